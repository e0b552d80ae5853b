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
int main(void)
{
	return strcmp(mqp_strerror(MQP_ETIMEDOUT), "timed out") != 0
	    || strcmp(mqp_version(), MQP_VERSION_STRING) != 0 || MQP_VERSION_NUMBER < 0x000300;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
# shellcheck disable=SC2046
cc "$tmp/main.c" $(pkg-config --cflags --libs mqttpool) -Wl,-rpath,"$tmp/prefix/lib" -o "$tmp/pc"
"$tmp/pc" && echo "ok: pkg-config consumer"
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
"$tmp/cm/build/consumer" && echo "ok: find_package(mqttpool) consumer"
lib=$(find "$tmp/prefix" -name 'libmqttpool.so.*' -type f | head -n 1)
others=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | grep -v '^mqp_' || true)
if [ -n "$others" ]; then
  echo "FAIL: libmqttpool exports non-API symbols: $others" >&2
  exit 1
fi
echo "ok: only mqp_* symbols exported"
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
