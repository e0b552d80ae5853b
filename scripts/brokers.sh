# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# The brokers nobody in this project configured, each started with its stock settings plus only
# what a measurement needs (a loopback listener on a free port, anonymous clients, files in one
# directory, this machine's descriptor limit), and stopped by PID. Sourced by scripts/interop
# (the broker matrix) and scripts/broker (one broker at a time, for bench/scale).
#
# The caller sets:  tmp        a directory of its own for the broker's files
#                   free_port  the tb-free-port program
#                   mosquitto_conf_lines (an array, may be unset): more lines for mosquitto.conf
# start_NAME sets:  broker_pid   the process group to stop (a session leader: setsid)
#                   measure_pid  the process that holds the broker's memory and does its work
#                                (the Erlang VM of ejabberd and RabbitMQ, node for aedes)
#                   url, wsurl   mqtt://127.0.0.1:PORT, and ws://... when it serves WebSockets
#                   protocol     the newest MQTT it speaks here: 5 or 3.1.1
#                   version      what it says it is
#                   broker_log   where it writes its log
#                   username, password  what its clients must give ("" none): ejabberd's
#                                anonymous login wants both, RabbitMQ would check them
# and returns non-zero when the broker did not come up (its output is in $tmp/broker.log).
# Every broker may open 20,000 files (this machine's cap per process).
brokers_here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
broker_names="mosquitto-2.0 mosquitto-2.1 flashmq ejabberd rabbitmq aedes paho"

wait_port() { # PORT SECONDS
  for _ in $(seq $(($2 * 10))); do
    (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

wait_file() { # FILE SECONDS: until FILE has something in it
  for _ in $(seq $(($2 * 10))); do
    [ -s "$1" ] && return 0
    sleep 0.1
  done
  return 1
}

# gone PID SECONDS: whether PID has exited within SECONDS (it need not be our child).
gone() {
  for _ in $(seq $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

# Stop what start_NAME started: the Erlang VMs by their own pid first (they run in sessions of
# their own), then the process group, SIGKILL after 10 s.
stop_broker() {
  [ -n "${broker_pid:-}" ] || return 0
  local vm
  for vm in "${ejabberd_pidfile:-}" "${rabbitmq_pidfile:-}"; do
    [ -n "$vm" ] && [ -s "$vm" ] && kill "$(cat "$vm")" 2>/dev/null
  done
  ejabberd_pidfile="" rabbitmq_pidfile=""
  kill -- -"$broker_pid" 2>/dev/null || kill "$broker_pid" 2>/dev/null
  gone "${measure_pid:-$broker_pid}" 10 || kill -9 "${measure_pid:-$broker_pid}" 2>/dev/null
  gone "$broker_pid" 10 || kill -9 -- -"$broker_pid" 2>/dev/null
  wait "$broker_pid" 2>/dev/null # reaped when it is our child
  broker_pid="" measure_pid=""
  true
}

# The Erlang brokers start epmd (their name server) when none runs: stop_epmd stops it only then.
epmd_ours=0
note_epmd() {
  command -v epmd >/dev/null && ! epmd -names >/dev/null 2>&1 && epmd_ours=1
  true
}
stop_epmd() { # it refuses while a node is still registered: the VM just stopped may linger
  if [ "$epmd_ours" = 1 ]; then
    for _ in $(seq 50); do
      epmd -kill 2>/dev/null | grep -q "not allowed" || break
      sleep 0.1
    done
  fi
  epmd_ours=0
  true
}

start_mosquitto() { # BINARY [ws]: with a WebSockets listener (2.1's own)
  port=$("$free_port")
  printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" >"$tmp/mosquitto.conf"
  if [ "${2:-}" = ws ]; then
    wsport=$("$free_port")
    printf 'listener %s 127.0.0.1\nprotocol websockets\n' "$wsport" >>"$tmp/mosquitto.conf"
    wsurl=ws://127.0.0.1:$wsport/mqtt
  fi
  [ -n "${mosquitto_conf_lines+x}" ] && printf '%s\n' "${mosquitto_conf_lines[@]}" >>"$tmp/mosquitto.conf"
  chmod 644 "$tmp/mosquitto.conf"
  broker_log=$tmp/broker.log protocol=5
  version=$("$1" -h 2>/dev/null | sed -n '1s/^mosquitto version //p')
  (ulimit -n 20000 && exec setsid "$1" -c "$tmp/mosquitto.conf") >"$tmp/broker.log" 2>&1 &
  broker_pid=$! measure_pid=$!
  wait_port "$port" 10 && url=mqtt://127.0.0.1:$port
}

# ejabberd_node DIR LOG ADDRESS PORT WSPORT NODE [CTL_LINE...]: one ejabberd VM as ejabberd's user,
# its files in DIR (made), mod_mqtt on ADDRESS:PORT and, with a WSPORT, MQTT over WebSockets at
# ws://ADDRESS:WSPORT/mqtt (ejabberd_http hands /mqtt to mod_mqtt), anonymous login, the Erlang
# node NODE; CTL_LINEs go into its ejabberdctl.cfg (a cluster's distribution port and cookie).
# Sets ejabberd_session (the session leader to stop) and ejabberd_pidfile (the VM's pid, once up);
# returns once it listens (60 s at most). Its output goes to LOG.
ejabberd_node() {
  local d=$1 log=$2 ip=$3 p=$4 wp=$5 node=$6
  shift 6
  mkdir -p "$d/logs" "$d/spool"
  {
    printf 'hosts:\n  - localhost\nloglevel: warning\nauth_method: [anonymous]\n'
    printf 'anonymous_protocol: login_anon\nlisten:\n'
    printf '  -\n    port: %s\n    ip: "%s"\n    module: mod_mqtt\n    backlog: 1000\n' "$p" "$ip"
    [ -n "$wp" ] && printf '  -\n    port: %s\n    ip: "%s"\n    module: ejabberd_http\n    request_handlers:\n      /mqtt: mod_mqtt\n' "$wp" "$ip"
    printf 'modules:\n  mod_mqtt: {}\n'
  } >"$d/ejabberd.yml"
  # Not Debian's ejabberdctl.cfg (it names /etc/ejabberd/ejabberd.yml); the pid file: the Erlang
  # VM runs under ejabberd's user in a session of its own, and is stopped by that pid.
  printf '%s\n' "EJABBERD_PID_PATH=$d/ejabberd.pid" "$@" >"$d/ejabberdctl.cfg"
  ejabberd_pidfile=$d/ejabberd.pid
  chmod 755 "$(dirname "$d")" # ejabberd runs as its own user
  chown -R ejabberd: "$d" 2>/dev/null
  # As ejabberd's user by setpriv, not by ejabberdctl's su: su's PAM session resets the file limit.
  (ulimit -n 20000 && HOME=$(getent passwd ejabberd | cut -d: -f6) && export HOME && cd "$d" \
    && exec setsid setpriv --reuid ejabberd --regid ejabberd --init-groups ejabberdctl --config "$d/ejabberd.yml" --ctl-config "$d/ejabberdctl.cfg" \
    --logs "$d/logs" --spool "$d/spool" --node "$node" foreground) >"$log" 2>&1 &
  ejabberd_session=$!
  local _
  for _ in $(seq 600); do
    (echo >"/dev/tcp/$ip/$p") 2>/dev/null && break
    sleep 0.1
  done
  (echo >"/dev/tcp/$ip/$p") 2>/dev/null && wait_file "$ejabberd_pidfile" 10
}

start_ejabberd() {
  command -v ejabberdctl >/dev/null || { echo "ejabberd is not installed (scripts/setup --interop)" >"$tmp/broker.log"; return 1; }
  port=$("$free_port") wsport=$("$free_port")
  wsurl=ws://127.0.0.1:$wsport/mqtt
  broker_log=$tmp/broker.log protocol=5
  version=$(dpkg-query -W -f '${Version}' ejabberd 2>/dev/null | sed 's/-[^-]*$//')
  note_epmd
  local rc=0
  ejabberd_node "$tmp/ejabberd" "$tmp/broker.log" 127.0.0.1 "$port" "$wsport" \
    "mqpinterop$port@localhost" || rc=1
  broker_pid=$ejabberd_session
  [ $rc = 0 ] || return 1
  measure_pid=$(cat "$ejabberd_pidfile") url=mqtt://127.0.0.1:$port
}

# RabbitMQ with its MQTT plugin (3.1.1 only before 3.13): its own scripts, every path and port
# moved into $tmp and free ports, the AMQP listener off, guest allowed from loopback.
start_rabbitmq() {
  [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] \
    || { echo "rabbitmq-server is not installed (scripts/setup --interop)" >"$tmp/broker.log"; return 1; }
  port=$("$free_port")
  local d=$tmp/rabbitmq dist
  dist=$("$free_port")
  mkdir -p "$d"
  echo '[rabbitmq_mqtt].' >"$d/enabled_plugins"
  cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp = none
mqtt.listeners.tcp.1 = 127.0.0.1:$port
mqtt.allow_anonymous = true
loopback_users = none
log.file = false
log.console = true
log.console.level = warning
EOF
  rabbitmq_pidfile=$d/pid
  broker_log=$tmp/broker.log protocol=3.1.1
  version=$(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null | sed 's/-[^-]*$//')
  note_epmd
  # HOME: the Erlang cookie. Without RABBITMQ_ALLOW_INPUT the VM runs with -noinput.
  (ulimit -n 20000 && cd "$d" && HOME=$d RABBITMQ_NODENAME=mqp$port@localhost \
    RABBITMQ_NODE_PORT=$dist RABBITMQ_DIST_PORT=$((dist + 1)) RABBITMQ_MNESIA_BASE=$d/mnesia \
    RABBITMQ_LOG_BASE=$d/log RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins \
    RABBITMQ_CONFIG_FILE=$d/rabbitmq RABBITMQ_PID_FILE=$rabbitmq_pidfile \
    exec setsid /usr/lib/rabbitmq/bin/rabbitmq-server </dev/null) >"$tmp/broker.log" 2>&1 &
  broker_pid=$!
  wait_port "$port" 90 && wait_file "$rabbitmq_pidfile" 10 || return 1
  measure_pid=$(cat "$rabbitmq_pidfile") url=mqtt://127.0.0.1:$port
}

start_flashmq() {
  local bin=$brokers_here/build/vendor/flashmq-1.26.2/flashmq d=$tmp/flashmq
  [ -x "$bin" ] || { echo "no FlashMQ build (scripts/flashmq needs ../shared/vendor)" >"$tmp/broker.log"; return 1; }
  port=$("$free_port") wsport=$("$free_port")
  wsurl=ws://127.0.0.1:$wsport/mqtt
  mkdir -p "$d/storage"
  # Its stock settings, and only what the method needs: a loopback listener, anonymous clients,
  # files in our directory, the descriptor limit this machine allows.
  cat >"$d/flashmq.conf" <<EOF
log_file $d/flashmq.log
log_level ${flashmq_log_level:-debug}
storage_dir $d/storage
allow_anonymous true
rlimit_nofile 20000
listen {
  protocol mqtt
  port $port
  inet_protocol ip4
  inet4_bind_address 127.0.0.1
}
listen {
  protocol websockets
  port $wsport
  inet_protocol ip4
  inet4_bind_address 127.0.0.1
}
EOF
  broker_log=$d/flashmq.log protocol=5 version=1.26.2
  # HOME: FlashMQ keeps a lock file there, one per instance.
  (ulimit -n 20000 && HOME=$d exec setsid "$bin" --config-file "$d/flashmq.conf") >"$tmp/broker.log" 2>&1 &
  broker_pid=$! measure_pid=$!
  wait_port "$port" 10 && url=mqtt://127.0.0.1:$port
}

start_paho() {
  local tarball=${MQTTPOOL_VENDOR_DIR:-$brokers_here/../shared/vendor}/paho.mqtt.testing.tar.gz
  local sha=a02e1f0d89855de171dc3f7ba3e3080802ff98546fcce0f8a59d398e922d4793
  local dir=$brokers_here/build/vendor/paho.mqtt.testing
  [ -f "$tarball" ] || { echo "no Paho test broker ($tarball)" >"$tmp/broker.log"; return 1; }
  if [ "$(cat "$dir/.sha256" 2>/dev/null)" != "$sha" ]; then
    echo "$sha  $tarball" | sha256sum -c --quiet - || return 1
    rm -rf "$dir" && mkdir -p "$dir" && tar xzf "$tarball" -C "$dir" --strip-components=1 \
      && echo "$sha" >"$dir/.sha256" || return 1
  fi
  port=$("$free_port")
  # Its defaults (Maximum Packet Size 256, Receive Maximum 2) are the point: only the listener.
  printf 'loglevel debug\nlistener %s 127.0.0.1\n' "$port" >"$tmp/paho.conf"
  broker_log=$tmp/broker.log protocol=5 version=paho.mqtt.testing
  (cd "$dir/interoperability" && exec setsid python3 startbroker.py -c "$tmp/paho.conf") \
    >"$tmp/broker.log" 2>&1 &
  broker_pid=$! measure_pid=$!
  wait_port "$port" 10 && url=mqtt://127.0.0.1:$port
}

start_aedes() {
  command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "node and npm are not installed (scripts/setup --interop)" >"$tmp/broker.log"; return 1; }
  local dir=$brokers_here/build/interop/aedes
  if [ ! -d "$dir/node_modules/aedes" ]; then
    mkdir -p "$dir"
    (cd "$dir" && npm init -y >/dev/null 2>&1 && npm install --no-audit --no-fund aedes@1.2.0 ws@8 >npm.log 2>&1) \
      || { tail -n 5 "$dir/npm.log" >"$tmp/broker.log"; return 1; }
  fi
  if [ ! -d "$dir/node_modules/ws" ]; then # a directory of an older run: ws came later
    (cd "$dir" && npm install --no-audit --no-fund ws@8 >>npm.log 2>&1) \
      || { tail -n 5 "$dir/npm.log" >"$tmp/broker.log"; return 1; }
  fi
  cp "$brokers_here/scripts/interop.d/aedes-broker.mjs" "$dir/"
  broker_log=$tmp/broker.log protocol=3.1.1 version=1.2.0
  (ulimit -n 20000 && cd "$dir" && exec setsid node aedes-broker.mjs) >"$tmp/broker.log" 2>&1 &
  broker_pid=$! measure_pid=$!
  for _ in $(seq 100); do grep -q AEDES_URL "$tmp/broker.log" && break; sleep 0.1; done
  url=$(sed -n 's/^AEDES_URL=//p' "$tmp/broker.log")
  wsurl=$(sed -n 's/^AEDES_WS_URL=//p' "$tmp/broker.log")
  [ -n "$url" ]
}

# start_named NAME: start_BROKER for one of $broker_names.
start_named() {
  url="" wsurl="" measure_pid="" version="" username="" password=""
  case $1 in
    mosquitto-2.0) start_mosquitto "$(command -v mosquitto || echo /usr/sbin/mosquitto)" ;;
    mosquitto-2.1)
      local v21=$brokers_here/build/vendor/mosquitto-2.1.2/src/mosquitto
      [ -x "$v21" ] || { echo "no 2.1.2 build (scripts/mosquitto-2.1 needs ../shared/vendor)" >"$tmp/broker.log"; return 1; }
      start_mosquitto "$v21" ws ;;
    ejabberd) username=bench password=x; start_ejabberd ;;
    rabbitmq) start_rabbitmq ;;
    flashmq) start_flashmq ;;
    paho) start_paho ;;
    aedes) start_aedes ;;
    *) echo "unknown broker '$1' (one of: $broker_names)" >"$tmp/broker.log"; return 2 ;;
  esac
}
