#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# On mosquitto 2.1, with password and ACL checks done by 2.1's own plugins listed BEFORE the
# probe (so the probe's auth hooks never see a decision) and 2.1's HTTP API listener on (its
# requests go through the auth hook with a made-up client): connects, connected clients,
# deliveries and disconnect reasons stay exact, in both probe modes.
# Usage: plugins21_test.sh MOSQUITTO_2.1 PROBE_SO FREE_PORT   (exits 77 without the 2.1 build)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
MOSQ=${1:-} PROBE=$2 FREE_PORT=$3
plugins=$(dirname "$MOSQ")/../plugins
if [ -z "$MOSQ" ] || [ ! -x "$MOSQ" ] || [ ! -f "$plugins/password-file/mosquitto_password_file.so" ]; then
  skip_test "no mosquitto 2.1 build with its plugins at '$MOSQ' (scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
. "$(dirname "$0")/broker21.sh" plugins21

mosquitto_passwd -c -b "$tmp/passwd" dev secret 2>/dev/null
printf 'user dev\ntopic readwrite p21/#\ntopic read /api/#\n' >"$tmp/acl"
chmod 0700 "$tmp/passwd" "$tmp/acl"
me=(-h 127.0.0.1 -u dev -P secret)

for mode in default observe_auth; do
  port=$("$FREE_PORT") metrics_port=$("$FREE_PORT") api_port=$("$FREE_PORT")
  cat >"$tmp/mosquitto.conf" <<CONF
user root
log_dest stderr
log_type error
log_type warning
listener $port 127.0.0.1
allow_anonymous false
plugin $plugins/password-file/mosquitto_password_file.so
plugin_opt_password_file $tmp/passwd
plugin $plugins/acl-file/mosquitto_acl_file.so
plugin_opt_acl_file $tmp/acl
plugin $PROBE
plugin_opt_http_listen 127.0.0.1:$metrics_port
plugin_opt_observe_auth $([ $mode = observe_auth ] && echo true || echo false)
listener $api_port 127.0.0.1
protocol http_api
CONF
  LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 "$MOSQ" -c "$tmp/mosquitto.conf" >"$tmp/broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$metrics_port/metrics" && break; sleep 0.1; done
  me=(-h 127.0.0.1 -p "$port" -u dev -P secret)
  c0=$(metric mosquitto_connects_total) n0=$(metric mosquitto_connected_clients)
  d0=$(metric mosquitto_deliveries_total)
  [ -n "$c0" ] && [ -n "$d0" ] || { fail "$mode: no probe metrics ($(cat "$tmp/broker.log"))"; break; }
  others=()
  for i in 1 2; do
    mosquitto_sub "${me[@]}" -q 1 -t "p21/t" -C 5 -W 15 >/dev/null 2>&1 &
    others+=($!)
  done
  wait_metric mosquitto_connected_clients $((n0 + 2)) || fail "$mode: two subscribers not counted connected"
  # The HTTP API: every request is authenticated through the plugins with a made-up client.
  api_ok=0
  for _ in 1 2 3; do
    code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' -u dev:secret "http://127.0.0.1:$api_port/api/v1/version")
    [ "$code" = 200 ] && api_ok=$((api_ok + 1))
  done
  [ $api_ok = 3 ] || fail "$mode: the HTTP API answered $api_ok of 3 requests (last $code)"
  mosquitto_pub "${me[@]}" -q 1 -t p21/t -m 'x' --repeat 5 --repeat-delay 0 2>/dev/null \
    || fail "$mode: publisher refused"
  for p in "${others[@]}"; do wait "$p" || fail "$mode: a subscriber did not get its 5 messages"; done
  others=()
  mosquitto_sub -h 127.0.0.1 -p "$port" -u dev -P wrong -t p21/x -W 1 >/dev/null 2>&1
  wait_metric mosquitto_connected_clients "$n0" || fail "$mode: connected did not come back to $n0 (now $(metric mosquitto_connected_clients))"
  c1=$(metric mosquitto_connects_total) d1=$(metric mosquitto_deliveries_total)
  normal=$(metric 'mosquitto_disconnect_reasons_total{reason="normal"}')
  auth=$(metric 'mosquitto_disconnect_reasons_total{reason="auth"}')
  if [ $((c1 - c0)) = 3 ] && [ $((d1 - d0)) = 10 ] && [ "$normal" = 3 ] && [ "$auth" = 1 ]; then
    pass "$mode, plugins before the probe, HTTP API on: connects +3, deliveries +10, connected back to $n0, reasons normal 3 auth 1"
  else
    fail "$mode: connects +$((c1 - c0)) (want 3), deliveries +$((d1 - d0)) (want 10), reasons normal $normal (want 3) auth $auth (want 1)"
  fi
  stop_broker
done
[ $failures -eq 0 ]
