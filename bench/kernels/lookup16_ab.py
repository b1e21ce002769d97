# SPDX-License-Identifier: Apache-2.0
"""How the avx2 variant gets the 16-bit activations, two ways timed in one run:
the table read with vpgatherdd against scalar loads (--axis lookup,
VLLM_FL_CPU_LOOKUP=gather|scalar), or every activation looked up against
computed in float32 with the table only for the lanes whose rounding is
unsure (--axis act16, VLLM_FL_CPU_ACT16=table|compute; the lookup is the
CPU's default unless --lookup names one).

Each round runs one child process per mode, in an order that rotates round by
round; the first mode runs twice, the second time named with a prime (gather',
table': an A/A control, their ratio shows the run's noise). A child times
either torch.ops.fldispatch.<op> on [tokens, 2 x hidden] 16-bit inputs
(default: the default 64 x 4096 fits the L3 of a Zen 3 CCX, so the kernel,
not memory, is timed; the torch dispatcher's few microseconds are in every
figure alike) at one thread, printing its median time per call, or with
--fldispatch TOOL, `TOOL bench --json` at one thread (each child measures its
own STREAM triad, so its share of the triad is printed too). The table is the
median over rounds, with the load average before and after.

    PYTHONPATH=build/python python3 bench/kernels/lookup16_ab.py \\
        [--axis lookup|act16] [--rounds 5] [--tokens 64] \\
        [--ops silu_and_mul,gelu_and_mul] [--dtypes f16,bf16] [--fldispatch build/bin/fldispatch]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

AXES = {
    "lookup": ("VLLM_FL_CPU_LOOKUP", ("gather", "scalar")),
    "act16": ("VLLM_FL_CPU_ACT16", ("table", "compute")),
}


def child(ops, dtypes, tokens, hidden, reps):
    import torch

    import fldispatch.torch  # noqa: F401  (registers torch.ops.fldispatch)

    torch.set_num_threads(1)
    res = {}
    for op in ops:
        fn = getattr(torch.ops.fldispatch, op)
        for dt in dtypes:
            dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
            torch.manual_seed(0)
            x = (4 * torch.randn(tokens, 2 * hidden)).to(dtype)
            out = torch.empty(tokens, hidden, dtype=dtype)
            for _ in range(20):
                fn(out, x)
            n = 50
            per = []
            for _ in range(reps):
                t0 = time.perf_counter_ns()
                for _ in range(n):
                    fn(out, x)
                per.append((time.perf_counter_ns() - t0) / n / 1e3)
            res[f"{op} {dt}"] = [statistics.median(per), None]
    return res


def bench_child(tool, ops, dtypes, tokens, reps, env):
    cmd = [tool, "bench", "--json", "--impl", "vendor.cpu", "--threads", "1", "--tokens",
           str(tokens), "--dtype", ",".join(dtypes), "--reps", str(reps), *ops]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"lookup16_ab: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    res = {}
    for r in json.loads(p.stdout)["results"]:
        res[f"{r['op']} {r['dtype']}"] = [r["us"], r["bw_share"]]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--axis", choices=sorted(AXES), default="lookup")
    ap.add_argument("--lookup", choices=AXES["lookup"][1],
                    help="with --axis act16: VLLM_FL_CPU_LOOKUP for every mode (default: the CPU's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--ops", default="silu_and_mul,gelu_and_mul")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--fldispatch", metavar="TOOL",
                    help="time `TOOL bench --json` (hidden 4096) instead of torch.ops")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ops, dtypes = a.ops.split(","), a.dtypes.split(",")
    if a.child:
        print(json.dumps(child(ops, dtypes, a.tokens, a.hidden, a.reps)))
        return
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    var, (first, second) = AXES[a.axis]
    modes = (first, second, first + "'")
    load0 = os.getloadavg()
    got: dict[str, list[dict[str, list[Any]]]] = {m: [] for m in modes}
    for rnd in range(a.rounds):
        order = modes[rnd % 3:] + modes[:rnd % 3]
        for m in order:
            env = dict(os.environ, VLLM_FL_CPU_ISA="avx2", VLLM_FL_CPU_THREADS="1")
            env[var] = m.rstrip("'")
            if a.axis == "act16" and a.lookup:
                env["VLLM_FL_CPU_LOOKUP"] = a.lookup
            if a.fldispatch:
                got[m].append(bench_child(a.fldispatch, ops, dtypes, a.tokens, a.reps, env))
                continue
            p = subprocess.run([sys.executable, __file__, "--child", "--tokens", str(a.tokens),
                                "--hidden", str(a.hidden), "--reps", str(a.reps), "--ops",
                                a.ops, "--dtypes", a.dtypes],
                               env=env, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                sys.exit(f"lookup16_ab: child {m} failed:\n{p.stderr[-2000:]}")
            got[m].append(json.loads(p.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()
    what = f"fldispatch bench, {a.tokens} x 4096" if a.fldispatch else f"{a.tokens} x {a.hidden}"
    print(f"# {what}, one thread, {a.rounds} rounds, {var}; load average before "
          f"{load0[0]:.1f}, after {load1[0]:.1f}")
    share = a.fldispatch is not None
    print(f"{'case':26} {first + ' us':>12} {second + ' us':>12} {first + '/' + second:>15} "
          f"{'A/A ' + first + '/' + first + chr(39):>20}"
          + (f" {first + ' share':>14} {second + ' share':>14}" if share else ""))
    for case in got[first][0]:
        med = {m: statistics.median(r[case][0] for r in got[m]) for m in modes}
        line = (f"{case:26} {med[first]:12.1f} {med[second]:12.1f} "
                f"{med[first] / med[second]:14.2f}x {med[first] / med[modes[2]]:19.2f}x")
        if share:
            sh = {m: 100 * statistics.median(r[case][1] for r in got[m]) for m in modes[:2]}
            line += f" {sh[first]:13.1f}% {sh[second]:13.1f}%"
        print(line)


if __name__ == "__main__":
    main()
