# SPDX-License-Identifier: Apache-2.0
"""How the avx2 variant reads the 16-bit activation tables: vpgatherdd against
scalar loads (VLLM_FL_CPU_LOOKUP=gather|scalar), timed in one run.

Each round runs one child process per mode, in an order that rotates round by
round; the `gather` mode runs twice under the names gather and gather' (an
A/A control: their ratio shows the run's noise). Each child times
torch.ops.fldispatch.<op> on [tokens, 2 x hidden] 16-bit inputs (the default
64 x 4096 fits the L3 of a Zen 3 CCX, so the kernel, not memory, is timed;
the torch dispatcher's few microseconds are in every figure alike) at one
thread, and prints its median time per call. The table is the median over
rounds, with the load average before and after.

    PYTHONPATH=build/python python3 bench/kernels/lookup16_ab.py \\
        [--rounds 5] [--tokens 64] [--ops silu_and_mul,gelu_and_mul] [--dtypes f16,bf16]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("gather", "scalar", "gather'")


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
            res[f"{op} {dt}"] = statistics.median(per)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--ops", default="silu_and_mul,gelu_and_mul")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    ops, dtypes = a.ops.split(","), a.dtypes.split(",")
    if a.child:
        print(json.dumps(child(ops, dtypes, a.tokens, a.hidden, a.reps)))
        return
    load0 = os.getloadavg()
    got = {m: [] for m in MODES}
    for rnd in range(a.rounds):
        order = MODES[rnd % 3:] + MODES[:rnd % 3]
        for m in order:
            env = dict(os.environ, VLLM_FL_CPU_LOOKUP=m.rstrip("'"), VLLM_FL_CPU_ISA="avx2",
                       VLLM_FL_CPU_THREADS="1")
            p = subprocess.run([sys.executable, __file__, "--child", "--tokens", str(a.tokens),
                                "--hidden", str(a.hidden), "--reps", str(a.reps), "--ops",
                                a.ops, "--dtypes", a.dtypes],
                               env=env, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                sys.exit(f"lookup16_ab: child {m} failed:\n{p.stderr[-2000:]}")
            got[m].append(json.loads(p.stdout.strip().splitlines()[-1]))
    load1 = os.getloadavg()
    print(f"# {a.tokens} x {a.hidden}, one thread, {a.rounds} rounds; load average before "
          f"{load0[0]:.1f}, after {load1[0]:.1f}")
    print(f"{'case':22} {'gather us':>10} {'scalar us':>10} {'gather/scalar':>14} "
          f"{'A/A gather/gather':>18}")
    for case in got["gather"][0]:
        med = {m: statistics.median(r[case] for r in got[m]) for m in MODES}
        print(f"{case:22} {med['gather']:10.1f} {med['scalar']:10.1f} "
              f"{med['gather'] / med['scalar']:13.2f}x {med['gather'] / med[MODES[2]]:17.2f}x")


if __name__ == "__main__":
    main()
