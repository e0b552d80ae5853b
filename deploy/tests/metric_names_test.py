#!/usr/bin/env python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""Every metric that the shipped Grafana dashboard and alert rules query is one the parts
really expose, read from live /metrics: the probe on mosquitto 2.0 (observe_auth, so its
connect and routing families are there), on 2.1 when MOSQUITTO_2.1 is given (deliveries, time
inside the broker, slow subscribers), and the gateway with its pool. A rename breaks this test,
not the dashboard. Then promtool checks the rules and runs their unit tests.

Usage: metric_names_test.py SOURCE_DIR BUILD_DIR [MOSQUITTO_2.1]
Without MOSQUITTO_2.1 the names only 2.1 exposes are left to the run that has it (ctest's
metric_names_test_2.1); with it but no binary there, exit 77 (skipped; MQTTPOOL_NO_SKIP=1: a
failure).
"""
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

src, build = sys.argv[1], sys.argv[2]
mosq21 = sys.argv[3] if len(sys.argv) > 3 else ""
if mosq21 and not os.access(mosq21, os.X_OK):
    why = f"no mosquitto 2.1 build at '{mosq21}' (scripts/mosquitto-2.1)"
    if os.environ.get("MQTTPOOL_NO_SKIP") == "1":
        print(f"FAIL: cannot run: {why} (MQTTPOOL_NO_SKIP=1 turns a skip into a failure)")
        sys.exit(1)
    print(f"SKIPPED: {why}")
    sys.exit(77)
tb_run = f"{build}/test-broker/tb-run"
gate_api = f"{build}/examples/gate-api/mqp-gate-api"
failures = []
started = []  # (kind, handle) to stop at the end


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


# --- the names a PromQL expression reads ----------------------------------------------------
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on",
            "ignoring", "group_left", "group_right"}
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def metric_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)  # string literals
    e = re.sub(r"\$\{?\w+\}?", "", e)  # Grafana variables ($__rate_interval, ${datasource})
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+\w+", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word, rest = m.group(0), e[m.end():].lstrip()
        if rest.startswith("(") or word in KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        if re.fullmatch(r"\d+[a-z]+", word) or (m.start() > 0 and e[m.start() - 1].isdigit()):
            continue  # the tail of a number (1e9) or a duration
        names.add(word)
    return names


# The extractor itself: what it must find and what it must not.
sample = ('sum by (route, le) (rate(gate_api_command_duration_seconds_bucket{status=~"5.."}'
          '[$__rate_interval])) / on(instance) group_left(job) up offset 5m > 1e3 and '
          'histogram_quantile(0.99, mosquitto_renamed_total)')
check(metric_names(sample) == {"gate_api_command_duration_seconds_bucket", "up",
                               "mosquitto_renamed_total"},
      f"the expression reader finds the metric names in a sample ({sorted(metric_names(sample))})")

# --- the queries the project ships ----------------------------------------------------------
queries = []  # (where, expr)
dashboard = json.load(open(f"{src}/deploy/grafana/dashboards/mqtt-pool.json"))


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


for p in panels(dashboard.get("panels", [])):
    for t in p.get("targets", []):
        if t.get("expr"):
            queries.append((f"dashboard panel '{p.get('title')}'", t["expr"]))
rules_file = f"{src}/deploy/alerts/mqtt-pool.rules.yml"
for group in yaml.safe_load(open(rules_file))["groups"]:
    for rule in group["rules"]:
        queries.append((f"alert {rule.get('alert') or rule.get('record')}", rule["expr"]))
check(len(queries) >= 20, f"{len(queries)} queries in the dashboard and the rules")


# --- what the parts expose, live -------------------------------------------------------------
def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    # every series' name, and every family declared (a family may have no series yet: the slow
    # subscribers' are empty until someone is slow)
    return ({re.split(r"[{ ]", line, 1)[0] for line in text.splitlines() if line and line[0] != "#"}
            | {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")})


def broker(*args):
    out = subprocess.run([tb_run, "--daemon", "--no-tls", *args], capture_output=True, text=True,
                         timeout=60)
    env = {k: v.strip("'\"") for k, v in
           (line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)}
    if "METRICS_URL" not in env:
        raise SystemExit(f"FAIL: the test broker did not start: {out.stderr[-2000:]}")
    started.append(("pid", env["RUN_PID"]))
    return env


exposed = {}
# A web_config without TLS or users: plain HTTP as before, and the endpoint's own families
# (failed logins, re-reads) exposed for the rules that read them.
web_config = tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="metric-names-web-")
web_config.write("http_server_config:\n  http2: true\n")
web_config.flush()
os.chmod(web_config.name, 0o644)
try:
    b20 = broker("--plugin-opt", "observe_auth=true", "--plugin-opt", f"web_config={web_config.name}")
    exposed["probe on mosquitto 2.0 (observe_auth, web_config)"] = scrape(b20["METRICS_URL"])
    if mosq21:
        b21 = broker("--mosquitto", mosq21, "--plugin-opt", "observe_auth=true")
        exposed["probe on mosquitto 2.1 (observe_auth: backlogs)"] = scrape(b21["METRICS_URL"])
    gw = subprocess.Popen([gate_api, "--broker", b20["MQTT_URL"], "--username", b20["MQTT_USERNAME"],
                           "--password", b20["MQTT_PASSWORD"], "--listen", "127.0.0.1:0"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    started.append(("proc", gw))
    line, end = "", time.monotonic() + 15  # its ready line, within 15 s
    while "GATE_API_READY" not in line and time.monotonic() < end:
        if not select.select([gw.stdout], [], [], end - time.monotonic())[0]:
            break
        line = gw.stdout.readline()
        if not line:
            break  # it exited
    port = line.split("url=http://127.0.0.1:")[1].split()[0] if "url=" in line else None
    check(port is not None, "the gateway started")
    if port:
        exposed["the gateway and its pool"] = scrape(f"http://127.0.0.1:{port}/metrics")
finally:
    for kind, h in started:
        if kind == "pid":
            subprocess.run(["kill", h])
        else:
            h.terminate()
            h.wait(timeout=15)

for where, names in exposed.items():
    print(f"   {where}: {len(names)} series names")
every = set().union(*exposed.values()) | PROMETHEUS_OWN
only21 = re.compile(r"mosquitto_(slow_subscriber|message_hold|deliveries|sent_payload|disconnect_reasons"
                    r"|backlog|client_|dropped_messages)")
have21 = any("2.1" in k for k in exposed)
left21 = set()  # names only 2.1 exposes, checked where it runs
for where, expr in queries:
    for name in sorted(metric_names(expr)):
        if name in every:
            continue
        if not have21 and only21.match(name):
            left21.add(name)
            continue
        check(False, f"{where} queries {name}, which nothing exposes: {expr}")
check(not any("nothing exposes" in f for f in failures),
      "every metric the dashboard and the alert rules query is exposed"
      + (f" (the {len(left21)} names only mosquitto 2.1 exposes: metric_names_test_2.1)"
         if left21 else ""))

# --- promtool ---------------------------------------------------------------------------------
for argv in (["promtool", "check", "rules", "mqtt-pool.rules.yml"],
             ["promtool", "test", "rules", "mqtt-pool.rules.test.yml"]):
    r = subprocess.run(argv, cwd=f"{src}/deploy/alerts", capture_output=True, text=True)
    check(r.returncode == 0, " ".join(argv) + ("" if r.returncode == 0 else f":\n{r.stdout}{r.stderr}"))
sys.exit(1 if failures else 0)
