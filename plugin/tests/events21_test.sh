#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# On mosquitto 2.1 the probe counts connects, connected clients and disconnects from the broker's
# own events (CONNECT, DISCONNECT, CLIENT_OFFLINE), exactly, without observe_auth and with it
# (no double count): clients that stay, a persistent session that leaves, a refused login.
# Usage: events21_test.sh TB_RUN MOSQUITTO_2.1   (exits 77, skipped, without the 2.1 binary)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
RUN=$1
if [ -z "${2:-}" ] || [ ! -x "$2" ]; then
  skip_test "no mosquitto 2.1 binary at '${2:-}' (build it with scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
export TB_MOSQUITTO=$2
tmp=$(mktemp -d /tmp/probe-events21-XXXXXX)
run_pid="" subs=()
cleanup() {
  for p in "${subs[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

metric() { # NAME: the value of one sample line, exactly as named
  exec 3<>/dev/tcp/127.0.0.1/"$metrics_port" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  timeout 5 cat <&3 | awk -v n="$1" '$1 == n { print $2 }'
  exec 3<&-
}
wait_metric() { # NAME VALUE: until it has it, at most 5 s
  for _ in $(seq 50); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.1; done
  return 1
}

for mode in default observe_auth; do
  opts=(); [ $mode = observe_auth ] && opts=(--plugin-opt observe_auth=true)
  "$RUN" --daemon --no-tls "${opts[@]}" --dir "$tmp" >"$tmp/env" 2>"$tmp/err" \
    || { echo "FAIL: test broker: $(cat "$tmp/err")" >&2; exit 1; }
  # shellcheck disable=SC1091
  . "$tmp/env"
  run_pid=$RUN_PID
  hostport=${MQTT_URL#mqtt://}
  metrics_port=${METRICS_URL#http://127.0.0.1:}
  metrics_port=${metrics_port%%/*}
  me=(-h "${hostport%:*}" -p "${hostport##*:}" -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD")
  grep -q '^mosquitto_probe_info{.*events="2.1"' <(exec 3<>/dev/tcp/127.0.0.1/"$metrics_port"; printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3; timeout 5 cat <&3) \
    || fail "$mode: mosquitto_probe_info does not say events=\"2.1\""
  c0=$(metric mosquitto_connects_total) n0=$(metric mosquitto_connected_clients)
  dc0=$(metric 'mosquitto_disconnects_total{identity="client"}')
  dn0=$(metric 'mosquitto_disconnects_total{identity="none"}')
  subs=()
  for i in 1 2; do
    mosquitto_sub "${me[@]}" -t "e21/$i" >/dev/null 2>&1 &
    subs+=($!)
  done
  wait_metric mosquitto_connected_clients $((n0 + 2)) || fail "$mode: two clients not counted connected"
  # a persistent session that leaves: CLIENT_OFFLINE on 2.1
  mosquitto_sub "${me[@]}" -c -i "e21-persistent-$mode" -q 1 -t e21/p -W 1 >/dev/null 2>&1
  # a refused login
  mosquitto_sub -h "${hostport%:*}" -p "${hostport##*:}" -u "$MQTT_USERNAME" -P wrong -t e21/x -W 1 >/dev/null 2>&1
  for p in "${subs[@]}"; do kill "$p"; wait "$p" 2>/dev/null; done
  subs=()
  wait_metric mosquitto_connected_clients "$n0" || fail "$mode: connected did not come back to $n0"
  wait_metric 'mosquitto_disconnects_total{identity="client"}' $((dc0 + 3)) || true
  c1=$(metric mosquitto_connects_total)
  dc1=$(metric 'mosquitto_disconnects_total{identity="client"}')
  dn1=$(metric 'mosquitto_disconnects_total{identity="none"}')
  if [ $((c1 - c0)) = 3 ] && [ $((dc1 - dc0)) = 3 ] && [ $((dn1 - dn0)) = 1 ]; then
    pass "$mode on 2.1: connects +3, disconnects client +3 (one a persistent session), none +1 (the refused login), connected back to $n0"
  else
    fail "$mode on 2.1: connects +$((c1 - c0)) (want 3), disconnects client +$((dc1 - dc0)) (want 3), none +$((dn1 - dn0)) (want 1)"
  fi
  kill "$run_pid"; wait "$run_pid" 2>/dev/null; run_pid=""
done
[ $failures -eq 0 ]
