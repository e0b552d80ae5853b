#!/usr/bin/python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""The probe cannot take its broker's file descriptors, nor be held open by a slow client.

Starts the test broker under `ulimit -n 1024` (the common soft limit; Debian's unit sets none),
opens 3000 idle HTTP connections to the probe, and checks that MQTT clients still connect and
that /metrics still answers once the idle ones are cut; then 20 clients that trickle one header
byte a second (each within the idle timeout) are all cut by the absolute deadline (5 s).

usage: fd_limit_test.py TB_RUN     (exit 0, or 1 naming the failure)
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

tb_run = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="probe-fd-test-")
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


env = {}
out = subprocess.run(["bash", "-c", f'ulimit -n 1024 && exec "{tb_run}" --daemon --no-tls --dir "{tmp}"'],
                     capture_output=True, text=True, timeout=60)
if out.returncode != 0:
    print("FAIL: test broker:", out.stderr)
    sys.exit(1)
for line in out.stdout.splitlines():
    if "=" in line:
        k, v = line.split("=", 1)
        env[k] = v.strip("'\"")
broker_pid = int(env["BROKER_PID"])
run_pid = int(env["RUN_PID"])
metrics_port = int(env["METRICS_URL"].split(":")[2].split("/")[0])
mqtt_port = int(env["MQTT_URL"].rsplit(":", 1)[1])


def limit(pid):
    for line in open(f"/proc/{pid}/limits"):
        if line.startswith("Max open files"):
            return int(line.split()[3])


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def mqtt_ok():
    r = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(mqtt_port), "-u", env["MQTT_USERNAME"],
                        "-P", env["MQTT_PASSWORD"], "-t", "fd/test", "-m", "x", "-q", "1"],
                       capture_output=True, text=True, timeout=10)
    return r.returncode == 0


def metrics_ok():
    try:
        with socket.create_connection(("127.0.0.1", metrics_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            return data.startswith(b"HTTP/1.") and b" 200 " in data.split(b"\r\n")[0]
    except OSError:
        return False


try:
    check(limit(broker_pid) == 1024, f"the broker runs with a soft limit of {limit(broker_pid)} files")
    base = open_fds(broker_pid)
    idle = []
    for _ in range(3000):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", metrics_port))
        idle.append(s)
    time.sleep(1.0)
    held = open_fds(broker_pid)
    check(held - base <= 40, f"3000 idle HTTP connections cost the broker {held - base} descriptors (limit 16, each watched by a dup)")
    check(all(mqtt_ok() for _ in range(20)), "20 MQTT clients connect while they are open")
    for s in idle:
        s.close()
    end = time.monotonic() + 10
    while not metrics_ok() and time.monotonic() < end:
        time.sleep(0.2)
    check(time.monotonic() < end, "/metrics answers again within seconds of them closing")

    # Slow clients: a header byte every second never trips the idle timeout; the deadline ends them.
    slow = [socket.create_connection(("127.0.0.1", metrics_port), timeout=10) for _ in range(12)]
    start = time.monotonic()
    open_slow = set(range(len(slow)))
    cut_at = {}
    for tick in range(10):
        for i in list(open_slow):
            try:
                slow[i].sendall(b"X-Slow: " if tick == 0 else b"a")
                slow[i].setblocking(False)
                try:
                    if slow[i].recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                slow[i].setblocking(True)
            except OSError:
                open_slow.discard(i)
                cut_at[i] = time.monotonic() - start
        if not open_slow:
            break
        time.sleep(1.0)
    check(not open_slow and max(cut_at.values()) < 8,
          f"12 clients trickling a byte a second were all cut after {max(cut_at.values(), default=-1):.1f} s (deadline 5 s)")
    check(mqtt_ok() and metrics_ok(), "afterwards MQTT and /metrics work")
finally:
    subprocess.run(["kill", str(run_pid)])
    time.sleep(0.3)
    subprocess.run(["rm", "-rf", tmp])
sys.exit(1 if failures else 0)
