# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""What the gateway's script tests share: the test broker, processes started and stopped, checks."""
import subprocess
import sys
import tempfile
import time


class Harness:
    """A test broker (plain TCP) in a temporary directory, the processes a test starts, and its checks."""

    def __init__(self, tb_run, prefix):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        self.failures = []
        self.procs = []
        out = subprocess.run([tb_run, "--daemon", "--no-tls", "--dir", self.tmp], capture_output=True, text=True, timeout=60)
        env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
        self.env = {k: v.strip("'\"") for k, v in env.items()}
        if "MQTT_URL" not in self.env:
            raise SystemExit(f"FAIL: the test broker did not start: {out.stderr[-2000:]}")
        self.url = self.env["MQTT_URL"]
        self.auth = ["--username", self.env["MQTT_USERNAME"], "--password", self.env["MQTT_PASSWORD"]]

    def check(self, ok, what):
        print(("ok: " if ok else "FAIL: ") + what, flush=True)
        if not ok:
            self.failures.append(what)

    def spawn(self, argv, ready):
        """Start argv (stderr to a file: self.log(p)) and wait up to 15 s for the line with ready."""
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(f"{self.tmp}/{len(self.procs)}.err", "w"), text=True)
        p.log = f"{self.tmp}/{len(self.procs)}.err"
        self.procs.append(p)
        end = time.monotonic() + 15
        while time.monotonic() < end:
            line = p.stdout.readline()
            if ready in line:
                return p, line
        raise SystemExit(f"FAIL: {argv[0]} did not print {ready}")

    def gateway(self, gate_api, *args):
        """Start the gateway on a free port with args; returns (process, port)."""
        p, line = self.spawn([gate_api, "--broker", self.url, *self.auth, "--listen", "127.0.0.1:0", *args], "GATE_API_READY")
        return p, int(line.split("url=http://127.0.0.1:")[1].split()[0])

    def finish(self):
        """Stop what was started (SIGTERM, then SIGKILL after 15 s) and exit 1 if a check failed."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        if "RUN_PID" in self.env:
            subprocess.run(["kill", self.env["RUN_PID"]])
        if self.failures:
            for p in self.procs:
                print(open(p.log).read()[-2000:], end="")
        sys.exit(1 if self.failures else 0)
