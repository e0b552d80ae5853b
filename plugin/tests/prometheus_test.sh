#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The probe's /metrics passes `promtool check metrics`, and a real Prometheus server scrapes it.
# Usage: prometheus_test.sh TB_RUN TB_FREE_PORT
set -u
. "$(dirname "$0")/prometheus.sh" # start_prometheus
RUN=$1
FREE_PORT=$2
tmp=$(mktemp -d /tmp/probe-prom-test-XXXXXX)
run_pid=""
prom_pid=""
cleanup() {
  [ -n "$prom_pid" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for tool in promtool prometheus; do
  command -v $tool >/dev/null || fail "$tool is not installed (Debian package prometheus; scripts/setup installs it)"
done

# http_get PORT PATH: the body of a GET, with bash's /dev/tcp (no curl needed).
http_get() {
  exec 3<>/dev/tcp/127.0.0.1/"$1" || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  timeout 5 cat <&3 | sed '1,/^\r$/d'
  exec 3<&-
}

"$RUN" --daemon --no-tls --plugin-opt observe_auth=true --dir "$tmp" >"$tmp/env" 2>"$tmp/err" \
  || fail "test broker: $(cat "$tmp/err")"
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
[ -n "${METRICS_URL:-}" ] || fail "no METRICS_URL: the probe is not loaded"
metrics_port=${METRICS_URL#http://127.0.0.1:}
metrics_port=${metrics_port%/metrics}

# Some traffic so every series has data.
mosquitto_pub -h 127.0.0.1 -p "${MQTT_URL##*:}" -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD" -t p/x -m hello -q 1 \
  || fail "publish"

http_get "$metrics_port" /metrics >"$tmp/metrics" || fail "GET /metrics"
grep -q '^mosquitto_messages_received_total{qos="1",retain="false"} 1$' "$tmp/metrics" \
  || fail "unexpected metrics: $(head -20 "$tmp/metrics")"
if ! promtool check metrics <"$tmp/metrics" >"$tmp/promtool" 2>&1; then
  fail "promtool check metrics: $(cat "$tmp/promtool")"
fi
echo "ok: promtool check metrics accepts $(grep -vc '^#' "$tmp/metrics") samples"
# promtool accepts a series named twice (a real Prometheus keeps one and drops the other)
dups=$(grep -v '^#' "$tmp/metrics" | awk '{print $1}' | sort | uniq -d)
[ -z "$dups" ] || fail "series named twice: $dups"

# A real Prometheus server scrapes the probe.
cat >"$tmp/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: mosquitto
    static_configs:
      - targets: ['127.0.0.1:$metrics_port']
YAML
start_prometheus "$tmp/prometheus.yml" "$tmp" "$FREE_PORT"
[ -n "$prom_pid" ] || fail "prometheus did not start: $(tail -5 "$tmp/prometheus.log")"

query='mosquitto_messages_received_total%7Bqos%3D%221%22%2Cretain%3D%22false%22%7D'
for _ in $(seq 60); do
  if http_get "$prom_port" "/api/v1/query?query=$query" >"$tmp/query" 2>/dev/null &&
     grep -q '"status":"success"' "$tmp/query" && grep -q '"1"\]' "$tmp/query"; then
    echo "ok: Prometheus scraped the probe: $(cat "$tmp/query")"
    http_get "$prom_port" "/api/v1/query?query=up" | grep -q '"1"\]' || fail "up != 1"
    echo "ok: up == 1"
    exit 0
  fi
  sleep 0.5
done
fail "Prometheus never returned the sample: $(cat "$tmp/query" 2>/dev/null); log: $(tail -5 "$tmp/prometheus.log")"
