#!/usr/bin/python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""The legacy model at every tool's defaults: the three agree on where a device answers.

A 3.1.1 device (the responder with nothing but --protocol 3.1.1), mqbench's request modes and the
gateway's two routes, none given a reply template, all meet on the one default (replies/{topic},
outside the devices' command filter): every request is answered and the device refuses nothing
as a loop. Then the old mismatch on purpose: with {topic}/reply, under the command filter, the
device refuses every reply as a loop and mqbench says that, instead of only asking whether a
device is answering.

usage: legacy_defaults_test.py TB_RUN RESPONDER GATE_API MQBENCH
"""
import http.client
import json
import re
import subprocess
import sys

from gate_harness import Harness

tb_run, responder, gate_api, mqbench = sys.argv[1:5]
h = Harness(tb_run, "gate-legacy-defaults-")
check = h.check


def summary(proc):
    """Stop a responder and return its counters (requests=, replies=, loops_refused=, ...)."""
    proc.terminate()
    out = proc.stdout.read()
    proc.wait(timeout=15)
    h.procs.remove(proc)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", out)}


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, body, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


try:
    device, _ = h.spawn([responder, "--broker", h.url, *h.auth, "--protocol", "3.1.1"], "RESPONDER_READY")

    run = subprocess.run([mqbench, "request", "--broker", h.url, *h.auth, "--protocol", "3.1.1", "--mode", "all",
                          "--duration", "1s", "--json"], capture_output=True, text=True, timeout=60)
    check(run.returncode == 0, f"mqbench request --protocol 3.1.1 at its defaults exits 0 ({run.returncode}: "
          f"{run.stderr[-300:]})")
    try:
        modes = json.loads(run.stdout)["modes"]
    except (ValueError, KeyError):
        modes = {}
    for mode in ("naive", "pool", "dedicated"):
        m = modes.get(mode, {})
        check(m.get("ok", 0) > 0 and m.get("errors", 1) == 0,
              f"mqbench {mode}: {m.get('ok')} requests answered, {m.get('errors')} errors")

    gate, port = h.gateway(gate_api, "--protocol", "3.1.1", "--timeout", "3s")
    for route in ("", "/naive"):
        status, body = post(port, f"{route}/devices/d7/commands/open", '{"n":7}')
        check(status == 200 and '"reply":{"n":7}' in body, f"gateway {route or '/'} at its defaults: {status} {body}")

    counts = summary(device)
    check(counts.get("replies", 0) > 0 and counts.get("loops_refused", 1) == 0,
          f"the device answered {counts.get('replies')} requests and refused {counts.get('loops_refused')} as loops")

    # The old default, {topic}/reply, on both sides: under devices/+/commands/#.
    device, _ = h.spawn([responder, "--broker", h.url, *h.auth, "--protocol", "3.1.1",
                         "--reply-template", "{topic}/reply"], "RESPONDER_READY")
    run = subprocess.run([mqbench, "request", "--broker", h.url, *h.auth, "--protocol", "3.1.1", "--mode", "pool",
                          "--duration", "1s", "--timeout", "300ms", "--reply-template", "{topic}/reply"],
                         capture_output=True, text=True, timeout=60)
    counts = summary(device)
    check(counts.get("loops_refused", 0) > 0 and counts.get("replies", 1) == 0,
          f"{{topic}}/reply: the device refused {counts.get('loops_refused')} replies as loops, "
          f"sent {counts.get('replies')}")
    check(run.returncode == 1 and "is under the devices' command filter devices/+/commands/#" in run.stderr
          and "loops_refused" in run.stderr, f"mqbench names the loop (exit {run.returncode}): {run.stderr[-600:]}")
finally:
    h.finish()
