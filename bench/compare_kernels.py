#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compare the CPU kernels of two fldispatch builds in one run.

Runs `fldispatch bench --json` of each build in turn with the same
arguments (the order flipped every round, so that drift of a shared machine
hits both alike) and prints, per op, dtype, shape and thread count, the
median over the rounds of each build's time per call and share of the
triad (each run's own), and base time / new time (> 1: the new build is
faster). With --aa the base build runs twice per round (the three runs'
order rotated), and a column gives base time / base-again time: the A/A
control, how far two runs of one build differ on this machine now; a
base/new ratio inside it is not a difference. Arguments after the two
builds go to `fldispatch bench`:

    git worktree add /tmp/base HEAD~1 && make -C /tmp/base
    python3 bench/compare_kernels.py /tmp/base/build/bin/fldispatch build/bin/fldispatch \\
        --rounds 3 --aa -- --impl vendor.cpu --dtype f32,bf16 --threads 1 --tokens 4096 --reps 5

Exit status 0; 2 on bad arguments or when a build's benchmark fails.
"""
import argparse
import collections
import json
import statistics
import subprocess
import sys
from typing import Any


def run(binary, bench_args):
    cmd = [binary, "bench", "--json", *bench_args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"compare_kernels: {' '.join(cmd)} failed ({done.returncode}): "
              f"{done.stderr.strip()}", file=sys.stderr)
        sys.exit(2)
    return json.loads(done.stdout)["results"]


def key(r):
    shape = r["shape"] + ("+res" if r.get("residual") else "")
    return (r["op"], r["impl_id"], r["dtype"], shape, r.get("threads", 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="arguments after -- go to fldispatch bench")
    ap.add_argument("base", help="the fldispatch tool of the build to compare against")
    ap.add_argument("new", help="the fldispatch tool of the build under test")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each build (default 3)")
    ap.add_argument("--aa", action="store_true",
                    help="run the base build twice per round and print the A/A ratio")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.bench_args = argv[cut + 1:]
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    us: dict[tuple[Any, ...], tuple[list[float], ...]] = collections.defaultdict(lambda: ([], [], []))
    share: dict[tuple[Any, ...], tuple[list[float], ...]] = collections.defaultdict(lambda: ([], [], []))
    binaries = (args.base, args.new, args.base)
    sides = [0, 1, 2] if args.aa else [0, 1]
    for rnd in range(args.rounds):
        # alternated (two builds) or rotated (with the A/A run)
        shift = rnd % len(sides)
        order = sides[shift:] + sides[:shift]
        if not args.aa and rnd % 2:
            order = [1, 0]
        for side in order:
            for r in run(binaries[side], args.bench_args):
                us[key(r)][side].append(r["us"])
                share[key(r)][side].append(r["bw_share"])
    print(f"{'op':<18} {'impl':<12} {'dtype':<5} {'shape':<18} {'thr':>3} "
          f"{'base us':>11} {'new us':>11} {'base %':>7} {'new %':>7} {'base/new':>8}"
          + (f" {'A/A':>6}" if args.aa else ""))
    for k in sorted(us):
        b, n, b2 = us[k]
        if not b or not n:
            continue
        mb, mn = statistics.median(b), statistics.median(n)
        sb, sn = (100 * statistics.median(v) for v in share[k][:2])
        aa = f" {mb / statistics.median(b2):>5.2f}x" if b2 else ""
        print(f"{k[0]:<18} {k[1]:<12} {k[2]:<5} {k[3]:<18} {k[4]:>3} {mb:>11.3f} {mn:>11.3f} "
              f"{sb:>6.1f}% {sn:>6.1f}% {mb / mn:>7.2f}x{aa}")
    print(f"# medians over {args.rounds} rounds of each build, order "
          + ("rotated; A/A: base / base again" if args.aa else "alternated"))


if __name__ == "__main__":
    main()
