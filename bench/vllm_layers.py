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
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

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
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--settings", default=",".join(SETTINGS),
                    help="comma-separated, among " + ",".join(SETTINGS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child, int(args.threads), args.hidden, args.dtype, args.reps)
    wanted = args.settings.split(",")
    bad = [s for s in wanted if s not in SETTINGS]
    if bad or "vllm" not in wanted or "fld-1" not in wanted:
        ap.error(f"--settings: {args.settings!r}: among {','.join(SETTINGS)}, with vllm and fld-1")
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    plan = [(s, int(t)) for t in args.threads.split(",") for s in SETTINGS
            if s in wanted and setting_env(s, int(t)) is not None]
    runs = {(s, t, c): [] for s, t in plan for c in COPIES}
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
