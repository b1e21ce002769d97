#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare the dispatch overhead of two fldispatch builds in one run.

Runs `fldispatch bench --overhead --json` of each build in turn (ABAB...,
the order flipped every round so that drift of a shared machine hits both
alike) and prints, per kernel, variant and thread count, the median over
the rounds of each build's overhead over the direct call and the difference.

    git worktree add /tmp/base HEAD~1 && make -C /tmp/base
    python3 bench/compare_overhead.py /tmp/base/build/bin/fldispatch build/bin/fldispatch

Exit status 0; 2 on bad arguments or when a build's benchmark fails.
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys


def run(binary, reps):
    cmd = [binary, "bench", "--overhead", "--json", "--reps", str(reps)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"compare_overhead: {' '.join(cmd)} failed ({done.returncode}): "
                 f"{done.stderr.strip()}")
    return json.loads(done.stdout)["results"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the fldispatch tool of the build to compare against")
    ap.add_argument("new", help="the fldispatch tool of the build under test")
    ap.add_argument("--rounds", type=int, default=6, help="runs of each build (default 6)")
    ap.add_argument("--reps", type=int, default=7, help="--reps of each run (default 7)")
    ap.add_argument("--kernels", default="null,opaque",
                    help="comma-separated kernels to show (default null,opaque)")
    args = ap.parse_args()
    if args.rounds < 1 or args.reps < 1:
        ap.error("--rounds and --reps must be at least 1")
    kernels = set(args.kernels.split(","))
    builds = [("base", args.base), ("new", args.new)]
    seen = collections.defaultdict(list)
    for r in range(args.rounds):
        for name, binary in builds if r % 2 == 0 else reversed(builds):
            for row in run(binary, args.reps):
                if row["kernel"] in kernels and row["variant"] != "direct":
                    key = (row["kernel"], row["variant"], row["threads"])
                    seen[key + (name,)].append(row["overhead_ns"])
    print(f"overhead over the direct call, ns: median of {args.rounds} runs x median of "
          f"{args.reps} repetitions")
    print(f"{'kernel':8}{'variant':10}{'threads':>7}{'base':>9}{'new':>9}{'new-base':>10}")
    for key in sorted({k[:3] for k in seen}):
        if not seen[key + ("base",)] or not seen[key + ("new",)]:
            # a variant one of the builds does not have (e.g. prepared calls)
            only = "base" if seen[key + ("base",)] else "new"
            value = statistics.median(seen[key + (only,)])
            print(f"{key[0]:8}{key[1]:10}{key[2]:7d}"
                  f"{value if only == 'base' else float('nan'):9.1f}"
                  f"{value if only == 'new' else float('nan'):9.1f}{'-':>10}")
            continue
        base = statistics.median(seen[key + ("base",)])
        new = statistics.median(seen[key + ("new",)])
        print(f"{key[0]:8}{key[1]:10}{key[2]:7d}{base:9.1f}{new:9.1f}{new - base:+10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
