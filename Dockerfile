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
      libyaml-dev libgnutls28-dev libcrypt-dev libcurl4-openssl-dev libuv1-dev libhttp-parser-dev \
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
      libyaml-0-2 libgnutls30 openssl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/mqtt-pool/lib/mosquitto/mqtt_probe.so /usr/lib/mosquitto/mqtt_probe.so
# bcrypt hashes for the probe's web_config (basic_auth_users)
COPY --from=build /opt/mqtt-pool/bin/mqtt-probe-passwd /usr/bin/mqtt-probe-passwd
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

# --- MQTT over WebSockets (deploy/docker/compose.websockets.yml) --------------------------------
# Debian 12's mosquitto (2.0.11) has no WebSockets; 2.1.2 serves them with its own code. Its
# source is not part of this project: deploy/stack-test copies the tarball to
# deploy/docker/vendor/ (from ../shared/vendor), and the build checks its sha256. These stages
# come last, so that building the targets above never needs the tarball.
FROM build AS build-mosquitto21
RUN apt-get update \
 && apt-get install -y --no-install-recommends libsqlite3-dev \
 && rm -rf /var/lib/apt/lists/*
COPY deploy/docker/vendor/mosquitto-2.1.2.tar.gz /tmp/mosquitto-2.1.2.tar.gz
RUN echo "cdad3ac1f474a87b1f7888f7f705e6ca3bd79e68a1376961e4c37575c30b7bcd  /tmp/mosquitto-2.1.2.tar.gz" | sha256sum -c - \
 && mkdir /mosquitto21 && tar xzf /tmp/mosquitto-2.1.2.tar.gz -C /mosquitto21 --strip-components=1 \
 && cmake -S /mosquitto21 -B /mosquitto21/build -DCMAKE_BUILD_TYPE=Release -DWITH_WEBSOCKETS=ON \
      -DWITH_WEBSOCKETS_BUILTIN=ON -DWITH_DOCS=OFF -DWITH_TESTS=OFF -DWITH_CTRL_SHELL=OFF \
      -DWITH_LTO=OFF >/dev/null \
 && cmake --build /mosquitto21/build -j "$(nproc)" --target mosquitto >/dev/null

# The broker with a WebSockets listener: the image above with 2.1.2 in place of 2.0.11 (its
# user, its clients for the healthcheck, the probe, which runs on both).
FROM mosquitto AS mosquitto-ws
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends libcjson1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build-mosquitto21 /mosquitto21/build/src/mosquitto /usr/sbin/mosquitto
COPY deploy/docker/mosquitto-ws.conf /etc/mosquitto/mosquitto.conf
EXPOSE 1883 8080 18830
USER mosquitto
