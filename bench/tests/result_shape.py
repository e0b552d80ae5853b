#!/usr/bin/env python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""The shape of mqbench's --json results, beyond their header: every field bench/README.md and
the readers (merge, report, hgrm, bench/scale, the stack test) rely on, with its type, and what
must hold between the numbers (a histogram's count is the sum of its buckets, percentiles rise,
counts add up). A renamed, dropped or mistyped field fails here, not in a user's script.

Usage: result_shape.py RESULT.json ...   (one result per line; the scenario says which shape)
"""
import json
import sys

INT, NUM, STR, BOOL, LIST, OBJ = "int", "number", "string", "bool", "list", "object"

HEADER = {"format": STR, "format_version": INT, "mqbench_version": STR, "date": STR,
          "label": STR, "scenario": STR, "broker": STR, "settings": OBJ}
PERCENTILES = ("p50", "p90", "p99", "p99.9", "max")
LATENCY = {**{p: INT for p in PERCENTILES}, "min": INT, "mean": NUM, "hist": OBJ}
HIST = {"sub_bits": INT, "count": INT, "min": INT, "max": INT, "sum": INT, "overflow": INT,
        "buckets": LIST}
MESSAGES = {  # throughput and fanout
    "top": {"run_id": INT, "clock": STR, "counts": OBJ, "elapsed_ns": INT, "latency": OBJ,
            "cpu_seconds": OBJ, "timeline": LIST},
    "settings": {"protocol": STR, "duration_ns": INT, "publishers": INT, "rate": NUM,
                 "subscribers": INT, "topics": INT, "qos": INT, "size": INT, "drain_ns": INT,
                 "tls": BOOL},
    "counts": {"scheduled": INT, "sent": INT, "acked": INT, "expected": INT, "delivered": INT,
               "duplicates": INT, "out_of_order": INT, "loss": INT, "shortfall": INT,
               "foreign": INT, "generator_saturated": BOOL, "lost_with_subscriber": INT,
               "not_received": INT},
    "latency": ("intended", "actual", "schedule_lag"),
}
SHAPES = {
    "throughput": MESSAGES,
    "fanout": MESSAGES,
    "connect": {
        "top": {"sources": INT, "counts": OBJ, "connack_refusals": OBJ, "elapsed_ns": INT,
                "connects_per_second": NUM, "latency": OBJ},
        "settings": {"protocol": STR, "clients": INT, "rate": NUM, "concurrency": INT,
                     "hold_ns": INT, "tls": BOOL, "reconnect": BOOL, "tls_resume": BOOL},
        "counts": {"scheduled": INT, "connected": INT, "held_at_end": INT, "failed": INT,
                   **{r: INT for r in ("refused", "timeout", "connack", "emfile", "eaddrnotavail",
                                       "tls", "dropped", "closed_before_connack", "suback",
                                       "other")}},
        "latency": ("tcp_connect", "connack"),
    },
    "request": {
        "top": {"modes": OBJ},
        "settings": {"protocol": STR, "duration_ns": INT, "concurrency": INT, "rate": NUM,
                     "pool_size": INT, "topic": STR, "timeout_ns": INT, "tls": BOOL},
        "mode": {"requests_per_second": NUM, "ok": INT, "timeouts": INT, "errors": INT,
                 "no_responder": INT, "latency": OBJ, "cpu_us_per_request": NUM, "client": STR, "failures": LIST},
    },
}


def kind(v):
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return INT
    if isinstance(v, float):
        return NUM
    return {str: STR, list: LIST, dict: OBJ}.get(type(v), "null")


def check_fields(obj, want, where, problems):
    if not isinstance(obj, dict):
        problems.append(f"{where}: not an object")
        return
    for key, typ in want.items():
        if key not in obj:
            problems.append(f"{where}.{key}: missing")
        elif kind(obj[key]) != typ and not (typ == NUM and kind(obj[key]) == INT):
            problems.append(f"{where}.{key}: {kind(obj[key])}, want {typ}")


def check_latency(lat, where, problems):
    check_fields(lat, LATENCY, where, problems)
    hist = lat.get("hist") if isinstance(lat, dict) else None
    check_fields(hist, HIST, where + ".hist", problems)
    if not isinstance(hist, dict) or not isinstance(hist.get("buckets"), list):
        return
    total = sum(count for _, count in hist["buckets"])
    if total != hist.get("count"):
        problems.append(f"{where}.hist: buckets hold {total}, count says {hist.get('count')}")
    if hist.get("count"):
        values = [lat.get(p, 0) for p in PERCENTILES]
        if values != sorted(values):
            problems.append(f"{where}: percentiles do not rise: {values}")


def check(doc, problems):
    check_fields(doc, HEADER, "result", problems)
    if doc.get("format") != "mqbench-result" or doc.get("format_version") != 2:
        problems.append(f"format {doc.get('format')} {doc.get('format_version')}, want mqbench-result 2")
    shape = SHAPES.get(doc.get("scenario"))
    if not shape:
        problems.append(f"scenario {doc.get('scenario')!r}: no shape known")
        return
    top = dict(shape["top"])
    if "merged" in doc:  # merge adds what adds up and leaves the rest out (bench/README.md)
        check_fields(doc, {"merged": INT}, "result", problems)
        for key in ("run_id", "clock", "cpu_seconds", "timeline", "sources"):
            top.pop(key, None)
    check_fields(doc, top, "result", problems)
    check_fields(doc.get("settings"), shape["settings"], "settings", problems)
    if "counts" in shape:
        counts = doc.get("counts", {})
        check_fields(counts, shape["counts"], "counts", problems)
        for name in shape["latency"]:
            check_latency(doc.get("latency", {}).get(name), f"latency.{name}", problems)
    if doc.get("scenario") in ("throughput", "fanout"):
        c = doc.get("counts", {})
        if c.get("sent", 0) + c.get("shortfall", 0) != c.get("scheduled"):
            problems.append(f"counts: sent {c.get('sent')} + shortfall {c.get('shortfall')} "
                            f"!= scheduled {c.get('scheduled')}")
        if c.get("delivered", 0) + c.get("loss", 0) < c.get("expected", 0):
            problems.append(f"counts: delivered + loss < expected: {c}")
        for second in doc.get("timeline", []):
            # each second's own latency (an interval histogram), not the run's so far
            check_fields(second, {"t": NUM, "sent": INT, "delivered": INT, "p50": INT, "p99": INT,
                                  "max": INT}, "timeline[]", problems)
            if not second.get("p50", 0) <= second.get("p99", 0) <= second.get("max", 0):
                problems.append(f"timeline[]: not p50 <= p99 <= max: {second}")
    if doc.get("scenario") == "connect":
        c = doc.get("counts", {})
        if c.get("connected", 0) + c.get("failed", 0) > c.get("scheduled", 0):
            problems.append(f"counts: connected + failed > scheduled: {c}")
        if "merged" not in doc:
            seconds = doc.get("timeline")
            if not isinstance(seconds, list):
                problems.append("timeline: missing")
                seconds = []
            for second in seconds:
                check_fields(second, {"t": NUM, "connected": INT, "failed": INT,
                                      "connack_mean_ns": NUM, "connack_max_ns": INT},
                             "timeline[]", problems)
            if sum(x.get("connected", 0) for x in seconds) != c.get("connected"):
                problems.append(f"timeline: its seconds' connects do not add up to "
                                f"counts.connected {c.get('connected')}")
    if doc.get("scenario") == "request":
        modes = doc.get("modes", {})
        if not modes:
            problems.append("modes: none")
        for name, mode in modes.items():
            check_fields(mode, shape["mode"], f"modes.{name}", problems)
            check_latency(mode.get("latency"), f"modes.{name}.latency", problems)


failed = 0
for path in sys.argv[1:]:
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    for n, line in enumerate(lines, 1):
        problems = []
        check(json.loads(line), problems)
        if problems:
            failed += 1
            print(f"FAIL: {path}:{n}: " + "; ".join(problems[:8]), file=sys.stderr)
        else:
            print(f"ok: {path}:{n}: the {json.loads(line)['scenario']} result's shape")
sys.exit(1 if failed or not sys.argv[1:] else 0)
