#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What a torch.ops.fldispatch call adds beyond PyTorch's dispatcher and our C call.

    make python python-torch-native
    PYTHONPATH=build/python python3 bench/torch_floor.py [--rounds 15] [--calls 2000]
        [--tokens 1,16] [--hidden 4096] [--dtype f32,bf16] [--evict KIB,...] [--vllm] [--json]

For each op at decode shapes, in one process, per call (median over rounds):
    torch_op   torch.ops.fldispatch.<op>(...) with the native kernels
    floor      torch.ops.fldispatch._floor_<family>(...) on the same tensors:
               a do-nothing C++ kernel with the op's schema, registered in the
               same library the same way (fldispatch.torch.dispatch_floor()),
               so it costs what the dispatcher alone adds to our op
    c_call     the op's typed entry point on the same tensors in a C loop
               (fldispatch._C._bench_c_op): what the library costs
    again      torch_op once more, timed in the same round: the A/A control
    evict_K    (--evict K,...) c_call with K KiB of another buffer written
               before each call, that writing's own time taken off
               (fldispatch._C._bench_c_op_evicting): the kernel as a caller
               that works between calls, as the interpreter does, sees it
    vllm       vLLM's own torch op on the same shapes (with --vllm, the CPU
               library vLLM itself would load: bench/vllm_peer.py)
added = torch_op - floor - c_call is what our binding adds (DLPack views,
the grad-mode check, the version-counter bumps); the target is added <= 300 ns
on every row. spread = |torch_op - again| / torch_op, the noise of the run:
an added figure within torch_op x spread of the target is undecided.
When torch_op - floor is close to an evict_K column and far from c_call,
what the row adds is the kernel's data leaving the caches between calls,
not work of the binding.
Rounds rotate the order of the variants so that drift hits all alike.
Single-threaded library calls (VLLM_FL_CPU_THREADS=1 unless set): at decode
the cpu plugin runs them inline anyway.
"""
import argparse
import json
import os
import statistics
import sys
from typing import Any, Callable

os.environ.setdefault("VLLM_FL_CPU_THREADS", "1")

import torch  # noqa: E402

import fldispatch  # noqa: E402
import fldispatch.torch as fltorch  # noqa: E402
from python_overhead import cpu_model, per_call_ns  # noqa: E402  (bench/, this script's folder)

TARGET_NS = 300
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def cases(tokens, hidden, dtypes):
    """(label, op, args, vllm_call or None): decode shapes of the ops a vLLM layer calls."""
    out: list[tuple[str, str, tuple[Any, ...], Callable[..., Any]]] = []
    heads, head_size = max(1, hidden // 128), 128
    for dt_name in dtypes:
        dt = DTYPES[dt_name]
        for t in tokens:
            x = torch.randn(t, hidden, dtype=dt)
            w = torch.randn(hidden, dtype=dt)
            o = torch.empty_like(x)
            res = torch.randn(t, hidden, dtype=dt)
            out.append((f"rms_norm {dt_name} {t}x{hidden}", "rms_norm", (o, x, w, None, 1e-6),
                        lambda o=o, x=x, w=w: torch.ops._C.rms_norm(o, x, w, 1e-6)))
            # In place, as vLLM calls it: x becomes the output, the residual x + residual.
            xr = torch.randn(t, hidden, dtype=dt)
            out.append((f"rms_norm+residual {dt_name} {t}x{hidden}", "rms_norm",
                        (xr, xr, w, res, 1e-6),
                        lambda x=xr, r=res, w=w: torch.ops._C.fused_add_rms_norm(x, r, w, 1e-6)))
            gate = torch.randn(t, 2 * hidden, dtype=dt)
            act = torch.empty(t, hidden, dtype=dt)
            out.append((f"silu_and_mul {dt_name} {t}x{hidden}", "silu_and_mul", (act, gate),
                        lambda a=act, g=gate: torch.ops._C.silu_and_mul(a, g)))
            pos = torch.arange(t, dtype=torch.int64)
            q = torch.randn(t, heads * head_size, dtype=dt)
            k = torch.randn(t, heads * head_size, dtype=dt)
            # The timed loops rotate the same q and k in place ~10^5 times: a cache of random
            # values (or any angle but zero, once rounded to a 16-bit dtype) drifts them to
            # infinities, NaNs or denormals, whose microcode assists then dominate the time. Angle
            # zero (cos 1, sin 0) keeps them as they are, at the same arithmetic per element.
            cache = torch.cat((torch.ones(4096, head_size // 2), torch.zeros(4096, head_size // 2)),
                              dim=-1).to(dt)
            out.append((f"rotary neox {dt_name} {t}x{heads}x{head_size}", "rotary_embedding",
                        (pos, q, k, head_size, cache, True),
                        lambda p=pos, q=q, k=k, c=cache:
                        torch.ops._C.rotary_embedding(p, q, k, head_size, c, True)))
    return out


def measure(op, args, vllm_call, rounds, calls, evict_kib=()):
    torch_op = getattr(torch.ops.fldispatch, op).default
    floor = fltorch.dispatch_floor(op)
    variants: dict[str, Callable[..., Any]] = {
        "torch_op": lambda: per_call_ns(lambda: torch_op(*args), calls),
        "floor": lambda: per_call_ns(lambda: floor(*args), calls),
        "c_call": lambda: fldispatch._C._bench_c_op(op, calls, *args),
        "again": lambda: per_call_ns(lambda: torch_op(*args), calls),
    }
    for k in evict_kib:
        variants[f"evict_{k}"] = (lambda k=k: fldispatch._C._bench_c_op_evicting(
            op, calls, k * 1024, *args))
    if vllm_call is not None:
        variants["vllm"] = lambda: per_call_ns(vllm_call, calls)
    for fn in variants.values():  # warm: first calls resolve and cache
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(variants[name]())
    return {name: statistics.median(v) for name, v in samples.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--tokens", default="1,16")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--dtype", default="f32,bf16")
    p.add_argument("--evict", default="",
                   help="comma list of KiB: c_call again with that much other memory written "
                        "before each call")
    p.add_argument("--vllm", action="store_true",
                   help="time vLLM's own op too (vllm installed: bench/vllm_peer.py picks its library)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.rounds < 3 or a.calls < 1 or a.hidden < 128 or a.hidden % 128:
        p.error("--rounds >= 3, --calls >= 1, --hidden a positive multiple of 128")
    dtypes = [d.strip() for d in a.dtype.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad:
        p.error(f"--dtype: unknown {', '.join(bad)}; valid: {', '.join(DTYPES)}")
    try:
        tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        p.error(f"--tokens: not a comma list of integers: {a.tokens!r}")
    try:
        evict_kib = [int(k) for k in a.evict.split(",") if k.strip()]
    except ValueError:
        p.error(f"--evict: not a comma list of integers: {a.evict!r}")
    if any(k <= 0 or k > 1024 * 1024 for k in evict_kib):
        p.error("--evict: each KiB count in 1 .. 1048576")
    if not fltorch.NATIVE:
        sys.exit(f"torch_floor: the native kernels are not in use ({fltorch.NATIVE_REASON}); "
                 "make python-torch-native builds them")
    peer = None
    if a.vllm:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import vllm_peer
        lib, how = vllm_peer.load()
        peer = f"vllm.{lib} ({how})"
    torch.set_num_threads(1)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    machine = {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_at_start": float(load),
               "torch": torch.__version__, "vllm_library": peer}
    rows = []
    with torch.no_grad():
        for label, op, args, vllm_call in cases(tokens, a.hidden, dtypes):
            m = measure(op, args, vllm_call if peer else None, a.rounds, a.calls, evict_kib)
            added = m["torch_op"] - m["floor"] - m["c_call"]
            spread = abs(m["torch_op"] - m["again"]) / m["torch_op"]
            noise = m["torch_op"] * spread
            verdict = ("ok" if added + noise <= TARGET_NS else
                       "over" if added - noise > TARGET_NS else "undecided")
            rows.append({"case": label, "op": op, **{k: round(v, 1) for k, v in m.items()},
                         "added_ns": round(added, 1), "spread": round(spread, 4), "verdict": verdict})
    if a.json:
        print(json.dumps({"benchmark": "torch_floor", "machine": machine, "target_added_ns": TARGET_NS,
                          "rows": rows}, indent=1))
        return
    print(f"# {machine['cpu']}, {machine['cpus']} CPUs, load {load} at start, torch {torch.__version__}"
          + (f", vLLM peer {machine['vllm_library']}" if peer else ""))
    print(f"# ns per call, median of {a.rounds} rounds x {a.calls} calls; target: added <= {TARGET_NS} ns")
    cols = (["torch_op", "floor", "c_call"] + [f"evict_{k}" for k in evict_kib]
            + ["added_ns", "spread"] + (["vllm"] if peer else []))
    print(f"{'case':36s}" + "".join(f"{c:>10s}" for c in cols) + "  verdict")
    for r in rows:
        cells = "".join(f"{r[c]:>10.1%}" if c == "spread" else f"{r[c]:>10.0f}" for c in cols)
        print(f"{r['case']:36s}{cells}  {r['verdict']}")


if __name__ == "__main__":
    main()
