#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# What mosquitto_routing_checks_total counts, against what subscribers receive: READ checks
# happen before the ACL decision and before a full queue drops a message, so they are an upper
# bound on deliveries. Two cases where they differ, both measured exactly. On mosquitto 2.1 the
# probe also counts true deliveries (MESSAGE_OUT): they must equal what the subscribers received.
# Usage: routing_checks_test.sh TB_RUN [MOSQUITTO]   (MOSQUITTO: a broker binary, e.g. 2.1;
#        exits 77, skipped, when it is given but empty or missing)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
RUN=$1
if [ $# -ge 2 ]; then
  if [ -z "$2" ] || [ ! -x "$2" ]; then
    skip_test "no mosquitto 2.1 binary at '$2' (build it with scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
  fi
  export TB_MOSQUITTO=$2
fi
tmp=$(mktemp -d /tmp/probe-routing-test-XXXXXX)
run_pid="" sub_pid=""
cleanup() {
  [ -n "$sub_pid" ] && kill -CONT "$sub_pid" 2>/dev/null && kill "$sub_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
for tool in mosquitto_sub mosquitto_pub; do
  command -v $tool >/dev/null || { echo "FAIL: $tool is not installed (Debian package mosquitto-clients)" >&2; exit 1; }
done

"$RUN" --daemon --no-tls --plugin-opt observe_auth=true --dir "$tmp" >"$tmp/env" 2>"$tmp/err" \
  || { echo "FAIL: test broker: $(cat "$tmp/err")" >&2; exit 1; }
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
hostport=${MQTT_URL#mqtt://}
host=${hostport%:*} port=${hostport##*:}
metrics_port=${METRICS_URL#http://127.0.0.1:}
metrics_port=${metrics_port%%/*}

# metric NAME: one of the probe's counters (bash's /dev/tcp: no curl needed); empty if absent.
metric() {
  exec 3<>/dev/tcp/127.0.0.1/"$metrics_port" || return 1
  printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  timeout 5 cat <&3 | awk -v n="$1" '$1 == n { print $2 }'
  exec 3<&-
}
checks() { metric mosquitto_routing_checks_total; }
deliveries() { metric mosquitto_deliveries_total; }
version=$(sed -n 's/.*mosquitto version \([0-9.]*\) starting.*/\1/p' "$BROKER_LOG" | head -n 1)
echo "broker: mosquitto $version"
case $version in
  2.0.*) [ -z "$(deliveries)" ] && pass "2.0: no delivery count (no MESSAGE_OUT), said by its absence" \
           || fail "2.0 exports mosquitto_deliveries_total" ;;
  *) [ -n "$(deliveries)" ] && pass "$version: deliveries counted (MESSAGE_OUT)" \
       || fail "$version: no mosquitto_deliveries_total" ;;
esac
# same_deliveries LABEL D0 GOT: on 2.1, deliveries went up by exactly what was received
same_deliveries() {
  [ -z "$2" ] && return
  local d1; d1=$(deliveries)
  [ $((d1 - $2)) = "$3" ] && pass "$1: deliveries +$((d1 - $2)) = received $3" \
    || fail "$1: deliveries +$((d1 - $2)), received $3"
}
me=(-h "$host" -p "$port" -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD")
other=(-h "$host" -p "$port" -u "$MQTT_OTHER_USERNAME" -P "$MQTT_OTHER_PASSWORD")
# wait_lines FILE N: until FILE has N lines, at most 10 s
wait_lines() { for _ in $(seq 100); do [ "$(wc -l <"$1")" -ge "$2" ] && return; sleep 0.1; done; }
# wait_line FILE TEXT: until FILE has the line TEXT, at most 10 s
wait_line() { for _ in $(seq 100); do grep -qx "$2" "$1" && return; sleep 0.1; done; }
sub_metric() { metric "mosquitto_subscription_checks_total{packet=\"$1\"}"; }
# wait_subscribed BEFORE N: until the probe has checked N more SUBSCRIBE filters than BEFORE
# (observe_auth: the broker checks a filter while it handles the SUBSCRIBE), at most 10 s
wait_subscribed() {
  for _ in $(seq 100); do [ $(($(sub_metric subscribe) - $1)) -ge "$2" ] && return; sleep 0.1; done
  fail "the subscriber's SUBSCRIBE was not seen within 10 s"
}

# --- an ACL that denies reads: the limited user subscribes to # and may read only limited/# ----
c0=$(checks) d0=$(deliveries) s0=$(sub_metric subscribe)
mosquitto_sub "${other[@]}" -q 1 -t '#' -v >"$tmp/acl.out" 2>"$tmp/acl.err" &
sub_pid=$!
wait_subscribed "$s0" 1
for i in 1 2 3 4 5; do
  mosquitto_pub "${me[@]}" -q 1 -t "denied/$i" -m no
  mosquitto_pub "${me[@]}" -q 1 -t "limited/$i" -m yes
done
# A last message it may read: one connection's QoS 1 messages arrive in order, so anything denied
# that was delivered by mistake is there before it.
mosquitto_pub "${me[@]}" -q 1 -t "limited/end" -m end
wait_line "$tmp/acl.out" "limited/end end"
kill "$sub_pid"; wait "$sub_pid" 2>/dev/null; sub_pid=""
c1=$(checks)
got=$(($(wc -l <"$tmp/acl.out") - 1))
if [ $((c1 - c0)) = 11 ] && [ "$got" = 5 ] && ! grep -q denied "$tmp/acl.out"; then
  pass "an ACL that denies reads: routing checks +$((c1 - c0)), delivered $got"
else
  fail "denied reads: routing checks +$((c1 - c0)) (want 11), delivered $got (want 5): $(head -c 200 "$tmp/acl.out")"
fi
same_deliveries "denied reads" "$d0" "$((got + 1))"

# --- SUBSCRIBE and UNSUBSCRIBE filters checked (observe_auth), payload bytes sent (2.1) ---------
s0=$(sub_metric subscribe) u0=$(sub_metric unsubscribe) b0=$(metric mosquitto_sent_payload_bytes_total)
mosquitto_sub "${me[@]}" -t 'subs/a' -t 'subs/b' -U 'subs/c' -C 2 -W 5 >"$tmp/subs.out" 2>&1 &
sub_pid=$!
wait_subscribed "$s0" 2
for _ in $(seq 100); do [ $(($(sub_metric unsubscribe) - u0)) -ge 1 ] && break; sleep 0.1; done
mosquitto_pub "${me[@]}" -t subs/a -m 12345
mosquitto_pub "${me[@]}" -t subs/b -m 678
wait "$sub_pid" 2>/dev/null; sub_pid=""
s1=$(sub_metric subscribe) u1=$(sub_metric unsubscribe) b1=$(metric mosquitto_sent_payload_bytes_total)
[ $((s1 - s0)) = 2 ] && [ $((u1 - u0)) = 1 ] \
  && pass "subscription checks: subscribe +$((s1 - s0)), unsubscribe +$((u1 - u0))" \
  || fail "subscription checks: subscribe +$((s1 - s0)) (want 2), unsubscribe +$((u1 - u0)) (want 1)"
case $version in
  2.0.*) [ -z "$b1" ] && pass "2.0: no sent payload bytes (no MESSAGE_OUT), said by its absence" \
           || fail "2.0 exports mosquitto_sent_payload_bytes_total" ;;
  *) [ $((b1 - b0)) = 8 ] && pass "$version: sent payload bytes +8 (5 + 3, MESSAGE_OUT)" \
       || fail "$version: sent payload bytes +$((b1 - b0)), want 8" ;;
esac

# --- a full queue: a QoS 1 subscriber that stops reading ---------------------------------------
# 2.0.11: 20 in flight (max_inflight_messages) + 1000 queued (max_queued_messages) = 1020; the rest
# is dropped. 2.1.2 lets a connected client queue max_queued_messages beyond its in-flight window
# (src/database.c, db__ready_for_queue: queued - inflight_maximum < max_queued_messages): 20 in
# flight + 1020 queued = 1040.
c0=$(checks) d0=$(deliveries) s0=$(sub_metric subscribe)
mosquitto_sub "${me[@]}" -q 1 -t 'full/#' >"$tmp/full.out" 2>"$tmp/full.err" &
sub_pid=$!
wait_subscribed "$s0" 1
kill -STOP "$sub_pid"
seq 1500 | mosquitto_pub "${me[@]}" -q 1 -t full/x -l
c1=$(checks)
kill -CONT "$sub_pid"
case $version in 2.0.*) want=1020 ;; *) want=1040 ;; esac
wait_lines "$tmp/full.out" "$want"
# Published once the queue has drained: it arrives after anything more the broker kept.
mosquitto_pub "${me[@]}" -q 1 -t full/x -m end
wait_line "$tmp/full.out" end
kill "$sub_pid"; wait "$sub_pid" 2>/dev/null; sub_pid=""
got=$(($(wc -l <"$tmp/full.out") - 1))
if [ $((c1 - c0)) = 1500 ] && [ "$got" = "$want" ]; then
  pass "a full queue: routing checks +$((c1 - c0)), delivered $got"
else
  fail "full queue: routing checks +$((c1 - c0)) (want 1500), delivered $got (want $want)"
fi
same_deliveries "a full queue" "$d0" "$((got + 1))"
[ $failures -eq 0 ]
