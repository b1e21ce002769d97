#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Check a benchmark run against this project's speed targets.

The shipped tool reports measurements only; the targets set for the kernels,
for dispatch and for registration (docs/BENCHMARKS.md) are this project's, so
they are checked here, from the document of `fldispatch bench ... --json`
(docs/schemas/bench.schema.json), told apart by its "benchmark":

    build/bin/fldispatch bench --threads 1,2 --json > run.json
    python3 bench/targets.py run.json          # or: ... --json | python3 bench/targets.py
    build/bin/fldispatch bench --overhead --json | python3 bench/targets.py
    build/bin/fldispatch bench --registration --json | python3 bench/targets.py

"kernels" (bench [OP...] --json). Each target is judged on the implementation
the caller's policy selects by default ("selected_by_default"), on the plain
shape (not the fused-residual line), and only when the run covers it:

  CPU
    bandwidth  4096 x 4096, one thread, f32 and bf16: bw_share >= 80% of
               the one-thread STREAM triad
    threads    the same shapes, two threads >= 1.7x faster than one (needs
               --threads with 1 and 2)
    decode     one token, every dtype: <= 0.5 us per call with dispatch (at
               one thread if that ran, else at the first thread count)
  other devices
    bandwidth  4096 x 4096 (rotary 4096 x 32 x 128), every dtype: bw_share
               >= 85% of the device-to-device copy
  Every kernel target needs --hidden 4096 (the default).

"dispatch_overhead" (bench --overhead --json), for every kernel (null, loop,
opaque) at one and two threads:
    handle     fld_call() by handle <= 5 ns over the direct call
    name       fld_call_by_name() <= 25 ns over the direct call
    prepared   fld_prepared_rms_norm() <= 3 ns over the direct call (null
               and loop: an op outside the catalog cannot be prepared)
    run        fld_prepared_run() (the same prepared call on its bound
               pointers) <= 3 ns over the direct call (null and loop)
    threads    every variant: two threads >= 1.8x the aggregate throughput
               of one

"registration" (bench --registration --json): 4000 ops with one
implementation each registered in < 50 ms and < 4 MiB of heap (needs 4000
in --ops and --impls 1, the defaults).

Prints each target with its figure and verdict. Exit status 0, whether met
or missed (speed targets belong in benchmarks, not in exit codes), unless
--strict is given: then 1 when a target is missed. 2 on a document that is
none of these.
"""
import argparse
import json
import math
import sys

TOKENS = 4096
HIDDEN = 4096
BW_SHARE = 0.80
SCALING = 1.7
DECODE_US = 0.5
DEVICE_BW_SHARE = 0.85
DTYPES = ("f32", "f16", "bf16")

TITLES = {
    "bandwidth": "bandwidth: 4096x4096, 1 thread, >= 80% of STREAM 1t (f32, bf16)",
    "bandwidth_device": "bandwidth: 4096x4096 (rotary 4096x32x128), >= 85% of the d2d copy "
                        "(f32, f16, bf16)",
    "scaling": "threads: 4096x4096, 2 threads >= 1.7x faster than 1 (f32, bf16)",
    "decode": "decode: 1 token, <= 0.5 us per call with dispatch",
}
KEYS = {"bandwidth": "bw_share_4096_1t", "bandwidth_device": "bw_share_4096_d2d",
        "scaling": "scaling_2t", "decode": "decode_us"}

# bench --overhead
HANDLE_NS = 5.0
NAME_NS = 25.0
PREPARED_NS = 3.0
OVERHEAD_SCALING = 1.8
# The op and implementation each kernel of bench --overhead registers and pins.
OVERHEAD_KERNELS = {"null": ("rms_norm", "vendor.bench_null"),
                    "loop": ("rms_norm", "vendor.bench_loop"),
                    "opaque": ("bench_opaque", "vendor.bench_null")}

# bench --registration
REG_OPS = 4000
REG_IMPLS = 1
REG_MS = 50.0
REG_MIB = 4.0


def hidden_of(shape):
    """H of a result's shape: "TxH", or "TxNx128" (rotary, N heads of 128)."""
    dims = [int(d) for d in shape.split("x")[1:]]
    return math.prod(dims)


def figure(value):
    return None if value is None else float(value)


def collect_kernels(doc):
    """The targets the run covers, as dicts (target, op, dtype, impl_id, value, limit, met)."""
    results = doc.get("results") or []
    on_device = doc.get("device") != "cpu"
    if not results or any(hidden_of(r["shape"]) != HIDDEN for r in results):
        return []

    def threads(r):
        return r["threads"] if r["threads"] is not None else 0

    def find(op, dtype, tokens, n_threads):
        for r in results:
            if (r["op"] == op and r["dtype"] == dtype and r["tokens"] == tokens
                    and threads(r) == n_threads and not r["residual"]
                    and r["selected_by_default"] and r["us"] is not None):
                return r
        return None

    ops = list(dict.fromkeys(r["op"] for r in results))  # the tool's order
    ran = [threads(r) for r in results]
    decode_threads = 1 if 1 in ran else ran[0]
    kinds = ["bandwidth"] if on_device else ["bandwidth", "scaling", "decode"]
    out = []
    for kind in kinds:
        for op in ops:
            for dtype in DTYPES:
                if not on_device and kind != "decode" and dtype == "f16":
                    continue
                if kind == "bandwidth":
                    one = find(op, dtype, TOKENS, 0 if on_device else 1)
                    if not one or one["bw_share"] is None:
                        continue
                    value = figure(one["bw_share"])
                    limit = DEVICE_BW_SHARE if on_device else BW_SHARE
                    met = value >= limit
                elif kind == "scaling":
                    one, two = find(op, dtype, TOKENS, 1), find(op, dtype, TOKENS, 2)
                    if not one or not two or not two["us"]:
                        continue
                    value = figure(one["us"]) / figure(two["us"])
                    limit = SCALING
                    met = value >= limit
                else:
                    one = find(op, dtype, 1, decode_threads)
                    if not one:
                        continue
                    value = figure(one["us"])
                    limit = DECODE_US
                    met = value <= limit
                name = "bandwidth_device" if on_device else kind
                out.append({"kind": name, "target": KEYS[name], "op": op, "dtype": dtype,
                            "impl_id": one["impl_id"], "value": value, "limit": limit,
                            "met": met})
    return out


def print_kernels(doc, targets):
    on_device = doc.get("device") != "cpu"
    print(f"targets ({'device' if on_device else 'CPU'} kernels; the implementation the policy selects "
          f"by default):")
    if not targets:
        if on_device:
            print("  not covered by this run: they need --hidden 4096 and tokens 4096")
        else:
            print("  not covered by this run: they need --hidden 4096 and tokens 4096 "
                  "(bandwidth),\n  --threads 1,2 (scaling) or tokens 1 (decode)")
        return
    for kind in TITLES:
        rows = [t for t in targets if t["kind"] == kind]
        if not rows:
            continue
        print(f"  {TITLES[kind]}")
        for t in rows:
            if kind.startswith("bandwidth"):
                value = f"{100 * t['value']:.1f}%"
            elif kind == "scaling":
                value = f"{t['value']:.2f}x"
            else:
                value = f"{t['value']:.3f} us"
            print(f"    {t['op']:<18} {t['dtype']:<5} {t['impl_id']:<15} {value:>10}  "
                  f"{'met' if t['met'] else 'MISSED'}")
    print(f"  {sum(t['met'] for t in targets)} of {len(targets)} met")


def collect_overhead(doc):
    """bench --overhead's targets, in the order its "targets" array had (schema 1)."""
    results = doc.get("results") or []
    kernels = list(dict.fromkeys(r["kernel"] for r in results))  # the tool's order
    scaling = doc.get("scaling_2t") or {}
    out = []

    def entry(target, kernel, variant, threads, value, limit, met):
        op, impl_id = OVERHEAD_KERNELS.get(kernel, (doc.get("op"), None))
        return {"target": target, "op": op, "dtype": doc.get("dtype"), "impl_id": impl_id,
                "kernel": kernel, "variant": variant, "threads": threads, "value": value,
                "limit": limit, "met": met}

    for kernel in kernels:
        for variant, target, limit in (("handle", "handle_overhead_ns", HANDLE_NS),
                                       ("name", "name_overhead_ns", NAME_NS),
                                       ("prepared", "prepared_overhead_ns", PREPARED_NS),
                                       ("run", "run_overhead_ns", PREPARED_NS)):
            for r in results:
                if r["kernel"] == kernel and r["variant"] == variant:
                    value = figure(r["overhead_ns"])
                    met = value is not None and value <= limit
                    e = entry(target, kernel, variant, r["threads"], value, limit, met)
                    e["ns_per_call"], e["calls"] = r["ns_per_call"], r["calls"]
                    out.append(e)
        for variant, value in (scaling.get(kernel) or {}).items():
            value = figure(value)
            met = value is not None and value >= OVERHEAD_SCALING
            out.append(entry("scaling_2t", kernel, variant, 2, value, OVERHEAD_SCALING, met))
    return out


def print_overhead(doc, targets):
    """The verdicts bench --overhead printed itself before its targets left it."""
    shape = (doc.get("shape") or "").replace("x", ", ")
    print(f"targets (dispatch overhead: {doc.get('op')} [{shape}] {doc.get('dtype')}):")
    rows = [t for t in targets if t["target"] != "scaling_2t"]
    if rows:
        print(f"  {'kernel':<6} {'variant':<8} {'threads':>7} {'calls':>8} {'ns/call':>10} "
              f"{'overhead':>10}  target")
        order = {k: i for i, k in enumerate(dict.fromkeys(t["kernel"] for t in rows))}
        for t in sorted(rows, key=lambda t: (order[t["kernel"]], t["threads"])):
            ns = "-" if t["ns_per_call"] is None else f"{t['ns_per_call']:.1f}"
            over = "-" if t["value"] is None else f"{t['value']:.1f}"
            print(f"  {t['kernel']:<6} {t['variant']:<8} {t['threads']:>7} {t['calls']:>8} "
                  f"{ns:>10} {over:>10}  {'<= %g ns' % t['limit']:<9} "
                  f"{'ok' if t['met'] else 'MISS'}")
    print(f"  two threads vs one, aggregate throughput (target >= {OVERHEAD_SCALING:.1f}x):")
    for kernel in dict.fromkeys(t["kernel"] for t in targets if t["target"] == "scaling_2t"):
        line = f"    {kernel:<6}"
        for t in targets:
            if t["target"] == "scaling_2t" and t["kernel"] == kernel:
                value = "-" if t["value"] is None else f"{t['value']:.2f}x"
                line += f"  {t['variant']} {value}{'' if t['met'] else ' (MISS)'}"
        print(line)
    if (doc.get("machine") or {}).get("threads", 2) < 2:
        print("  note: fewer than 2 online cpus, two-thread figures are not meaningful")
    print(f"  {sum(t['met'] for t in targets)} of {len(targets)} met")


def collect_registration(doc):
    """bench --registration's target: the row of 4000 ops, when it had one implementation each."""
    if doc.get("impls") != REG_IMPLS:
        return []
    for r in doc.get("results") or []:
        if r["ops"] == REG_OPS:
            ms, mib = figure(r["register_ms"]), figure(r["heap_mib"])
            common = {"ops": REG_OPS, "impls": REG_IMPLS}
            return [dict(target="register_ms", **common, value=ms, limit=REG_MS,
                         met=ms is not None and ms < REG_MS),
                    dict(target="register_heap_mib", **common, value=mib, limit=REG_MIB,
                         met=mib is not None and mib < REG_MIB)]
    return []


def print_registration(doc, targets):
    """The line bench --registration printed itself before its target left it."""
    if not targets:
        print(f"target (registration): not covered by this run: it needs {REG_OPS} in --ops and "
              f"--impls {REG_IMPLS} (the defaults)")
        return
    ms, mib = targets[0]["value"], targets[1]["value"]
    print(f"target (registration): {REG_OPS} ops with 1 implementation each registered in "
          f"< {REG_MS:.0f} ms and < {REG_MIB:.0f} MiB: "
          f"{'-' if ms is None else f'{ms:.2f}'} ms, {'n/a' if mib is None else f'{mib:.3f}'} MiB  "
          f"{'met' if all(t['met'] for t in targets) else 'MISSED'}")


# "benchmark" -> (collect, print, the keys of an entry of --json)
DOCUMENTS = {
    "kernels": (collect_kernels, print_kernels,
                ("target", "op", "dtype", "impl_id", "value", "limit", "met")),
    "dispatch_overhead": (collect_overhead, print_overhead,
                          ("target", "op", "dtype", "impl_id", "kernel", "variant", "threads",
                           "value", "limit", "met")),
    "registration": (collect_registration, print_registration,
                     ("target", "ops", "impls", "value", "limit", "met")),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="the output of fldispatch bench --json, "
                                            "bench --overhead --json or bench --registration "
                                            "--json (default: stdin)")
    ap.add_argument("--json", action="store_true",
                    help="print the targets as a JSON array of {target, op, dtype, impl_id, "
                         "value, limit, met} (bench --overhead: with kernel, variant and threads; "
                         "bench --registration: {target, ops, impls, value, limit, met})")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()
    try:
        if args.file:
            with open(args.file, encoding="utf-8") as f:
                doc = json.load(f)
        else:
            doc = json.load(sys.stdin)
    except (OSError, ValueError) as e:
        print(f"targets: {args.file or 'stdin'}: {e}", file=sys.stderr)
        return 2
    kind = doc.get("benchmark") if isinstance(doc, dict) else None
    if kind not in DOCUMENTS:
        print("targets: not the output of 'fldispatch bench --json' (\"benchmark\": "
              + ", ".join(f'"{k}"' for k in DOCUMENTS) + ")", file=sys.stderr)
        return 2
    collect, print_text, keys = DOCUMENTS[kind]
    targets = collect(doc)
    if args.json:
        print(json.dumps([{k: t[k] for k in keys} for t in targets], indent=2))
    else:
        print_text(doc, targets)
    return 1 if args.strict and not all(t["met"] for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
