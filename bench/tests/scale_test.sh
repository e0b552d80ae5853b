#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# bench/scale: the committed measurements reprint with their fits, a small live run fits a
# line through two sizes, bad input is refused by name with nothing written, and a comparison of
# two brokers (short, with the scenarios) makes a page whose every chart Chromium draws.
# Usage: scale_test.sh SOURCE_DIR BUILD_DIR
set -u
SRC=$1
BUILD=$2
SCALE=$SRC/bench/scale
tmp=$(mktemp -d /tmp/scale-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# 1. --from reprints what was measured: the fits in bench/README.md come from these files.
out=$("$SCALE" --from "$SRC/bench/results/scale-2026-12-04.json" 2>&1)
if grep -q "2.0.11: VmRSS = 8.8 MB + 752 B x N" <<<"$out" && grep -q "2.1.2: VmRSS = 10.1 MB + 5041 B x N" <<<"$out"; then
  pass "--from: 752 and 5041 B per connection, as the README says"
else
  fail "--from scale-2026-12-04.json: $out"
fi
out=$("$SCALE" --from "$SRC/bench/results/scale-2026-12-04-2.1.2-pbs256.json" 2>&1)
grep -q "(packet_buffer_size 256): VmRSS = 10.2 MB + 1199 B x N" <<<"$out" \
  && pass "--from: packet_buffer_size 256 gives 1199 B per connection" || fail "--from pbs256: $out"

# 2. Refusals: a message that names the problem, exit 2 (1 for a file), no traceback.
refuse() {  # refuse CODE TEXT ARGS...
  local code=$1 text=$2 rc
  shift 2
  out=$("$SCALE" "$@" 2>&1)
  rc=$?
  if [ $rc -eq "$code" ] && grep -q -- "$text" <<<"$out" && ! grep -q Traceback <<<"$out"; then
    pass "refused: $* ($text)"
  else
    fail "$*: expected exit $code and '$text', got $rc: $out"
  fi
}
refuse 2 "unknown broker '2.2'" --brokers 2.2
refuse 2 "mosquitto's configuration only" --brokers mosquitto-2.0,aedes --conf-line 'max_connections 5'
refuse 2 "at least two sizes" --sizes 1000
refuse 2 "expected numbers" --sizes 1k,2k
refuse 2 "each 1..18000" --sizes 1000,20000
refuse 1 "No such file or directory" --from "$tmp/none.json"
echo '{"x": 1}' >"$tmp/other.json"
refuse 1 "is not a result of bench/scale" --from "$tmp/other.json"
refuse 2 "cannot write" --json /nonexistent-dir/x.json --build "$BUILD"

# 3. A live run: two sizes on 2.0.11, one round; a line through them, the JSON whole.
if "$SCALE" --build "$BUILD" --brokers 2.0.11 --sizes 200,600 --rounds 1 --rate 2000 \
     --json "$tmp/live.json" >"$tmp/live.out" 2>&1; then
  b=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["mosquitto 2.0.11"]["memory_fit"]["bytes_per_connection"]))' "$tmp/live.json")
  # 2.0.11 holds ~750 B per idle connection; 200-5000 allows the allocator's steps at 400.
  if [ "$b" -ge 200 ] && [ "$b" -le 5000 ]; then pass "live: $b B per connection"; else fail "live: $b B per connection"; fi
  grep -q "^mosquitto 2.0.11 (fitted here) .* 500,000" "$tmp/live.out" && pass "live: projected to 500k" \
    || fail "live: no projection: $(cat "$tmp/live.out")"
else
  fail "live run: $(tail -5 "$tmp/live.out")"
fi
# A broker that does not start is named, and no JSON is left behind.
refuse 1 "no broker ran here" --build "$BUILD" --brokers 2.0.11 --sizes 200,600 \
  --rounds 1 --conf-line "no_such_option 1" --json "$tmp/bad.json"
[ ! -e "$tmp/bad.json" ] && [ ! -e "$tmp/bad.json.tmp" ] && pass "no JSON from a failed run" \
  || fail "a failed run left $tmp/bad.json"

# 4. The comparison: two brokers, one round of two sizes, the scenarios, the page.
v21=$SRC/build/vendor/mosquitto-2.1.2/src/mosquitto
chromium=$(command -v chromium || command -v chromium-browser)
if [ ! -x "$v21" ] || [ -z "$chromium" ]; then
  why="no mosquitto 2.1.2 build (scripts/mosquitto-2.1)"
  [ -n "$chromium" ] || why="no chromium (scripts/setup installs it)"
  if [ "${MQTTPOOL_NO_SKIP:-0}" = 1 ]; then fail "the comparison cannot run: $why"; else echo "skipped: the comparison: $why"; fi
elif "$SCALE" --build "$BUILD" --short --scenarios --brokers mosquitto-2.0,mosquitto-2.1 \
       --json "$tmp/cmp.json" --html "$tmp/cmp.html" >"$tmp/cmp.out" 2>&1; then
  # Every scenario ran and its counts add up: nothing lost on an idle broker.
  said=$(python3 - "$tmp/cmp.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
bad = []
for name in ("mosquitto 2.0.11", "mosquitto 2.1.2"):
    r = report.get(name)
    if not r or "error" in r:
        bad.append(f"{name}: {r and r.get('error')}")
        continue
    if [x["held"] for x in r["runs"]] != [1000, 3000]:
        bad.append(f"{name}: held {[x['held'] for x in r['runs']]}")
    if any(sum(s["connected"] for s in x["timeline"]) != x["held"] for x in r["runs"]):
        bad.append(f"{name}: the timeline's connects do not add up")
    s = r["scenarios"]
    if not s["throughput"][0]["kept"] or s["throughput"][0]["delivered"] != s["throughput"][0]["expected"]:
        bad.append(f"{name}: throughput at 1000/s: {s['throughput'][0]}")
    f = s["fanout"]
    if f.get("loss") != 0 or f.get("delivered") != f.get("expected") or not f.get("expected"):
        bad.append(f"{name}: fan-out: {f}")
    q = s["request"]
    if not q.get("ok") or q.get("errors") or q.get("timeouts"):
        bad.append(f"{name}: request: {q}")
print("; ".join(bad) or "ok")
PY
)
  [ "$said" = ok ] && pass "comparison: both brokers measured, every scenario without loss" || fail "comparison: $said"
  # The page, drawn by a real browser: its script lists the charts whose data it drew.
  drawn() {
    timeout 60 "$chromium" --headless=new --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" \
      --dump-dom "file://$1" 2>/dev/null | grep -o 'data-charts-drawn="[^"]*"'
  }
  want='data-charts-drawn="mosquitto 2.0.11:connections,mosquitto 2.0.11:memory,mosquitto 2.1.2:connections,mosquitto 2.1.2:memory"'
  got=$(drawn "$tmp/cmp.html")
  [ "$got" = "$want" ] && pass "Chromium drew every broker's two charts" || fail "Chromium drew: ${got:-nothing}"
  # The check can fail: a broker whose per-second record is missing has no connections chart.
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [x.update(timeline=[]) for x in r["mosquitto 2.1.2"]["runs"]]; json.dump(r, open(sys.argv[2], "w"))' \
    "$tmp/cmp.json" "$tmp/cut.json"
  "$SCALE" --from "$tmp/cut.json" --html "$tmp/cut.html" >/dev/null 2>&1
  got=$(drawn "$tmp/cut.html")
  [ "$got" = 'data-charts-drawn="mosquitto 2.0.11:connections,mosquitto 2.0.11:memory,mosquitto 2.1.2:memory"' ] \
    && pass "a chart without data is not counted as drawn" || fail "without 2.1.2's timeline Chromium drew: ${got:-nothing}"
  grep -q "<th>CPU load mean / peak<sup>b</sup></th>" "$tmp/cmp.html" && grep -q "Where each number comes from" "$tmp/cmp.html" \
    && ! grep -qiE "(src|href)=\"https?:" "$tmp/cmp.html" && pass "the page: the published table's columns, sources said, no network assets" \
    || fail "the page's table or sources"
else
  fail "comparison: $(tail -5 "$tmp/cmp.out")"
fi

[ $failures -eq 0 ] && echo "scale_test: all passed" || { echo "scale_test: $failures failed" >&2; exit 1; }
