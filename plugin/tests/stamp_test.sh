#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The stamp's choices on a real broker: stamp_topic filters and 1-in-N sampling (counters stay
# exact), and on mosquitto 2.1 tx_stamp: each stamped delivery to a v5 subscriber carries
# broker-tx-ns >= broker-rx-ns, and mosquitto_message_hold_seconds counts one per stamped
# delivery, and mqbench splits its latency into publisher->broker, inside the broker and
# broker->subscriber. Usage: stamp_test.sh TB_RUN MQBENCH [MOSQUITTO]  (77, skipped, when
# MOSQUITTO is given but missing; without it the default broker, 2.0)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
RUN=$1 MQBENCH=$2
shift
if [ -n "${2:-}" ]; then
  [ -x "$2" ] || skip_test "no mosquitto binary at '$2' (scripts/mosquitto-2.1)"
  export TB_MOSQUITTO=$2
fi
tmp=$(mktemp -d /tmp/probe-stamp-XXXXXX)
run_pid=""
cleanup() { [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
metric() { curl -s --max-time 5 "$METRICS_URL" | awk -v n="$1" '$1 == n { print $2 }'; }

"$RUN" --daemon --no-tls --dir "$tmp" --plugin-opt stamp_every=2 --plugin-opt 'stamp_topic=s/a/#' \
  --plugin-opt 'stamp_topic=s/c' --plugin-opt tx_stamp=true >"$tmp/env" 2>"$tmp/err" \
  || { echo "FAIL: test broker: $(cat "$tmp/err")" >&2; exit 1; }
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
hostport=${MQTT_URL#mqtt://}
me=(-h "${hostport%:*}" -p "${hostport##*:}" -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD")
on21=false
curl -s --max-time 5 "$METRICS_URL" | grep -q '^mosquitto_probe_info{.*events="2.1"' && on21=true
[ -n "${2:-}" ] && [ $on21 = false ] && fail "the probe on $2 does not say events=\"2.1\""

s0=$(metric mosquitto_probe_stamped_total)
mosquitto_sub "${me[@]}" -V 5 -t 's/#' -C 8 -W 10 -F '%t %P' >"$tmp/v5" 2>&1 &
sub5=$!
mosquitto_sub "${me[@]}" -V 311 -t 's/#' -C 8 -W 10 -F '%t' >"$tmp/v311" 2>&1 &
sub4=$!
sleep 0.5
for t in s/a/1 s/b s/a/2 s/b s/a/3 s/c s/a/4 s/c; do
  mosquitto_pub "${me[@]}" -V 5 -t "$t" -m x || fail "publish to $t"
done
wait $sub5 || fail "the v5 subscriber did not get 8 messages: $(cat "$tmp/v5")"
wait $sub4 || fail "the v3.1.1 subscriber did not get 8 messages"
stamped=$(grep -c 'broker-rx-ns' "$tmp/v5")
on_b=$(grep '^s/b ' "$tmp/v5" | grep -c 'broker-rx-ns')
s1=$(metric mosquitto_probe_stamped_total)
# matching: s/a/1..4, s/c twice = 6; 1 in 2 of them = 3 stamped; s/b never
if [ "$stamped" = 3 ] && [ "$on_b" = 0 ] && [ $((s1 - s0)) = 3 ]; then
  pass "stamp_topic s/a/# and s/c, stamp_every 2: 3 of 8 messages stamped, none on s/b, stamped_total +3"
else
  fail "stamped $stamped (want 3), on s/b $on_b (want 0), stamped_total +$((s1 - s0)) (want 3): $(cat "$tmp/v5")"
fi
[ "$(metric 'mosquitto_messages_received_total{qos="0",retain="false"}')" -ge 8 ] \
  || fail "received count not exact under sampling"

if [ $on21 = true ]; then
  ok_tx=0
  while read -r line; do
    rx=$(grep -o 'broker-rx-ns:[0-9]*' <<<"$line" | cut -d: -f2)
    tx=$(grep -o 'broker-tx-ns:[0-9]*' <<<"$line" | cut -d: -f2)
    [ -n "$rx" ] && [ -n "$tx" ] && [ "$tx" -ge "$rx" ] && ok_tx=$((ok_tx + 1))
  done < <(grep 'broker-rx-ns' "$tmp/v5")
  untimed=$(grep -v 'broker-rx-ns' "$tmp/v5" | grep -c 'broker-tx-ns')
  holds=$(metric mosquitto_message_hold_seconds_count)
  # 3 stamped messages x 2 subscribers: 6 timed deliveries, 3 of them to the v5 one with tx
  if [ $ok_tx = 3 ] && [ "$untimed" = 0 ] && [ "$holds" = 6 ]; then
    pass "2.1 tx_stamp: 3 stamped deliveries carry broker-tx-ns >= broker-rx-ns, unstamped ones none; hold histogram count 6"
  else
    fail "2.1 tx_stamp: $ok_tx of 3 with tx >= rx, $untimed unstamped with tx, hold count $holds (want 6): $(cat "$tmp/v5")"
  fi
  "$MQBENCH" throughput --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password "$MQTT_PASSWORD" \
    --prefix s/a --rate 500 --duration 2 --json >"$tmp/run.json" 2>"$tmp/run.err" \
    || fail "mqbench: $(cat "$tmp/run.err")"
  python3 - "$tmp/run.json" <<'PY' || fail "mqbench's three-way split (latency keys: $(python3 -c 'import json,sys; print(list(json.load(open(sys.argv[1]))["latency"]))' "$tmp/run.json"))"
import json, sys
l = json.load(open(sys.argv[1]))["latency"]
legs = [l[k]["hist"]["count"] for k in ("publisher_to_broker", "inside_broker", "broker_to_subscriber")]
# stamp_every 2 under s/a/#: half of the ~1000 messages carry both stamps
assert all(400 <= n <= 600 for n in legs), legs
assert l["inside_broker"]["p50"] < l["intended"]["p50"], l
print("ok: mqbench splits %d deliveries three ways: publisher->broker p50 %d ns, inside broker %d ns, broker->subscriber %d ns"
      % (legs[1], l["publisher_to_broker"]["p50"], l["inside_broker"]["p50"], l["broker_to_subscriber"]["p50"]))
PY
else
  grep -q 'broker-tx-ns' "$tmp/v5" && fail "broker-tx-ns on 2.0, which has no MESSAGE_OUT"
  [ -z "$(metric mosquitto_message_hold_seconds_count)" ] || fail "a hold histogram on 2.0"
  pass "2.0: no broker-tx-ns and no hold histogram (no MESSAGE_OUT)"
fi
[ $failures -eq 0 ]
