#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# Run one of the probe's tests against another mosquitto binary: on_broker.sh MOSQUITTO CMD...
# The test-broker library starts $TB_MOSQUITTO; PROBE_TEST_EVENTS tells the tests which broker
# events the probe should find (2.1 or 2.0). Exits 77 (skipped) when the binary is missing:
# scripts/mosquitto-2.1 builds 2.1.2 only where its source is (../shared/vendor).
set -u
. "$(dirname "$0")/../../scripts/lib.sh" # skip_test
if [ -z "${1:-}" ] || [ ! -x "$1" ]; then
  skip_test "no mosquitto binary at '${1:-}' (scripts/mosquitto-2.1 builds 2.1.2 from ../shared/vendor/mosquitto-2.1.2.tar.gz)"
fi
export TB_MOSQUITTO=$1
version=$("$1" -h 2>&1 | sed -n 's/^mosquitto version \([0-9]*\.[0-9]*\).*/\1/p' | head -n 1)
case $version in
  2.0) export PROBE_TEST_EVENTS=2.0 ;;
  *) export PROBE_TEST_EVENTS=2.1 ;;
esac
shift
exec "$@"
