# syntax=docker/dockerfile:1
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# mqtt-pool images, built on Debian 12 so they run the same mosquitto (2.0.11) the tests use.
#   docker build --target mosquitto -t mqtt-pool/mosquitto-probe .   mosquitto + mqtt_probe.so
#   docker build --target tools     -t mqtt-pool/tools .             mqbench, gate-api, responder
#   docker build --target bench     -t mqtt-pool/bench .             tools + wrk, for load runs
# docker-compose.yml builds all three. No image downloads anything when it runs.

FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config \
      libmosquitto-dev mosquitto-dev libssl-dev uthash-dev libcjson-dev libmicrohttpd-dev \
      libcurl4-openssl-dev libuv1-dev libhttp-parser-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DMQTTPOOL_BUILD_TESTS=OFF \
      -DCMAKE_INSTALL_PREFIX=/opt/mqtt-pool -DCMAKE_INSTALL_LIBDIR=lib \
 && cmake --build /build -j "$(nproc)" \
 && cmake --install /build

# The broker: Debian's mosquitto with the probe.
FROM debian:12-slim AS mosquitto
RUN apt-get update \
 && apt-get install -y --no-install-recommends mosquitto mosquitto-clients libmicrohttpd12 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/mqtt-pool/lib/mosquitto/mqtt_probe.so /usr/lib/mosquitto/mqtt_probe.so
COPY deploy/docker/mosquitto.conf /etc/mosquitto/mosquitto.conf
EXPOSE 1883 18830
USER mosquitto
CMD ["/usr/sbin/mosquitto", "-c", "/etc/mosquitto/mosquitto.conf"]

# The programs: mqbench, gate-api, responder (and libmqttpool, which needs only OpenSSL).
FROM debian:12-slim AS tools
RUN apt-get update \
 && apt-get install -y --no-install-recommends libmosquitto1 libssl3 libcjson1 libhttp-parser2.9 \
      libcurl4 libuv1 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/mqtt-pool /opt/mqtt-pool
ENV PATH=/opt/mqtt-pool/bin:$PATH
USER nobody
CMD ["mqbench", "--help"]

# Load against the stack: the programs plus wrk and its POST script (docker-compose's bench
# profile). Everything is in the image; nothing is installed when it runs.
FROM tools AS bench
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends wrk \
 && rm -rf /var/lib/apt/lists/*
COPY deploy/docker/post.lua /opt/mqtt-pool/share/post.lua
# Where replicas write their results (a named volume takes this directory's owner when empty).
RUN mkdir /results && chown nobody:nogroup /results
USER nobody
