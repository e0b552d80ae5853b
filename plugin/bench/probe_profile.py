#!/usr/bin/env python3
# SPDX-License-Identifier: EPL-2.0 OR BSD-3-Clause
"""Where the broker's time per message goes, with and without the probe.

Reads the perf files `probe_overhead --perf DIR` wrote (cpu-clock samples of the broker's
process during each measured window, DIR/MODE-rROUND.data) and prints, per mode, the median
share of the broker's samples in the probe's own code (mqtt_probe.so), in the broker's plugin
dispatch (plugin__handle_*: symbols only on a broker built with them, such as 2.1.2 from source),
in the kernel, and the symbols whose share differs most from the no-probe runs. Multiply a share
by the broker's CPU time per message (probe_overhead prints it) for nanoseconds per message.

Usage: probe_profile.py DIR [--top N (8)]
"""
import collections
import glob
import os
import re
import statistics
import subprocess
import sys

if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__.strip())
    sys.exit(0 if len(sys.argv) > 1 else 2)
folder = sys.argv[1]
top = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--top" else 8


def shares(path):
    """{(dso, symbol): percent of the samples} for one perf file."""
    out = subprocess.run(["perf", "report", "-i", path, "--stdio", "-q", "--sort", "dso,sym",
                          "--percent-limit", "0"], capture_output=True, text=True)
    table = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*\S)", line)
        if m:
            table[(m.group(2), m.group(4))] = float(m.group(1))
    return table


runs = collections.defaultdict(list)  # mode -> [shares]
for path in sorted(glob.glob(os.path.join(folder, "*-r*.data"))):
    mode = re.sub(r"-r\d+\.data$", "", os.path.basename(path))
    runs[mode].append(shares(path))
if not runs:
    sys.exit(f"probe_profile: no perf files in {folder} (probe_overhead --perf {folder})")


def median_share(mode, pred):
    return statistics.median(sum(v for k, v in s.items() if pred(*k)) for s in runs[mode])


def probe(dso, sym):
    return dso == "mqtt_probe.so"


def dispatch(dso, sym):
    return sym.startswith("plugin__handle") or sym.startswith("plugin__")


def kernel(dso, sym):
    return dso == "[kernel.kallsyms]"


base = "no_probe"
print(f"{'mode':32} {'runs':>4} {'probe':>7} {'dispatch':>8} {'kernel':>7}   (median % of the broker's samples)")
for mode in sorted(runs, key=lambda m: (m != base, m)):
    print(f"{mode:32} {len(runs[mode]):4} {median_share(mode, probe):6.2f}% "
          f"{median_share(mode, dispatch):7.2f}% {median_share(mode, kernel):6.2f}%")

if base in runs:
    keys = set().union(*(s.keys() for m in runs for s in runs[m]))
    base_med = {k: statistics.median(s.get(k, 0) for s in runs[base]) for k in keys}
    for mode in sorted(m for m in runs if m != base):
        diff = []
        for k in keys:
            d = statistics.median(s.get(k, 0) for s in runs[mode]) - base_med[k]
            diff.append((d, k))
        diff.sort(key=lambda x: -abs(x[0]))
        print(f"\n{mode}: the symbols whose median share moved most against no probe")
        for d, (dso, sym) in diff[:top]:
            print(f"  {d:+6.2f} pts  {dso:24} {sym}")
