#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The probe beside mosquitto 2.1's own HTTP API, from the official image's configuration
# (docker/2.1-alpine/mosquitto.conf in the 2.1.2 source: listener 1883, and listener 9883 with
# protocol http_api), with only its ports moved to free ones and the probe's lines added:
#   1. /api/v1/systree and /metrics both answer, and the probe's counts stay exact while a
#      dashboard polls the API (its requests are not connects, clients or deliveries);
#   2. without plugin_opt_http_listen the probe takes its default, 127.0.0.1:18830, not 9883;
#   3. the probe given the http_api listener's address: the broker refuses to start and its log
#      names both lines;
#   4. the probe's port held by another process: the broker refuses to start and its log names
#      the process.
# Usage: http_api21_test.sh MOSQUITTO_2.1 PROBE_SO FREE_PORT   (exits 77 without the 2.1 build)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
MOSQ=${1:-} PROBE=$2 FREE_PORT=$3
official=$(dirname "$MOSQ")/../src-tree/docker/2.1-alpine/mosquitto.conf
if [ -z "$MOSQ" ] || [ ! -x "$MOSQ" ] || [ ! -f "$official" ]; then
  skip_test "no mosquitto 2.1 build with its source at '$MOSQ' (scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
. "$(dirname "$0")/broker21.sh" http-api21
start_broker() { # the configuration in $tmp/mosquitto.conf; waits up to 10 s for URL $1 to answer
  LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 "$MOSQ" -c "$tmp/mosquitto.conf" >"$tmp/broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 100); do curl -s --max-time 1 -o /dev/null "$1" && return 0; sleep 0.1; done
  stop_broker # it may be up without the probe's endpoint, or hanging in exit
  return 1
}
expect_refusal() { # WHAT NEEDLE...: the broker exits non-zero within 5 s and its log has each needle
  local what=$1 rc=0
  shift
  LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 timeout -k 2 5 "$MOSQ" -c "$tmp/mosquitto.conf" >"$tmp/broker.log" 2>&1 || rc=$?
  # 2.1.2 under a sanitizer runtime can hang in exit after saying it terminates: that is a refusal
  if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ -n "$runtime" ] && grep -q "terminating" "$tmp/broker.log"; then
    rc=1
  fi
  if [ "$rc" = 0 ] || [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$what: the broker started (exit $rc)"
    return
  fi
  for needle in "$@"; do
    grep -qF -- "$needle" "$tmp/broker.log" || { fail "$what: the log does not say '$needle': $(cat "$tmp/broker.log")"; return; }
  done
  pass "$what: the broker refused to start: $(grep -o 'mqtt_probe: Error: .*' "$tmp/broker.log" | head -n 1)"
}
# The official file with its two ports moved ($1 MQTT, $2 API); the probe's lines come after.
official_conf() {
  sed -e "s/^listener 1883\$/listener $1/" -e "s/^listener 9883\$/listener $2/" \
      -e "s|^http_dir .*|http_dir $tmp|" "$official" >"$tmp/mosquitto.conf"
  grep -q "^listener $2\$" "$tmp/mosquitto.conf" || fail "the official configuration has no 'listener 9883' any more: $(cat "$official")"
  printf '\nuser root\nlog_dest stderr\nplugin %s\n' "$PROBE" >>"$tmp/mosquitto.conf"
}

# 1. Side by side, and the counts while the API is polled.
port=$("$FREE_PORT") api_port=$("$FREE_PORT") metrics_port=$("$FREE_PORT")
official_conf "$port" "$api_port"
echo "plugin_opt_http_listen 127.0.0.1:$metrics_port" >>"$tmp/mosquitto.conf"
if ! start_broker "http://127.0.0.1:$metrics_port/metrics"; then
  fail "the broker with the official configuration and the probe did not start: $(cat "$tmp/broker.log")"
else
  systree=$(curl -s --max-time 5 -w ' %{http_code}' "http://127.0.0.1:$api_port/api/v1/systree")
  case $systree in
    '{'*' 200') pass "/api/v1/systree answers JSON on the API's port" ;;
    *) fail "/api/v1/systree: $systree" ;;
  esac
  curl -s --max-time 5 "http://127.0.0.1:$metrics_port/metrics" | grep -q '^mosquitto_probe_info{' \
    && pass "/metrics answers on the probe's port" || fail "/metrics has no probe figures"
  c0=$(metric mosquitto_connects_total) n0=$(metric mosquitto_connected_clients) d0=$(metric mosquitto_deliveries_total)
  ( while :; do # a dashboard: two API pages every 20 ms
      curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$api_port/api/v1/systree"
      curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$api_port/api/v1/listeners"
      sleep 0.02
    done ) &
  others+=($!)
  subs=()
  for _ in 1 2 3; do
    mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -t api21/t -C 4 -W 15 >/dev/null 2>&1 &
    subs+=($!)
  done
  wait_metric mosquitto_connected_clients $((n0 + 3)) || fail "three subscribers not counted connected"
  mosquitto_pub -h 127.0.0.1 -p "$port" -q 1 -t api21/t -m x --repeat 4 --repeat-delay 0 2>/dev/null \
    || fail "the publisher was refused"
  for p in "${subs[@]}"; do wait "$p" || fail "a subscriber did not get its 4 messages"; done
  sleep 0.5 # more polling after the clients left
  wait_metric mosquitto_connected_clients "$n0" || fail "connected did not come back to $n0 (now $(metric mosquitto_connected_clients))"
  c1=$(metric mosquitto_connects_total) d1=$(metric mosquitto_deliveries_total)
  polls=$(curl -s --max-time 5 "http://127.0.0.1:$api_port/api/v1/systree" | grep -c . || true)
  if [ $((c1 - c0)) = 4 ] && [ $((d1 - d0)) = 12 ]; then
    pass "while the API was polled: connects +4, deliveries +12, connected back to $n0"
  else
    fail "while the API was polled: connects +$((c1 - c0)) (want 4), deliveries +$((d1 - d0)) (want 12)"
  fi
  [ "$polls" -gt 0 ] || fail "the API stopped answering"
  kill "${others[@]}" 2>/dev/null
  others=()
  grep -qi "http api" "$tmp/broker.log" || echo "note: the broker's log has no line about its HTTP API listener"
  stop_broker
fi

# 2. The default address.
port=$("$FREE_PORT") api_port=$("$FREE_PORT")
official_conf "$port" "$api_port"
if curl -s --max-time 1 -o /dev/null http://127.0.0.1:18830/; then
  echo "skipped: the default 127.0.0.1:18830 is in use on this machine"
elif start_broker "http://127.0.0.1:18830/metrics"; then
  code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$api_port/api/v1/version")
  [ "$code" = 200 ] && pass "default: /metrics on 127.0.0.1:18830, the API on its own port" \
    || fail "default: the API answered $code"
  stop_broker
else
  fail "default: nothing on 127.0.0.1:18830: $(cat "$tmp/broker.log")"
fi

# 3. The probe on the API's address: refused, both lines named.
port=$("$FREE_PORT") api_port=$("$FREE_PORT")
official_conf "$port" "$api_port"
echo "plugin_opt_http_listen 127.0.0.1:$api_port" >>"$tmp/mosquitto.conf"
api_line=$(grep -n "^listener $api_port\$" "$tmp/mosquitto.conf" | cut -d: -f1)
opt_line=$(grep -n "^plugin_opt_http_listen" "$tmp/mosquitto.conf" | cut -d: -f1)
expect_refusal "the probe on the http_api listener's port" \
  "mosquitto.conf:$opt_line" "mosquitto.conf:$api_line" "protocol http_api" "listener $api_port"

# 4. The probe's port held by another process: named.
hold_port=$("$FREE_PORT")
python3 -c 'import socket,sys,time
s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' "$hold_port" &
holder=$!
others+=($holder)
for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$hold_port/" ; [ $? = 7 ] || break; sleep 0.1; done
official_conf "$("$FREE_PORT")" "$("$FREE_PORT")"
echo "plugin_opt_http_listen 127.0.0.1:$hold_port" >>"$tmp/mosquitto.conf"
expect_refusal "the probe's port held by another process" "127.0.0.1:$hold_port" "held by pid $holder (python3)"

[ $failures -eq 0 ]
