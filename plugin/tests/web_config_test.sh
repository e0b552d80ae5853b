#!/usr/bin/env bash
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
# plugin_opt_web_config: the probe's /metrics over TLS behind basic auth and client certificates,
# as the exporter-toolkit's web configuration file says; what a wrong password, too many of them,
# a missing certificate and an old TLS version get; a re-read when the file changes (a broken one
# keeps the settings in force); a file that does not read stops the broker at load with its line;
# client ids shown because the endpoint requires a password; and a real Prometheus scraping it
# with tls_config and basic_auth.
# Usage: web_config_test.sh TB_RUN TB_FREE_PORT MQTT_PROBE_PASSWD
set -u
. "$(dirname "$0")/prometheus.sh" # start_prometheus
RUN=$(readlink -f "$1")
FREE_PORT=$(readlink -f "$2")
PASSWD=$(readlink -f "$3")
tmp=$(mktemp -d /tmp/probe-web-test-XXXXXX)
chmod 755 "$tmp"   # the broker may run as another user: it reads the files here
run_pid=""
prom_pid=""
cleanup() {
  [ -n "$prom_pid" ] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
  [ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -n "${BROKER_LOG:-}" ] && tail -5 "$BROKER_LOG" >&2; exit 1; }
ok() { echo "ok: $*"; }
for tool in openssl curl prometheus; do
  command -v $tool >/dev/null || fail "$tool is not installed (scripts/setup installs it)"
done

# --- certificates: a CA, the server's (for 127.0.0.1), a client's, and another CA's client ----
cd "$tmp" || exit 1
ossl() { openssl "$@" >/dev/null 2>&1 || fail "openssl $*"; }
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=probe-test-ca \
  -keyout ca.key -out ca.crt
ossl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=other-ca \
  -keyout other-ca.key -out other-ca.crt
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr
ossl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile san.ext -out server.crt
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=prometheus -keyout client.key -out client.csr
ossl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt
ossl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=intruder -keyout bad.key -out bad.csr
ossl x509 -req -in bad.csr -CA other-ca.crt -CAkey other-ca.key -CAcreateserial -days 2 -out bad.crt
chmod 644 ./*.key

pw_scrape=$(head -c 12 /dev/urandom | base64 | tr '+/' '-_')
pw_other=$(head -c 12 /dev/urandom | base64 | tr '+/' '-_')
hash_scrape=$(printf '%s\n' "$pw_scrape" | "$PASSWD" --cost 4) || fail "mqtt-probe-passwd"
hash_other=$(printf '%s\n' "$pw_other" | "$PASSWD" --cost 4) || fail "mqtt-probe-passwd"
case $hash_scrape in '$2b$04$'*) ;; *) fail "mqtt-probe-passwd printed '$hash_scrape'" ;; esac
"$PASSWD" --cost 3 </dev/null >/dev/null 2>&1 && fail "mqtt-probe-passwd took --cost 3"

write_web() { # FILE USER HASH [extra tls lines...]
  local file=$1 user=$2 hash=$3
  shift 3
  {
    echo "# written by web_config_test.sh"
    echo "tls_server_config:"
    echo "  cert_file: server.crt"
    echo "  key_file: $tmp/server.key"
    for line in "$@"; do echo "  $line"; done
    echo "basic_auth_users:"
    echo "  $user: '$hash'"
  } >"$file.new"
  mv "$file.new" "$file"
}
write_web web.yml prometheus "$hash_scrape"

start() { # NAME [tb-run options]: the broker with the probe, its env in $tmp/NAME.env
  local name=$1
  shift
  "$RUN" --daemon --no-tls --dir "$tmp" "$@" >"$tmp/$name.env" 2>"$tmp/$name.err" || return 1
  # shellcheck disable=SC1090
  . "$tmp/$name.env"
  run_pid=$RUN_PID
}
stop() { kill "$run_pid" 2>/dev/null; for _ in $(seq 50); do kill -0 "$run_pid" 2>/dev/null || break; sleep 0.1; done; run_pid=""; }

# --- 1. TLS and basic auth ---------------------------------------------------------------------
start tls --plugin-opt "web_config=$tmp/web.yml" || fail "the broker did not start: $(cat "$tmp/tls.err")"
port=${METRICS_URL#http://127.0.0.1:}
port=${port%/metrics}
url=https://127.0.0.1:$port/metrics
grep -q "web_config $tmp/web.yml: TLS 1.2 and 1.3, basic auth (1 user), no client certificates" "$BROKER_LOG" \
  || fail "the log does not say what the web config set: $(grep web_config "$BROKER_LOG")"

get() { # CURL-ARGS...: "STATUS" on stdout, the body in $tmp/body
  curl -sS --max-time 5 --cacert "$tmp/ca.crt" -o "$tmp/body" -w '%{http_code}' "$@" 2>"$tmp/curl.err"
}
status=$(get -u "prometheus:$pw_scrape" "$url")
[ "$status" = 200 ] || fail "the right password over TLS got $status: $(cat "$tmp/body" "$tmp/curl.err")"
grep -q '^mosquitto_probe_info{' "$tmp/body" || fail "no metrics in the 200: $(head -3 "$tmp/body")"
ok "GET over TLS with the right password: 200 and the metrics"
curl -sS --max-time 5 -o /dev/null "http://127.0.0.1:$port/metrics" 2>/dev/null \
  && fail "plain HTTP was answered on the TLS endpoint"
ok "plain HTTP gets no answer"
if get --tls-max 1.1 -u "prometheus:$pw_scrape" "$url" >/dev/null; then
  fail "TLS 1.1 was accepted"
fi
ok "TLS 1.1 is refused ($(head -c 80 "$tmp/curl.err"))"

# Wrong password, unknown user, no credentials: one answer, 401 with a Basic challenge.
status=$(get -u "prometheus:wrong" -D "$tmp/headers" "$url")
[ "$status" = 401 ] || fail "a wrong password got $status"
grep -qi '^WWW-Authenticate: Basic realm="mqtt_probe"' "$tmp/headers" || fail "no Basic challenge: $(cat "$tmp/headers")"
cp "$tmp/body" "$tmp/body.wrong"
status=$(get -u "nobody:$pw_scrape" "$url")
[ "$status" = 401 ] || fail "an unknown user got $status"
cmp -s "$tmp/body" "$tmp/body.wrong" || fail "an unknown user's answer differs from a wrong password's"
status=$(get "$url")
[ "$status" = 401 ] || fail "no credentials got $status"
cmp -s "$tmp/body" "$tmp/body.wrong" || fail "no credentials' answer differs from a wrong password's"
ok "a wrong password, an unknown user and no credentials get the same 401"

# Two failures so far from 127.0.0.1; three more are allowed, then 429 even for the right one.
for i in 1 2 3; do
  status=$(get -u "prometheus:wrong$i" "$url")
  [ "$status" = 401 ] || fail "failure $((i + 2)) got $status, expected 401"
done
status=$(get -u "prometheus:$pw_scrape" "$url")
[ "$status" = 429 ] || fail "after 5 failures the right password got $status, expected 429 (rate limited)"
status=$(get --interface 127.0.0.2 -u "prometheus:$pw_scrape" "$url")
[ "$status" = 200 ] || fail "another address (127.0.0.2) got $status while 127.0.0.1 was limited"
sleep 1.2
status=$(get -u "prometheus:$pw_scrape" "$url")
[ "$status" = 200 ] || fail "a second later the right password got $status"
ok "5 failed logins from 127.0.0.1: 429 for it (not for 127.0.0.2), one more try a second later"
for want in 'reason="no_credentials"} 1' 'reason="wrong_credentials"} 5' 'reason="client_certificate"} 0' \
            'mosquitto_probe_http_rate_limited_total 1' 'tls="true",basic_auth="true",client_cert="false"'; do
  grep -q "$want" "$tmp/body" || fail "metrics lack '$want': $(grep -E 'auth_fail|rate_lim|web_config_info' "$tmp/body")"
done
ok "the failures counted by reason: $(grep -E '^mosquitto_probe_http_(auth|rate)' "$tmp/body" | tr '\n' ' ')"

# --- 2. re-read on change ------------------------------------------------------------------------
# From 127.0.0.3 (127.0.0.1 has used its failures). Polled with the old user, whose success is
# cached: no failed login and no bcrypt until the re-read, then one each.
write_web web.yml operator "$hash_other"
gone() { [ "$(get --interface 127.0.0.3 -u "prometheus:$pw_scrape" "$url")" = 401 ]; }
for _ in $(seq 40); do gone && break; sleep 0.1; done
gone || fail "the removed user still got in 4 s after the change"
status=$(get --interface 127.0.0.3 -u "operator:$pw_other" "$url")
[ "$status" = 200 ] || fail "the new user got $status"
grep -q 'reloads_total{result="success"} 1' "$tmp/body" || fail "no successful reload counted: $(grep reload "$tmp/body")"
ok "the file changed: the new user gets in, the old one is refused, one reload counted"
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  operator: not-a-hash\n' >web.yml.new
mv web.yml.new web.yml
bad_counted() {
  get --interface 127.0.0.3 -u "operator:$pw_other" "$url" >/dev/null
  grep -q 'mosquitto_probe_web_config_last_reload_successful 0' "$tmp/body"
}
for _ in $(seq 40); do bad_counted && break; sleep 0.1; done
bad_counted || fail "a broken file was not counted as a failed reload: $(grep reload "$tmp/body")"
status=$(get --interface 127.0.0.3 -u "operator:$pw_other" "$url")
[ "$status" = 200 ] || fail "after a broken file the settings in force stopped working: $status"
ok "a broken file: last_reload_successful 0, the settings in force keep serving"
stop

# --- 3. client certificates --------------------------------------------------------------------
write_web mtls.yml prometheus "$hash_scrape" "client_ca_file: ca.crt" \
  "client_auth_type: RequireAndVerifyClientCert" "min_version: TLS13"
start mtls --plugin-opt "web_config=$tmp/mtls.yml" || fail "the broker did not start: $(cat "$tmp/mtls.err")"
port=${METRICS_URL#http://127.0.0.1:}
port=${port%/metrics}
url=https://127.0.0.1:$port/metrics
status=$(get -u "prometheus:$pw_scrape" "$url")
[ "$status" = 403 ] || fail "no client certificate got $status, expected 403"
status=$(get --cert "$tmp/bad.crt" --key "$tmp/bad.key" -u "prometheus:$pw_scrape" "$url")
[ "$status" = 403 ] || [ "$status" = 000 ] || fail "a certificate of another CA got $status"
status=$(get --cert "$tmp/client.crt" --key "$tmp/client.key" -u "prometheus:$pw_scrape" "$url")
[ "$status" = 200 ] || fail "the CA's client certificate got $status: $(cat "$tmp/curl.err")"
grep -q 'reason="client_certificate"} 2' "$tmp/body" || fail "client certificate failures not counted"
get --tls-max 1.2 --cert "$tmp/client.crt" --key "$tmp/client.key" -u "prometheus:$pw_scrape" "$url" >/dev/null \
  && fail "TLS 1.2 was accepted with min_version TLS13"
ok "RequireAndVerifyClientCert: none 403, another CA's refused, the CA's 200; min_version TLS13 refuses 1.2"
stop

# --- 4. a file that does not read stops the broker at load, with its line -----------------------
check_refused() { # FILE EXPECTED-TEXT
  if start bad --plugin-opt "web_config=$1"; then
    fail "the broker started with $1 ($(cat "$1"))"
  fi
  grep -q -- "$2" "$tmp/bad.err" "$tmp"/tb-*/mosquitto.log 2>/dev/null \
    || fail "loading $1: expected '$2' in: $(cat "$tmp/bad.err")"
}
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n' >b1.yml
check_refused "$tmp/b1.yml" "b1.yml, line 4: tls_server_config: cipher_suites is not supported"
printf 'basic_auth_users:\n  alice: $2b$10$short\n' >b2.yml
check_refused "$tmp/b2.yml" "b2.yml, line 2: basic_auth_users: alice: not a bcrypt hash"
printf 'tls_server_config:\n  cert_file: server.crt\n  key_file: other-ca.key\n' >b3.yml
check_refused "$tmp/b3.yml" "b3.yml, line 2: cert_file $tmp/server.crt with key_file $tmp/other-ca.key"
printf 'tls_server_config: [\n' >b4.yml
check_refused "$tmp/b4.yml" "b4.yml, line 2:"
check_refused "$tmp/missing.yml" "missing.yml: cannot read it: No such file or directory"
ok "a bad key, a wrong key for the certificate, YAML that does not parse, a missing file: each stops the load with its line"

# --- 5. ids shown because of the authentication; Prometheus scrapes with tls_config and basic_auth
write_web web.yml prometheus "$hash_scrape"
port=$("$FREE_PORT")
start ids --plugin-opt "web_config=$tmp/web.yml" --plugin-opt "http_listen=0.0.0.0:$port" \
  || fail "the broker did not start on 0.0.0.0: $(cat "$tmp/ids.err")"
grep -q "named by their client ids: the metrics endpoint requires a password or a client certificate" "$BROKER_LOG" \
  || [ -z "$(grep 'slowest subscribers' "$BROKER_LOG")" ] \
  || fail "on 0.0.0.0 behind a password the ids should be shown: $(grep 'slowest subscribers' "$BROKER_LOG")"
# The bcrypt budget over all addresses (10 at once, 2 a second): 15 wrong logins from 15 addresses
# at once get 401 while it lasts and 429 after, whatever their address.
for i in $(seq 15); do
  curl -sS --max-time 10 --cacert "$tmp/ca.crt" -o /dev/null -w '%{http_code}\n' --interface "127.0.2.$i" \
    -u "prometheus:wrong$i" "https://127.0.0.1:$port/metrics" >"$tmp/burst.$i" 2>/dev/null &
done
wait
n401=$(cat "$tmp"/burst.* | grep -c '^401$')
n429=$(cat "$tmp"/burst.* | grep -c '^429$')
[ $((n401 + n429)) = 15 ] || fail "15 wrong logins at once: $n401 x 401, $n429 x 429, the rest other: $(cat "$tmp"/burst.* | tr '\n' ' ')"
[ "$n401" -ge 10 ] && [ "$n401" -le 12 ] && [ "$n429" -ge 3 ] \
  || fail "15 wrong logins from 15 addresses at once: $n401 checked (401), $n429 turned away (429); the budget is 10 at once and 2 a second"
ok "15 wrong logins from 15 addresses at once: $n401 checked (401), $n429 turned away unchecked (429)"
printf '%s' "$pw_scrape" >prom-password
cat >prometheus.yml <<YAML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: mosquitto
    scheme: https
    tls_config:
      ca_file: $tmp/ca.crt
    basic_auth:
      username: prometheus
      password_file: $tmp/prom-password
    static_configs:
      - targets: ['127.0.0.1:$port']
YAML
start_prometheus "$tmp/prometheus.yml" "$tmp" "$FREE_PORT"
[ -n "$prom_pid" ] || fail "prometheus did not start: $(tail -5 "$tmp/prometheus.log")"
scraped() {
  curl -sS --max-time 3 -G "http://127.0.0.1:$prom_port/api/v1/query" \
    --data-urlencode 'query=up{job="mosquitto"} == 1 and on() mosquitto_probe_web_config_info{tls="true"}' >"$tmp/query" 2>/dev/null \
    && grep -q '"value"' "$tmp/query"
}
for _ in $(seq 60); do scraped && break; sleep 0.5; done
scraped || fail "Prometheus did not scrape the probe over TLS with basic auth: $(cat "$tmp/query"); targets: $(curl -sS "http://127.0.0.1:$prom_port/api/v1/targets" | head -c 600)"
ok "Prometheus scrapes https://127.0.0.1:$port/metrics with tls_config and basic_auth (up == 1)"

# --- 6. what a scrape over TLS with basic auth costs the broker's own thread ----------------------
# (target: at most 2 ms a scrape; the probe's HTTP process, the broker's child, does the work).
# The broker's one thread from schedstat (ns); the child's threads, those gone too, from stat.
child=$(cat "/proc/$BROKER_PID/task/$BROKER_PID/children" | xargs)
[ -n "$child" ] && [ "$(wc -w <<<"$child")" = 1 ] || fail "the broker's children: '$child' (want the HTTP process)"
[ "$(awk '/^Threads:/ { print $2 }' "/proc/$BROKER_PID/status")" = 1 ] || fail "the broker is not single-threaded"
broker_ns() { cut -d' ' -f1 "/proc/$BROKER_PID/task/$BROKER_PID/schedstat"; }
child_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$child/stat"; }
scrapes=50
main0=$(broker_ns) http0=$(child_ticks)
for _ in $(seq $scrapes); do
  [ "$(get --interface 127.0.0.4 -u "prometheus:$pw_scrape" "https://127.0.0.1:$port/metrics")" = 200 ] \
    || fail "a scrape failed: $(cat "$tmp/body")"
done
main1=$(broker_ns) http1=$(child_ticks)
main_us=$(( (main1 - main0) / scrapes / 1000 ))
http_us=$(( (http1 - http0) * 1000000 / $(getconf CLK_TCK) / scrapes ))
[ "$main_us" -le 2000 ] || fail "a scrape cost the broker's thread ${main_us} us (target: at most 2 ms)"
ok "$scrapes scrapes over TLS with basic auth: the broker's thread ${main_us} us a scrape (its own ticks included; target <= 2 ms), the probe's HTTP process ${http_us} us (handshake, bcrypt cached, rendering)"
echo "web_config_test: passed"
