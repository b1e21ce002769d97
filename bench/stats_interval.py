#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What VLLM_FL_STATS_INTERVAL costs a process that calls ops.

Each round runs three child processes in turn, for --seconds each: a loop
of fldispatch.silu_and_mul on a float32 [1, 8192] array, counting calls,
with VLLM_FL_STATS_FILE set and no interval (A), with the interval (B), and
again without it (A2, the A/A control). Printed: each run's calls, the
medians over the rounds, B/A and A2/A (a B/A ratio inside the A/A spread is
no difference), and the CPU time of the library's writer thread
("fld-stats", from /proc/PID/task/TID/stat) per run and per rewrite (the
counts change all the time, so it rewrites once per interval).

    PYTHONPATH=build/python python3 bench/stats_interval.py --rounds 3 --seconds 10 --interval 0.1

Exit status 0; 1 when a child fails.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import glob, os, sys, time
import numpy as np
import fldispatch

x = np.ones((1, 8192), np.float32)
out = np.zeros((1, 4096), np.float32)
end = time.monotonic() + float(sys.argv[1])
calls = 0
while time.monotonic() < end:
    fldispatch.silu_and_mul(out, x)
    calls += 1
writer_ms = 0.0
for task in glob.glob(f"/proc/{os.getpid()}/task/*"):
    with open(task + "/comm") as f:
        if f.read().strip() != "fld-stats":
            continue
    with open(task + "/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    writer_ms = (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")
print(calls, writer_ms)
"""


def run(seconds, interval, directory):
    env = dict(os.environ, VLLM_FL_STATS_FILE=os.path.join(directory, "stats-%p.json"))
    env.pop("VLLM_FL_STATS_INTERVAL", None)
    if interval:
        env["VLLM_FL_STATS_INTERVAL"] = str(interval)
    done = subprocess.run([sys.executable, "-c", CHILD, str(seconds)], env=env,
                          capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode:
        sys.exit(f"stats_interval.py: the child failed:\n{done.stderr}")
    calls, writer_ms = done.stdout.split()
    return int(calls), float(writer_ms)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--interval", type=float, default=0.1)
    args = parser.parse_args()
    runs: dict[str, list[int]] = {"A": [], "B": [], "A2": []}
    writer = []
    with tempfile.TemporaryDirectory() as directory:
        for r in range(args.rounds):
            for label, interval in (("A", 0), ("B", args.interval), ("A2", 0)):
                calls, writer_ms = run(args.seconds, interval, directory)
                runs[label].append(calls)
                if interval:
                    writer.append(writer_ms)
                print(f"round {r + 1} {label:2} interval {interval or '-':>4}: {calls:>10,} calls"
                      + (f", writer {writer_ms:.0f} ms CPU" if interval else ""), flush=True)
    median = {k: statistics.median(v) for k, v in runs.items()}
    print(f"medians: A {median['A']:,.0f}  B {median['B']:,.0f}  A2 {median['A2']:,.0f}"
          f"  calls in {args.seconds:g} s")
    print(f"B/A {median['B'] / median['A']:.3f}  A2/A (the control) "
          f"{median['A2'] / median['A']:.3f}")
    rewrites = args.seconds / args.interval
    print(f"writer thread: {statistics.median(writer):.0f} ms CPU per run, "
          f"{statistics.median(writer) / rewrites:.2f} ms per rewrite ({rewrites:.0f} rewrites)")


if __name__ == "__main__":
    main()
