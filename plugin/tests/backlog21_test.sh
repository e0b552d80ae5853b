#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# A client falling behind, named while it is stuck (mosquitto 2.1, observe_auth): three healthy
# MQTT 3.1.1 QoS 1 subscribers and one whose process is stopped (SIGSTOP), with the broker's
# max_queued_messages 50, while 300 messages go out. The broker sends the stopped one its 20
# in-flight messages, queues 70 more (max_queued_messages plus its in-flight maximum: 2.1.2's
# db__ready_for_queue) and drops the rest. Within one window, still stopped, it must be listed
# first with its queue full and its drops, the healthy ones not at all, the probe's drop count
# equal to the broker's own ($SYS/broker/publish/messages/dropped), and $SYS's probe document
# must say the same.
# Usage: backlog21_test.sh MOSQUITTO_2.1 PROBE_SO FREE_PORT   (exits 77 without 2.1)
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
MOSQ=${1:-} PROBE=$2 FREE_PORT=$3
if [ -z "$MOSQ" ] || [ ! -x "$MOSQ" ]; then
  skip_test "no mosquitto 2.1 build at '$MOSQ' (scripts/mosquitto-2.1; needs ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
. "$(dirname "$0")/broker21.sh" backlog21
die() { echo "FAIL: $*" >&2; exit 1; }

port=$("$FREE_PORT") metrics_port=$("$FREE_PORT")
# observe_auth is neutral only beside a password file and an ACL file (README): anonymous
# clients may do anything, through the ACL file.
mosquitto_passwd -c -b "$tmp/passwd" nobody "$(head -c 9 /dev/urandom | base64)" >/dev/null 2>&1 \
  || die "mosquitto_passwd"
printf 'topic readwrite #\ntopic read $SYS/#\n' >"$tmp/acl"
printf '%s\n' "user root" "log_dest stderr" "log_type error" "log_type warning" "log_type notice" \
  "listener $port 127.0.0.1" "allow_anonymous true" "password_file $tmp/passwd" "acl_file $tmp/acl" \
  "sys_interval 1" "max_queued_messages 50" "plugin $PROBE" \
  "plugin_opt_http_listen 127.0.0.1:$metrics_port" "plugin_opt_sys_interval 1" \
  "plugin_opt_observe_auth true" "plugin_opt_backlog_top 3" "plugin_opt_backlog_threshold 10" \
  "plugin_opt_slow_window 2" >"$tmp/broker.conf"
LD_PRELOAD=$runtime ASAN_OPTIONS=detect_leaks=0 "$MOSQ" -c "$tmp/broker.conf" >"$tmp/broker.log" 2>&1 &
broker_pid=$!
for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$metrics_port/metrics" && break; sleep 0.1; done
grep -q "clients falling behind: the 3 with the largest queues (at least 10 messages, or a drop) each 2 s, named by client id; queue limit 70 from max_queued_messages 50 + max_inflight_messages 20 (its configuration)" "$tmp/broker.log" \
  || die "the log does not say how backlogs are tracked: $(grep mqtt_probe "$tmp/broker.log")"
curl -s --max-time 5 "http://127.0.0.1:$metrics_port/metrics" | grep -q '^mosquitto_backlog_queue_limit_messages 70$' \
  || die "no backlog figures, or the wrong limit: $(curl -s "http://127.0.0.1:$metrics_port/metrics" | grep backlog)"

sub() { # ID: an MQTT 3.1.1 QoS 1 subscriber
  mosquitto_sub -V mqttv311 -h 127.0.0.1 -p "$port" -q 1 -i "$1" -t backlog21/t -C 300 -W 30 >"$tmp/$1.out" 2>&1 &
  others+=($!)
}
for i in 1 2 3; do sub "healthy-$i"; done
sub "stuck-1"
stuck=${others[3]}
mosquitto_sub -h 127.0.0.1 -p "$port" -v -t '$SYS/broker/publish/messages/dropped' -t '$SYS/broker/probe/metrics' \
  >"$tmp/sys.out" 2>&1 &
others+=($!)
for _ in $(seq 50); do
  [ "$(metric mosquitto_connected_clients)" = 5 ] && break
  sleep 0.1
done
[ "$(metric mosquitto_connected_clients)" = 5 ] || die "the subscribers did not all connect"
kill -STOP "$stuck"
mosquitto_pub -V mqttv311 -h 127.0.0.1 -p "$port" -q 1 -t backlog21/t -m x --repeat 300 --repeat-delay 0.005 2>/dev/null \
  || die "the publisher was refused"
for p in "${others[@]:0:3}"; do wait "$p" || die "a healthy subscriber did not get its 300 messages"; done

# Named while it is still stopped: the first window (2 s) that ends after the last message was
# routed to it lists its 280 unsent (a window that ended mid-burst lists fewer).
found=""
for _ in $(seq 80); do
  curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics"
  grep -q '^mosquitto_client_unsent_messages{client_id="stuck-1"} 280$' "$tmp/metrics" && { found=1; break; }
  sleep 0.1
done
kill -0 "$stuck" 2>/dev/null || die "the stuck subscriber exited"
grep -q 'State:.*T (stopped)' "/proc/$stuck/status" || die "the stuck subscriber is not stopped any more"
[ -n "$found" ] || die "the stopped subscriber is not listed while stopped: $(grep -E 'backlog|client_' "$tmp/metrics")"
dropped=$(awk '$1 == "mosquitto_client_dropped_messages{client_id=\"stuck-1\",reason=\"queue_full\"}" { print $2 }' "$tmp/metrics")
queued=$(awk '$1 == "mosquitto_client_queued_messages{client_id=\"stuck-1\"}" { print $2 }' "$tmp/metrics")
unsent=$(awk '$1 == "mosquitto_client_unsent_messages{client_id=\"stuck-1\"}" { print $2 }' "$tmp/metrics")
first=$(grep '^mosquitto_client_queued_messages{' "$tmp/metrics" | head -n 1)
case $first in *'client_id="stuck-1"}'*) ;; *) die "the stuck subscriber is not first: $first" ;; esac
grep -q 'client_id="healthy-' "$tmp/metrics" && die "a healthy subscriber is listed: $(grep 'client_id="healthy' "$tmp/metrics")"
[ "$queued" = 70 ] || die "queued $queued, want 70 (max_queued_messages 50 + 20 in flight)"
[ "$dropped" = 210 ] || die "dropped $dropped, want 210 (300 - 20 sent - 70 queued)"
[ "$unsent" = 280 ] || die "unsent $unsent, want 280 (queued + dropped, counted)"
[ "$(awk '$1 == "mosquitto_backlog_clients" { print $2 }' "$tmp/metrics")" = 1 ] \
  || die "mosquitto_backlog_clients is not 1: $(grep -E "^mosquitto_(backlog|client_)" "$tmp/metrics")"
total=$(awk '$1 == "mosquitto_dropped_messages_total{reason=\"queue_full\"}" { print $2 }' "$tmp/metrics")
echo "ok: while stopped, listed first: queued $queued, dropped $dropped (queue full), unsent $unsent; no healthy one listed"

# The broker's own count (published every second) agrees.
sys_dropped=""
for _ in $(seq 30); do
  sys_dropped=$(grep '^$SYS/broker/publish/messages/dropped ' "$tmp/sys.out" | tail -n 1 | awk '{ print $2 }')
  [ "$sys_dropped" = "$total" ] && break
  sleep 0.1
done
[ "$sys_dropped" = "$total" ] || die "the broker's \$SYS dropped count is '$sys_dropped', the probe's $total"
[ "$total" = "$dropped" ] || die "mosquitto_dropped_messages_total $total, the stuck client's $dropped"
echo "ok: the broker's \$SYS/broker/publish/messages/dropped $sys_dropped = the probe's $total"
# $SYS's probe document (every second) says the same, once a window with all of it has ended.
sys_lists() {
  grep '^$SYS/broker/probe/metrics ' "$tmp/sys.out" | tail -n 1 | cut -d' ' -f2- >"$tmp/doc.json"
  python3 - "$tmp/doc.json" >"$tmp/doc.check" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
top = doc["backlog"]["top"]
assert top and top[0]["client_id"] == "stuck-1", top
assert top[0]["dropped"]["queue_full"] == 210 and top[0]["queued_messages"] == 70, top[0]
assert not any(t["client_id"].startswith("healthy") for t in top), top
assert doc["dropped"]["queue_full"] == 210, doc["dropped"]
print(f"ok: $SYS/broker/probe/metrics lists it too: {top[0]}")
PY
}
for _ in $(seq 50); do sys_lists && break; sleep 0.1; done
sys_lists || die "the \$SYS document does not list it: $(cat "$tmp/doc.check")"
cat "$tmp/doc.check"

# Let it go: it reads its 90, its queue empties, and it leaves the list.
kill -CONT "$stuck"
for _ in $(seq 60); do
  curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" >"$tmp/metrics"
  grep -q 'client_id="stuck-1"' "$tmp/metrics" || break
  sleep 0.1
done
grep -q 'client_id="stuck-1"' "$tmp/metrics" && die "the resumed subscriber is still listed: $(grep stuck-1 "$tmp/metrics")"
got=$(wc -l <"$tmp/stuck-1.out")
[ "$got" = 90 ] || die "the resumed subscriber got $got messages, want 90 (20 in flight + 70 queued)"
echo "ok: resumed, it got its 90 (20 in flight and 70 queued) and left the list"
exit 0
