#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-call cost of fldispatch from Python, beside what it is compared with.

    make python
    PYTHONPATH=build/python python3 bench/python_overhead.py [--rounds 15] [--calls 20000]
        [--op silu_and_mul|rms_norm] [--json]
    PYTHONPATH=build/python python3 bench/python_overhead.py --kernels-ab 4 [--op ...] [...]

Times, on x = torch.randn(1, 8) (float32) and out = torch.empty(1, 4)
(--op rms_norm: out = torch.empty(1, 8), weight = torch.randn(8), no residual):
    c_call        the op's typed entry point alone, in a C loop, tensors
                  imported once (fldispatch._C._bench_c_call for
                  silu_and_mul, _bench_c_op for rms_norm): the floor
    python_call   fldispatch.<op>(out, x, ...)
    torch_op      torch.ops.fldispatch.<op>(out, x, ...), through the kernels
                  fldispatch.torch registered for the CPU key: the native
                  ones, or the Python-level ones where those are not in use
                  (FLDISPATCH_TORCH_NATIVE=0); "kernels" in the output says which
    torch_op_default  torch.ops.fldispatch.<op>.default(out, x, ...)
    torch_add     torch.add(x, x), an ATen op on the same tensors
    numpy_call    fldispatch.<op> on NumPy views of the same memory
                  (the __dlpack__ capsule path)
Each round times every variant once (calls in a loop, per-call mean), in an
order that rotates from round to round so that drift of a shared machine hits
all alike; the figure is the median over the rounds. Prints the machine, the
figures, and the differences the targets are about (docs/BENCHMARKS.md):
python_call - c_call <= 1000 ns, torch_op - torch_add <= 2000 ns, both below
vllm-plugin-FL's 1,200 ns of dispatch.

--kernels-ab N runs this benchmark (with the other options) in 4N child
processes, the native kernels (A) and the Python-level ones (B,
FLDISPATCH_TORCH_NATIVE=0) in the order A B B A, N times, and prints the
median over each kind's processes of their torch_op figure, B - A, and the
A/A and B/B pairs: the median of each kind's first half of the processes
against its second half, the noise the difference is read against.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch

import fldispatch
import fldispatch.torch as fltorch

VLLM_PLUGIN_FL_DISPATCH_NS = 1200


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def per_call_ns(fn, calls):
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--op", choices=("silu_and_mul", "rms_norm"), default="silu_and_mul")
    p.add_argument("--json", action="store_true")
    p.add_argument("--kernels-ab", type=int, default=0, metavar="N")
    args = p.parse_args()
    if args.kernels_ab:
        kernels_ab(args)
        return

    torch.set_num_threads(1)
    x = torch.randn(1, 8)
    op = getattr(torch.ops.fldispatch, args.op)
    op_default = op.default
    call = getattr(fldispatch, args.op)
    rest: tuple[Any, ...]
    rest_n: tuple[Any, ...]
    if args.op == "rms_norm":
        out, w = torch.empty(1, 8), torch.randn(8)
        rest, rest_n = (w, None, 1e-6), (w.numpy(), None, 1e-6)
    else:
        out = torch.empty(1, 4)
        rest, rest_n = (), ()
    xn, outn = x.numpy(), out.numpy()

    def c_call(n):
        if args.op == "silu_and_mul":
            return fldispatch._C._bench_c_call(out, x, n)
        return fldispatch._C._bench_c_op(args.op, n, out, x, *rest)

    variants = {
        "c_call": None,
        "python_call": lambda: call(out, x, *rest),
        "torch_op": lambda: op(out, x, *rest),
        "torch_op_default": lambda: op_default(out, x, *rest),
        "torch_add": lambda: torch.add(x, x),
        "numpy_call": lambda: call(outn, xn, *rest_n),
    }
    # Warm up: caches, the dispatcher, the library's resolution.
    for fn in variants.values():
        if fn:
            per_call_ns(fn, 1000)
    c_call(1000)

    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name == "c_call":
                samples[name].append(c_call(args.calls))
            else:
                samples[name].append(per_call_ns(variants[name], args.calls))
    median = {name: statistics.median(v) for name, v in samples.items()}
    spread = {name: (min(v), max(v)) for name, v in samples.items()}
    diffs = {
        "python_call - c_call": median["python_call"] - median["c_call"],
        "torch_op - torch_add": median["torch_op"] - median["torch_add"],
        "torch_op - c_call": median["torch_op"] - median["c_call"],
    }
    result = {
        "machine": {"cpu": cpu_model(), "python": platform.python_version(),
                    "torch": torch.__version__, "numpy": np.__version__,
                    "fldispatch": fldispatch.__version__,
                    "impl": fldispatch.resolve(args.op)},
        "op": args.op,
        "kernels": "native" if fltorch.NATIVE else f"python ({fltorch.NATIVE_REASON})",
        "command": " ".join([sys.executable] + sys.argv),
        "rounds": args.rounds, "calls": args.calls,
        "median_ns": median, "min_max_ns": spread, "differences_ns": diffs,
        "targets": {
            "python_call - c_call <= 1000": diffs["python_call - c_call"] <= 1000,
            "torch_op - torch_add <= 2000": diffs["torch_op - torch_add"] <= 2000,
            f"python_call - c_call < {VLLM_PLUGIN_FL_DISPATCH_NS}":
                diffs["python_call - c_call"] < VLLM_PLUGIN_FL_DISPATCH_NS,
            f"torch_op - torch_add < {VLLM_PLUGIN_FL_DISPATCH_NS}":
                diffs["torch_op - torch_add"] < VLLM_PLUGIN_FL_DISPATCH_NS,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    m = result["machine"]
    print(f"cpu: {m['cpu']}; python {m['python']}, torch {m['torch']}, "
          f"fldispatch {m['fldispatch']} ({m['impl']})")
    print(f"op {args.op}; torch.ops kernels: {result['kernels']}")
    print(f"{args.rounds} rounds x {args.calls} calls; median of the rounds' per-call means\n")
    print(f"{'variant':<18} {'ns/call':>9} {'min':>9} {'max':>9}")
    for name in names:
        lo, hi = spread[name]
        print(f"{name:<18} {median[name]:9.1f} {lo:9.1f} {hi:9.1f}")
    print()
    for name, v in diffs.items():
        print(f"{name:<22} {v:9.1f} ns")
    for name, ok in result["targets"].items():
        print(f"target {name}: {'ok' if ok else 'MISS'}")


def kernels_ab(args):
    """The --kernels-ab comparison (see the module's docstring)."""
    child = [sys.executable, os.path.abspath(__file__), "--json", "--op", args.op,
             "--rounds", str(args.rounds), "--calls", str(args.calls)]
    runs: dict[str, list[float]] = {"native": [], "python": []}
    machine = None
    for _ in range(args.kernels_ab):
        for kind in ("native", "python", "python", "native"):
            env = dict(os.environ, FLDISPATCH_TORCH_NATIVE="1" if kind == "native" else "0")
            r = json.loads(subprocess.run(child, env=env, check=True, capture_output=True,
                                          text=True).stdout)
            if not r["kernels"].startswith(kind):
                sys.exit(f"python_overhead: a {kind} run used the {r['kernels']} kernels")
            machine = r["machine"]
            runs[kind].append(r["median_ns"]["torch_op"])
    median = {kind: statistics.median(v) for kind, v in runs.items()}
    half = args.kernels_ab  # each kind ran 2N times
    pairs = {kind: (statistics.median(v[:half]), statistics.median(v[half:]))
             for kind, v in runs.items()}
    result = {"machine": machine, "op": args.op, "processes_per_kind": 2 * half,
              "rounds": args.rounds, "calls": args.calls,
              "torch_op_ns": runs, "median_ns": median,
              "python - native_ns": median["python"] - median["native"],
              "aa_pairs_ns": pairs}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    assert machine is not None  # set by every run above
    print(f"cpu: {machine['cpu']}; torch {machine['torch']}; op {args.op}; "
          f"{2 * half} processes per kind, each the median of {args.rounds} rounds x "
          f"{args.calls} calls")
    for kind in ("native", "python"):
        a, b = pairs[kind]
        print(f"torch_op, {kind + ' kernels':<15} {median[kind]:8.1f} ns/call  "
              f"(A/A halves {a:.1f} / {b:.1f}, {abs(a - b) / median[kind]:.1%})")
    print(f"python - native           {median['python'] - median['native']:8.1f} ns/call "
          f"({median['python'] / median['native']:.2f}x)")


if __name__ == "__main__":
    main()
