# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# Shared by the scripts and the test-broker wrappers: find (or build) a program of this tree.
# find_built NAME: print the path of build/<preset>/.../NAME, building the release preset if
# no build has it yet.
mqp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

find_built() {
  local name=$1 dir
  for dir in ${MQTTPOOL_BUILD_DIR:-} "$mqp_root"/build/release "$mqp_root"/build/dev \
             "$mqp_root"/build/asan "$mqp_root"/build/tsan; do
    [ -n "$dir" ] || continue
    local found
    found=$(find "$dir" -maxdepth 3 -type f -name "$name" -perm -u+x 2>/dev/null | head -n 1)
    if [ -n "$found" ]; then
      echo "$found"
      return 0
    fi
  done
  echo "building the release preset first (once)..." >&2
  (cd "$mqp_root" && "$mqp_root"/scripts/setup >&2 && cmake --preset release >/dev/null &&
    cmake --build --preset release -j "$(nproc)" >&2) || return 1
  find "$mqp_root"/build/release -maxdepth 3 -type f -name "$name" -perm -u+x | head -n 1
}

# skip_test WHY: a test that cannot run here says why and exits 77, which ctest reports as
# skipped (SKIP_RETURN_CODE). With MQTTPOOL_NO_SKIP=1 (CI sets it: it always has what every test
# needs, ../shared/vendor included) a skip is a failure instead: exit 1.
skip_test() {
  if [ "${MQTTPOOL_NO_SKIP:-0}" = 1 ]; then
    echo "FAIL: cannot run: $* (MQTTPOOL_NO_SKIP=1 turns a skip into a failure)" >&2
    exit 1
  fi
  echo "SKIPPED: $*"
  exit 77
}
