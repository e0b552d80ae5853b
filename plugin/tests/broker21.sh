# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# What the probe's mosquitto 2.1 script tests share; sourced, after PROBE is set, with the
# temporary directory's name: `. broker21.sh NAME`. Gives $tmp, $runtime, $broker_pid, the
# array `others` (pids stopped at exit), stop_broker, fail/pass ($failures), and metric and
# wait_metric, which read the probe at 127.0.0.1:$metrics_port.

# A sanitized probe loads into the (uninstrumented) broker only with its runtime preloaded, as
# test-broker does; the broker's own exit-time allocations are not the probe's leaks.
runtime=$(ldd "$PROBE" 2>/dev/null | grep -oE '/[^ ]*lib(asan|tsan)\.so[^ ]*' | head -n 1)
# 2.1 with an http_api listener is multi-threaded when the probe forks its HTTP process, and
# ThreadSanitizer kills a child of a multi-threaded parent that starts threads unless told not to
# (glibc's fork makes malloc safe there; README: Threads, processes and safety).
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}die_after_fork=0"
tmp=$(mktemp -d "/tmp/probe-$1-XXXXXX")
broker_pid="" others=()
stop_broker() { # SIGTERM, then SIGKILL after 5 s (2.1.2 under a sanitizer runtime can hang in exit)
  [ -n "$broker_pid" ] || return 0
  kill "$broker_pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$broker_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$broker_pid" 2>/dev/null
  wait "$broker_pid" 2>/dev/null
  broker_pid=""
}
cleanup() {
  for p in "${others[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
  stop_broker
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
metric() { curl -s --max-time 5 "http://127.0.0.1:$metrics_port/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
wait_metric() { # NAME VALUE: until it has it, at most 5 s
  for _ in $(seq 50); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.1; done
  return 1
}
