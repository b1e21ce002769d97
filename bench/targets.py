#!/usr/bin/env python3
"""Check a kernel benchmark run against this project's speed targets.

The shipped tool reports measurements only; the targets set for the kernels
(docs/BENCHMARKS.md) are this project's, so they are checked here, from the
document of `fldispatch bench --json` (docs/schemas/bench.schema.json,
"benchmark": "kernels"):

    build/bin/fldispatch bench --threads 1,2 --json > run.json
    python3 bench/targets.py run.json          # or: ... --json | python3 bench/targets.py

Each target is judged on the implementation the caller's policy selects by
default ("selected_by_default"), on the plain shape (not the fused-residual
line), and only when the run covers it:

  CPU (issue 4)
    bandwidth  4096 x 4096, one thread, f32 and bf16: bw_share >= 80% of
               the one-thread STREAM triad
    threads    the same shapes, two threads >= 1.7x faster than one (needs
               --threads with 1 and 2)
    decode     one token, every dtype: <= 0.5 us per call with dispatch (at
               one thread if that ran, else at the first thread count)
  other devices (issue 5)
    bandwidth  4096 x 4096 (rotary 4096 x 32 x 128), every dtype: bw_share
               >= 85% of the device-to-device copy

Every target needs --hidden 4096 (the default). Prints one line per target
with its figure and "met" or "MISSED". Exit status 0, whether met or missed
(speed targets belong in benchmarks, not in exit codes), unless --strict is
given: then 1 when a target is missed. 2 on a document that is not a kernel
benchmark.
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


def hidden_of(shape):
    """H of a result's shape: "TxH", or "TxNx128" (rotary, N heads of 128)."""
    dims = [int(d) for d in shape.split("x")[1:]]
    return math.prod(dims)


def figure(value):
    return None if value is None else float(value)


def collect(doc):
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


def print_text(doc, targets):
    on_device = doc.get("device") != "cpu"
    print(f"targets (issue {5 if on_device else 4}; the implementation the policy selects "
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="the output of fldispatch bench --json (default: stdin)")
    ap.add_argument("--json", action="store_true",
                    help="print the targets as a JSON array of {target, op, dtype, impl_id, "
                         "value, limit, met}")
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
    if not isinstance(doc, dict) or doc.get("benchmark") != "kernels":
        print("targets: not the output of 'fldispatch bench --json' (\"benchmark\": \"kernels\")",
              file=sys.stderr)
        return 2
    targets = collect(doc)
    if args.json:
        print(json.dumps([{k: v for k, v in t.items() if k != "kind"} for t in targets], indent=2))
    else:
        print_text(doc, targets)
    return 1 if args.strict and not all(t["met"] for t in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
