# SPDX-License-Identifier: Apache-2.0
"""Each layer fldispatch replaces in vLLM, timed against vLLM's own CPU path,
at decode (1 and 8 tokens) and prefill (512 tokens), with torch's pool at one
and at two threads, and the CPU plugin's threading inside a host that runs
torch's OpenMP pool:

    vllm        vLLM's own layers (VLLM_PLUGINS="")
    fld-1       fldispatch, inline on the calling thread (VLLM_FL_CPU_THREADS=1,
                what fldispatch.vllm sets in vLLM's processes)
    fld-torch   fldispatch's pool at torch.get_num_threads() threads
                (only where that is more than 1: else it is fld-1)
    fld-unset   fldispatch's pool at the library's own default (the caller's
                NUMA node's physical cores), as without the plugin's setting

Run with vLLM installed (the environment of make check-vllm:
python/tests/engine/venv.sh):

    VENV/bin/python bench/vllm_layers.py [--rounds 3] [--threads 1,2] [--hidden 4096] [--json]

Every (setting, threads) runs in a child process of this one run (the plugin
reads its variables when it registers), alternating round by round. Between
two timed calls the child runs a matrix product on torch's pool, as a model's
forward does between its layers, so the OpenMP threads are awake (spinning)
when the layer runs; only the layer call is timed. Prints the median over
rounds of each child's median per call, in us, and the minimum.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETTINGS = ("vllm", "fld-1", "fld-torch", "fld-unset")
TOKENS = (1, 8, 512)


def setting_env(setting, threads):
    """The variables a child runs under (None: the setting is another one at
    this thread count)."""
    if setting == "vllm":
        return {"VLLM_PLUGINS": ""}
    if setting == "fld-1":
        return {"VLLM_FL_CPU_THREADS": "1"}
    if setting == "fld-torch":
        return None if threads == 1 else {"VLLM_FL_CPU_THREADS": str(threads)}
    return {}


def child(setting, threads, hidden, dtype_name, reps):
    import torch

    torch.set_num_threads(threads)
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import activation, layernorm
    from vllm.model_executor.layers.rotary_embedding import get_rope

    if setting != "vllm":
        import fldispatch.vllm as fv
        if setting == "fld-unset":  # the library's own default, not the plugin's
            fv.HOST_DEFAULTS = {k: v for k, v in fv.HOST_DEFAULTS.items()
                                if k != "VLLM_FL_CPU_THREADS"}
        fv.register()
    dtype = getattr(torch, dtype_name)
    inter = hidden * 11 // 4 // 64 * 64
    heads, kv_heads, head = hidden // 128, max(1, hidden // 512), 128
    results = {}
    with set_current_vllm_config(VllmConfig()), torch.inference_mode():
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
        print(json.dumps({"type": type(norm).__module__, "results": results,
                          "fl_threads": os.environ.get("VLLM_FL_CPU_THREADS")}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child, int(args.threads), args.hidden, args.dtype, args.reps)
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    plan = [(s, int(t)) for t in args.threads.split(",") for s in SETTINGS
            if setting_env(s, int(t)) is not None]
    runs = {key: [] for key in plan}
    for _ in range(args.rounds):
        for setting, threads in plan:
            out = subprocess.run([sys.executable, __file__, "--child", setting, "--threads",
                                  str(threads), "--hidden", str(args.hidden), "--dtype", args.dtype,
                                  "--reps", str(args.reps)],
                                 env=dict(env0, **setting_env(setting, threads)),
                                 capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert (got["type"] == "fldispatch.vllm") == (setting != "vllm"), got["type"]
            runs[(setting, threads)].append(got["results"])
    table = {f"{s} t{t}": {case: (statistics.median(r[case] for r in rs), min(r[case] for r in rs))
                           for case in rs[0]}
             for (s, t), rs in runs.items()}
    if args.json:
        print(json.dumps(table, indent=1))
        return
    print(f"us per call (median of {args.rounds} rounds / min), {args.dtype}, hidden {args.hidden}")
    for t in args.threads.split(","):
        cols = [f"{s} t{t}" for s in SETTINGS if f"{s} t{t}" in table]
        print(f"\ntorch threads {t}")
        print(f"{'case':28}" + "".join(f"{c:>20}" for c in cols) + "   vllm/fld-1")
        for case in table[cols[0]]:
            cells = "".join(f"{table[c][case][0]:12.1f} /{table[c][case][1]:6.1f}" for c in cols)
            ratio = table[f"vllm t{t}"][case][0] / table[f"fld-1 t{t}"][case][0]
            print(f"{case:28}{cells}   {ratio:9.2f}x")


if __name__ == "__main__":
    main()
