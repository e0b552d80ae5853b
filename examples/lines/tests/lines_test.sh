#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The hundred-line example runs: three lines through a device (the responder echoes them), each
# answered with its number; a line too long is refused by number, not cut; a broker nobody
# listens on is said, with exit 1.
# Usage: lines_test.sh TB_RUN RESPONDER LINES
set -u
RUN=$1 RESPONDER=$2 LINES=$3
tmp=$(mktemp -d /tmp/lines-test-XXXXXX)
run_pid="" responder_pid=""
cleanup() {
  [ -n "$responder_pid" ] && kill "$responder_pid" 2>/dev/null && wait "$responder_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

"$RUN" --daemon --no-tls --dir "$tmp" >"$tmp/env" 2>"$tmp/err" || { echo "FAIL: test broker: $(cat "$tmp/err")"; exit 1; }
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
export MQTT_USERNAME MQTT_PASSWORD
"$RESPONDER" --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password "$MQTT_PASSWORD" \
  --filter 'lines/+/cmd' >"$tmp/resp" 2>&1 &
responder_pid=$!
for _ in $(seq 50); do grep -q RESPONDER_READY "$tmp/resp" && break; sleep 0.1; done

printf 'open\n{"speed":3}\nclose' | timeout 30 "$LINES" "$MQTT_URL" lines/d1/cmd >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && [ "$(sort "$tmp/out")" = "$(printf '1: open\n2: {"speed":3}\n3: close')" ]; then
  pass "three lines, three replies by number (the last line without a newline too)"
else
  fail "exit $rc: $(cat "$tmp/out" "$tmp/err")"
fi

{ echo short; head -c 5000 /dev/zero | tr '\0' x; echo; echo after; } |
  timeout 30 "$LINES" "$MQTT_URL" lines/d1/cmd >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 1 ] && grep -qx "2: longer than 4096 bytes: not sent" "$tmp/err" &&
   [ "$(sort "$tmp/out")" = "$(printf '1: short\n3: after')" ]; then
  pass "a 5000-byte line is refused by its number, the others answered"
else
  fail "long line: exit $rc: $(cat "$tmp/out" "$tmp/err" | head -c 600)"
fi

port=$("$(dirname "$RUN")"/tb-free-port)
echo x | timeout 30 "$LINES" "mqtt://127.0.0.1:$port" lines/d1/cmd >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 1 ] && grep -q "^1: .*Connection refused" "$tmp/err"; then
  pass "no broker: said for the line, exit 1 ($(head -c 160 "$tmp/err"))"
else
  fail "no broker: exit $rc: $(cat "$tmp/err")"
fi

"$LINES" only-one-argument >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q "^usage: mqp-lines BROKER_URL TOPIC" "$tmp/err" && pass "usage: exit 2" || fail "usage: exit $rc"
[ $failures = 0 ] || { echo "$failures lines check(s) failed"; exit 1; }
