#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The probe serves /metrics from a process of its own, so the broker stays single-threaded.
# Against a broker that drops root for `user nobody` (when run as root): the broker has one
# thread; its one child is the probe's HTTP process, running as the broker's user, sharing no
# socket with the broker but the metrics listener; process_open_fds is the broker's (read through
# directories opened before mosquitto made itself undumpable); the child killed is replaced and
# the counters carry on; the broker stopped or killed takes the child with it.
# Usage: http_process_test.sh PROBE_SO FREE_PORT [MOSQUITTO]  (default /usr/sbin/mosquitto; 77,
# skipped, when MOSQUITTO is given but missing)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
PROBE=$1 FREE_PORT=$2 MOSQ=${3:-/usr/sbin/mosquitto}
[ -x "$MOSQ" ] || skip_test "no mosquitto binary at '$MOSQ' (scripts/mosquitto-2.1)"
. "$(dirname "$0")/broker21.sh" http-process
chmod 0755 "$tmp"
user=$(id -un)
[ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1 && user=nobody
# The broker opens the probe as the user it switched to (2.0 and 2.1 both drop root before they
# load plugins: plugin/README.md, Options): a build tree under a private directory (mktemp -d,
# root's home) is not readable by that user, so it loads a copy from here.
cp "$PROBE" "$tmp/mqtt_probe.so" && chmod 0644 "$tmp/mqtt_probe.so"
PROBE=$tmp/mqtt_probe.so

start_broker() {
  port=$("$FREE_PORT") metrics_port=$("$FREE_PORT")
  cat >"$tmp/mosquitto.conf" <<CONF
user $user
log_dest stderr
log_type error
log_type warning
log_type information
listener $port 127.0.0.1
allow_anonymous true
plugin $PROBE
plugin_opt_http_listen 127.0.0.1:$metrics_port
CONF
  LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 "$MOSQ" -c "$tmp/mosquitto.conf" >>"$tmp/broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$metrics_port/metrics" && return 0; sleep 0.1; done
  fail "the probe did not answer within 5 s: $(tail -5 "$tmp/broker.log")"
  return 1
}
children() { cat "/proc/$broker_pid/task/$broker_pid/children" 2>/dev/null | xargs; }
sockets() { # PID: the socket inodes it holds, one a line
  for l in /proc/"$1"/fd/*; do readlink "$l"; done 2>/dev/null | sed -n 's/^socket:\[\([0-9]*\)\]$/\1/p' | sort -u
}
gone_within() { # PID TENTHS
  for _ in $(seq "$2"); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

start_broker || exit 1
threads=$(awk '/^Threads:/ { print $2 }' "/proc/$broker_pid/status")
[ "$threads" = 1 ] && pass "the broker serving /metrics has 1 thread" \
  || fail "the broker has $threads threads (want 1: the probe's server is in its own process)"
child=$(children)
[ -n "$child" ] && [ "$(wc -w <<<"$child")" = 1 ] || fail "the broker's children: '$child' (want one)"
child=${child%% *}
comm=$(cat "/proc/$child/comm" 2>/dev/null)
[ "$comm" = "mqtt_probe http" ] || fail "the child is '$comm' (want 'mqtt_probe http')"
cuid=$(awk '/^Uid:/ { print $2 }' "/proc/$child/status") buid=$(awk '/^Uid:/ { print $2 }' "/proc/$broker_pid/status")
[ "$cuid" = "$buid" ] && [ "$buid" = "$(id -u "$user")" ] \
  && pass "its one child is '$comm' (pid $child), running as $user like the broker" \
  || fail "uids: child $cuid, broker $buid, want $(id -u "$user") ($user)"

# An MQTT client: its socket is the broker's alone.
mosquitto_sub -h 127.0.0.1 -p "$port" -t 'hp/#' -W 30 >/dev/null 2>&1 &
others+=($!)
for _ in $(seq 50); do [ "$(sockets "$broker_pid" | wc -l)" -ge 3 ] && break; sleep 0.1; done
shared=$(comm -12 <(sockets "$broker_pid") <(sockets "$child") | wc -l)
[ "$shared" = 1 ] && pass "the child shares one socket with the broker (the metrics listener), not its clients'" \
  || fail "the child shares $shared sockets with the broker (want 1): broker $(sockets "$broker_pid" | xargs), child $(sockets "$child" | xargs)"
fds=$(metric process_open_fds) real=$(find "/proc/$broker_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
[ "$fds" = "$real" ] && pass "process_open_fds $fds: the broker's, as $user" \
  || fail "process_open_fds '$fds', the broker has $real"

# The child killed: the broker says so and starts another; the counters are the broker's.
mosquitto_pub -h 127.0.0.1 -p "$port" -t hp/a -m 1
wait_metric 'mosquitto_messages_received_total{qos="0",retain="false"}' 1 || fail "one message not counted"
kill -9 "$child"
back=""
for _ in $(seq 100); do
  back=$(children)
  [ -n "$back" ] && [ "$back" != "$child" ] && metric process_open_fds >/dev/null && [ -n "$(metric process_open_fds)" ] && break
  sleep 0.1
done
grep -q "HTTP process (pid $child) was killed by signal 9" "$tmp/broker.log" \
  || fail "the broker did not log the child's death: $(tail -3 "$tmp/broker.log")"
[ -n "$back" ] && [ "$back" != "$child" ] && [ "$(metric 'mosquitto_messages_received_total{qos="0",retain="false"}')" = 1 ] \
  && [ "$(metric mosquitto_probe_http_process_exits_total)" = 1 ] \
  && pass "the child killed: logged and counted, another ($back) serves within 10 s, the count carried on" \
  || fail "after the child was killed: children '$back', received $(metric 'mosquitto_messages_received_total{qos="0",retain="false"}'), exits $(metric mosquitto_probe_http_process_exits_total)"
child=$back

# The broker stopped, then killed: the child goes with it.
stop_broker
gone_within "$child" 30 && pass "the broker stopped: its HTTP process is gone" \
  || fail "the HTTP process $child outlived the stopped broker"
start_broker || exit 1
child=$(children)
kill -9 "$broker_pid"
wait "$broker_pid" 2>/dev/null
broker_pid=""
gone_within "$child" 30 && pass "the broker killed (SIGKILL): its HTTP process is gone" \
  || fail "the HTTP process $child outlived the killed broker"
curl -s --max-time 2 -o /dev/null "http://127.0.0.1:$metrics_port/metrics" \
  && fail "the metrics port still answers after the broker was killed"

[ $failures = 0 ] || { echo "broker log:" >&2; tail -20 "$tmp/broker.log" >&2; exit 1; }
echo "http_process_test: passed"
