#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What an op registered from Python costs to call by name, and to register.

    make python
    PYTHONPATH=build/python python3 bench/python_registry.py [--rounds 15] [--calls 20000] [--json]

Times (per-call means, median over rounds; the variants rotate from round to
round so that drift of a shared machine hits all alike), on x = torch.randn(1, 8):
    direct          fn(x), the Python implementation called by hand: the floor
    call_op         fldispatch.call_op("bench_any", x): an op whose every
                    implementation takes every device and dtype (no key work)
    resolve_op      fldispatch.resolve_op("bench_any")(x)
    call_op_keyed   fldispatch.call_op("bench_keyed", x): an op with a
                    float32-only implementation, so the call's device and dtype
                    are read from x (the DLPack exchange API)
    rms_norm        fldispatch.rms_norm(out, x, w, None, 1e-6) (a C kernel)
    call_op_rms_norm  fldispatch.call_op("rms_norm", out, x, w, None, 1e-6)
    call_op_c_declared  fldispatch.call_op("sig_axpy", out, x, y, 2.0): a C
                    plugin's op outside the catalog, declared with a signature,
                    three tensors marshalled per the signature (needs
                    --sig-plugin build/python/tests/fld-sig_ops.so, which
                    `make check-python` or `make build/python/tests/fld-sig_ops.so` builds)
and, once per round in a fresh registry batch, registering 40 ops x 4
implementations (one registering() block: validation, one C registration).
Targets (docs/BENCHMARKS.md): call_op - direct <= 500 ns; registration <= 50 ms;
call_op_c_declared - rms_norm <= 500 ns.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

import fldispatch


def fn(x):
    return x


def per_call(f, calls):
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        f()
    return (time.perf_counter_ns() - t0) / calls


def register_batch(tag):
    t0 = time.perf_counter_ns()
    with fldispatch.registering(f"bench_reg_{tag}"):
        for i in range(40):
            op = f"bench_reg_{tag}_{i}"
            fldispatch.register_impl(op, fn, impl_id="default.b", kind="flagos")
            fldispatch.register_impl(op, fn, impl_id="vendor.b", kind="vendor", vendor="b")
            fldispatch.register_impl(op, fn, impl_id="vendor.c", kind="vendor", vendor="c",
                                     devices=["cuda"], dtypes=["float16"])
            fldispatch.register_impl(op, fn, impl_id="reference.b", kind="reference")
    return (time.perf_counter_ns() - t0) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--sig-plugin", help="path of fld-sig_ops.so (tests/plugins/sig_ops.c)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    fldispatch.register_impl("bench_any", fn, impl_id="vendor.b", kind="vendor", vendor="b")
    fldispatch.register_impl("bench_keyed", fn, impl_id="vendor.b", kind="vendor", vendor="b",
                             dtypes=["float32"])
    x = torch.randn(1, 8)
    out = torch.empty(1, 8)
    w = torch.ones(8)
    op = fldispatch.resolve_op("bench_any")
    call_op = fldispatch.call_op
    variants = {
        "direct": lambda: fn(x),
        "call_op": lambda: call_op("bench_any", x),
        "resolve_op": lambda: op(x),
        "call_op_keyed": lambda: call_op("bench_keyed", x),
        "rms_norm": lambda: fldispatch.rms_norm(out, x, w, None, 1e-6),
        "call_op_rms_norm": lambda: call_op("rms_norm", out, x, w, None, 1e-6),
    }
    if args.sig_plugin:
        fldispatch.load_plugin(os.path.abspath(args.sig_plugin))
        y = torch.randn(1, 8)
        variants["call_op_c_declared"] = lambda: call_op("sig_axpy", out, x, y, 2.0)
    for f in variants.values():  # warm: resolve and cache
        per_call(f, 100)
    samples: dict[str, list[float]] = {k: [] for k in variants}
    samples["register_40x4_ms"] = []
    names = list(variants)
    for r in range(args.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            samples[k].append(per_call(variants[k], args.calls))
        samples["register_40x4_ms"].append(register_batch(r))
    med = {k: statistics.median(v) for k, v in samples.items()}
    result = {
        "ns": {k: round(v, 1) for k, v in med.items() if k != "register_40x4_ms"},
        "register_40x4_ms": round(med["register_40x4_ms"], 2),
        "call_op_over_direct_ns": round(med["call_op"] - med["direct"], 1),
        "resolve_op_over_direct_ns": round(med["resolve_op"] - med["direct"], 1),
        "call_op_keyed_over_direct_ns": round(med["call_op_keyed"] - med["direct"], 1),
        "call_op_rms_norm_over_rms_norm_ns": round(med["call_op_rms_norm"] - med["rms_norm"], 1),
        "call_op_c_declared_over_rms_norm_ns":
            round(med["call_op_c_declared"] - med["rms_norm"], 1)
            if "call_op_c_declared" in med else None,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for k, v in result["ns"].items():
        print(f"{k:18s} {v:9.1f} ns")
    for k in ("call_op_over_direct_ns", "resolve_op_over_direct_ns",
              "call_op_keyed_over_direct_ns", "call_op_rms_norm_over_rms_norm_ns",
              "call_op_c_declared_over_rms_norm_ns"):
        if result[k] is not None:
            print(f"{k:36s} {result[k]:8.1f}")
    print(f"register 40 ops x 4 impls: {result['register_40x4_ms']:.2f} ms (target <= 50 ms)")


if __name__ == "__main__":
    main()
