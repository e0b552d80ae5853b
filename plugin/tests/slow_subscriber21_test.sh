#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The slow subscriber, named (mosquitto 2.1): three healthy QoS 1 subscribers and one whose
# process is stopped (SIGSTOP) while 300 messages go out, so it reads nothing: its 20 in-flight
# messages are not acknowledged and the rest wait in its queue inside the broker. When it is let
# go, the broker sends them, seconds late. The probe's ranking of that window must name it first,
# with its longest wait, and name none of the healthy ones; $SYS says the same. Its endpoint is
# on loopback, so ids are shown (the log says why); with plugin_opt_expose_client_ids false a
# client is named by a keyed hash in both renderings, and its id appears nowhere.
# Usage: slow_subscriber21_test.sh MOSQUITTO_2.1 PROBE_SO FREE_PORT   (exits 77 without 2.1)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
MOSQ=${1:-} PROBE=$2 FREE_PORT=$3
if [ -z "$MOSQ" ] || [ ! -x "$MOSQ" ]; then
  skip_test "no mosquitto 2.1 build at '$MOSQ' (scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
. "$(dirname "$0")/broker21.sh" slow21
fail() { echo "FAIL: $*" >&2; exit 1; } # the first failure ends this test

# start NAME OPTION-LINE...: a 2.1 broker with the probe on free ports ($port, $metrics_port), its
# log in $tmp/NAME.log; back when /metrics answers.
start() {
  local name=$1
  shift
  port=$("$FREE_PORT") metrics_port=$("$FREE_PORT")
  {
    printf '%s\n' "user root" "log_dest stderr" "log_type error" "log_type warning" "log_type notice" \
      "listener $port 127.0.0.1" "allow_anonymous true" "sys_interval 1" "plugin $PROBE" \
      "plugin_opt_http_listen 127.0.0.1:$metrics_port" "plugin_opt_sys_interval 1"
    printf 'plugin_opt_%s\n' "$@"
  } >"$tmp/$name.conf"
  LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 "$MOSQ" -c "$tmp/$name.conf" >"$tmp/$name.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$metrics_port/metrics" && break; sleep 0.1; done
}
start broker "slow_top 3" "slow_threshold_ms 200" "slow_window 2"
curl -s --max-time 5 "http://127.0.0.1:$metrics_port/metrics" | grep -q '^mosquitto_slow_subscribers ' \
  || fail "no slow-subscriber figures on 2.1: $(cat "$tmp/broker.log")"

sub() { # ID: a QoS 1 subscriber that takes the 300 messages
  mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -i "$1" -t slow21/t -C 300 -W 30 >"$tmp/$1.out" 2>&1 &
  others+=($!)
}
for i in 1 2 3; do sub "healthy-$i"; done
sub "stuck-1"
stuck=${others[3]}
mosquitto_sub -h 127.0.0.1 -p "$port" -v -t '$SYS/broker/probe/metrics' >"$tmp/sys.out" 2>&1 &
others+=($!)
for _ in $(seq 50); do
  [ "$(curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" | awk '$1 == "mosquitto_connected_clients" { print $2 }')" = 5 ] && break
  sleep 0.1
done
kill -STOP "$stuck"
mosquitto_pub -h 127.0.0.1 -p "$port" -q 1 -t slow21/t -m x --repeat 300 --repeat-delay 0.01 2>/dev/null \
  || fail "the publisher was refused"
sleep 0.5
kill -CONT "$stuck"
for p in "${others[@]:0:4}"; do wait "$p" || fail "a subscriber did not get its 300 messages"; done

# The window that saw the stuck subscriber's queue go out: within two windows and a tick.
found=""
for _ in $(seq 60); do
  curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics"
  grep -q '^mosquitto_slow_subscriber_hold_max_seconds{client_id="stuck-1"}' "$tmp/metrics" && { found=1; break; }
  sleep 0.1
done
[ -n "$found" ] || fail "the stuck subscriber is not listed: $(grep slow_subscriber "$tmp/metrics")"
first=$(grep '^mosquitto_slow_subscriber_hold_max_seconds{' "$tmp/metrics" | head -n 1)
wait_s=$(awk '{ print $2 }' <<<"$first")
case $first in
  *'client_id="stuck-1"}'*) ;;
  *) fail "the stuck subscriber is not first: $(grep slow_subscriber "$tmp/metrics")" ;;
esac
awk -v w="$wait_s" 'BEGIN { exit !(w >= 1.0) }' || fail "its longest wait is $wait_s s; it was stopped for 3 s"
grep -q 'client_id="healthy-' "$tmp/metrics" && fail "a healthy subscriber is listed: $(grep slow_subscriber "$tmp/metrics")"
over=$(awk '$1 == "mosquitto_slow_subscribers" { print $2 }' "$tmp/metrics")
[ "$over" = 1 ] || fail "mosquitto_slow_subscribers is $over, want 1"
echo "ok: the stuck subscriber tops the list (longest wait $wait_s s, $(awk '$1 ~ /deliveries\{client_id="stuck-1"\}/ { print $2 }' "$tmp/metrics") messages in the window); no healthy one is listed"

# $SYS: the same ranking in the JSON document (published every second).
for _ in $(seq 30); do
  grep -q '"top":\[{"client_id":"stuck-1"' "$tmp/sys.out" && break
  sleep 0.1
done
grep -q '"top":\[{"client_id":"stuck-1"' "$tmp/sys.out" || fail "\$SYS never listed the stuck subscriber first"
grep '"top":\[{"client_id":"stuck-1"' "$tmp/sys.out" | grep -q 'healthy-' && fail "\$SYS lists a healthy subscriber"
echo "ok: \$SYS/broker/probe/metrics lists it first too"

grep -q "named by their client ids: the metrics endpoint listens on loopback (127.0.0.1) only" "$tmp/broker.log" \
  || fail "the log does not say why ids are shown: $(grep mqtt_probe "$tmp/broker.log")"
echo "ok: ids shown, and the broker's log says why (the endpoint is on loopback)"

# Ids hidden by choice: every subscriber over a threshold of 0 is listed, as h: and 16 hex digits.
stop_broker
start hidden "slow_threshold_ms 0" "slow_window 1" "expose_client_ids false"
mosquitto_sub -h 127.0.0.1 -p "$port" -v -t '$SYS/broker/probe/metrics' >"$tmp/sys2.out" 2>&1 &
others+=($!)
mosquitto_sub -h 127.0.0.1 -p "$port" -q 1 -i device-serial-0042 -t hidden/t -C 5 -W 20 >/dev/null 2>&1 &
sub_pid=$!
sleep 0.5
mosquitto_pub -h 127.0.0.1 -p "$port" -q 1 -t hidden/t -m x --repeat 5 --repeat-delay 0.1 2>/dev/null \
  || fail "the publisher was refused"
wait "$sub_pid" || fail "the subscriber did not get its 5 messages"
label=""
for _ in $(seq 40); do
  curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics2"
  label=$(grep -o '^mosquitto_slow_subscriber_hold_max_seconds{client_id="h:[0-9a-f]\{16\}"}' "$tmp/metrics2" | head -n 1)
  [ -n "$label" ] && break
  sleep 0.1
done
[ -n "$label" ] || fail "no hashed label: $(grep slow_subscriber "$tmp/metrics2")"
for _ in $(seq 30); do grep -q '"top":\[{"client_id":"h:' "$tmp/sys2.out" && break; sleep 0.1; done
grep -q '"top":\[{"client_id":"h:' "$tmp/sys2.out" || fail "\$SYS does not name it by its hash"
grep -q device-serial-0042 "$tmp/metrics2" "$tmp/sys2.out" && fail "the client id appears in the metrics"
grep -q "named by a keyed hash of their client id (h:...), not the id: plugin_opt_expose_client_ids false" "$tmp/hidden.log" \
  || fail "the log does not say ids are hidden: $(grep mqtt_probe "$tmp/hidden.log")"
echo "ok: with expose_client_ids false the subscriber is $(grep -o "h:[0-9a-f]*" <<<"$label") in /metrics and \$SYS, its id nowhere; the log says why"
