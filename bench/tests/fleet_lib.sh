# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# What fleet_test.sh and fleet_ws21_test.sh share; sourced after MQB, RUN and FREE_PORT are set.
# Gives $tmp (removed at exit), fail/pass ($failures), json, start_broker, kill_broker and
# finish (the verdict and exit status).
tmp=$(mktemp -d /tmp/fleet-test-XXXXXX)
run_pids=()
failures=0
cleanup() {
  for p in "${run_pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
json() { grep -o "\"$2\":[0-9.-]*" "$1" | head -n 1 | cut -d: -f2; }
# SIGKILL a broker and wait (5 s at most) until it is gone or a zombie: its sockets are closed
# then. kill returns before the killed process has run its exit, and a broker started on the same
# port at once found it still listening now and then ("plain port ... is already in use").
kill_broker() {
  kill -9 "$1" 2>/dev/null
  for _ in $(seq 100); do
    local state
    state=$(sed -n 's/^[0-9]* (.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)
    [ -z "$state" ] || [ "$state" = Z ] && return 0
    sleep 0.05
  done
  echo "FAIL: broker $1 still running 5 s after SIGKILL"
  exit 1
}
# start_broker ENVFILE ARGS...: a test broker in the background; its variables in ENVFILE.
start_broker() {
  local envf=$1; shift
  "$RUN" --daemon --dir "$tmp" "$@" >"$envf" 2>"$envf.err" || { echo "FAIL: test broker: $(cat "$envf.err")"; exit 1; }
  run_pids+=("$(. "$envf" && echo "$RUN_PID")")
}
finish() { # WHAT: the verdict
  [ $failures -eq 0 ] && echo "$1 passed" || { echo "$failures $1 failed"; exit 1; }
}
