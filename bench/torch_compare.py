#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Time PyTorch eager and torch.compile on fldispatch's ops, next to `fldispatch bench`.

For each op and dtype at the issue's shapes (4096 x 4096; rotary 4096 tokens x 32
heads x 128), this times the natural PyTorch expression of the op (eager) and
torch.compile of the same function on a CUDA device, with CUDA events, and reports
the median time and GB/s counted as `fldispatch bench` counts them (every tensor read
once, every output written once). With --fldispatch-json FILE (the output of
`fldispatch bench --device cuda --json`) or --fldispatch PATH (the tool, run here),
it prints a side-by-side table with fldispatch's figures and the ratios.

Needs PyTorch (2.11 was the target) and a CUDA device; torch is imported only when
timing, so --help and `python3 -m py_compile` work anywhere. This script was written
on a machine without a GPU or PyTorch: it has not been run there.
"""

import argparse
import json
import statistics
import subprocess
import sys

OPS = [
    "silu_and_mul",
    "mul_and_silu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rms_norm",
    "gemma_rms_norm",
    "rotary_embedding",
]
DTYPES = ["f32", "f16", "bf16"]
EPS = 1e-6
HEAD = 128
ROTARY_BASE = 10000.0


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Byte counts: activations x [T, 2H] read + out [T, H] written; norms x and out "
        "[T, H] + weight [H] (+ residual read and written); rotary query and key [T, heads*128] "
        "read and written + cache rows [T, 128] + int64 positions. Exit status: 0 ok, "
        "2 usage, 3 torch or CUDA missing.",
    )
    p.add_argument("ops", nargs="*", metavar="OP", help="ops (default: all seven)")
    p.add_argument("--dtype", default="f32,f16,bf16", help="comma list of f32, f16, bf16")
    p.add_argument("--tokens", type=int, default=4096, help="T (default 4096)")
    p.add_argument("--hidden", type=int, default=4096, help="H (default 4096; rotary heads = H/128)")
    p.add_argument("--reps", type=int, default=50, help="timed repetitions (median; default 50)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls first (default 10)")
    p.add_argument("--no-compile", action="store_true", help="eager only (no torch.compile)")
    p.add_argument("--compile-mode", default=None,
                   help="torch.compile mode, e.g. max-autotune-no-cudagraphs (default: default)")
    p.add_argument("--residual", action="store_true",
                   help="norms with the fused residual (residual = x + residual, then norm)")
    p.add_argument("--fldispatch-json", metavar="FILE",
                   help="output of `fldispatch bench --device cuda --json` to compare with")
    p.add_argument("--fldispatch", metavar="PATH",
                   help="run this fldispatch binary (bench --device cuda --json) and compare")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    args = p.parse_args(argv)
    for op in args.ops:
        if op not in OPS:
            p.error("unknown op %r (ops: %s)" % (op, ", ".join(OPS)))
    args.ops = args.ops or OPS
    args.dtypes = [d for d in args.dtype.split(",") if d]
    for d in args.dtypes:
        if d not in DTYPES:
            p.error("unknown dtype %r (f32, f16, bf16)" % d)
    if args.hidden % HEAD:
        p.error("--hidden must be a multiple of 128 (rotary heads of 128)")
    if args.reps < 1 or args.tokens < 1:
        p.error("--reps and --tokens must be at least 1")
    return args


def load_torch():
    try:
        import torch  # noqa: F401  (imported here so that --help needs no torch)
        import torch.nn.functional  # noqa: F401
    except ImportError as e:
        print("torch_compare: PyTorch is not installed (%s); pip install torch" % e,
              file=sys.stderr)
        sys.exit(3)
    if not torch.cuda.is_available():
        print("torch_compare: no CUDA device visible to PyTorch (torch %s, CUDA build %s)"
              % (torch.__version__, torch.version.cuda), file=sys.stderr)
        sys.exit(3)
    return torch


# ---- the ops, as one would write them in PyTorch -------------------------------------------

def make_ops(torch):
    F = torch.nn.functional

    def silu_and_mul(x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    def mul_and_silu(x):
        d = x.shape[-1] // 2
        return x[..., :d] * F.silu(x[..., d:])

    def gelu_and_mul(x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d]) * x[..., d:]

    def gelu_tanh_and_mul(x):
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]

    def rms_norm(x, w):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return (y * w.float()).to(x.dtype)

    def gemma_rms_norm(x, w):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return (y * (1.0 + w.float())).to(x.dtype)

    def rms_norm_residual(x, res, w):
        res = x + res
        return rms_norm(res, w), res

    def gemma_rms_norm_residual(x, res, w):
        res = x + res
        return gemma_rms_norm(res, w), res

    def rotary_embedding(positions, query, key, cache):
        # neox style, rot_dim = head size; returns new tensors (eager PyTorch has no
        # in-place rotation), which torch.compile may turn into in-place writes.
        t = positions.shape[0]
        cos, sin = cache[positions].float().chunk(2, dim=-1)  # [T, 64] each
        cos = cos.unsqueeze(1)
        sin = sin.unsqueeze(1)

        def rot(v):
            v = v.view(t, -1, HEAD).float()
            a, b = v[..., : HEAD // 2], v[..., HEAD // 2:]
            return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)

        return rot(query).to(query.dtype).view(t, -1), rot(key).to(key.dtype).view(t, -1)

    return {
        "silu_and_mul": silu_and_mul,
        "mul_and_silu": mul_and_silu,
        "gelu_and_mul": gelu_and_mul,
        "gelu_tanh_and_mul": gelu_tanh_and_mul,
        "rms_norm": rms_norm,
        "gemma_rms_norm": gemma_rms_norm,
        "rms_norm+res": rms_norm_residual,
        "gemma_rms_norm+res": gemma_rms_norm_residual,
        "rotary_embedding": rotary_embedding,
    }


def torch_dtype(torch, name):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def esize(name):
    return 4 if name == "f32" else 2


def make_case(torch, op, dtype, t, h, residual):
    """The inputs of one call and its compulsory bytes (as fldispatch bench counts)."""
    dev = "cuda"
    dt = torch_dtype(torch, dtype)
    e = esize(dtype)
    g = torch.Generator(device=dev).manual_seed(1234)
    if op.endswith("_and_mul") or op == "mul_and_silu":
        x = torch.empty(t, 2 * h, device=dev, dtype=dt).uniform_(-4, 4, generator=g)
        return (x,), e * (t * 2 * h + t * h), "%dx%d" % (t, h)
    if op in ("rms_norm", "gemma_rms_norm"):
        x = torch.empty(t, h, device=dev, dtype=dt).uniform_(-2, 2, generator=g)
        w = torch.empty(h, device=dev, dtype=dt).uniform_(0.5, 1.5, generator=g)
        if residual:
            res = torch.empty(t, h, device=dev, dtype=dt).uniform_(-0.01, 0.01, generator=g)
            return (x, res, w), e * (2 * t * h + h + 2 * t * h), "%dx%d+res" % (t, h)
        return (x, w), e * (2 * t * h + h), "%dx%d" % (t, h)
    heads = h // HEAD
    width = heads * HEAD
    positions = torch.arange(t, device=dev, dtype=torch.int64)
    q = torch.empty(t, width, device=dev, dtype=dt).uniform_(-1, 1, generator=g)
    k = torch.empty(t, width, device=dev, dtype=dt).uniform_(-1, 1, generator=g)
    inv_freq = ROTARY_BASE ** (-torch.arange(0, HEAD, 2, device=dev, dtype=torch.float64) / HEAD)
    angles = torch.arange(t, device=dev, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(dt)
    nbytes = e * (2 * t * 2 * width) + e * t * HEAD + 8 * t
    return (positions, q, k, cache), nbytes, "%dx%dx%d" % (t, heads, HEAD)


def time_fn(torch, fn, inputs, warmup, reps):
    """Median milliseconds of one call, each call between two CUDA events."""
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(args):
    torch = load_torch()
    ops = make_ops(torch)
    rows = []
    for op in args.ops:
        for dtype in args.dtypes:
            residual = args.residual and op in ("rms_norm", "gemma_rms_norm")
            key = op + ("+res" if residual else "")
            inputs, nbytes, shape = make_case(torch, op, dtype, args.tokens, args.hidden, residual)
            fn = ops[key]
            row = {"op": op, "dtype": dtype, "shape": shape, "bytes": nbytes}
            ms = time_fn(torch, fn, inputs, args.warmup, args.reps)
            row["eager_us"] = ms * 1e3
            row["eager_gbps"] = nbytes / (ms * 1e-3) / 1e9
            if not args.no_compile:
                compiled = torch.compile(fn, mode=args.compile_mode, dynamic=False)
                ms = time_fn(torch, compiled, inputs, max(args.warmup, 3), args.reps)
                row["compile_us"] = ms * 1e3
                row["compile_gbps"] = nbytes / (ms * 1e-3) / 1e9
            rows.append(row)
            del inputs
            torch.cuda.empty_cache()
    device = torch.cuda.get_device_name(0)
    return rows, {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda}


# ---- fldispatch's figures ------------------------------------------------------------------

def fldispatch_results(args):
    doc = None
    if args.fldispatch_json:
        with open(args.fldispatch_json) as f:
            doc = json.load(f)
    elif args.fldispatch:
        cmd = [args.fldispatch, "bench", "--device", "cuda", "--json", "--tokens",
               str(args.tokens), "--hidden", str(args.hidden), "--dtype", ",".join(args.dtypes)]
        cmd += args.ops
        print("torch_compare: running %s" % " ".join(cmd), file=sys.stderr)
        out = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if out.returncode != 0:
            print("torch_compare: fldispatch bench exited %d:\n%s" % (out.returncode, out.stderr),
                  file=sys.stderr)
            sys.exit(1)
        doc = json.loads(out.stdout)
    if doc is None:
        return None, None
    # the implementation the library selects by default, at the shape compared
    best = {}
    for r in doc.get("results", []):
        if not r.get("selected_by_default") or r.get("us") is None:
            continue
        best[(r["op"], r["dtype"], r["shape"] + ("+res" if r.get("residual") else ""))] = r
    return best, doc


def main(argv):
    args = parse_args(argv)
    rows, machine = measure(args)
    best, doc = fldispatch_results(args)
    for row in rows:
        f = best.get((row["op"], row["dtype"], row["shape"])) if best else None
        if f:
            row["fld_impl"] = f["impl_id"]
            row["fld_us"] = f["us"]
            row["fld_gbps"] = f["gbps"]
            row["fld_bw_share"] = f.get("bw_share")
            row["eager_over_fld"] = row["eager_us"] / f["us"]
            if "compile_us" in row:
                row["compile_over_fld"] = row["compile_us"] / f["us"]
    if args.json:
        out = {"machine": machine, "results": rows}
        if doc:
            out["fldispatch_baseline"] = doc.get("baseline")
            out["fldispatch_baseline_gbps"] = doc.get("baseline_gbps")
        print(json.dumps(out, indent=2))
        return 0
    print("device: %(device)s; torch %(torch)s, CUDA %(cuda)s" % machine)
    print("median of %d calls, CUDA events; GB/s = compulsory bytes / time" % args.reps)
    if doc and doc.get("baseline_gbps"):
        print("fldispatch d2d copy baseline: %.1f GB/s" % doc["baseline_gbps"])
    head = "%-18s %-5s %-12s %10s %9s %10s %9s" % ("op", "dtype", "shape", "eager_us", "GB/s",
                                                  "compile_us", "GB/s")
    if best is not None:
        head += " %-16s %9s %9s %8s %8s" % ("fld_impl", "fld_us", "GB/s", "eager/x", "comp/x")
    print(head)
    for row in rows:
        line = "%-18s %-5s %-12s %10.2f %9.1f" % (row["op"], row["dtype"], row["shape"],
                                                 row["eager_us"], row["eager_gbps"])
        if "compile_us" in row:
            line += " %10.2f %9.1f" % (row["compile_us"], row["compile_gbps"])
        else:
            line += " %10s %9s" % ("-", "-")
        if best is not None:
            if "fld_us" in row:
                line += " %-16s %9.2f %9.1f %7.2fx" % (row["fld_impl"], row["fld_us"],
                                                       row["fld_gbps"], row["eager_over_fld"])
                line += " %7.2fx" % row["compile_over_fld"] if "compile_over_fld" in row else \
                    " %8s" % "-"
            else:
                line += " %-16s" % "(not in fldispatch's run)"
        print(line)
    if best is not None:
        print("eager/x, comp/x: PyTorch's time over fldispatch's (above 1: fldispatch is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
