#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The deployment files, checked without a Docker engine or a cluster:
#   1. docker-compose.yml is valid for docker-compose (Debian's 1.29), with and without the
#      bench profile;
#   2. validate_deploy.py: Kubernetes manifests, compose cross-references, every option the
#      files pass to our programs;
#   3. the install layout the Dockerfile copies from (/opt/mqtt-pool/...) is what
#      `cmake --install` of this build produces;
#   4. deploy/docker/mosquitto.conf (the image's) starts the real mosquitto with the probe, with
#      only the plugin path, ports and user rewritten for this machine, and the probe counts a
#      message published anonymously;
#   5. the Kubernetes manifests against the Kubernetes API schemas (k8s/validate.sh).
# deploy/stack-test runs the same files for real, in containers (.ci/run calls it).
# Usage: deploy_test.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
tmp=$(mktemp -d /tmp/deploy-test-XXXXXX)
broker_pid=""
cleanup() {
  [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# 1
if ! command -v docker-compose >/dev/null; then
  fail "docker-compose is not installed (scripts/setup installs it)"
else
  (cd "$src" && docker-compose config -q 2>"$tmp/err") && pass "docker-compose config" \
    || fail "docker-compose config: $(cat "$tmp/err")"
  services=$(cd "$src" && docker-compose --profile bench config --services 2>&1 | sort | tr '\n' ' ')
  [ "$services" = "bench bench-gateway gate-api grafana mosquitto prometheus responder " ] \
    && pass "services: $services" || fail "services: $services"
  grep -q '^version:' "$src/docker-compose.yml" && fail "docker-compose.yml has the obsolete version: key"
  for extra in deploy/docker/compose.offline.yml deploy/docker/secure/compose.secure.yml \
               deploy/docker/compose.two-nodes.yml; do
    (cd "$src" && MQP_GATEWAY_PASSWORD=x MQP_DEVICE_PASSWORD=x MQP_BENCH_PASSWORD=x MQP_HEALTH_PASSWORD=x MQP_METRICS_PASSWORD=x \
      docker-compose -f docker-compose.yml -f "$extra" --profile bench config -q 2>"$tmp/err") \
      && pass "docker-compose config with $extra" || fail "docker-compose config with $extra: $(cat "$tmp/err")"
  done
  # Refused because a password is unset, and said so (any other failure of compose must not pass).
  if (cd "$src" && docker-compose -f docker-compose.yml -f deploy/docker/secure/compose.secure.yml config -q 2>"$tmp/err"); then
    fail "the secure variant starts without passwords"
  elif grep -q 'set MQP_[A-Z]*_PASSWORD' "$tmp/err"; then
    pass "the secure variant refuses to start without passwords ($(grep -o 'set MQP_[A-Z_]*' "$tmp/err" | head -n 1))"
  else
    fail "the secure variant failed without passwords, but not because of them: $(cat "$tmp/err")"
  fi
  if command -v apt-get >/dev/null && grep -q 'apt-get' "$src/docker-compose.yml"; then
    fail "docker-compose.yml installs packages at run time (the bench image must carry its tools)"
  fi
fi

# 2
/usr/bin/python3 "$src"/deploy/tests/validate_deploy.py "$src" "$build" || fail "validate_deploy.py"

# 3
prefix=$tmp/opt/mqtt-pool
if cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
  for path in $(sed -n 's|^COPY --from=build /opt/mqtt-pool\(/[^ ]*\) .*|\1|p' "$src/Dockerfile"); do
    [ -e "$prefix$path" ] && pass "install has $path" || fail "the Dockerfile copies $path; cmake --install has no such file"
  done
  for bin in mqbench mqp-gate-api mqp-responder; do
    [ -x "$prefix/bin/$bin" ] && pass "install has bin/$bin" || fail "install lacks bin/$bin (the tools image runs it)"
  done
else
  fail "cmake --install: $(tail -5 "$tmp/install.log")"
fi

# 4
mqtt_port=$("$build"/test-broker/tb-free-port) http_port=$("$build"/test-broker/tb-free-port)
plugin=$(find "$build" -name mqtt_probe.so | head -n 1)
sed -e "s|^plugin /usr/lib/mosquitto/mqtt_probe.so|plugin $plugin|" \
    -e "s|^plugin_opt_http_listen 0.0.0.0:18830|plugin_opt_http_listen 127.0.0.1:$http_port|" \
    -e "s|^listener 1883 0.0.0.0|listener $mqtt_port 127.0.0.1|" \
    "$src"/deploy/docker/mosquitto.conf >"$tmp/mosquitto.conf"
[ "$(id -u)" = 0 ] && echo "user root" >>"$tmp/mosquitto.conf"
changed=$(diff "$src"/deploy/docker/mosquitto.conf "$tmp/mosquitto.conf" | grep -c '^>')
[ "$changed" -le 4 ] || fail "the test rewrote $changed lines of mosquitto.conf (expected at most 4)"
/usr/sbin/mosquitto -c "$tmp/mosquitto.conf" >"$tmp/broker.log" 2>&1 &
broker_pid=$!
metrics=""
for _ in $(seq 100); do
  metrics=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$http_port && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" 2>/dev/null) && break
  sleep 0.05
done
if [ -z "$metrics" ]; then
  fail "mosquitto with deploy/docker/mosquitto.conf: no /metrics on $http_port: $(head -c 600 "$tmp/broker.log")"
else
  mosquitto_pub -h 127.0.0.1 -p "$mqtt_port" -t deploy/test -m hello -q 1 2>"$tmp/pub.err" \
    || fail "anonymous publish: $(cat "$tmp/pub.err")"
  sleep 0.2
  got=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$http_port && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3" \
        | awk '$1 ~ /^mosquitto_messages_received_total/ { n += $2 } END { print n + 0 }')
  [ "$got" -ge 1 ] && pass "the shipped mosquitto.conf loads the probe; it counted $got message(s)" \
    || fail "the probe counted $got messages after a publish"
fi

# 5
"$src"/deploy/tests/k8s/validate.sh >"$tmp/k8s" 2>&1 && pass "$(tr '\n' ' ' <"$tmp/k8s")" \
  || fail "Kubernetes schemas: $(cat "$tmp/k8s")"

[ $failures -eq 0 ] || exit 1
