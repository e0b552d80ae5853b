#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# Install the build into a temporary prefix and build two consumers against it, as users do:
# pkg-config and CMake's find_package(mqttpool). The library must export only mqp_* symbols.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d /tmp/mqttpool-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# The library alone (scripts/check-lib-only) is checked in CI; this is the whole install.
cat >"$tmp/main.c" <<'C'
#include <mqttpool.h>
#include <string.h>
#include <stdio.h>
int main(void)
{
	if (strcmp(mqp_strerror(MQP_ETIMEDOUT), "timed out") != 0) {
		fprintf(stderr, "mqp_strerror(MQP_ETIMEDOUT): %s\n", mqp_strerror(MQP_ETIMEDOUT));
		return 1;
	}
	if (strcmp(mqp_version(), MQP_VERSION_STRING) != 0 || MQP_VERSION_NUMBER < 0x000300) {
		fprintf(stderr, "mqp_version() %s, header %s\n", mqp_version(), MQP_VERSION_STRING);
		return 1;
	}
	return 0;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc "$tmp/main.c" $(pkg-config --cflags --libs mqttpool) -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/pc"
# Each consumer's exit status is checked on its own line: under `set -e`, `prog && echo ok`
# would not stop the test when prog fails.
run_consumer() {
  if ! "$1"; then
    echo "FAIL: the $2 consumer failed (exit status above; it checks mqp_strerror and the version)" >&2
    exit 1
  fi
  echo "ok: $2 consumer"
}
run_consumer "$tmp/pc" pkg-config
mkdir "$tmp/cm"
cp "$tmp/main.c" "$tmp/cm/"
cat >"$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(mqttpool REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE mqttpool::mqttpool)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
run_consumer "$tmp/cm/build/consumer" "find_package(mqttpool)"
lib=$(find "$tmp/prefix" -name 'libmqttpool.so.*' -type f | head -n 1)
# Every defined dynamic symbol, of any kind (functions, data, weak, thread-local, ...), not
# only text: a global variable that leaked out is an export too.
exports=$(nm -D --defined-only "$lib" | awk 'NF == 3 {print $2, $3}')
[ -n "$exports" ] || { echo "FAIL: nm found no exports in $lib" >&2; exit 1; }
others=$(echo "$exports" | awk '$2 !~ /^mqp_/' || true)
if [ -n "$others" ]; then
  echo "FAIL: libmqttpool exports non-API symbols: $others" >&2
  exit 1
fi
echo "ok: only mqp_* symbols exported ($(echo "$exports" | wc -l) of them)"
# The programs: names that cannot collide in bin/, and an RPATH to the library installed beside
# them, so they run from a prefix the dynamic linker does not search.
for prog in mqbench mqp-gate-api mqp-responder; do
  [ -x "$tmp/prefix/bin/$prog" ] || { echo "FAIL: $prog is not installed in bin/" >&2; exit 1; }
done
for generic in responder gate-api; do
  [ ! -e "$tmp/prefix/bin/$generic" ] || { echo "FAIL: bin/$generic installed" >&2; exit 1; }
done
env -u LD_LIBRARY_PATH "$tmp/prefix/bin/mqbench" --version >/dev/null \
  && env -u LD_LIBRARY_PATH "$tmp/prefix/bin/mqp-gate-api" --version >/dev/null \
  || { echo "FAIL: installed programs do not find libmqttpool (RPATH)" >&2; exit 1; }
echo "ok: mqbench, mqp-gate-api and mqp-responder installed, and they run from $tmp/prefix"
