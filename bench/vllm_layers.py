"""Each layer fldispatch replaces in vLLM, timed against vLLM's own CPU path,
at decode (1 and 8 tokens) and prefill (512 tokens), and the CPU plugin's
threading inside a host that runs torch's OpenMP pool: its own pool
(VLLM_FL_CPU_THREADS=2) against inline on the calling thread (=1, what
fldispatch.vllm sets in vLLM's processes). Run with vLLM installed (the
environment of make check-vllm: python/tests/engine/venv.sh):

    VENV/bin/python bench/vllm_layers.py [--rounds 5] [--hidden 4096] [--json]

Every setting runs in a child process of this one run (the plugin reads its
variables when it registers), alternating round by round. Between two timed
calls the child runs a matrix product on torch's pool, as a model's forward
does between its layers, so the OpenMP threads are awake (spinning) when the
layer runs; only the layer call is timed. Prints the median per call in us.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SETTINGS = {
    "vllm": {"VLLM_PLUGINS": ""},
    "fld-inline": {"VLLM_FL_CPU_THREADS": "1"},
    "fld-pool": {"VLLM_FL_CPU_THREADS": "2"},
}
TOKENS = (1, 8, 512)


def child(setting, hidden, dtype_name, reps):
    import torch

    torch.set_num_threads(2)
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers import activation, layernorm
    from vllm.model_executor.layers.rotary_embedding import get_rope

    if setting != "vllm":
        import fldispatch.vllm as fv
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
        print(json.dumps({"type": type(norm).__module__, "results": results}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.hidden, args.dtype, args.reps)
    env0 = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    runs = {s: [] for s in SETTINGS}
    for _ in range(args.rounds):
        for setting, extra in SETTINGS.items():
            out = subprocess.run([sys.executable, __file__, "--child", setting, "--hidden",
                                  str(args.hidden), "--dtype", args.dtype, "--reps",
                                  str(args.reps)], env=dict(env0, **extra),
                                 capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert (got["type"] == "fldispatch.vllm") == (setting != "vllm"), got["type"]
            runs[setting].append(got["results"])
    table = {s: {case: statistics.median(r[case] for r in rs) for case in rs[0]}
             for s, rs in runs.items()}
    if args.json:
        print(json.dumps(table, indent=1))
        return
    print(f"median us per call, {args.dtype}, hidden {args.hidden}, {args.rounds} rounds")
    print(f"{'case':28} {'vllm':>9} {'fld-inline':>11} {'fld-pool':>9}  inline/vllm  pool/inline")
    for case in table["vllm"]:
        v, i, p = (table[s][case] for s in ("vllm", "fld-inline", "fld-pool"))
        print(f"{case:28} {v:9.1f} {i:11.1f} {p:9.1f}  {v / i:10.2f}x  {i / p:10.2f}x")


if __name__ == "__main__":
    main()
