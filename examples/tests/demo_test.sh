#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The README's main command, in its short mode, on the programs of this build: every row of its
# table (plain and TLS; naive, pool, dedicated, pool open loop, gateway naive, gateway pool) must
# show requests
# served, no errors, and the probe's connect and disconnect counts; the pool rows must stay
# within the pool's 10 connections.
# Usage: demo_test.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
out=$(mktemp /tmp/demo-test-XXXXXX)
trap 'rm -f "$out"' EXIT
if ! "$src"/scripts/demo --short --build-dir "$build" >"$out" 2>&1; then
  echo "FAIL: scripts/demo --short exited non-zero:"; cat "$out"; exit 1
fi
# The rows between the table's header and the blank line after it.
awk '/^   transport route/ { on = 1; next } on && NF == 0 { exit } on' "$out" >"$out.rows"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[ "$(wc -l <"$out.rows")" -eq 12 ] || fail "expected 12 rows, got $(wc -l <"$out.rows")"
for want in "plain naive" "plain pool" "plain dedicated" "plain pool, open" "plain gateway naive" \
            "plain gateway pool" "TLS naive" "TLS pool" "TLS dedicated" "TLS pool, open" \
            "TLS gateway naive" "TLS gateway pool"; do
  t=${want%% *} r=${want#* }
  line=$(awk -v t="$t" -v r="$r" '$1 == t && index($0, r " ") && (r ~ /gateway/ || $0 !~ /gateway/) &&
    (r ~ /open/ || $0 !~ /open/)' "$out.rows" | head -n 1)
  [ -n "$line" ] || { fail "no row for $want"; continue; }
  # the last five fields: p50 p99 errors connects disconnects; req/s before them
  read -r rate _ _ errors conn disc <<<"$(awk '{ print $(NF-5), $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF }' <<<"$line")"
  [[ $rate =~ ^[0-9]+$ ]] && [ "$rate" -gt 0 ] || fail "$want: req/s '$rate'"
  [ "$errors" = 0 ] || fail "$want: $errors errors"
  [[ $conn =~ ^[0-9]+$ ]] && [ "$conn" -gt 0 ] || fail "$want: connects '$conn'"
  [[ $disc =~ ^[0-9]+$ ]] || fail "$want: disconnects '$disc'"
  case $r in *pool|pool,*) [ "$conn" -le 10 ] || fail "$want: $conn connects from a pool of 10" ;; esac
  echo "ok: $want: $rate req/s, $conn connects, $disc disconnects"
done
grep -q 'gateway pool/naive' "$out" || fail "no ratio lines"
grep -q 'closed loop (each worker' "$out" || fail "the table does not say which rows are closed loop"
[ $failures -eq 0 ] || { echo "--- demo output:"; cat "$out"; rm -f "$out.rows"; exit 1; }
rm -f "$out.rows"
