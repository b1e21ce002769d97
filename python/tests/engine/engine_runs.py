# SPDX-License-Identifier: Apache-2.0
"""The engine runs of the engine test (test_engine.py), one after the other
in this process:

    python engine_runs.py PLAN.json OUTDIR

PLAN.json is a list of runs, each {"name", "model", "dtype", "mode" (eager
or compiled), "force" (the name of an earlier run, or null), and optionally
"tokenizer" (a directory; default the model's), "multiprocess" (default
false), "tensor_parallel" (default 1), "ir_op_priority" (vLLM's, as LLM()
takes it; default none), "env" (variables set for this run only)}.
Whether fldispatch is loaded at all is set by the caller (VLLM_PLUGINS) for
the whole process, as for a deployment: vLLM loads its plugins once per
process. For each run a vllm.LLM is made, models.PROMPTS
are decoded greedily, and with "force" the token sequences of that earlier
run (prompts plus what it generated) are fed back as prompts to record the
log-probability the model gives each of their tokens (teacher forcing: both
runs judged on the same tokens). Writes OUTDIR/NAME.json: {"tokens",
"prompt_len", "forced", "startup_s", "generate_s", "wall_s", "workers",
"driver_pid"}, and
the run's output (its engine processes' included) to OUTDIR/NAME.log.

Runs are in-process by default (VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine
core and its one worker run in this process), which spares each run the
start of two Python processes that import vLLM; vLLM's distributed state is
torn down between runs. A "multiprocess" run starts vLLM's engine core (and,
with tensor_parallel, its workers) as spawned processes, which read the
plugin's variables from the environment as a deployment's would.
fldispatch's counters come back through each worker's report (worker_report,
through collective_rpc; callables need VLLM_ALLOW_INSECURE_SERIALIZATION=1);
they are reset once the engine has started, so each run's counters are its
generate calls' (and a VLLM_FL_STATS_FILE written at a worker's exit holds
them).
"""

import gc
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MAX_TOKENS = 12


def worker_report(worker=None, reset=False):
    """Runs in each vLLM worker (collective_rpc): its pid, its rank in
    torch.distributed, its VLLM_FL_* variables, whether fldispatch.vllm replaced layers there and
    fldispatch's counters (None where fldispatch was never loaded); with
    reset, resets them after."""
    if "fldispatch.vllm" not in sys.modules:
        return {"pid": os.getpid(), "fldispatch": False}
    import fldispatch

    stats = fldispatch.stats()
    if reset:
        fldispatch.stats_reset()
    cpu = [p for p in fldispatch.plugins() if p["name"] == "cpu" and p["status"] == "loaded"]
    from vllm.ir.op import IrOp

    ir = {name: op.get_priority() for name, op in IrOp.registry.items()}
    decided = sys.modules["fldispatch.vllm_state"].DECIDED  # what the plugin's register() decided
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else None
    return {"pid": os.getpid(), "rank": rank, "fldispatch": True,
            "registered": dict(decided.oot_layers),
            "ir_priority": ir, "ir_providers": sorted(decided.ir_providers),
            "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_FL_")},
            "cpu_plugin": cpu[0]["detail"] if cpu else None, "stats": stats}


def run(spec, outdir):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    tp = spec.get("tensor_parallel", 1)
    t0 = time.perf_counter()
    llm = LLM(model=spec["model"], tokenizer=spec.get("tokenizer"), dtype=spec["dtype"],
              enforce_eager=spec["mode"] == "eager",
              max_model_len=256, max_num_seqs=8, seed=0, tensor_parallel_size=tp,
              distributed_executor_backend="mp" if tp > 1 else None,
              **({"ir_op_priority": spec["ir_op_priority"]} if spec.get("ir_op_priority") else {}))
    t1 = time.perf_counter()
    # what happened before this run's generate (profile and warm-up passes,
    # an earlier run in this process) is not this run's
    llm.collective_rpc(worker_report, kwargs={"reset": True})
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    outs = llm.generate(models.PROMPTS, greedy, use_tqdm=False)
    t2 = time.perf_counter()
    result = {"tokens": [list(o.prompt_token_ids) + list(o.outputs[0].token_ids) for o in outs],
              "prompt_len": [len(o.prompt_token_ids) for o in outs],
              "startup_s": t1 - t0, "generate_s": t2 - t1, "driver_pid": os.getpid()}
    if spec.get("force"):
        if spec["force"] == spec["name"]:
            ref: dict[str, Any] = result
        else:
            with open(os.path.join(outdir, spec["force"] + ".json")) as f:
                ref = json.load(f)
        forced = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0)
        outs = llm.generate([TokensPrompt(prompt_token_ids=seq) for seq in ref["tokens"]],
                            forced, use_tqdm=False)
        # prompt_logprobs[i]: token id -> Logprob at position i (None at 0)
        result["forced"] = [[o.prompt_logprobs[i][tok].logprob
                             for i, tok in enumerate(seq) if i > 0]
                            for seq, o in zip(ref["tokens"], outs)]
    result["workers"] = llm.collective_rpc(worker_report)
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()
    return result


def cleanup():
    """vLLM's distributed state and its cached environment, for the next
    in-process engine; and the rotary layers vLLM's get_rope() keeps for the
    process, which chose their path (fldispatch's or vLLM's own) under the
    configuration of the engine that made them: the next engine makes its
    own, as a process of its own would."""
    from vllm.distributed import cleanup_dist_env_and_memory
    from vllm.model_executor.layers import rotary_embedding

    cleanup_dist_env_and_memory()
    rotary_embedding._ROPE_DICT.clear()


def main():
    plan_file, outdir = sys.argv[1], sys.argv[2]
    with open(plan_file) as f:
        plan = json.load(f)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    saved = os.dup(1), os.dup(2)
    for spec in plan:
        env = dict(spec.get("env") or {})
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if spec.get("multiprocess") else "0"
        before = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        # this run's output, and its engine processes' (they inherit 1 and 2)
        log = os.open(os.path.join(outdir, spec["name"] + ".log"),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log, 1)
        os.dup2(log, 2)
        t = time.perf_counter()
        try:
            result = run(spec, outdir)
            cleanup()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(log)
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        result["wall_s"] = time.perf_counter() - t
        with open(os.path.join(outdir, spec["name"] + ".json"), "w") as f:
            json.dump(result, f)
        print(f"engine run {spec['name']}: {result['wall_s']:.1f} s "
              f"(start {result['startup_s']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
