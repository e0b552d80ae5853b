#!/usr/bin/python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""Validate the deployment files without a Docker engine or a cluster.

Checks what would otherwise only fail on a user's machine:
  - every Kubernetes document parses and has the fields its kind requires; Services select a
    Deployment's pods and name ports that exist; volumes name ConfigMaps that exist; the scrape
    annotations point at a declared container port; the Job runs pods in parallel with a distinct
    --prefix per pod and prints JSON;
  - the ConfigMap's mosquitto.conf is the same file the image ships (deploy/docker/mosquitto.conf);
  - docker-compose.yml's build targets exist in the Dockerfile, its bind mounts exist, and
    Prometheus scrapes services and ports the stack has;
  - every command-line option the compose file and the manifests pass to mqbench, gate-api or
    responder is one the program's --help knows (the programs of this build).

usage: validate_deploy.py SOURCE_DIR BUILD_DIR   (exit 0, or 1 with every problem listed)
"""
import glob
import os
import re
import shlex
import subprocess
import sys

import yaml

src, build = sys.argv[1], sys.argv[2]
problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def need(doc, path, where):
    node = doc
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            problem(where, f"missing {path}")
            return None
        node = node[key]
    return node


# --- Kubernetes -------------------------------------------------------------------------------
docs = []
for f in sorted(glob.glob(os.path.join(src, "deploy/k8s/**/*.yaml"), recursive=True)):
    if os.path.basename(f) == "kustomization.yaml":
        continue  # deploy/tests/k8s/validate.mjs checks the kustomizations
    try:
        for d in yaml.safe_load_all(open(f)):
            if d is not None:
                docs.append((os.path.relpath(f, src), d))
    except yaml.YAMLError as e:
        problem(f, f"does not parse: {e}")
if len(docs) < 5:
    problem("deploy/k8s", f"expected at least 5 documents, found {len(docs)}")

by_kind = {}
for where, d in docs:
    for field in ("apiVersion", "kind", "metadata.name"):
        need(d, field, where)
    by_kind.setdefault(d.get("kind"), []).append((where, d))

configmaps = {d["metadata"]["name"]: d for _, d in by_kind.get("ConfigMap", [])}
programs = []  # (where, argv) run in containers


def check_pod(where, spec):
    containers = spec.get("containers") or []
    if not containers:
        problem(where, "no containers")
    ports = {}
    for c in containers:
        for field in ("name", "image"):
            if field not in c:
                problem(where, f"a container without {field}")
        for p in c.get("ports", []):
            if not isinstance(p.get("containerPort"), int):
                problem(where, f"container port {p} is not a number")
            ports[p.get("name")] = p.get("containerPort")
        argv = (c.get("command") or []) + (c.get("args") or [])
        programs.append((f"{where} ({c.get('name')})", argv))
        for probe in ("readinessProbe", "livenessProbe"):
            for kind in ("tcpSocket", "httpGet"):
                port = c.get(probe, {}).get(kind, {}).get("port")
                if port is not None and port not in ports and port not in ports.values():
                    problem(where, f"{probe} uses port {port}, which the container does not declare")
    for v in spec.get("volumes", []):
        name = v.get("configMap", {}).get("name")
        if name and name not in configmaps:
            problem(where, f"volume refers to ConfigMap {name}, which is not defined")
    restricted(where, spec)
    return ports


def restricted(where, spec):
    """The restricted Pod Security level, and a read-only root filesystem."""
    pod = spec.get("securityContext", {})
    if pod.get("runAsNonRoot") is not True or not isinstance(pod.get("runAsUser"), int) or pod["runAsUser"] == 0:
        problem(where, "the pod must set runAsNonRoot: true and a numeric non-zero runAsUser")
    if pod.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        problem(where, "the pod must set seccompProfile RuntimeDefault")
    for c in spec.get("containers", []):
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            problem(where, f"container {c.get('name')}: allowPrivilegeEscalation must be false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            problem(where, f"container {c.get('name')}: capabilities must drop ALL")
        if sc.get("readOnlyRootFilesystem") is not True:
            problem(where, f"container {c.get('name')}: readOnlyRootFilesystem must be true")


deployments = {}
for where, d in by_kind.get("Deployment", []):
    sel = need(d, "spec.selector.matchLabels", where) or {}
    labels = need(d, "spec.template.metadata.labels", where) or {}
    if not sel.items() <= labels.items():
        problem(where, f"selector {sel} does not match the pod labels {labels}")
    spec = need(d, "spec.template.spec", where) or {}
    ports = check_pod(where, spec)
    if d["metadata"]["name"] == "mosquitto" and d["spec"].get("strategy", {}).get("type") != "Recreate":
        problem(where, "the broker needs strategy Recreate: two brokers in a rolling update split request and reply")
    ann = d["spec"]["template"]["metadata"].get("annotations", {})
    if ann.get("prometheus.io/scrape") == "true" and int(ann.get("prometheus.io/port", 0)) not in ports.values():
        problem(where, f"prometheus.io/port {ann.get('prometheus.io/port')} is not a container port")
    deployments[d["metadata"]["name"]] = (labels, ports)

services = {}
for where, d in by_kind.get("Service", []):
    sel = need(d, "spec.selector", where) or {}
    match = [n for n, (labels, _) in deployments.items() if sel.items() <= labels.items()]
    if not match:
        problem(where, f"selector {sel} selects no Deployment")
    names = set()
    for p in need(d, "spec.ports", where) or []:
        names.add(p.get("name"))
        target = p.get("targetPort", p.get("port"))
        if match and target not in deployments[match[0]][1] and target not in deployments[match[0]][1].values():
            problem(where, f"targetPort {target} is not a port of Deployment {match[0]}")
    services[d["metadata"]["name"]] = (sel, names, d["metadata"].get("labels", {}))
    if "prometheus.io/scrape" in d["metadata"].get("annotations", {}):
        problem(where, "scrape annotations belong on the pods only (two objects annotated: scraped twice)")

policies = {d["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
            for _, d in by_kind.get("NetworkPolicy", [])}
for name in deployments:
    if name not in policies:
        problem("deploy/k8s", f"no NetworkPolicy selects the {name} pods")

for where, d in by_kind.get("ServiceMonitor", []):
    sel = need(d, "spec.selector.matchLabels", where) or {}
    chosen = [n for n, (_, _, labels) in services.items() if sel.items() <= labels.items()]
    if not chosen:
        problem(where, f"selector {sel} matches no Service's labels")
    for e in need(d, "spec.endpoints", where) or []:
        if chosen and e.get("port") not in services[chosen[0]][1]:
            problem(where, f"endpoint port {e.get('port')} is not a named port of Service {chosen[0]}")

rules = yaml.safe_load(open(os.path.join(src, "deploy/alerts/mqtt-pool.rules.yml")))["groups"]
if not by_kind.get("PrometheusRule"):
    problem("deploy/k8s/monitoring", "no PrometheusRule: the stack's alert rules are not shipped for the Operator")
for where, d in by_kind.get("PrometheusRule", []):
    if (need(d, "spec.groups", where) or []) != rules:
        problem(where, "its groups differ from deploy/alerts/mqtt-pool.rules.yml (keep them identical)")

jobs = by_kind.get("Job", [])
if not jobs:
    problem("deploy/k8s", "no Job")
for where, d in jobs:
    spec = need(d, "spec", where) or {}
    if not (spec.get("parallelism", 1) > 1 and spec.get("completions", 1) > 1):
        problem(where, "parallelism and completions should both be > 1 (several pods)")
    if spec.get("completionMode") != "Indexed":
        problem(where, "completionMode Indexed gives each pod JOB_COMPLETION_INDEX")
    pod = need(d, "spec.template.spec", where) or {}
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        problem(where, "a Job's pods need restartPolicy Never or OnFailure")
    check_pod(where, pod)
    text = " ".join(str(x) for c in pod.get("containers", []) for x in c.get("command", []) + c.get("args", []))
    for needle in ("--prefix", "JOB_COMPLETION_INDEX", "--json"):
        if needle not in text:
            problem(where, f"the mqbench command lacks {needle}")
    for host in re.findall(r"mqtts?://([a-z0-9-]+):", text):
        if host not in services:
            problem(where, f"--broker host {host} is not a Service")
    # The index-to-range rule: pod I of N takes shard I/N, N being the completions.
    for index, n in re.findall(r"--shard\s+\"?\$(\w+)/(\d+)", text):
        if index != "JOB_COMPLETION_INDEX" or int(n) != spec.get("completions"):
            problem(where, f"--shard ${index}/{n}: want $JOB_COMPLETION_INDEX/{spec.get('completions')}")

# --- the swarm stack: replica SLOT (1-based) is shard SLOT-1 of the replicas ---------------------
stack_path = "deploy/swarm/mqbench-stack.yml"
stack = yaml.safe_load(open(os.path.join(src, stack_path)))
bench = stack.get("services", {}).get("mqbench", {})
script = " ".join(bench.get("command") or []).replace("\\\n", " ")
env = bench.get("environment", {})
replicas = str(bench.get("deploy", {}).get("replicas", ""))
if env.get("SLOT") != "{{.Task.Slot}}":
    problem(stack_path, "SLOT must be {{.Task.Slot}} (each replica's number)")
if not re.search(r'--shard "\$\$\(\(SLOT - 1\)\)/\$\$REPLICAS"', script):
    problem(stack_path, "mqbench must run --shard $((SLOT - 1))/$REPLICAS")
if env.get("REPLICAS") != replicas.replace("${", "${"):
    problem(stack_path, f"REPLICAS {env.get('REPLICAS')} and deploy.replicas {replicas} must be the same")
if bench.get("deploy", {}).get("restart_policy", {}).get("condition") != "none":
    problem(stack_path, "a finished replica must not be restarted (restart_policy none)")
m = re.search(r"(mqbench connect .*?)\s>", script)
if m:
    programs.append((stack_path, [m.group(1)]))
else:
    problem(stack_path, "no mqbench connect command")

shipped = open(os.path.join(src, "deploy/docker/mosquitto.conf")).read()
cm = configmaps.get("mosquitto-config", {}).get("data", {})
for key, path in (("mosquitto.conf", "deploy/docker/secure/mosquitto.conf"), ("acl", "deploy/docker/secure/acl")):
    if cm.get(key) != open(os.path.join(src, path)).read():
        problem("deploy/k8s/mosquitto.yaml", f"the ConfigMap's {key} differs from {path}")
for path in ("deploy/docker/mosquitto.conf", "deploy/docker/secure/mosquitto.conf"):
    if not re.search(r"^set_tcp_nodelay true$", open(os.path.join(src, path)).read(), re.M):
        problem(path, "lacks set_tcp_nodelay true (mosquitto's default costs up to 40 ms per hop)")

# --- docker-compose.yml -------------------------------------------------------------------------
compose = yaml.safe_load(open(os.path.join(src, "docker-compose.yml")))
dockerfile = open(os.path.join(src, "Dockerfile")).read()
targets = set(re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", dockerfile, re.M | re.I))


def check_service(where, svc):
    """A compose service: its build target, its bind mounts, its program's options (later)."""
    build_spec = svc.get("build")
    if isinstance(build_spec, dict) and build_spec.get("target") not in targets:
        problem(where, f"build target {build_spec.get('target')} is not in the Dockerfile ({sorted(targets)})")
    for v in svc.get("volumes", []):
        host = v.split(":")[0]
        if host.startswith(".") and not os.path.exists(os.path.join(src, host)):
            problem(where, f"mounts {host}, which does not exist")
    cmd = svc.get("command")
    if isinstance(cmd, list) and not svc.get("entrypoint"):
        programs.append((where, cmd))


for name, svc in compose.get("services", {}).items():
    check_service(f"docker-compose.yml: {name}", svc)
for m in re.finditer(r"^COPY\s+(?!--from)(\S+)", dockerfile, re.M):
    if m.group(1).startswith("deploy/docker/vendor/"):
        # Not the project's: the user puts it there (stack-test copies it from ../shared/vendor).
        # It must be ignored by git and checked by the build.
        name = os.path.basename(m.group(1))
        if not re.search(r"sha256sum -c", dockerfile) or name not in dockerfile.split(m.group(0), 1)[1]:
            problem("Dockerfile", f"COPY {m.group(1)}: a vendored file the build does not check (sha256sum -c)")
        if "deploy/docker/vendor/" not in open(os.path.join(src, ".gitignore")).read():
            problem(".gitignore", "deploy/docker/vendor/ (sources the user supplies) is not ignored")
    elif m.group(1) != "." and not os.path.exists(os.path.join(src, m.group(1))):
        problem("Dockerfile", f"COPY {m.group(1)}: no such file")
# The two-node variant: its services over the base ones (as docker-compose merges them), their
# mounts and commands checked the same way, and its Prometheus against them.
two = yaml.safe_load(open(os.path.join(src, "deploy/docker/compose.two-nodes.yml")))
merged = {name: dict(svc) for name, svc in compose["services"].items()}
for name, svc in two.get("services", {}).items():
    merged.setdefault(name, {}).update(svc)
    check_service(f"deploy/docker/compose.two-nodes.yml: {name}", svc)
# The WebSockets variant: its services checked the same way (its build target, its gateway's
# command: a ws:// broker the gateway's options take).
ws = yaml.safe_load(open(os.path.join(src, "deploy/docker/compose.websockets.yml")))
for name, svc in ws.get("services", {}).items():
    check_service(f"deploy/docker/compose.websockets.yml: {name}", svc)
for prom_file, services in (("deploy/docker/prometheus.yml", compose["services"]),
                            ("deploy/docker/prometheus.two-nodes.yml", merged)):
    prom = yaml.safe_load(open(os.path.join(src, prom_file)))
    for job in prom.get("scrape_configs", []):
        for sc in job.get("static_configs", []):
            for t in sc.get("targets", []):
                host, port = t.rsplit(":", 1)
                svc = services.get(host)
                if not svc:
                    problem(prom_file, f"target {t}: no service {host}")
                    continue
                text = " ".join(str(x) for x in (svc.get("command") or [])) + " " + " ".join(svc.get("ports", []))
                conf = shipped if host.startswith("mosquitto") else ""
                if port not in text and f":{port}" not in conf:
                    problem(prom_file, f"target {t}: {host} does not listen on {port}")

# --- options the programs must know ---------------------------------------------------------------
binaries = {"mqbench": "bench/mqbench", "mqp-gate-api": "examples/gate-api/mqp-gate-api",
            "mqp-responder": "test-broker/mqp-responder"}
help_cache = {}


def help_text(prog, sub):
    key = (prog, sub)
    if key not in help_cache:
        argv = [os.path.join(build, binaries[prog])] + ([sub] if sub else []) + ["--help"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        help_cache[key] = r.stdout + r.stderr
    return help_cache[key]


checked = 0
for where, argv in programs:
    words = []
    for a in argv:
        words += shlex.split(str(a).replace("$", "")) if " " in str(a) else [str(a)]
    for i, w in enumerate(words):
        if w not in binaries:
            continue
        sub = words[i + 1] if w == "mqbench" and i + 1 < len(words) else None
        text = help_text(w, sub)
        for opt in words[i + 1:]:
            if opt in ("||", "2>/tmp/progress", "{") or opt.startswith("2>"):
                break
            if opt.startswith("--") and not re.search(re.escape(opt.split("=")[0]) + r"\b", text):
                problem(where, f"{w} {sub or ''} does not know {opt}")
            checked += 1
if checked < 20:
    problem("options", f"only {checked} command-line words were checked: did the parsing break?")

for p in problems:
    print("FAIL:", p)
print(f"validate_deploy: {len(docs)} Kubernetes documents, {len(compose['services'])} compose services, "
      f"{len(programs)} commands checked; {len(problems)} problems")
sys.exit(1 if problems else 0)
