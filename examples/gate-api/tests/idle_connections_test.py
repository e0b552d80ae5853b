#!/usr/bin/python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""10,000 idle HTTP connections cost the gateway memory, not threads, and do not slow the others.

A normal client sends 200 commands; then 10,000 connections from 40 addresses open and stay idle
(each has sent nothing, or half a request line); the normal client sends 200 more. Asserted: the
gateway holds every idle connection (its open descriptors), its thread count does not move, the
normal client's median latency with them open is within 3x (+1 ms) of its median without them,
connections past --max-connections (all workers together) are closed at once, and afterwards the
idle connections close when their clients go. Printed: the memory they cost.

usage: idle_connections_test.py TB_RUN RESPONDER GATE_API
"""
import os
import resource
import socket
import statistics
import sys
import time

from gate_harness import Harness

IDLE = 10000
tb_run, responder, gate_api = sys.argv[1:4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < IDLE + 1000:
    why = f"this process may open {hard} files; the test needs {IDLE + 1000}"
    if os.environ.get("MQTTPOOL_NO_SKIP") == "1":
        sys.exit(f"FAIL: cannot run: {why} (MQTTPOOL_NO_SKIP=1 turns a skip into a failure)")
    print(f"SKIPPED: {why}")
    sys.exit(77)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def status_field(pid, name):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return -1


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


h = Harness(tb_run, "gate-idle-")
check = h.check
idle = []
try:
    h.spawn([responder, "--broker", h.url, *h.auth, "--filter", "devices/+/commands/ping"], "RESPONDER_READY")
    gate, port = h.gateway(gate_api, "--workers", "2", "--max-connections", str(IDLE + 100),
                           "--max-per-address", str(IDLE), "--request-deadline", "1h")

    # The normal client keeps one connection for both measurements: a connection closing between
    # them would still be counted in the gateway's descriptors for a moment.
    normal = socket.create_connection(("127.0.0.1", port), timeout=5)

    def latencies(n):
        lat = []
        for _ in range(n):
            t = time.monotonic()
            normal.sendall(b"POST /devices/d1/commands/ping HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            data = b""
            while b"\r\n\r\n" not in data:
                data += normal.recv(65536)
            head, rest = data.split(b"\r\n\r\n", 1)
            length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
            while len(rest) < length:
                rest += normal.recv(65536)
            lat.append((time.monotonic() - t) * 1000)
            if int(head.split()[1]) != 200:
                check(False, f"a normal request got {head.split()[1]}")
        return lat

    quiet = latencies(200)
    threads0, rss0, fds0 = status_field(gate.pid, "Threads"), status_field(gate.pid, "VmRSS"), open_fds(gate.pid)
    t0 = time.monotonic()
    for i in range(IDLE):
        s = socket.socket()
        s.bind((f"127.0.{1 + i // 250 // 250}.{2 + i // 250 % 250}", 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        if i % 2:
            s.sendall(b"POST /devices/d1/comm")  # half a request line
        idle.append(s)
    opened = time.monotonic() - t0
    end = time.monotonic() + 20
    while open_fds(gate.pid) < fds0 + IDLE and time.monotonic() < end:
        time.sleep(0.1)
    fds1 = open_fds(gate.pid)
    check(fds1 >= fds0 + IDLE, f"the gateway holds the {IDLE} idle connections ({fds1 - fds0} more descriptors; opened in {opened:.1f} s)")
    busy = latencies(200)
    threads1, rss1 = status_field(gate.pid, "Threads"), status_field(gate.pid, "VmRSS")
    check(threads1 == threads0, f"threads: {threads0} without the idle connections, {threads1} with them")
    print(f"memory: VmRSS {rss0} KiB -> {rss1} KiB, {(rss1 - rss0) * 1024 / IDLE:.0f} bytes per idle connection")
    q50, b50 = statistics.median(quiet), statistics.median(busy)
    check(b50 <= 3 * q50 + 1, f"a normal client's p50: {q50:.3f} ms without, {b50:.3f} ms with {IDLE} idle connections")
    # --max-connections counts every worker's connections together: past it, closed at once.
    extra = []
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.2.2", 0))
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        extra.append(s)
    closed, end = set(), time.monotonic() + 10

    def poll_closed():
        for k, s in enumerate(extra):
            try:
                if k not in closed and s.recv(1) == b"":
                    closed.add(k)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(k)
    room = 100 - 1  # --max-connections IDLE + 100, less the normal client's connection
    while len(closed) < 200 - room and time.monotonic() < end:
        poll_closed()
        time.sleep(0.05)
    time.sleep(0.3)  # none of the others follows
    poll_closed()
    check(len(closed) == 200 - room, f"200 more past --max-connections {IDLE + 100} with {IDLE + 1} open: {len(closed)} closed at once, {200 - len(closed)} kept")
    idle += extra + [normal]
    for s in idle:
        s.close()
    idle = []
    end = time.monotonic() + 20
    while open_fds(gate.pid) > fds0 + 50 and time.monotonic() < end:
        time.sleep(0.1)
    check(open_fds(gate.pid) <= fds0 + 50, f"their clients gone, the gateway closed them ({open_fds(gate.pid) - fds0} left)")
finally:
    for s in idle:
        s.close()
    h.finish()
