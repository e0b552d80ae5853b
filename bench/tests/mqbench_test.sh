#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# Integration tests of mqbench against the test broker (with the probe) and the responder.
# Usage: mqbench_test.sh MQBENCH TB_RUN RESPONDER
set -u
MQB=$1
RUN=$2
RESPONDER=$3
FAKE=$4 # tb-fake-broker
tmp=$(mktemp -d /tmp/mqbench-test-XXXXXX)
run_pid=""
responder_pid=""
failures=0
cleanup() {
  [ -n "$responder_pid" ] && kill "$responder_pid" 2>/dev/null && wait "$responder_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill -CONT "$BROKER_PID" 2>/dev/null; [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
expect_exit() { # status needle -- command
  local want=$1 needle=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local got=$?
  if [ $got -eq "$want" ] && grep -qF -- "$needle" "$tmp/err"; then pass "$needle (exit $got)"
  else fail "$*: exit $got (want $want), stderr: $(head -c 300 "$tmp/err")"; fi
}
# json FILE KEY: the first numeric value of "KEY": in a one-line JSON document.
json() { grep -o "\"$2\":[0-9.]*" "$1" | head -n 1 | cut -d: -f2; }
# hist FILE NAME FIELD: a field of a latency histogram ("intended", "p99")
hist() { grep -o "\"$2\":{\"p50\":[^}]*" "$1" | grep -o "\"$3\":[0-9.]*" | head -n 1 | cut -d: -f2; }

"$RUN" --daemon --plugin-opt observe_auth=true --plugin-opt sys_interval=1 --dir "$tmp" >"$tmp/env" 2>"$tmp/err" \
  || { echo "FAIL: test broker: $(cat "$tmp/err")"; exit 1; }
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
auth=(--username "$MQTT_USERNAME" --password "$MQTT_PASSWORD")

expect_counts() { # label file sent expected
  local label=$1 f=$2 sent=$3 expected=$4
  local s d e l sh dup
  s=$(json "$f" sent); e=$(json "$f" expected); d=$(json "$f" delivered)
  l=$(json "$f" loss); sh=$(json "$f" shortfall); dup=$(json "$f" duplicates)
  if [ "$s" = "$sent" ] && [ "$e" = "$expected" ] && [ "$d" = "$expected" ] && [ "$l" = 0 ] &&
     [ "$sh" = 0 ] && [ "$dup" = 0 ]; then
    pass "$label: sent $s, delivered $d of $e, no loss, no shortfall"
  else
    # what the loss was (lost with a subscriber's connection, or not received by the drain's end)
    # and how the run went, for a failure nobody could reproduce here (QoS 2 at 3.1.1, once, in CI)
    fail "$label: sent $s (want $sent) delivered $d expected $e (want $expected) loss $l shortfall $sh dup $dup lost_with_subscriber $(json "$f" lost_with_subscriber) not_received $(json "$f" not_received) timeline $(grep -o '"timeline":\[[^]]*\]' "$f" | cut -c1-600); stderr: $(tail -n 5 "${f%.json}.err" 2>/dev/null)"
  fi
}

# --- exact counts ------------------------------------------------------------------------------
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --publishers 3 --rate 200 --subscribers 4 \
  --duration 2s --qos 1 --json --metrics-url "$METRICS_URL" >"$tmp/t1.json" 2>"$tmp/t1.err" \
  || fail "throughput exited $?: $(cat "$tmp/t1.err")"
expect_counts "throughput 3x200/s -> 4 subs, QoS 1" "$tmp/t1.json" 1200 4800
probe_connects=$(grep -o '"probe":{"connects":[0-9]*' "$tmp/t1.json" | grep -o '[0-9]*$')
[ "$probe_connects" = 7 ] && pass "the probe saw 7 connects" || fail "probe connects '$probe_connects', want 7"
grep -q '"routing_checks":4800' "$tmp/t1.json" && pass "the probe counted 4800 routing checks" \
  || fail "probe deliveries: $(grep -o '"probe":{[^}]*' "$tmp/t1.json")"
[ "$(hist "$tmp/t1.json" broker_to_subscriber p50)" -gt 0 ] 2>/dev/null \
  && pass "latency split from broker-rx-ns" || fail "no broker->subscriber samples"

"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --publishers 3 --rate 200 --subscribers 4 \
  --topics 2 --duration 2s --json >"$tmp/t2.json" 2>"$tmp/t2.err" || fail "topics run: $(cat "$tmp/t2.err")"
expect_counts "throughput with --topics 2 (each message to 2 of 4 subscribers)" "$tmp/t2.json" 1200 2400

"$MQB" fanout --broker "$MQTT_URL" "${auth[@]}" --rate 500 --subscribers 10 --duration 2s \
  --json >"$tmp/f.json" 2>"$tmp/f.err" || fail "fanout: $(cat "$tmp/f.err")"
expect_counts "fanout 500/s -> 10 subs" "$tmp/f.json" 1000 10000

"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --protocol 3.1.1 --qos 2 --rate 300 \
  --subscribers 2 --duration 1s --json >"$tmp/q2.json" 2>"$tmp/q2.err" || fail "qos2: $(cat "$tmp/q2.err")"
expect_counts "QoS 2 over MQTT 3.1.1" "$tmp/q2.json" 300 600
[ "$(json "$tmp/q2.json" acked)" = 300 ] && pass "QoS 2: every PUBCOMP counted" || fail "acked $(json "$tmp/q2.json" acked)"

"$MQB" throughput --broker "$MQTTS_URL" --cafile "$CA_FILE" "${auth[@]}" --rate 200 --duration 1s \
  --json >"$tmp/tls.json" 2>"$tmp/tls.err" || fail "TLS: $(cat "$tmp/tls.err")"
expect_counts "over TLS" "$tmp/tls.json" 200 200

# --- connect ------------------------------------------------------------------------------------
"$MQB" connect --broker "$MQTT_URL" "${auth[@]}" --clients 500 --rate 2000 --hold 0.5s --json \
  --metrics-url "$METRICS_URL" --broker-pid "$BROKER_PID" --source 127.0.0.2-127.0.0.3 \
  >"$tmp/c.json" 2>"$tmp/c.err" || fail "connect: $(cat "$tmp/c.err")"
if [ "$(json "$tmp/c.json" connected)" = 500 ] && [ "$(json "$tmp/c.json" failed)" = 0 ] &&
   grep -q '"probe":{"connects":500,"disconnects":500}' "$tmp/c.json" &&
   grep -q '"cpu_peak_pct":[1-9]' "$tmp/c.json"; then
  pass "connect: 500 of 500 from 2 source addresses, the probe saw 500 connects and 500 disconnects"
else
  fail "connect: $(head -c 600 "$tmp/c.json") $(cat "$tmp/c.err")"
fi
"$MQB" connect --broker "$MQTTS_URL" --cafile "$CA_FILE" "${auth[@]}" --clients 50 --rate 500 \
  --hold 0.2s --json >"$tmp/ct.json" 2>"$tmp/ct.err" || fail "TLS connect: $(cat "$tmp/ct.err")"
[ "$(json "$tmp/ct.json" connected)" = 50 ] && pass "connect over TLS: 50 of 50" || fail "TLS connect"
# The right CA, a certificate for another host: every scenario refuses it and says why, by address
# and by name.
other_by_name=${MQTTS_OTHER_HOST_URL/127.0.0.1/localhost}
for target in "$MQTTS_OTHER_HOST_URL IP address mismatch" "$other_by_name hostname mismatch"; do
  url=${target%% *} want=${target#* }
  expect_exit 1 "$want" -- "$MQB" throughput --broker "$url" --cafile "$CA_FILE" "${auth[@]}" --duration 1s
  expect_exit 1 "$want" -- "$MQB" connect --broker "$url" --cafile "$CA_FILE" "${auth[@]}" --clients 3 \
    --rate 100 --hold 0s
  expect_exit 1 "$want" -- "$MQB" request --broker "$url" --cafile "$CA_FILE" "${auth[@]}" --mode pool \
    --duration 0.3s
  expect_exit 1 "$want" -- "$MQB" request --broker "$url" --cafile "$CA_FILE" "${auth[@]}" --mode naive \
    --duration 0.3s
done

# Memory: VmRSS growth over a baseline taken just before the run, labelled as growth.
grep -q '"rss_before_bytes":[1-9][0-9]*,"rss_growth_per_held_connection":[0-9]' "$tmp/c.json" \
  && pass "connect: broker memory as VmRSS growth over a baseline taken just before the run" \
  || fail "connect memory: $(grep -o '"broker_usage":{[^}]*}' "$tmp/c.json")"
# Refusals by their CONNACK reason, named.
"$MQB" connect --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password wrong --clients 5 --hold 0s \
  --json >"$tmp/cna.json" 2>/dev/null
grep -q '"connack_refusals":{"135":{"reason":"not authorized","count":5}}' "$tmp/cna.json" \
  && pass "connect: 5 refused by CONNACK 135 'not authorized', named" \
  || fail "CONNACK reasons: $(grep -o '"counts":{[^}]*}' "$tmp/cna.json")"
# max_connections: mosquitto 2.0 lets the TCP connection in and closes it before any CONNACK.
# A broker of its own, fresh: 2.0.11 enforces the limit only until the first refusals.
# (max_connections belongs to a listener: one of its own, on a free port.)
small_port=$("$(dirname "$RUN")"/tb-free-port)
"$RUN" --daemon --no-tls --dir "$tmp" --conf-line "listener $small_port 127.0.0.1" \
  --conf-line "max_connections 5" >"$tmp/env2" 2>"$tmp/err2" \
  || fail "a second test broker: $(cat "$tmp/err2")"
small_url=mqtt://127.0.0.1:$small_port
small_pid=$(sed -n 's/^RUN_PID=//p' "$tmp/env2")
small_user=(--username "$(sed -n 's/^MQTT_USERNAME=//p' "$tmp/env2")" --password "$(sed -n 's/^MQTT_PASSWORD=//p' "$tmp/env2")")
"$MQB" connect --broker "$small_url" "${small_user[@]}" --clients 8 --hold 0.3s >"$tmp/cmax.out" 2>"$tmp/cmax.err"
rc=$?
[ -n "$small_pid" ] && kill "$small_pid" 2>/dev/null
if [ $rc = 1 ] && grep -q "closed_before_connack 3" "$tmp/cmax.err" &&
   grep -q "in answer to an MQTT 5 CONNECT without a CONNACK (mqbench.s: clean start, Keep Alive 0 s, Maximum Packet Size 512, Topic Alias Maximum 0), and an MQTT 3.1.1 CONNECT right after fared no better (no CONNACK came): not a matter of the protocol version as far as can be seen; a broker at its connection limit" "$tmp/cmax.err" &&
   ! grep -q "(confirmed:" "$tmp/cmax.err"; then
  pass "max_connections 5: 3 of 8 closed before CONNACK, a 3.1.1 CONNECT closed too: the limit, not the protocol"
else
  fail "max_connections: rc $rc $(cat "$tmp/cmax.out" "$tmp/cmax.err" | tail -n 3)"
fi

# The scale this machine allows: 15,000 held connections from one process, 5,000/s scheduled.
"$MQB" connect --broker "$MQTT_URL" "${auth[@]}" --clients 15000 --rate 5000 --concurrency 200 \
  --hold 1s --source 127.0.0.2-127.0.0.5 --json >"$tmp/c15k.json" 2>"$tmp/c15k.err" \
  || fail "15k connect: $(cat "$tmp/c15k.err")"
if [ "$(json "$tmp/c15k.json" connected)" = 15000 ] && [ "$(json "$tmp/c15k.json" failed)" = 0 ]; then
  pass "connect: 15000 of 15000 held ($(json "$tmp/c15k.json" connects_per_second)/s measured, 5000/s scheduled)"
else
  fail "15k connect: $(head -c 400 "$tmp/c15k.json")"
fi

# --- merge: two "pods" with distinct prefixes -------------------------------------------------
for pod in a b; do
  "$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 300 --subscribers 2 --duration 1s \
    --prefix "pod-$pod" --json >"$tmp/pod-$pod.json" 2>/dev/null &
done
wait
"$MQB" merge --json "$tmp/pod-a.json" "$tmp/pod-b.json" >"$tmp/merged.json" 2>"$tmp/merge.err" \
  || fail "merge: $(cat "$tmp/merge.err")"
count_a=$(grep -o '"intended":{[^}]*"count":[0-9]*' "$tmp/pod-a.json" | grep -o '"count":[0-9]*$' | cut -d: -f2)
count_m=$(grep -o '"intended":{[^}]*"count":[0-9]*' "$tmp/merged.json" | grep -o '"count":[0-9]*$' | cut -d: -f2)
if grep -q '"merged":2' "$tmp/merged.json" && [ "$(json "$tmp/merged.json" delivered)" = 1200 ] &&
   [ "$count_m" = $((count_a * 2)) ]; then
  pass "merge: 2 results, 1200 deliveries, histogram counts added ($count_m samples)"
else
  fail "merge: $(head -c 400 "$tmp/merged.json")"
fi
expect_exit 1 "is a connect result" -- "$MQB" merge "$tmp/pod-a.json" "$tmp/c.json"

"$MQB" report "$tmp/pod-a.json" "$tmp/c.json" >"$tmp/report.html" 2>"$tmp/report.err" \
  || fail "report: $(cat "$tmp/report.err")"
if [ "$(grep -c '<svg' "$tmp/report.html")" = 3 ] && grep -q '</html>' "$tmp/report.html" &&
   ! grep -qE 'https?://[^"]*\.(js|css)' "$tmp/report.html" &&
   grep -q '&#9632; pod-a</td>' "$tmp/report.html" && grep -q 'connected 500 of 500' "$tmp/report.html" &&
   grep -q 'loss 0 (0.00%), shortfall 0' "$tmp/report.html" && grep -q 'rate=300 ' "$tmp/report.html" &&
   grep -q 'Latency over time' "$tmp/report.html"; then
  pass "report: one self-contained page: runs by label, settings, loss and shortfall, connections, 3 charts"
else
  fail "report: $(head -c 300 "$tmp/report.html")"
fi
# Latency over time: each second's own p50, p99 and max, three lines with points for a run of
# 2 s; what the probe saw; and a result that kept only the p99 of the run so far said as such.
"$MQB" report "$tmp/t1.json" >"$tmp/report1.html" 2>/dev/null
lines=$(sed -n '/each second.s own p50 (dashed)/,/<\/svg>/p' "$tmp/report1.html" | grep -c '<polyline[^>]*points="[0-9]')
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); [s.pop(k) for s in d["timeline"] for k in ("p50", "max")]; print(json.dumps(d))' \
  "$tmp/t1.json" >"$tmp/older.json"
if [ "$lines" = 3 ] && grep -q 'What the broker saw (the probe)' "$tmp/report1.html" \
   && grep -q 'messages_in 1200 ' "$tmp/report1.html" \
   && "$MQB" report "$tmp/older.json" 2>/dev/null | grep -q 'p99 of the run so far (an older result)'; then
  pass "report: each second's own p50, p99 and max over time, what the probe saw; an older result's run-so-far p99 said as such"
else
  fail "report: latency over time drew $lines lines: $(grep -o 'What the broker saw.\{0,300\}' "$tmp/report1.html")"
fi
expect_exit 1 "is not an mqbench --json result" -- "$MQB" report "$tmp/env"

# --- results: one JSON writer, every scenario ------------------------------------------------
# A topic holding '"' and '\' stays valid JSON; every result says what made it.
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 100 --duration 0.5s --label 'quote "q" \ back' \
  --pub-topic 'mqb/"odd"\topic' --sub-filter 'mqb/"odd"\topic' --json >"$tmp/odd.json" 2>"$tmp/odd.err" \
  || fail "odd topic: $(cat "$tmp/odd.err")"
if python3 - "$tmp/odd.json" "$tmp/c.json" "$tmp/merged.json" <<'PY'
import json, sys
odd = json.load(open(sys.argv[1]))
assert odd["settings"]["pub_topic"] == 'mqb/"odd"\\topic', odd["settings"]
assert odd["label"] == 'quote "q" \\ back', odd["label"]
for path in sys.argv[1:]:
    d = json.load(open(path))
    for key in ("format", "format_version", "mqbench_version", "date", "label", "scenario", "settings"):
        assert key in d, (path, key)
    assert d["format"] == "mqbench-result" and d["format_version"] == 2, path
PY
then pass "--json: valid with quotes and backslashes in a topic; format, version, date, label, settings in every result"
else fail "--json results: $(head -c 300 "$tmp/odd.json")"; fi

# Every field the README and the readers rely on, with its type, and the numbers consistent
# (tests/result_shape.py): each scenario's result, and merged ones.
here=$(cd "$(dirname "$0")" && pwd)
"$MQB" merge --json "$tmp/pod-a.json" "$tmp/pod-a.json" >"$tmp/m-a.json" 2>/dev/null
if python3 "$here/result_shape.py" "$tmp/t1.json" "$tmp/f.json" "$tmp/q2.json" "$tmp/c.json" \
     "$tmp/odd.json" "$tmp/m-a.json" >"$tmp/shape.out" 2>&1; then
  pass "--json: every scenario's result has its documented fields, types and consistent counts ($(grep -c '^ok' "$tmp/shape.out") results)"
else
  fail "--json shape: $(grep FAIL "$tmp/shape.out" | head -n 3)"
fi
# Format 1 (results from before format_version 2, kept in tests/data as 0.2 wrote them): merge,
# report and hgrm still read them, and the drain deadline stays a setting when merged.
f1=$here/data
if "$MQB" merge --json "$f1/format1-throughput.json" "$f1/format1-throughput.json" >"$tmp/f1m.json" 2>"$tmp/f1.err" &&
   python3 - "$tmp/f1m.json" <<'PY' &&
import json, sys
d = json.load(open(sys.argv[1]))
assert d["merged"] == 2 and d["counts"]["sent"] == 40 and d["counts"]["delivered"] == 80, d["counts"]
assert "drain_ns" not in d["counts"] and d["settings"]["drain_ns"] == 10**10, d
assert d["latency"]["intended"]["hist"]["count"] == 80
PY
   "$MQB" merge --json "$f1/format1-connect.json" "$f1/format1-connect.json" 2>>"$tmp/f1.err" | grep -q '"connected":40' &&
   "$MQB" report "$f1/format1-throughput.json" "$f1/format1-connect.json" 2>>"$tmp/f1.err" | grep -q 'format1-connect.json' &&
   "$MQB" hgrm "$f1/format1-throughput.json" 2>>"$tmp/f1.err" | grep -q 'Total count *= *40\]'; then
  pass "format 1 results: merged (counts added, the drain a setting), reported and exported as .hgrm"
else
  fail "format 1: $(cat "$tmp/f1.err") $(head -c 300 "$tmp/f1m.json")"
fi

# merge refuses results whose settings differ, unless told
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 200 --subscribers 2 --duration 1s --json >"$tmp/r200.json" 2>/dev/null
expect_exit 1 "was run with other settings (rate 300 against 200)" -- "$MQB" merge "$tmp/pod-a.json" "$tmp/r200.json"
"$MQB" merge --json --force "$tmp/pod-a.json" "$tmp/r200.json" >"$tmp/forced.json" 2>/dev/null \
  && grep -q '"settings_differ":true' "$tmp/forced.json" \
  && pass "merge --force: merged, marked settings_differ" || fail "merge --force: $(head -c 300 "$tmp/forced.json")"
# merge takes every scenario: connect results, and request results mode by mode
"$MQB" merge --json "$tmp/c.json" "$tmp/c.json" >"$tmp/c2.json" 2>"$tmp/c2.err" \
  && [ "$(json "$tmp/c2.json" connected)" = 1000 ] && pass "merge: two connect results, 1000 connected" \
  || fail "merge connect: $(cat "$tmp/c2.err") $(head -c 300 "$tmp/c2.json")"
"$MQB" hgrm "$tmp/pod-a.json" >"$tmp/a.hgrm" 2>"$tmp/hgrm.err"
if head -n 1 "$tmp/a.hgrm" | grep -q "Value *Percentile *TotalCount 1/(1-Percentile)" &&
   grep -q "^#\[Max *= *[0-9.]*, Total count *= *$count_a\]" "$tmp/a.hgrm" &&
   grep -q "^#\[Mean" "$tmp/a.hgrm"; then
  pass "hgrm: HdrHistogram's percentile distribution, $count_a samples"
else
  fail "hgrm: $(head -n 3 "$tmp/a.hgrm") $(tail -n 3 "$tmp/a.hgrm") $(cat "$tmp/hgrm.err")"
fi
expect_exit 1 "has no latency histogram called nothing" -- "$MQB" hgrm "$tmp/pod-a.json" nothing

# after_first_second FILE: wait (at most 10 s) until a run's first progress line, 1 s into its
# schedule. A stall starts there, not at a time guessed from the process's start: a start slowed by
# a sanitizer or a busy machine then cannot move it out of the schedule (each run's schedule lasts
# long enough past its first second for the stall to end inside it, or past it as the test needs).
after_first_second() {
  for _ in $(seq 100); do grep -q 'sent' "$1" 2>/dev/null && return; sleep 0.1; done
  fail "no progress line in $1 within 10 s"
}
# stall SECONDS: the broker stopped for SECONDS, then continued.
stall() { kill -STOP "$BROKER_PID"; sleep "$1"; kill -CONT "$BROKER_PID"; }

# --- coordinated omission: a 500 ms broker stall must show up in the tail --------------------
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 1000 --duration 3s --qos 1 --json \
  >"$tmp/co.json" 2>"$tmp/co.err" &
bench=$!
after_first_second "$tmp/co.err"
stall 0.5 # 1.0-1.6 s of a 3 s schedule
wait $bench || fail "CO run exited $?: $(cat "$tmp/co.err")"
max=$(hist "$tmp/co.json" intended max); p99=$(hist "$tmp/co.json" intended p99)
p50=$(hist "$tmp/co.json" intended p50)
if [ "${max:-0}" -ge 500000000 ] && [ "${p99:-0}" -ge 300000000 ] && [ "$(json "$tmp/co.json" loss)" = 0 ] &&
   [ "$(json "$tmp/co.json" shortfall)" = 0 ]; then
  pass "stall visible: max $((max / 1000000)) ms, p99 $((p99 / 1000000)) ms, p50 $((p50 / 1000)) us, no loss, no shortfall"
else
  fail "stall hidden: max $max p99 $p99 loss $(json "$tmp/co.json" loss) shortfall $(json "$tmp/co.json" shortfall)"
fi

# --- the overload guard: a stalled broker and a small --max-backlog --------------------------
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 1000 --duration 3s --qos 1 \
  --max-backlog 300 --json >"$tmp/sat.json" 2>"$tmp/sat.err" &
bench=$!
after_first_second "$tmp/sat.err"
stall 0.8 # 1.0-1.9 s of a 3 s schedule: 800 unacknowledged against a backlog of 300
wait $bench
rc=$?
shortfall=$(json "$tmp/sat.json" shortfall)
if [ $rc = 0 ] && grep -q "generator saturated" "$tmp/sat.err" && grep -q '"generator_saturated":true' "$tmp/sat.json" &&
   [ "${shortfall:-0}" -gt 0 ] && [ "$(json "$tmp/sat.json" loss)" = 0 ]; then
  pass "overload guard: 'generator saturated', shortfall $shortfall counted, nothing sent silently less"
else
  fail "overload guard: rc $rc shortfall $shortfall $(cat "$tmp/sat.err" | tail -2)"
fi


# --- the end of a run: a stall at the end of a QoS 0 run is latency, not loss ------------------
# QoS 0 has no acknowledgement to wait for: the drain must wait for the deliveries themselves.
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 1000 --duration 2s --qos 0 \
  --subscribers 2 --metrics-url "$METRICS_URL" --json >"$tmp/end.json" 2>"$tmp/end.err" &
bench=$!
after_first_second "$tmp/end.err"
stall 1.5 # from 1.0-1.1 s of a 2 s schedule to past its end: the last second waits 1.5 s
wait $bench
rc=$?
max=$(hist "$tmp/end.json" intended max)
probe_in=$(grep -o '"probe":{[^}]*"messages_in":[0-9]*' "$tmp/end.json" | grep -o '[0-9]*$')
probe_gone=$(grep -o '"probe":{[^}]*"disconnects":[0-9]*' "$tmp/end.json" | grep -o '[0-9]*$')
if [ $rc = 0 ] && [ "$(json "$tmp/end.json" loss)" = 0 ] && [ "$(json "$tmp/end.json" delivered)" = 4000 ] &&
   [ "${max:-0}" -ge 1000000000 ] && [ "$probe_in" = 2000 ] && [ "$probe_gone" = 3 ]; then
  pass "a 1.5 s stall at the end of a QoS 0 run: all 4000 delivered, max $((max / 1000000)) ms, the probe saw 2000 in and 3 disconnects"
else
  fail "end-of-run stall: rc $rc loss $(json "$tmp/end.json" loss) delivered $(json "$tmp/end.json" delivered) max $max probe in $probe_in disconnects $probe_gone"
fi

# --- a subscriber's connection lost mid-run: the others still drain ------------------------------
# Another client takes one subscriber's session over (same client id, from the broker's log).
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 500 --duration 3s --qos 1 \
  --subscribers 3 --prefix mqbtakeover --json >"$tmp/lost.json" 2>"$tmp/lost.err" &
bench=$!
victim=""
for _ in $(seq 50); do
  victim=$(grep -o 'as mqbtakeover-sub-[A-Za-z0-9]*-1 ' "$BROKER_LOG" | tail -n 1 | cut -d' ' -f2)
  [ -n "$victim" ] && break
  sleep 0.1
done
after_first_second "$tmp/lost.err" # taken over 1 s into a 3 s schedule
hostport=${MQTT_URL#mqtt://}
timeout 5 mosquitto_sub -h "${hostport%:*}" -p "${hostport##*:}" -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD" \
  -i "$victim" -t mqbtakeover-nothing -C 1 -W 1 >/dev/null 2>&1
wait $bench
rc=$?
gone=$(json "$tmp/lost.json" lost_with_subscriber); late=$(json "$tmp/lost.json" not_received)
if [ -n "$victim" ] && [ $rc = 1 ] && grep -q "lost a connection" "$tmp/lost.err" &&
   [ "${gone:-0}" -gt 0 ] && [ "$late" = 0 ] &&
   [ "$(json "$tmp/lost.json" loss)" = "$gone" ]; then
  pass "a subscriber taken over: exit 1, $gone lost with its connection, 0 missing at the healthy ones"
else
  fail "lost subscriber: victim '$victim' rc $rc lost_with_subscriber $gone not_received $late loss $(json "$tmp/lost.json" loss): $(tail -n 2 "$tmp/lost.err")"
fi

# --- exit 3: missing at the end of the drain, no connection lost --------------------------------
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 1000 --duration 2s --qos 0 \
  --drain 300ms --max-loss 1 --json >"$tmp/short.json" 2>"$tmp/short.err" &
bench=$!
after_first_second "$tmp/short.err"
stall 2 # from 1.0-1.1 s of a 2 s schedule past the 300 ms drain's end (2.3 s)
wait $bench
rc=$?
late=$(json "$tmp/short.json" not_received)
if [ $rc = 3 ] && grep -q "not received by the end of the drain" "$tmp/short.err" && [ "${late:-0}" -gt 0 ] &&
   [ "$(json "$tmp/short.json" lost_with_subscriber)" = 0 ]; then
  pass "a drain too short for a stall: exit 3, $late not received by the end of the drain"
else
  fail "short drain: rc $rc not_received $late: $(tail -n 1 "$tmp/short.err")"
fi

# --- accuracy: through a device that answers after exactly 20 ms ------------------------------
"$RESPONDER" --broker "$MQTT_URL" "${auth[@]}" --filter mqbench-acc/cmd --delay 20ms >"$tmp/resp" 2>&1 &
responder_pid=$!
for _ in $(seq 50); do grep -q RESPONDER_READY "$tmp/resp" && break; sleep 0.1; done
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --rate 100 --duration 2s \
  --pub-topic mqbench-acc/cmd --sub-filter replies/mqbench-acc/cmd --json >"$tmp/acc.json" 2>"$tmp/acc.err" \
  || fail "accuracy run: $(cat "$tmp/acc.err")"
min=$(hist "$tmp/acc.json" intended min)
p50=$(hist "$tmp/acc.json" intended p50)
if [ "${min:-0}" -ge 20000000 ] && [ "${p50:-0}" -le 30000000 ]; then
  pass "a 20 ms device: min $((min / 1000)) us, p50 $((p50 / 1000)) us"
else
  fail "accuracy: min $min p50 $p50 for a 20 ms delay"
fi
expect_counts "through the responder" "$tmp/acc.json" 200 200
kill "$responder_pid"; wait "$responder_pid" 2>/dev/null; responder_pid=""

# --- request: naive, pool and dedicated through the responder ----------------------------------
"$RESPONDER" --broker "$MQTT_URL" "${auth[@]}" --filter 'devices/+/commands/#' >"$tmp/resp2" 2>&1 &
responder_pid=$!
for _ in $(seq 50); do grep -q RESPONDER_READY "$tmp/resp2" && break; sleep 0.1; done
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --concurrency 4 --duration 1s --pool-size 3 \
  --metrics-url "$METRICS_URL" --json >"$tmp/req.json" 2>"$tmp/req.err" || fail "request: $(cat "$tmp/req.err")"
modes_ok=0
for mode in naive pool dedicated; do
  rps=$(grep -o "\"$mode\":{\"requests_per_second\":[0-9.]*" "$tmp/req.json" | grep -o '[0-9.]*$')
  [ "${rps%.*}" -gt 0 ] 2>/dev/null && modes_ok=$((modes_ok + 1))
done
pool_connects=$(grep -o '"pool":{[^}]*"connects":[0-9]*' "$tmp/req.json" | grep -o '[0-9]*$')
naive_ok=$(grep -o '"naive":{[^}]*"ok":[0-9]*' "$tmp/req.json" | grep -o '[0-9]*$')
naive_connects=$(grep -o '"naive":{[^}]*"connects":[0-9]*' "$tmp/req.json" | grep -o '[0-9]*$')
if [ $modes_ok = 3 ] && [ "${pool_connects:-99}" -le 3 ] && [ "$naive_connects" -ge "$naive_ok" ]; then
  pass "request: 3 modes answered; the pool used $pool_connects connections, naive $naive_connects"
else
  fail "request: $(head -c 600 "$tmp/req.json")"
fi
python3 "$here/result_shape.py" "$tmp/req.json" >"$tmp/shape.out" 2>&1 \
  && pass "--json: the request result's fields, mode by mode" || fail "request shape: $(cat "$tmp/shape.out")"
# A command nobody is subscribed to: at QoS 1 the broker's PUBACK says so (0x10), and every mode
# counts it as "no responder" at once: no timeout, no error.
rc=0
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --topic nobody/commands/ping --qos 1 --mode all \
  --concurrency 2 --duration 1s --timeout 5s --json >"$tmp/nobody.json" 2>"$tmp/nobody.err" || rc=$?
if [ $rc = 1 ] && [ "$(grep -c 'the broker said nobody is subscribed to nobody/commands/ping' "$tmp/nobody.err")" = 3 ] \
  && python3 - "$tmp/nobody.json" <<'PY'
import json, sys
modes = json.load(open(sys.argv[1]))["modes"]
bad = [m for m, r in modes.items()
       if r["no_responder"] < 10 or r["timeouts"] or r["errors"] or r["ok"]]
sys.exit(1 if bad or len(modes) != 3 else 0)
PY
then
  pass "request to a topic nobody listens on: every mode counts no_responder, no timeout; exit 1 saying so"
else
  fail "request to nobody (exit $rc): $(head -c 800 "$tmp/nobody.json") $(tail -n 3 "$tmp/nobody.err")"
fi
# The legacy model (MQTT 3.1.1): a device per worker, replies on replies/{topic} matched by id; the
# pool keeps its connections (warm), naive connects per request.
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --protocol 3.1.1 --concurrency 4 --duration 1s \
  --pool-size 3 --metrics-url "$METRICS_URL" --json >"$tmp/leg.json" 2>"$tmp/leg.err" \
  || fail "request --protocol 3.1.1: $(cat "$tmp/leg.err")"
modes_ok=0
for mode in naive pool dedicated; do
  ok=$(grep -o "\"$mode\":{[^}]*\"ok\":[0-9]*" "$tmp/leg.json" | grep -o '[0-9]*$')
  errs=$(grep -o "\"$mode\":{[^}]*\"errors\":[0-9]*" "$tmp/leg.json" | grep -o '[0-9]*$')
  [ "${ok:-0}" -gt 0 ] && [ "${errs:-1}" = 0 ] && modes_ok=$((modes_ok + 1))
done
pool_connects=$(grep -o '"pool":{[^}]*"connects":[0-9]*' "$tmp/leg.json" | grep -o '[0-9]*$')
pool_ok=$(grep -o '"pool":{[^}]*"ok":[0-9]*' "$tmp/leg.json" | grep -o '[0-9]*$')
if [ $modes_ok = 3 ] && [ "${pool_connects:-99}" -le 3 ] && [ "${pool_ok:-0}" -gt 100 ]; then
  pass "request --protocol 3.1.1: 3 modes answered; the pool's $pool_ok legacy requests used $pool_connects connections"
else
  fail "request --protocol 3.1.1: $(head -c 800 "$tmp/leg.json") $(tail -n 3 "$tmp/leg.err")"
fi
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --protocol 3.1.1 --mode loop --concurrency 4 \
  --duration 1s --json >"$tmp/legl.json" 2>"$tmp/legl.err"
loop_ok=$(grep -o '"loop":{"requests_per_second":[0-9.e+]*,"ok":[0-9]*' "$tmp/legl.json" | grep -o '[0-9]*$')
[ "${loop_ok:-0}" -gt 100 ] && pass "request --protocol 3.1.1 --mode loop: $loop_ok requests" \
  || fail "request --protocol 3.1.1 --mode loop: $(tail -n 3 "$tmp/legl.err")"
# fake_start MODE: tb-fake-broker in that mode, fake_pid and fake_url set once it is ready.
fake_start() {
  "$FAKE" --mode "$1" >"$tmp/fake-$1.out" 2>&1 &
  fake_pid=$!
  for _ in $(seq 50); do grep -q ready "$tmp/fake-$1.out" && break; sleep 0.05; done
  fake_url=$(sed -n 's/^FAKE_BROKER_URL=//p' "$tmp/fake-$1.out")
}
# A broker that speaks only 3.1.1: said once, confirmed, with the switch; the mode gives up after
# --fail-after with exit 1 instead of failing in a hot loop; the device is not blamed.
fake_start v311-only
"$MQB" request --broker "$fake_url" --mode all --concurrency 4 --duration 5s --fail-after 1s \
  >"$tmp/f.out" 2>"$tmp/f.err"
rc=$?
kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null
said=$(grep -c "does not accept MQTT 5 (confirmed: it refused the MQTT 5 CONNECT's protocol version; an MQTT 3.1.1 CONNECT right after was accepted): use --protocol 3.1.1" "$tmp/f.err")
if [ $rc = 1 ] && grep -q "naive: ended after 1.000s with nothing but connection failures" "$tmp/f.err" &&
   grep -q "pool: ended after 1.000s" "$tmp/f.err" && [ "$said" -ge 1 ] &&
   ! grep -q "is a device answering" "$tmp/f.err" && [ "$(grep -c '^mqbench: naive: the broker' "$tmp/f.err")" = 1 ]; then
  pass "a 3.1.1-only broker: confirmed and named once per mode ($said lines), ended by --fail-after, exit 1"
else
  fail "a 3.1.1-only broker: rc $rc: $(cat "$tmp/f.err" | head -c 1500)"
fi
# A broker that closes an MQTT 5 CONNECT without a word (RabbitMQ 3 does): every mode's advice is
# mqbench's flag, never the library's option names, and each mode says it once (all: naive, pool,
# dedicated; then loop).
fake_start close-v5
"$MQB" request --broker "$fake_url" --mode all --concurrency 4 --duration 5s --fail-after 1s \
  >"$tmp/c5.out" 2>"$tmp/c5.err"
rc=$?
"$MQB" request --broker "$fake_url" --mode loop --concurrency 4 --duration 5s --fail-after 1s \
  >"$tmp/c5.out" 2>>"$tmp/c5.err"
rc=$rc$?
kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null
once=0
for m in naive pool dedicated loop; do
  [ "$(grep -c "^mqbench: $m: the broker at .*(RabbitMQ 3 closes an MQTT 5 CONNECT so), use --protocol 3.1.1 (not confirmed" "$tmp/c5.err")" = 1 ] && once=$((once + 1))
done
if [ $rc = 11 ] && [ $once = 4 ] && ! grep -q "options.protocol\|mqp_pool_request_legacy" "$tmp/c5.err"; then
  pass "a broker closing MQTT 5 (RabbitMQ 3): each of the 4 modes advises --protocol 3.1.1 once, no library names"
else
  fail "a broker closing MQTT 5: rc $rc, $once of 4 modes said it once: $(head -c 2000 "$tmp/c5.err")"
fi
# A 2 s broker stall: closed loop hides it in the percentiles (and says so: max over 100x p99),
# open loop shows it. 2 s, not 1: under a sanitizer on a loaded machine the closed loop's p99
# reaches 12 ms, and a 1 s max is then only 80x it. --ping-timeout 5s: a pause the pool is told
# to wait out (by default it would call the broker silent after 1.5 s: the next check).
for load in closed open; do
  rate=(); [ $load = open ] && rate=(--rate 1000)
  before=$(grep -c "New client connected" "$BROKER_LOG")
  "$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode pool --concurrency 4 --duration 4s \
    --ping-timeout 5s "${rate[@]}" --json >"$tmp/stall-$load.json" 2>"$tmp/stall-$load.err" &
  bench=$!
  # The pool's first connection is in (it serves before the others are): its schedule has
  # begun; 0.5 s later the 2 s stall ends 1.5 s before the 4 s schedule does.
  for _ in $(seq 100); do [ "$(grep -c "New client connected" "$BROKER_LOG")" -gt "$before" ] && break; sleep 0.1; done
  sleep 0.5
  stall 2
  wait $bench || fail "$load-loop stall run: $(cat "$tmp/stall-$load.err")"
done
p99_closed=$(hist "$tmp/stall-closed.json" latency p99)
p99_open=$(hist "$tmp/stall-open.json" latency p99)
if grep -q "closed loop: max .* is over 100x p99" "$tmp/stall-closed.err" &&
   ! grep -q "closed loop" "$tmp/stall-open.err" && [ "${p99_open:-0}" -ge 100000000 ]; then
  pass "a 2 s stall: closed loop warns (p99 $((p99_closed / 1000)) us hides it), open loop p99 $((p99_open / 1000000)) ms shows it"
else
  fail "stall in request runs: closed p99 $p99_closed open p99 $p99_open; $(cat "$tmp/stall-closed.err" "$tmp/stall-open.err" | tail -n 4)"
fi
# A broker that hangs for 3 s under the pool's defaults: named as silent, counted, and not a
# storm of timeouts - what was in flight failed at 1.5 s as "connection lost"; requests go on
# once it answers again.
before=$(grep -c "New client connected" "$BROKER_LOG")
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode pool --concurrency 4 --duration 6s \
  --json >"$tmp/silent.json" 2>"$tmp/silent.err" &
bench=$!
for _ in $(seq 100); do [ "$(grep -c "New client connected" "$BROKER_LOG")" -gt "$before" ] && break; sleep 0.1; done
sleep 0.5
stall 3
wait $bench
rc=$?
silent=$(grep -o '"pool":{[^}]*"unresponsive":[0-9]*' "$tmp/silent.json" | grep -o '[0-9]*$')
timeouts=$(grep -o '"pool":{[^}]*"timeouts":[0-9]*' "$tmp/silent.json" | grep -o '[0-9]*$')
if [ $rc = 0 ] && [ "${silent:-0}" -ge 1 ] && [ "${timeouts:-1}" = 0 ] &&
   grep -q "^mqbench: pool: a broker went silent (a PINGREQ unanswered: hung, or the link went dark): 127.0.0.1:[0-9]* ([0-9]*)" "$tmp/silent.err"; then
  pass "a broker that hangs 3 s: named silent ($silent connections), no timeouts, the run went on"
else
  fail "a broker that hangs: rc $rc, unresponsive ${silent:-?}, timeouts ${timeouts:-?}: $(tail -n 5 "$tmp/silent.err")"
fi
# merge takes request results too, mode by mode
"$MQB" merge --json "$tmp/req.json" "$tmp/req.json" >"$tmp/req2m.json" 2>"$tmp/req2m.err"
pool_ok=$(grep -o '"pool":{[^}]*"ok":[0-9]*' "$tmp/req.json" | grep -o '[0-9]*$')
pool_ok2=$(grep -o '"pool":{[^}]*"ok":[0-9]*' "$tmp/req2m.json" | grep -o '[0-9]*$')
[ -n "$pool_ok" ] && [ "$pool_ok2" = $((pool_ok * 2)) ] && pass "merge: request results, mode by mode (pool ok $pool_ok x 2)" \
  || fail "merge request: $(cat "$tmp/req2m.err") $(head -c 300 "$tmp/req2m.json")"
# --metrics-url by host name (libcurl): the broker columns filled, numbers not dashes.
metrics_port=${METRICS_URL#http://127.0.0.1:}
metrics_port=${metrics_port%%/*}
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode naive --concurrency 2 --duration 0.5s \
  --metrics-url "http://localhost:$metrics_port/metrics" >"$tmp/req3.out" 2>"$tmp/req3.err"
if read -r _ ok _ _ _ _ conn disc _ < <(grep '^naive ' "$tmp/req3.out") && [ "$ok" -gt 0 ] &&
   [ "$conn" -ge 1 ] && [ "$disc" -ge 1 ] && ! grep -q warning "$tmp/req3.err"; then
  pass "--metrics-url http://localhost:$metrics_port/metrics: connects $conn, disconnects $disc"
else
  fail "--metrics-url by host name: $(cat "$tmp/req3.out" "$tmp/req3.err")"
fi
# --mode loop: the pool on a libuv loop, one thread; closed loop, then on a schedule.
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode loop --concurrency 4 --duration 1.5s --json \
  >"$tmp/loop1.json" 2>"$tmp/loop1.err"
loop_ok=$(grep -o '"loop":{"requests_per_second":[0-9.e+]*,"ok":[0-9]*' "$tmp/loop1.json" | grep -o '[0-9]*$')
loop_err=$(grep -o '"loop":{[^}]*"errors":[0-9]*' "$tmp/loop1.json" | grep -o '[0-9]*$')
[ "${loop_ok:-0}" -gt 100 ] && [ "$loop_err" = 0 ] && grep -q "loop: last 1s:" "$tmp/loop1.err" \
  && pass "--mode loop: $loop_ok requests in 1.5 s, no errors, progress shown" \
  || fail "--mode loop: $(cat "$tmp/loop1.json" "$tmp/loop1.err" | head -c 600)"
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode loop --concurrency 4 --duration 1s \
  --rate 300 --json >"$tmp/loop2.json" 2>"$tmp/loop2.err"
loop_ok=$(grep -o '"loop":{"requests_per_second":[0-9.e+]*,"ok":[0-9]*' "$tmp/loop2.json" | grep -o '[0-9]*$')
[ "${loop_ok:-0}" -ge 290 ] && [ "${loop_ok:-0}" -le 300 ] \
  && pass "--mode loop --rate 300 for 1 s: $loop_ok requests, on the schedule" \
  || fail "--mode loop --rate 300: ${loop_ok:-none} requests: $(head -c 400 "$tmp/loop2.err")"
# An unreachable probe: a loud warning, the columns n/a, the run itself still measured (exit 0).
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode dedicated --concurrency 1 --duration 0.3s \
  --metrics-url "http://127.0.0.1:1/metrics" >"$tmp/req4.out" 2>"$tmp/req4.err"
rc=$?
if [ $rc = 0 ] && grep -q "warning: cannot read the broker's probe at http://127.0.0.1:1/metrics" "$tmp/req4.err" &&
   grep -qE '^dedicated .* n/a +n/a +[^ ]+ +[^ ]+$' "$tmp/req4.out"; then
  pass "an unreachable --metrics-url: a warning naming it, n/a in the broker columns"
else
  fail "unreachable --metrics-url (exit $rc): $(cat "$tmp/req4.out" "$tmp/req4.err")"
fi
"$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --duration 0.3s --rate 100 \
  --metrics-url "http://localhost:$metrics_port/nothing-here" >"$tmp/t4.out" 2>"$tmp/t4.err"
grep -q "HTTP status 404" "$tmp/t4.err" && grep -q "broker (probe): n/a" "$tmp/t4.out" \
  && pass "a --metrics-url that answers 404: a warning, 'broker (probe): n/a'" \
  || fail "404 --metrics-url: $(cat "$tmp/t4.out" "$tmp/t4.err")"
"$MQB" request --broker "$MQTT_URL" "${auth[@]}" --mode pool --topic nobody/listens --timeout 200ms \
  --duration 0.5s --concurrency 2 >"$tmp/req2.out" 2>"$tmp/req2.err"
[ $? = 1 ] && grep -q "no request got its reply" "$tmp/req2.err" && pass "request without a device fails loudly" \
  || fail "request without a device: $(cat "$tmp/req2.err")"
kill "$responder_pid"; wait "$responder_pid" 2>/dev/null; responder_pid=""

# --- failing loudly ---------------------------------------------------------------------------
expect_exit 2 "unknown option '--bogus'" -- "$MQB" throughput --broker "$MQTT_URL" --bogus
expect_exit 2 "--qos: expected 0, 1 or 2" -- "$MQB" throughput --broker "$MQTT_URL" --qos 3
expect_exit 2 "--rate: expected" -- "$MQB" fanout --broker "$MQTT_URL" --rate fast
expect_exit 2 "--broker URL is required" -- "$MQB" throughput
expect_exit 2 "--publishers does not apply to the fanout scenario" -- "$MQB" fanout --broker "$MQTT_URL" --publishers 2
expect_exit 2 "unknown scenario 'bogus'" -- "$MQB" bogus
expect_exit 2 "--metrics-url: 'ftp://h/m': expected an http:// or https:// URL" -- "$MQB" request --broker "$MQTT_URL" --metrics-url ftp://h/m
expect_exit 2 "--metrics-url: 'http://' is not a URL" -- "$MQB" connect --broker "$MQTT_URL" --metrics-url http://
expect_exit 1 "cannot connect to mqtt://127.0.0.1:1" -- "$MQB" throughput --broker mqtt://127.0.0.1:1 --duration 1s
expect_exit 1 "CONNECT refused" -- "$MQB" throughput --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password wrong --duration 1s
expect_exit 1 "nothing was delivered" -- "$MQB" throughput --broker "$MQTT_URL" "${auth[@]}" --duration 1s \
  --pub-topic nowhere/a --sub-filter nowhere/b --drain 1s
expect_exit 1 "connections failed: refused 20" -- "$MQB" connect --broker mqtt://127.0.0.1:1 --clients 20
expect_exit 1 "connections failed: connack 5" -- "$MQB" connect --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password wrong --clients 5 --hold 0s
# A password as long as a JWT (it overflowed a fixed 1200-byte buffer, found by ASan): sent whole,
# refused by the broker; one longer than MQTT allows: refused before the run.
jwt=$(head -c 3000 /dev/zero | tr '\0' j)
expect_exit 1 "3 of 3 connections failed: connack" -- "$MQB" connect --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password "$jwt" --clients 3 --hold 0s
expect_exit 2 "--password: longer than MQTT allows" -- "$MQB" connect --broker "$MQTT_URL" --username u --password "$(head -c 70000 /dev/zero | tr '\0' p)"
expect_exit 1 "connections failed: tls 3" -- "$MQB" connect --broker "$MQTTS_URL" --cafile "$CLIENT_CERT" "${auth[@]}" --clients 3
expect_exit 1 "file descriptors each; the limit here is" -- "$MQB" connect --broker "$MQTT_URL" --clients 1000000
expect_exit 2 "--clients does not apply to the throughput scenario" -- "$MQB" throughput --broker "$MQTT_URL" --clients 5
expect_exit 2 "--fail-after: expected a duration above zero" -- "$MQB" request --broker "$MQTT_URL" --fail-after 0s
expect_exit 2 "--mode: expected naive, pool, dedicated, loop or all" -- "$MQB" request --broker "$MQTT_URL" --mode fast
# ws:// and wss://: the scenarios on libmosquitto (2.0.11: no WebSockets) say so before the run.
expect_exit 2 "throughput over ws:// and wss://: it connects with libmosquitto" -- "$MQB" throughput --broker ws://127.0.0.1:1
expect_exit 2 "fanout over ws:// and wss://" -- "$MQB" fanout --broker wss://127.0.0.1:1
expect_exit 2 "request --mode naive, dedicated or all over ws://" -- "$MQB" request --broker ws://127.0.0.1:1
expect_exit 2 "--ws-header is for ws:// and wss:// brokers" -- "$MQB" connect --broker "$MQTT_URL" --ws-header "A: b"
expect_exit 2 "--ws-header: expected one 'Name: value' header line" -- "$MQB" connect --broker ws://h --ws-header "no colon"
for sc in connect throughput fanout request; do
  "$MQB" $sc --help | grep -q -- "--broker URL" && pass "$sc --help" || fail "$sc --help"
done

# --- a broker that takes small packets (mosquitto's max_packet_size 256, as the Paho test broker's
# default): what fits goes, every request mode included (a pooled request is about 100 bytes),
# and what does not is named with the broker's limit, not reported as "loss 0 %".
"$RUN" --daemon --no-tls --no-probe --conf-line "max_packet_size 256" --dir "$tmp" >"$tmp/small.env" \
  2>"$tmp/small.err" || fail "the max_packet_size broker: $(cat "$tmp/small.err")"
small_url=$(. "$tmp/small.env" && echo "$MQTT_URL")
small_pid=$(. "$tmp/small.env" && echo "$RUN_PID")
small_auth=(--username "$(. "$tmp/small.env" && echo "$MQTT_USERNAME")"
  --password "$(. "$tmp/small.env" && echo "$MQTT_PASSWORD")")
expect_exit 1 "larger than the broker takes (its Maximum Packet Size, 256 bytes)" -- \
  "$MQB" throughput --broker "$small_url" "${small_auth[@]}" --size 300 --rate 50 --duration 0.5s
grep -q "^the run failed: a publish of 300 payload bytes" "$tmp/out" \
  && pass "the report says the run failed before its counts" || fail "report after a refused publish: $(head -5 "$tmp/out")"
"$RESPONDER" --broker "$small_url" "${small_auth[@]}" >"$tmp/resp-small" 2>&1 &
responder_pid=$!
for _ in $(seq 50); do grep -q RESPONDER_READY "$tmp/resp-small" && break; sleep 0.1; done
"$MQB" request --broker "$small_url" "${small_auth[@]}" --concurrency 2 --duration 0.5s --json \
  >"$tmp/req-small.json" 2>"$tmp/req-small.err"
rc=$?
kill "$responder_pid"; wait "$responder_pid" 2>/dev/null; responder_pid=""
if [ $rc = 0 ] && python3 - "$tmp/req-small.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for mode in ("naive", "pool", "dedicated"):
    m = d["modes"][mode]
    assert m["ok"] > 0 and m["errors"] == 0 and m["timeouts"] == 0, (mode, m["ok"], m["errors"], m["failures"])
PY
then
  pass "Maximum Packet Size 256: naive, pool and dedicated requests all answered, none refused"
else
  fail "requests under max_packet_size 256: exit $rc: $(tail -3 "$tmp/req-small.err")"
fi
kill "$small_pid" 2>/dev/null

[ $failures -eq 0 ] && { echo "all mqbench checks passed"; exit 0; }
echo "$failures mqbench check(s) failed"
exit 1
