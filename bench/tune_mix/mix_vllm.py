# SPDX-License-Identifier: Apache-2.0
"""A decode+prefill mix of rotary_embedding (float32, 32 query heads and 8
key heads of 128, neox) through fldispatch from Python, timed under each
manifest named: one process per manifest and round, the manifests alternated
round by round (each library in its own process: a peer's idle OpenMP
workers would otherwise bias the next one). The mix: 96 decode calls of 1 to
16 tokens (cycling), then one prefill of 512 tokens and one of 2048.

    python bench/tune_mix/mix_vllm.py ROUNDS MANIFEST...

Run it with the interpreter that has torch and vLLM (the vLLM implementations
come from vllm_c_ops.py through VLLM_FL_PLUGIN_MODULES=vllm_c_ops).
"""

import os
import statistics
import subprocess
import sys

CHILD = """
import time, torch, fldispatch
torch.manual_seed(0)
heads, kheads, d, max_pos = 32, 8, 128, 8192
cache = torch.randn(max_pos, d)
def tensors(t):
    return (torch.randint(0, max_pos, (t,), dtype=torch.int64), torch.randn(t, heads * d),
            torch.randn(t, kheads * d))
decode = [tensors(1 + i % 16) for i in range(96)]
prefill = [tensors(512), tensors(2048)]
def mix():
    for pos, q, k in decode + prefill:
        fldispatch.rotary_embedding(pos, q, k, d, cache, True)
mix()
best = []
for _ in range(5):
    t0 = time.perf_counter(); mix(); best.append(time.perf_counter() - t0)
print(min(best) * 1e3)
"""


def main():
    rounds, manifests = int(sys.argv[1]), sys.argv[2:]
    times: dict[str, list[float]] = {m: [] for m in manifests}
    for _ in range(rounds):
        for m in manifests:
            env = dict(os.environ, VLLM_FL_MANIFEST=m)
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                 text=True, check=True)
            times[m].append(float(out.stdout.split()[-1]))
    print(f"{'manifest':44} {'min ms':>9} {'median ms':>10}")
    for m in manifests:
        print(f"{m:44} {min(times[m]):9.3f} {statistics.median(times[m]):10.3f}")


if __name__ == "__main__":
    main()
