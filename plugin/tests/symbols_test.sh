#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The probe must load on upstream mosquitto 2.0.x builds, which export only the functions in
# src/linker.syms (Debian's build exports all of them, so a mistake would pass every other test).
# It must also export nothing but the three plugin entry points.
# Usage: symbols_test.sh mqtt_probe.so
set -u
so=$1
# Upstream 2.0.x src/linker.syms entries this plugin may use (a subset; see notes §11).
allowed="mosquitto_broker_publish mosquitto_broker_publish_copy mosquitto_callback_register
mosquitto_callback_unregister mosquitto_calloc mosquitto_free mosquitto_malloc mosquitto_realloc
mosquitto_strdup mosquitto_client_address mosquitto_client_clean_session mosquitto_client_id
mosquitto_client_keepalive mosquitto_client_protocol mosquitto_client_protocol_version
mosquitto_client_username mosquitto_log_printf mosquitto_log_vprintf
mosquitto_property_add_binary mosquitto_property_add_byte mosquitto_property_add_int16
mosquitto_property_add_int32 mosquitto_property_add_string mosquitto_property_add_string_pair
mosquitto_property_add_varint mosquitto_property_free_all mosquitto_topic_matches_sub"
status=0
for sym in $(nm -u --format=posix "$so" | awk '{print $1}' | grep '^mosquitto_'); do
  if ! grep -qw "$sym" <<<"$allowed"; then
    echo "FAIL: $so imports $sym, which upstream mosquitto 2.0.x does not export" >&2
    status=1
  fi
done
exported=$(nm -D --defined-only --format=posix "$so" | awk '$2 ~ /[TDB]/ {print $1}' | sort | tr '\n' ' ')
if [ "$exported" != "mosquitto_plugin_cleanup mosquitto_plugin_init mosquitto_plugin_version " ]; then
  echo "FAIL: $so exports more than the plugin entry points: $exported" >&2
  status=1
fi
[ $status -eq 0 ] && echo "ok: imports only upstream-exported broker functions; exports: $exported"
exit $status
