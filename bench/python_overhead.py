#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-call cost of fldispatch from Python, beside what it is compared with.

    make python
    PYTHONPATH=build/python python3 bench/python_overhead.py [--rounds 15] [--calls 20000] [--json]

Times, on x = torch.randn(1, 8) (float32) and out = torch.empty(1, 4):
    c_call        fld_silu_and_mul() alone, in a C loop, tensors imported once
                  (fldispatch._C._bench_c_call): the floor
    python_call   fldispatch.silu_and_mul(out, x)
    torch_op      torch.ops.fldispatch.silu_and_mul(out, x)
    torch_op_default  torch.ops.fldispatch.silu_and_mul.default(out, x)
    torch_add     torch.add(x, x), an ATen op on the same tensors
    numpy_call    fldispatch.silu_and_mul on NumPy views of the same memory
                  (the __dlpack__ capsule path)
Each round times every variant once (calls in a loop, per-call mean), in an
order that rotates from round to round so that drift of a shared machine hits
all alike; the figure is the median over the rounds. Prints the machine, the
figures, and the differences the targets are about (docs/BENCHMARKS.md):
python_call - c_call <= 1000 ns, torch_op - torch_add <= 2000 ns, both below
vllm-plugin-FL's 1,200 ns of dispatch.
"""
import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np
import torch

import fldispatch
import fldispatch.torch  # noqa: F401  (torch.ops.fldispatch)

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
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    torch.set_num_threads(1)
    x = torch.randn(1, 8)
    out = torch.empty(1, 4)
    xn, outn = x.numpy(), out.numpy()
    op = torch.ops.fldispatch.silu_and_mul
    op_default = op.default
    call = fldispatch.silu_and_mul
    variants = {
        "c_call": None,
        "python_call": lambda: call(out, x),
        "torch_op": lambda: op(out, x),
        "torch_op_default": lambda: op_default(out, x),
        "torch_add": lambda: torch.add(x, x),
        "numpy_call": lambda: call(outn, xn),
    }
    # Warm up: caches, the dispatcher, the library's resolution.
    for fn in variants.values():
        if fn:
            per_call_ns(fn, 1000)
    fldispatch._C._bench_c_call(out, x, 1000)

    samples = {name: [] for name in variants}
    names = list(variants)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if name == "c_call":
                samples[name].append(fldispatch._C._bench_c_call(out, x, args.calls))
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
                    "impl": fldispatch.resolve("silu_and_mul")},
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


if __name__ == "__main__":
    main()
