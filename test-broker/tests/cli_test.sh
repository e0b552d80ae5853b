#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# Integration test of the command-line launchers: test-broker/run (tb-run) and the responder.
# Usage: cli_test.sh TB_RUN RESPONDER
set -u
RUN=$1
RESPONDER=$2
failures=0
tmp=$(mktemp -d /tmp/tb-cli-test-XXXXXX)
run_pid=""
cleanup() {
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect STATUS NEEDLE -- command...: exit status and a message on stderr naming the problem.
expect() {
  local want=$1 needle=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$* exited $got, want $want; stderr: $(cat "$tmp/err")"
  elif ! grep -qF -- "$needle" "$tmp/err"; then
    fail "$*: stderr lacks '$needle': $(cat "$tmp/err")"
  else
    pass "$* -> $want ($needle)"
  fi
}

# --- bad input: a message that names the problem, a non-zero exit, nothing left behind -------
expect 2 "unknown option '--bogus'" -- "$RUN" --bogus
expect 2 "option '--port' needs a value" -- "$RUN" --port
expect 2 "--port: expected a port number" -- "$RUN" --port 70000
expect 2 "--plugin-opt: expected KEY=VALUE" -- "$RUN" --plugin-opt novalue
expect 1 "mosquitto not found at '/nonexistent/mosquitto'" -- "$RUN" --mosquitto /nonexistent/mosquitto --dir "$tmp"
expect 1 "cannot create a directory in /proc/self/fdinfo" -- "$RUN" --dir /proc/self/fdinfo
expect 1 "plugin '/nonexistent.so' not readable" -- "$RUN" --plugin /nonexistent.so --dir "$tmp"
expect 2 "unknown option '--bogus'" -- "$RESPONDER" --broker mqtt://127.0.0.1:1 --bogus
expect 2 "--drop: expected a probability" -- "$RESPONDER" --broker mqtt://127.0.0.1:1 --drop 2
expect 2 "bad broker URL" -- "$RESPONDER" --broker http://x
expect 1 "cannot connect" -- "$RESPONDER" --broker mqtt://127.0.0.1:1
"$RUN" --help | grep -q -- "--daemon" && pass "--help documents --daemon" || fail "--help"
"$RESPONDER" --help | grep -q -- "--reply-template" && pass "responder --help" || fail "responder --help"

# --- daemon mode: lines within seconds, real clients work, kill stops and cleans up -----------
start=$(date +%s%N)
if ! "$RUN" --daemon --dir "$tmp" >"$tmp/env" 2>"$tmp/err"; then
  fail "run --daemon: $(cat "$tmp/err")"
  exit 1
fi
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
# shellcheck disable=SC1091
. "$tmp/env"
run_pid=$RUN_PID
for key in MQTT_URL MQTTS_URL MQTTS_MTLS_URL CA_FILE CLIENT_CERT CLIENT_KEY MQTT_USERNAME MQTT_PASSWORD BROKER_PID BROKER_LOG RUN_PID; do
  [ -n "${!key:-}" ] || fail "missing $key in output"
done
[ "$elapsed_ms" -lt 3000 ] && pass "lines printed after ${elapsed_ms} ms" || fail "start took ${elapsed_ms} ms"
port=${MQTT_URL##*:}
tls_port=${MQTTS_URL##*:}
auth=(-h 127.0.0.1 -u "$MQTT_USERNAME" -P "$MQTT_PASSWORD")

# A port that is taken (by this broker), named explicitly.
expect 1 "port $port is already in use" -- "$RUN" --port "$port" --dir "$tmp"
leftovers=$(find "$tmp" -maxdepth 1 -name 'mqp-broker-*' ! -path "$BROKER_DIR" | wc -l)
[ "$leftovers" -eq 0 ] && pass "failed starts leave nothing behind" || fail "$leftovers directories left behind"


# Retained, so the subscriber gets it whenever its SUBSCRIBE lands (no race with the publish).
mosquitto_pub "${auth[@]}" -p "$port" -q 1 -r -t cli/t -m plain-hello
mosquitto_sub "${auth[@]}" -p "$port" -t cli/t -C 1 -W 5 >"$tmp/sub"
[ "$(cat "$tmp/sub")" = plain-hello ] && pass "mosquitto_pub/sub on MQTT_URL" || fail "plain pub/sub"

mosquitto_pub "${auth[@]}" -p "$tls_port" --cafile "$CA_FILE" -q 1 -r -t cli/t -m tls-hello
mosquitto_sub "${auth[@]}" -p "$tls_port" --cafile "$CA_FILE" -t cli/t -C 1 -W 5 >"$tmp/sub"
[ "$(cat "$tmp/sub")" = tls-hello ] && pass "mosquitto_pub/sub on MQTTS_URL with CA_FILE" || fail "TLS pub/sub"
mosquitto_pub "${auth[@]}" -p "$port" -q 1 -r -n -t cli/t # the retained message goes

"$RESPONDER" --broker "$MQTT_URL" --username "$MQTT_USERNAME" --password "$MQTT_PASSWORD" \
  >"$tmp/responder" 2>&1 &
responder=$!
for _ in $(seq 50); do grep -q RESPONDER_READY "$tmp/responder" && break; sleep 0.1; done
reply=$(mosquitto_rr "${auth[@]}" -p "$port" -t devices/gate-1/commands/open -e rr/reply -m open-please -W 5)
[ "$reply" = open-please ] && pass "mosquitto_rr answered by the responder" || fail "mosquitto_rr got '$reply'"
kill -TERM $responder
wait $responder
rc=$?
[ $rc -eq 0 ] && grep -q "requests=1 replies=1" "$tmp/responder" && pass "responder exits 0 with its summary" \
  || fail "responder exit $rc: $(cat "$tmp/responder")"

kill "$RUN_PID"
for _ in $(seq 50); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
kill -0 "$BROKER_PID" 2>/dev/null && fail "broker still running after kill RUN_PID" || pass "broker stopped"
for _ in $(seq 20); do [ -d "$BROKER_DIR" ] || break; sleep 0.1; done
[ -d "$BROKER_DIR" ] && fail "$BROKER_DIR not removed" || pass "directory removed"
run_pid=""

# --- foreground mode: SIGINT stops cleanly; a broker that dies is reported ------------------
"$RUN" --no-tls --dir "$tmp" >"$tmp/env" 2>"$tmp/err" &
fg=$!
for _ in $(seq 50); do grep -q RUN_PID "$tmp/env" && break; sleep 0.1; done
# shellcheck disable=SC1091
. "$tmp/env"
kill -INT $fg
wait $fg
rc=$?
[ $rc -eq 0 ] && [ ! -d "$BROKER_DIR" ] && pass "foreground run stops on SIGINT" || fail "SIGINT: rc=$rc"

"$RUN" --no-tls --dir "$tmp" >"$tmp/env" 2>"$tmp/err" &
fg=$!
for _ in $(seq 50); do grep -q RUN_PID "$tmp/env" && break; sleep 0.1; done
# shellcheck disable=SC1091
. "$tmp/env"
kill -KILL "$BROKER_PID"
wait $fg
rc=$?
[ $rc -eq 1 ] && grep -q "mosquitto exited unexpectedly" "$tmp/err" && [ ! -d "$BROKER_DIR" ] \
  && pass "a dead broker is reported (exit 1)" || fail "dead broker: rc=$rc $(cat "$tmp/err")"

# --export: eval makes the variables reach programs started from the shell, not just the shell.
unset MQTT_URL RUN_PID
if eval "$("$RUN" --daemon --export --no-tls --dir "$tmp" 2>"$tmp/err")"; then
  seen=$(sh -c 'echo "$MQTT_URL"')
  [ -n "$seen" ] && [ "$seen" = "$MQTT_URL" ] && pass "--export: a child process sees MQTT_URL" \
    || fail "--export: the child saw '$seen'"
  kill "$RUN_PID" 2>/dev/null
else
  fail "--daemon --export: $(cat "$tmp/err")"
fi

if [ $failures -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
