# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# A real Prometheus for the probe's script tests; sourced. start_prometheus CONFIG DIR FREE_PORT
# starts it on a free loopback port ($prom_port, $prom_pid; its log in DIR/prometheus.log, its data
# in DIR/data), trying three ports (another test may take the one it was given); returns 1 when it
# did not start. The caller stops it by $prom_pid.
start_prometheus() {
  local config=$1 dir=$2 free_port=$3 _
  prom_pid=""
  for _ in 1 2 3; do
    prom_port=$("$free_port")
    prometheus --config.file="$config" --storage.tsdb.path="$dir/data" \
      --web.listen-address="127.0.0.1:$prom_port" >"$dir/prometheus.log" 2>&1 &
    prom_pid=$!
    sleep 1
    kill -0 "$prom_pid" 2>/dev/null && return 0
    prom_pid=""
  done
  return 1
}
