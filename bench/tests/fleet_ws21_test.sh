#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# A fleet over WebSockets, on mosquitto 2.1.2's listeners (Debian's 2.0.11 has none): a storm of
# 10,000 on ws:// through a broker SIGKILLed and started again, 500 held on wss:// with the name
# checked against the test CA, and a server that is no WebSocket one refused by name.
# Usage: fleet_ws21_test.sh MQBENCH TB_RUN TB_FREE_PORT MOSQUITTO_2.1
# (77, skipped, without a 2.1 build; MQTTPOOL_NO_SKIP=1 makes that a failure)
set -u
MQB=$1
RUN=$2
FREE_PORT=$3
M21=$4
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
[ -x "$M21" ] || skip_test "no mosquitto 2.1.2 at '$M21' (scripts/mosquitto-2.1)"
. "$(dirname "$0")/fleet_lib.sh"

wport=$("$FREE_PORT")
ws_broker=(--mosquitto "$M21" --no-tls --no-probe --allow-anonymous
  --conf-line "listener $wport 127.0.0.1" --conf-line "protocol websockets")
start_broker "$tmp/w1.env" "${ws_broker[@]}"
. "$tmp/w1.env"
"$MQB" connect --broker "ws://127.0.0.1:$wport" --clients 10000 --rate 5000 --concurrency 500 \
  --reconnect --reconnect-backoff 200ms,1s --storms 1 --hold 60s --json \
  >"$tmp/wstorm.json" 2>"$tmp/wstorm.err" &
mqb=$!
for _ in $(seq 150); do grep -q 'opened: connected 10000 of 10000' "$tmp/wstorm.err" && break; sleep 0.1; done
grep -q 'opened: connected 10000 of 10000' "$tmp/wstorm.err" \
  || fail "ws:// storm: 10000 did not open: $(tail -2 "$tmp/wstorm.err")"
sleep 0.5
kill_broker "$BROKER_PID"
sleep 1
start_broker "$tmp/w2.env" "${ws_broker[@]}"
. "$tmp/w2.env"
timeout 60 tail --pid=$mqb -f /dev/null
wait $mqb; rc=$?
lost=$(grep -o '"storms":\[{"lost":[0-9]*' "$tmp/wstorm.json" | grep -o '[0-9]*$')
back=$(grep -o '"reconnected":[0-9]*' "$tmp/wstorm.json" | head -n 1 | cut -d: -f2)
ids=$(grep -o 'New client connected .* as mqbench-[^ ]*' "$BROKER_LOG" | awk '{print $NF}' | sort)
total=$(printf '%s\n' "$ids" | grep -c .); distinct=$(printf '%s\n' "$ids" | uniq | grep -c .)
if [ $rc = 0 ] && [ "$lost" = 10000 ] && [ "$back" = 10000 ] && [ "$total" = 10000 ] && [ "$distinct" = 10000 ]; then
  pass "ws:// storm: lost 10000, reconnected 10000, the new broker saw each client once"
else
  fail "ws:// storm: exit $rc lost '$lost' back '$back', broker $total CONNECTs of $distinct: $(tail -3 "$tmp/wstorm.err")"
fi
# wss:// (the name checked against the test CA), held; then a server that is no WebSocket one.
start_broker "$tmp/wss.env" --mosquitto "$M21" --websockets --allow-anonymous
. "$tmp/wss.env"
"$MQB" connect --broker "${WSS_URL/127.0.0.1/localhost}" --cafile "$CA_FILE" \
  --username "$MQTT_USERNAME" --password "$MQTT_PASSWORD" --clients 500 --rate 1000 --hold 1s \
  --ws-header "Authorization: Bearer x" --json >"$tmp/wss.json" 2>"$tmp/wss.err"
rc=$?
held=$(json "$tmp/wss.json" held_at_end)
[ $rc = 0 ] && [ "$held" = 500 ] && pass "wss://: 500 of 500 held" \
  || fail "wss://: exit $rc held '$held': $(tail -3 "$tmp/wss.err")"
mport=${METRICS_URL#http://127.0.0.1:}; mport=${mport%%/*}
"$MQB" connect --broker "ws://127.0.0.1:$mport/metrics" --clients 5 --rate 100 --hold 0s \
  >"$tmp/notws.out" 2>"$tmp/notws.err"
rc=$?
if [ $rc != 0 ] && grep -q 'websocket 5' "$tmp/notws.err" "$tmp/notws.out" &&
   grep -q "not 101 Switching Protocols" "$tmp/notws.err" "$tmp/notws.out"; then
  pass "a server that is no WebSocket one: 5 of 5 failed as websocket, the reason said"
else
  fail "not a WebSocket server: exit $rc: $(cat "$tmp/notws.out" "$tmp/notws.err" | tail -4)"
fi

finish "fleet tests over WebSockets"
