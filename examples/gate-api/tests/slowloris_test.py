#!/usr/bin/python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""A slow or greedy client cannot starve the gateway.

While 300 clients from 30 addresses trickle header bytes (each byte within libmicrohttpd's idle
timeout), another streams an endless chunked body and a third opens 40 connections from one
address, a normal client keeps getting 200s at its usual latency. Then: every slow client was cut
at the request deadline, the chunked body got 413 after at most a few times --max-body, the one
address got at most --max-per-address connections, a reply above --max-reply is a 502, and the
flood left a handful of log lines, not one per refused connection.

usage: slowloris_test.py TB_RUN RESPONDER GATE_API
"""
import socket
import statistics
import sys
import threading
import time

from gate_harness import Harness

tb_run, responder, gate_api = sys.argv[1:4]
h = Harness(tb_run, "gate-slowloris-")
check = h.check
try:
    h.spawn([responder, "--broker", h.url, *h.auth, "--filter", "devices/+/commands/ping"], "RESPONDER_READY")
    h.spawn([responder, "--broker", h.url, *h.auth, "--filter", "devices/big/commands/fetch",
             "--reply", "x" * 120000], "RESPONDER_READY")
    gate, port = h.gateway(gate_api, "--request-deadline", "2s", "--max-per-address", "16", "--max-body", "4096",
                           "--max-reply", "100k", "--max-connections", "512")

    def post(sock, path="/devices/d1/commands/ping", body=b"{}"):
        sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, rest = data.split(b"\r\n\r\n", 1)
        length = int([h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")][0].split(b":")[1])
        while len(rest) < length:
            rest += sock.recv(65536)
        return int(head.split()[1]), rest

    def normal_latencies(n):
        lat = []
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            for _ in range(n):
                t = time.monotonic()
                status, _ = post(s)
                lat.append((time.monotonic() - t) * 1000)
                if status != 200:
                    check(False, f"a normal request got {status}")
        return lat

    quiet = normal_latencies(50)

    # The attack: 300 trickling clients from 127.0.0.2..127.0.0.31, 10 each.
    slow, cut = [], []
    for a in range(30):
        for _ in range(10):
            s = socket.socket()
            s.bind((f"127.0.0.{a + 2}", 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            s.sendall(b"POST /devices/d1/commands/ping HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
    start = time.monotonic()

    def trickle():
        alive = set(range(len(slow)))
        while alive and time.monotonic() - start < 8:
            for i in list(alive):
                try:
                    slow[i].sendall(b"X")
                except OSError:
                    alive.discard(i)
                    cut.append(time.monotonic() - start)
            time.sleep(0.5)
        for i in alive:
            try:  # a server close may only show on read
                slow[i].setblocking(False)
                if slow[i].recv(1) == b"":
                    cut.append(time.monotonic() - start)
            except OSError:
                pass

    chunked = {}

    def chunk_flood():
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"POST /devices/d1/commands/ping HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            got = []

            def read():  # the answer comes while we are still sending
                try:
                    while data := s.recv(4096):
                        got.append(data)
                except OSError:
                    pass
            reader = threading.Thread(target=read)
            reader.start()
            piece = b"%x\r\n%s\r\n" % (65536, b"{" * 65536)
            sent = 0
            try:
                while sent < 200 * 1024 * 1024:
                    s.sendall(piece)
                    sent += 65536
            except OSError:
                pass
            chunked["sent"] = sent
            reader.join(5)
            chunked["reply"] = b"".join(got)

    def one_address():
        conns = []
        for _ in range(40):
            s = socket.socket()
            s.bind(("127.0.0.40", 0))
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
                conns.append(s)
            except OSError:
                pass
        # Connections past the limit are closed once the server has accepted them: wait for that.
        for s in conns:
            s.setblocking(False)
        closed, end = set(), time.monotonic() + 5
        while len(closed) < len(conns) - 16 and time.monotonic() < end:
            for k, s in enumerate(conns):
                if k in closed:
                    continue
                try:
                    if s.recv(1) == b"":
                        closed.add(k)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(k)
            time.sleep(0.05)
        chunked["one_address_open"] = len(conns) - len(closed)
        for s in conns:
            s.close()

    threads = [threading.Thread(target=f) for f in (trickle, chunk_flood, one_address)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    under_attack = normal_latencies(50)
    for t in threads:
        t.join()

    q50, a50 = statistics.median(quiet), statistics.median(under_attack)
    check(max(under_attack) < 1000 and a50 < max(20 * q50, 50),
          f"a normal client under attack: 50 of 50 answered 200, p50 {a50:.2f} ms (quiet {q50:.2f} ms), max {max(under_attack):.1f} ms")
    check(len(cut) == 300 and max(cut) < 4.5,
          f"300 trickling clients were cut at the 2 s deadline: {len(cut)} cut, the last after {max(cut, default=-1):.1f} s")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        metrics = b""
        while data := s.recv(65536):
            metrics += data
    cut413 = [l for l in metrics.decode().splitlines() if 'status="413"' in l and l.startswith("gate_api_responses_total")]
    check(chunked.get("sent", 1 << 40) < 32 * 1024 * 1024 and any(l.endswith(" 1") for l in cut413),
          f"an endless chunked body was cut off after {chunked.get('sent', 0) >> 10} KiB (max-body 4 KiB; "
          f"kernel buffers hold the rest) and counted: {cut413}")
    check(chunked.get("one_address_open", 99) <= 16,
          f"40 connections from one address: {chunked.get('one_address_open')} kept (--max-per-address 16)")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        status, body = post(s, "/devices/d2/commands/ping")
        check(status == 200, f"afterwards a command still gets 200 ({status})")
        status, body = post(s, "/devices/big/commands/fetch")
        check(status == 502 and b"reply_too_large" in body,
              f"a 120 kB reply above --max-reply 100k: {status} {body[:120]!r}")
    time.sleep(0.5)
    lines = open(gate.log).read().count("\n")
    check(lines < 40, f"the attack left {lines} lines in the gateway's log")
finally:
    h.finish()
