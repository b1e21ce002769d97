# SPDX-License-Identifier: Apache-2.0
"""Each layer fldispatch serves in vLLM, timed against vLLM's own CPU path,
at decode (1 and 8 tokens) and prefill (512 tokens), with torch's pool at one
and at two threads, and the CPU plugin's settings inside a host that runs
torch's OpenMP pool:

    vllm        vLLM's own layers (VLLM_PLUGINS="")
    fld-1       fldispatch as fldispatch.vllm runs it in vLLM's processes:
                inline on the calling thread (VLLM_FL_CPU_THREADS=1) with
                PyTorch's activation forms (VLLM_FL_CPU_ACTIVATIONS=torch)
    fld-ref     inline, with the library's own activation forms
                (VLLM_FL_CPU_ACTIVATIONS=reference)
    fld-torch   fldispatch's pool at torch.get_num_threads() threads
                (only where that is more than 1: else it is fld-1)
    fld-unset   fldispatch's pool at the library's own default (the caller's
                NUMA node's physical cores), as without the plugin's setting

Run with vLLM installed (the environment of make check-vllm:
python/tests/engine/venv.sh):

    VENV/bin/python bench/vllm_layers.py [--rounds 3] [--threads 1,2] [--hidden 4096]
        [--dtype bfloat16] [--settings vllm,fld-1,...] [--json]
    PYTHONPATH=build/python VENV/bin/python bench/vllm_layers.py --breakdown
        [--base DIR] [--rounds 3] [--tokens 1,8] [--hidden 2048,4096] [--json]

vLLM's configuration is its eager mode (custom_ops "all"), where the plugin
serves the layers by default: the activations and rotary as its CustomOp
layers, the norms (vLLM's RMSNorm, which calls vLLM IR's rms_norm ops) as an
IR provider, with each IR op's priority the platform's default for that
configuration (fldispatch first where the plugin is loaded).

Every (setting, threads) runs in two child processes of this one run, "a"
and "b" (the plugin reads its variables when it registers), alternating
round by round. Between two timed calls the child runs a matrix product on
torch's pool, as a model's forward does between its layers, so the OpenMP
threads are awake (spinning) when the layer runs; only the layer call is
timed. Prints the median over rounds and both children of each child's
median per call, in us, and the minimum; beside each row the A/A control:
the largest |b/a - 1| over the settings of the row's thread count, b/a the
ratio of the two identical children's medians. A ratio between two
settings within 1 +- that spread is noise.

--breakdown times, instead, what one call of each layer costs stage by
stage at decode shapes (--tokens 1,8; --hidden and --dtype take lists here,
default 2048,4096 and float32,bfloat16), on torch's pool at --threads (one
value, default 1), to show what the plugin's Python adds to its torch op:

    layer       the vLLM layer's call, as a model makes it
    ir          the vLLM IR op the norm layers call (vllm.ir.ops.*)
    dispatch    vLLM IR's choice of provider, supports_args included
    supports    our supports_args, through vLLM's IrOpImpl
    impl        our IR implementation (allocation and torch op)
    forward_fl  our CustomOp layer's forward (activations, rotary)
    forward     fldispatch.vllm's forward function under it
    op          torch.ops.fldispatch.<op>(...) alone, output preallocated
    op.default  the same through the op's resolved overload (.default)
    alloc       the output's allocation alone
    loop        the timing loop's own cost per call (an empty lambda)

Each stage runs `--calls` calls in a row (the same inputs; in-place calls
keep their values finite: a norm's output is normalised, a rotation keeps
lengths), per-call time = elapsed / calls, median over `--batches` such
runs. The vLLM IR torch wrap is what vLLM's eager configuration installs
(off: vLLM's worker calls vllm.ir.set_default_torch_wrap with it). The
settings are "vllm" (layer and ir only) and "fld"; `--base DIR` adds
"base", fldispatch imported from DIR (put first on PYTHONPATH) in the same
run, alternated: the Python of another tree against this one. Two
children per setting (A/A), rounds alternating their order.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

SETTINGS = ("vllm", "fld-1", "fld-ref", "fld-torch", "fld-unset")
COPIES = ("a", "b")
TOKENS = (1, 8, 512)
# the comparisons printed beside each row: (numerator, denominator), each
# time over time, so > 1 means the denominator is faster
RATIOS = (("vllm", "fld-1"), ("fld-1", "fld-ref"), ("fld-1", "fld-torch"))


def setting_env(setting, threads):
    """The variables a child runs under (None: the setting is another one at
    this thread count)."""
    if setting == "vllm":
        return {"VLLM_PLUGINS": ""}
    if setting == "fld-1":
        return {"VLLM_FL_CPU_THREADS": "1"}
    if setting == "fld-ref":
        return {"VLLM_FL_CPU_THREADS": "1", "VLLM_FL_CPU_ACTIVATIONS": "reference"}
    if setting == "fld-torch":
        return None if threads == 1 else {"VLLM_FL_CPU_THREADS": str(threads)}
    return {}


def child(setting, threads, hidden, dtype_name, reps):
    import contextlib

    import torch

    torch.set_num_threads(threads)
    from vllm import ir
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.config.compilation import CompilationMode
    from vllm.model_executor.layers import activation, layernorm
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.platforms import current_platform

    cpu_detail = None
    if setting != "vllm":
        import fldispatch
        import fldispatch.vllm as fv
        if setting == "fld-unset":  # the library's own default, not the plugin's
            fv.HOST_DEFAULTS = {k: v for k, v in fv.HOST_DEFAULTS.items()
                                if k != "VLLM_FL_CPU_THREADS"}
        fv.register()
        cpu_detail = next(p.get("detail", "") for p in fldispatch.plugins() if p["name"] == "cpu")
    dtype = getattr(torch, dtype_name)
    inter = hidden * 11 // 4 // 64 * 64
    heads, kv_heads, head = hidden // 128, max(1, hidden // 512), 128
    results = {}
    eager = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    priority = current_platform.get_default_ir_op_priority(eager)
    with set_current_vllm_config(eager), torch.inference_mode(), contextlib.ExitStack() as stack:
        # the IR torch wrap as vLLM's workers install it for this configuration
        wrap = bool(eager.compilation_config.ir_enable_torch_wrap)
        stack.enter_context(ir.enable_torch_wrap(wrap))
        providers = {}
        for name in ("rms_norm", "fused_add_rms_norm"):
            op = getattr(ir.ops, name)
            order = [p for p in getattr(priority, name, None) or [] if p in op.impls]
            stack.enter_context(op.set_priority(order + ["native"]))
            providers[name] = op.get_priority()
        norm = layernorm.RMSNorm(hidden, dtype=dtype)
        act = activation.SiluAndMul()
        gact = activation.GeluAndMul("tanh")
        rope = get_rope(head, 4096, is_neox_style=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 10000},
                        dtype=dtype)
        a = torch.randn(256, 256)
        b = torch.randn(256, 256)
        for t in TOKENS:
            x = torch.randn(t, hidden, dtype=dtype)
            res = torch.randn(t, hidden, dtype=dtype)
            g = torch.randn(t, 2 * inter, dtype=dtype)
            pos = torch.randint(0, 4096, (t,))
            q = torch.randn(t, heads * head, dtype=dtype)
            k = torch.randn(t, kv_heads * head, dtype=dtype)
            cases = {"rms_norm+residual": lambda: norm(x, res),
                     "silu_and_mul": lambda: act(g),
                     "gelu_tanh_and_mul": lambda: gact(g),
                     "rotary_embedding": lambda: rope(pos, q, k)}
            for name, fn in cases.items():
                times = []
                for i in range(reps + 3):
                    torch.mm(a, b)  # wakes torch's pool, as the layer's neighbours do
                    t0 = time.perf_counter_ns()
                    fn()
                    t1 = time.perf_counter_ns()
                    if i >= 3:
                        times.append(t1 - t0)
                results[f"{name} T={t}"] = statistics.median(times) / 1000
        print(json.dumps({"type": type(act).__module__, "norm_first": providers["rms_norm"][0],
                          "results": results, "cpu": cpu_detail,
                          "fl_threads": os.environ.get("VLLM_FL_CPU_THREADS")}))


def per_call_ns(fn, calls, batches):
    """Median over batches of (elapsed of `calls` calls in a row) / calls, ns."""
    for _ in range(calls):
        fn()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - t0) / calls)
    return statistics.median(samples)


def breakdown_cases(t, hidden, dtype, fld):
    """({case: {stage: fn}}, the module of the activation layer's class) for
    one shape: vLLM's eager layers built here (with the plugin registered
    where fld), each stage a no-argument call."""
    import torch
    from vllm import ir
    from vllm.model_executor.layers import activation, layernorm
    from vllm.model_executor.layers.rotary_embedding import get_rope

    inter = hidden * 11 // 4 // 64 * 64
    heads, kv_heads, head = hidden // 128, max(1, hidden // 512), 128
    eps = 1e-6
    x = torch.randn(t, hidden, dtype=dtype)
    res = torch.randn(t, hidden, dtype=dtype)
    xg = torch.randn(t, hidden, dtype=dtype)
    resg = torch.randn(t, hidden, dtype=dtype)
    g = torch.randn(t, 2 * inter, dtype=dtype)
    pos = torch.randint(0, 4096, (t,))
    q = torch.randn(t, heads * head, dtype=dtype)
    k = torch.randn(t, kv_heads * head, dtype=dtype)
    norm = layernorm.RMSNorm(hidden, dtype=dtype)
    gnorm = layernorm.GemmaRMSNorm(hidden)
    silu = activation.SiluAndMul()
    gelu = activation.GeluAndMul("none")
    rope = get_rope(head, 4096, is_neox_style=True,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000}, dtype=dtype)
    w = norm.weight.data
    gw = gnorm.weight.float() + 1.0
    rms, fused = ir.ops.rms_norm, ir.ops.fused_add_rms_norm
    cases = {
        "rms_norm": {"layer": lambda: norm(x), "ir": lambda: rms(x, w, eps, None)},
        "rms_norm+residual": {"layer": lambda: norm(x, res),
                              "ir": lambda: fused.maybe_inplace(x, res, w, eps, None)},
        "gemma_rms_norm": {"layer": lambda: gnorm(xg), "ir": lambda: rms(xg, gw, eps)},
        "gemma_rms_norm+residual": {"layer": lambda: gnorm(xg, resg),
                                    "ir": lambda: fused(xg, resg, gw, eps)},
        "silu_and_mul": {"layer": lambda: silu(g)},
        "gelu_and_mul": {"layer": lambda: gelu(g)},
        "rotary_embedding": {"layer": lambda: rope(pos, q, k)},
    }
    for stages in cases.values():
        stages["loop"] = lambda: None
    if not fld:
        return cases, type(silu).__module__
    import fldispatch.vllm as fv

    ops = torch.ops.fldispatch
    out = torch.empty_like(x)
    h = torch.empty(t, inter, dtype=dtype)
    cache = rope._match_cos_sin_cache_dtype(q)

    def ir_stages(case, op, args, norm_args):
        impl = op.impls["fldispatch"]
        cases[case].update({
            "dispatch": lambda: op.dispatch(*args),
            "supports": lambda: impl.supports_args(*args),
            "impl": lambda: impl.impl_fn(*args),
            "op": lambda: ops.rms_norm(*norm_args),
            "op.default": lambda: ops.rms_norm.default(*norm_args),
            "alloc": lambda: torch.empty_like(x, memory_format=torch.contiguous_format),
        })

    ir_stages("rms_norm", rms, (x, w, eps, None), (out, x, w, None, eps))
    ir_stages("rms_norm+residual", fused, (x, res, w, eps, None), (x, x, w, res, eps))
    ir_stages("gemma_rms_norm", rms, (xg, gw, eps), (out, xg, gw, None, eps))
    ir_stages("gemma_rms_norm+residual", fused, (xg, resg, gw, eps), (xg, xg, gw, resg, eps))
    for case, layer, op_name in (("silu_and_mul", silu, "silu_and_mul"),
                                 ("gelu_and_mul", gelu, "gelu_and_mul")):
        op_default = getattr(ops, op_name).default
        act_stages: dict[str, Callable[..., Any]] = {
            "forward_fl": lambda layer=layer: layer.forward_fl(g),
            "forward": lambda op_name=op_name: fv.act_and_mul_forward(op_name, g),
            "op": lambda op_name=op_name: getattr(ops, op_name)(h, g),
            "op.default": lambda op=op_default: op(h, g),
            "alloc": lambda: g.new_empty([t, inter]),
        }
        cases[case].update(act_stages)
    cases["rotary_embedding"].update({
        "forward_fl": lambda: rope.forward_fl(pos, q, k),
        "forward": lambda: fv.rotary_forward(pos, q, k, head, cache, True),
        "op": lambda: ops.rotary_embedding(pos, q, k, head, cache, True),
        "op.default": lambda: ops.rotary_embedding.default(pos, q, k, head, cache, True),
    })
    return cases, type(silu).__module__


def breakdown_child(setting, threads, hiddens, dtype_names, tokens, calls, batches):
    import contextlib

    import torch

    torch.set_num_threads(threads)
    from vllm import ir
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.config.compilation import CompilationMode
    from vllm.platforms import current_platform

    fld = setting != "vllm"
    if fld:
        import fldispatch.vllm as fv

        fv.register()
    eager = VllmConfig(compilation_config=CompilationConfig(mode=CompilationMode.NONE))
    priority = current_platform.get_default_ir_op_priority(eager)
    results, types, first = {}, set(), set()
    with set_current_vllm_config(eager), torch.inference_mode(), contextlib.ExitStack() as stack:
        wrap = bool(eager.compilation_config.ir_enable_torch_wrap)
        stack.enter_context(ir.enable_torch_wrap(wrap))
        for name in ("rms_norm", "fused_add_rms_norm"):
            op = getattr(ir.ops, name)
            order = [p for p in getattr(priority, name, None) or [] if p in op.impls]
            stack.enter_context(op.set_priority(order + ["native"]))
            first.add(op.get_priority()[0])
        for dtype_name in dtype_names:
            for hidden in hiddens:
                for t in tokens:
                    dtype = getattr(torch, dtype_name)
                    cases, layer_module = breakdown_cases(t, hidden, dtype, fld)
                    types.add(layer_module)
                    for case, stages in cases.items():
                        for stage, fn in stages.items():
                            key = f"{case} {dtype_name} h{hidden} T={t} {stage}"
                            results[key] = per_call_ns(fn, calls, batches) / 1000
    fldispatch_file = None
    if fld:
        import fldispatch

        fldispatch_file = fldispatch.__file__
    print(json.dumps({"type": ",".join(sorted(types)), "norm_first": sorted(first),
                      "fldispatch": fldispatch_file, "results": results}))


def breakdown(args):
    """The parent of --breakdown: children per setting, alternated, two copies each."""
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    settings = ["vllm", "fld"] + (["base"] if args.base else [])
    hiddens = args.hidden or "2048,4096"
    dtypes = args.dtype or "float32,bfloat16"

    def env_of(setting):
        if setting == "vllm":
            return dict(env0, VLLM_PLUGINS="")
        if setting == "base":
            path = os.path.abspath(args.base)
            rest = env0.get("PYTHONPATH")
            return dict(env0, PYTHONPATH=path + (os.pathsep + rest if rest else ""))
        return dict(env0)

    runs: dict[tuple[str, str], list[dict[str, float]]] = {(s, c): [] for s in settings for c in COPIES}
    load = [open("/proc/loadavg").read().split()[:3]]
    files = {}
    for r in range(args.rounds):
        order = [(s, c) for s in settings for c in COPIES]
        if r % 2:
            order.reverse()
        for setting, copy in order:
            out = subprocess.run([sys.executable, __file__, "--breakdown", "--child", setting,
                                  "--threads", args.threads, "--hidden", hiddens, "--dtype", dtypes,
                                  "--tokens", args.tokens, "--calls", str(args.calls),
                                  "--batches", str(args.batches)],
                                 env=env_of(setting), capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"vllm_layers.py --breakdown: the {setting} child failed:\n{out.stderr}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            fld = setting != "vllm"
            assert (got["type"] == "fldispatch.vllm") == fld, (setting, got["type"])
            assert (got["norm_first"] == ["fldispatch"]) == fld, (setting, got["norm_first"])
            files[setting] = got["fldispatch"]
            runs[(setting, copy)].append(got["results"])
            load.append(open("/proc/loadavg").read().split()[:3])
    if args.base and files["base"] == files["fld"]:
        sys.exit(f"vllm_layers.py --breakdown: --base {args.base} imports the same fldispatch "
                 f"({files['fld']}) as this run")
    table = {}
    for s in settings:
        both = runs[(s, "a")] + runs[(s, "b")]
        table[s] = {key: {"median": statistics.median(r[key] for r in both),
                          "b/a": (statistics.median(r[key] for r in runs[(s, "b")])
                                  / statistics.median(r[key] for r in runs[(s, "a")]))}
                    for key in both[0]}
    if args.json:
        print(json.dumps({"loadavg": load, "fldispatch": files, "table": table}, indent=1))
        return
    print(f"us per call (median of {args.rounds} rounds x 2 children; each child's median of "
          f"{args.batches} x {args.calls} calls), torch threads {args.threads}")
    print(f"load average (1, 5, 15 min) at start {' '.join(load[0])}, at end {' '.join(load[-1])}")
    print("fldispatch: " + ", ".join(f"{s} {f}" for s, f in files.items() if f))
    print("A/A = the largest |b/a - 1| of the row's settings (two identical children each)")
    cols = settings + (["fld/base"] if args.base else [])
    print(f"\n{'case':48}" + "".join(f"{c:>10}" for c in cols) + "     A/A")
    for key in table["fld"]:
        cells = "".join(f"{table[s][key]['median']:10.2f}" if key in table[s] else f"{'':10}"
                        for s in settings)
        if args.base:
            cells += f"{table['fld'][key]['median'] / table['base'][key]['median']:9.2f}x"
        spread = max(abs(table[s][key]["b/a"] - 1) for s in settings if key in table[s])
        print(f"{key:48}{cells}  {100 * spread:5.1f}%")


def check_child(setting, got):
    """The child ran what its setting says: fldispatch's layers and IR
    provider, and the CPU plugin's activation forms; or vLLM's own."""
    fld = setting != "vllm"
    assert (got["type"] == "fldispatch.vllm") == fld, (setting, got["type"])
    assert (got["norm_first"] == "fldispatch") == fld, (setting, got["norm_first"])
    if fld:
        torch_forms = "activations as torch's" in got["cpu"]
        assert torch_forms == (setting != "fld-ref"), (setting, got["cpu"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--hidden", help="default 4096 (--breakdown: a list, default 2048,4096)")
    ap.add_argument("--dtype",
                    help="default bfloat16 (--breakdown: a list, default float32,bfloat16)")
    ap.add_argument("--breakdown", action="store_true",
                    help="the cost of one call stage by stage at decode shapes (see above)")
    ap.add_argument("--tokens", default="1,8", help="--breakdown: token counts")
    ap.add_argument("--calls", type=int, default=50, help="--breakdown: calls per timed run")
    ap.add_argument("--batches", type=int, default=15, help="--breakdown: timed runs per stage")
    ap.add_argument("--base", help="--breakdown: also time the fldispatch package in this "
                    "directory (first on PYTHONPATH), as setting 'base'")
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help="comma-separated, among " + ",".join(SETTINGS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.breakdown:
        if args.child:
            return breakdown_child(args.child, int(args.threads),
                                   [int(h) for h in args.hidden.split(",")], args.dtype.split(","),
                                   [int(t) for t in args.tokens.split(",")], args.calls,
                                   args.batches)
        if args.threads == "1,2":
            args.threads = "1"
        return breakdown(args)
    args.hidden = int(args.hidden or 4096)
    args.dtype = args.dtype or "bfloat16"
    if args.child:
        return child(args.child, int(args.threads), args.hidden, args.dtype, args.reps)
    wanted = args.settings.split(",")
    bad = [s for s in wanted if s not in SETTINGS]
    if bad or "vllm" not in wanted or "fld-1" not in wanted:
        ap.error(f"--settings: {args.settings!r}: among {','.join(SETTINGS)}, with vllm and fld-1")
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    plan = [(s, int(t)) for t in args.threads.split(",") for s in SETTINGS
            if s in wanted and setting_env(s, int(t)) is not None]
    runs: dict[tuple[str, int, str], list[dict[str, float]]] = {(s, t, c): [] for s, t in plan for c in COPIES}
    load = [os.getloadavg()]
    for r in range(args.rounds):
        order = [(s, t, c) for s, t in plan for c in COPIES]
        if r % 2:
            order.reverse()
        for setting, threads, copy in order:
            out = subprocess.run([sys.executable, __file__, "--child", setting, "--threads",
                                  str(threads), "--hidden", str(args.hidden), "--dtype", args.dtype,
                                  "--reps", str(args.reps)],
                                 env=dict(env0, **setting_env(setting, threads)),
                                 capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            check_child(setting, got)
            runs[(setting, threads, copy)].append(got["results"])
    load.append(os.getloadavg())
    table = {}
    for s, t in plan:
        both = runs[(s, t, "a")] + runs[(s, t, "b")]
        table[f"{s} t{t}"] = {
            case: {"median": statistics.median(r[case] for r in both),
                   "min": min(r[case] for r in both),
                   "b/a": (statistics.median(r[case] for r in runs[(s, t, "b")])
                           / statistics.median(r[case] for r in runs[(s, t, "a")]))}
            for case in both[0]}
    if args.json:
        print(json.dumps({"loadavg": load, "table": table}, indent=1))
        return
    print(f"us per call (median of {args.rounds} rounds x 2 children / min), {args.dtype}, "
          f"hidden {args.hidden}; load average at start {load[0][0]:.2f}, at end {load[1][0]:.2f}")
    print("A/A = the largest |b/a - 1| of the row's settings (two identical children each)")
    for t in args.threads.split(","):
        cols = [f"{s} t{t}" for s in SETTINGS if f"{s} t{t}" in table]
        ratios = [(a, b) for a, b in RATIOS if f"{a} t{t}" in table and f"{b} t{t}" in table]
        print(f"\ntorch threads {t}")
        print(f"{'case':24}" + "".join(f"{c:>19}" for c in cols)
              + "".join(f"{a + '/' + b:>19}" for a, b in ratios) + "     A/A")
        for case in table[cols[0]]:
            cells = "".join(f"{table[c][case]['median']:11.1f} /{table[c][case]['min']:6.1f}"
                            for c in cols)
            rs = "".join(f"{table[f'{a} t{t}'][case]['median'] / table[f'{b} t{t}'][case]['median']:18.2f}x"
                         for a, b in ratios)
            spread = max(abs(table[c][case]["b/a"] - 1) for c in cols)
            print(f"{case:24}{cells}{rs}  {100 * spread:5.1f}%")


if __name__ == "__main__":
    main()
