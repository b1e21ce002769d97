# SPDX-License-Identifier: Apache-2.0
"""vLLM 0.26 CUDA engine with fldispatch's IR provider off and on: decode
tokens/s, tokens, the providers vLLM's lowering chose and the fusion passes'
matches, in one time-boxed run on a lent GPU:

    PYTHONPATH=/tmp/vllm-site:... python3 bench/vllm_cuda.py --out DIR
        [--budget-s 300] [--configs 1,2,...] [--pairs 3] [--layers 2] [--dry-run]

Models (written here with transformers, random weights, seed fixed, no
tokenizer): "llama" (LlamaForCausalLM) and "qwen3" (Qwen3ForCausalLM, q/k
norms), both hidden 1024, intermediate 2816, 2 layers (--layers: more, so
that a decode step is more the GPU's than the host's), 16 query and 8
key-value heads of 64, vocabulary 1024, saved in bfloat16.

Settings (each configuration is one vLLM engine; engines run one after
another, never two at a time):
  off         vLLM alone (VLLM_PLUGINS="": no general plugin loads)
  default     fldispatch's plugin loaded, no ir_op_priority: vLLM's platform
              default (with Inductor: "native"; the plugin steps aside there)
  fldispatch  plugin loaded, ir_op_priority fldispatch first for rms_norm and
              fused_add_rms_norm (vLLM appends its default after it)
  vllm_c      plugin loaded, ir_op_priority vllm_c first for both ops
The plugin is loaded once per process (vLLM's general plugins), so settings
run in child processes: "off-a" and "off-b" (VLLM_PLUGINS="", the A/A pair)
and "on" (the plugin's entry point, VLLM_FL_STATS=1). Each child keeps its
in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) and runs its
configurations one after the other, tearing each engine down (vLLM's own
shutdown, its distributed state, captured graphs, Dynamo's caches) before the
next. A child that dies, hangs past the budget or cannot tear an engine down
is killed and started afresh for its next configuration; an engine that
fails to start in a child that ran one before is tried once more in a fresh
child, before any other retry (vLLM 0.26 on torch 2.11 sometimes fails a
process's second engine with PyTorch's CUDA allocator assertion).

Every engine: VLLM_COMPILE (enforce_eager=False; vLLM's default cudagraph
mode, FULL_AND_PIECEWISE at its default optimisation level), cudagraph
capture sizes = the batch sizes (1 and 32), attention_backend TRITON_ATTN,
skip_tokenizer_init with token-id prompts, bfloat16, max_model_len 256,
gpu_memory_utilization 0.3, seed 0, prefix caching off,
VLLM_USE_FLASHINFER_SAMPLER=0, VLLM_DISABLE_COMPILE_CACHE=1 and a fresh
Inductor cache per child (so Inductor compiles and vLLM's passes run in every
engine: a cached graph would run none and count nothing). Qwen3 engines also
turn on vLLM's q/k-norm + RoPE fusion pass (pass_config
enable_qk_norm_rope_fusion, off by default in vLLM 0.26;
--no-qk-norm-rope-fusion leaves it off); where a Qwen3 engine with it fails to
start, that configuration is tried once more without it, and so are the
later Qwen3 ones.

Per configuration: the engine start (compilation and graph capture
included), an untimed warm-up, one greedy generate at the largest batch with
logprobs (the tokens compared with the reference setting's), then per batch
size --pairs pairs of generates (max_tokens=1, then max_tokens=--tokens; 16
token-id prompts, greedy, ignore_eos): decode tok/s of a pair = B * (N - 1) /
(t(N) - t(1)), reported as the median and the best pair. What vLLM's
compiler did is read from its own objects while it compiles:
PostGradPassManager.__call__ is wrapped, and after each call the wrapper reads
each pattern-matcher pass's matched_count (pass by pass, summed over the
compiled subgraphs) and the IR lowering pass's selected_impls (IR op -> node
-> provider); the passes' DEBUG log ("Selected implementations", "Replaced N
patterns") goes to a file beside the child's log as a second source.
fldispatch's counters (fldispatch.stats(), this process, since the engine is
in-process) are read after the start (reset there) and after the timed runs:
they count host calls, so a kernel replayed inside a CUDA graph is not
counted again; the prefill at batch 32 (512 tokens, above the largest
captured size) runs outside the graphs.

Output: DIR/results.jsonl (one JSON object per configuration, with the
derived comparisons; DIR/results.partial.jsonl is written as each one ends),
DIR/summary.json, DIR/table.txt (also printed), DIR/logs/ (each child's vLLM
output and the passes' DEBUG log per configuration). The models and the
caches go elsewhere (--model-dir, --cache-dir: under the temporary
directory), so DIR stays small. The run stops starting configurations when
the next one's estimated time (the median configuration so far or the last,
the larger) would pass --budget-s, kills one still running --grace-s after
the budget, and says which were skipped. The budget counts from the start,
the children's import of vLLM and the writing of the models included.

--dry-run prints the plan (configurations, children, environments, engine
arguments) without importing vLLM or torch. --simulate runs the whole driver
with children that fake vLLM (for testing the harness where no GPU is).
"""

import argparse
import contextlib
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- the plan

MODEL_SHAPE = {"vocab_size": 1024, "hidden_size": 1024, "intermediate_size": 2816,
               "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8,
               "head_dim": 64, "max_position_embeddings": 512, "rms_norm_eps": 1e-6,
               "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
               "tie_word_embeddings": False}
MODELS = {"llama": ("LlamaConfig", 11), "qwen3": ("Qwen3Config", 12)}


def model_shape(layers):
    """MODEL_SHAPE with layers decoder layers (--layers)."""
    return dict(MODEL_SHAPE, num_hidden_layers=layers)


def model_path(root, name, layers):
    """Where model name of layers layers is written: one folder per depth."""
    return os.path.join(root, name if layers == MODEL_SHAPE["num_hidden_layers"] else f"{name}-{layers}l")
IR_OPS = ("rms_norm", "fused_add_rms_norm")
SETTINGS = ("off", "default", "fldispatch", "vllm_c")
FIRST = {"fldispatch": "fldispatch", "vllm_c": "vllm_c"}
PROMPT_LEN = 16
FIRST_TOKEN = 4  # token ids 0..3 are pad, bos, eos and a spare

# (model, quant, setting, child), in the order they run: the most telling
# first, so that a budget cut leaves the comparisons that matter most
PLAN = (
    ("llama", None, "off", "off-a"),
    ("llama", None, "fldispatch", "on"),
    ("llama", None, "default", "on"),
    ("llama", None, "off", "off-b"),      # the A/A control
    ("qwen3", None, "off", "off-a"),
    ("qwen3", None, "fldispatch", "on"),
    ("llama", "fp8", "default", "on"),
    ("llama", "fp8", "fldispatch", "on"),
    # with a provider other than native first, vLLM 0.26 turns its norm + quant
    # fusion pass on (fuse_norm_quant): vllm_c first is fldispatch first's peer
    ("llama", "fp8", "vllm_c", "on"),
    ("llama", None, "vllm_c", "on"),
    ("qwen3", None, "default", "on"),
    ("qwen3", None, "vllm_c", "on"),
    ("llama", "fp8", "off", "off-a"),
)


def config_name(model, quant, setting, child):
    name = f"{model}-{quant or 'bf16'}-{setting}"
    return name + ("-aa" if child == "off-b" else "")


def all_configs():
    return [{"id": i + 1, "name": config_name(*row), "model": row[0], "quant": row[1],
             "setting": row[2], "child": row[3]} for i, row in enumerate(PLAN)]


def select_configs(text):
    """The configurations a --configs list names (ids or names, in plan
    order); all of them for None."""
    configs = all_configs()
    if not text:
        return configs
    wanted = [s.strip() for s in text.split(",") if s.strip()]
    by_key = {str(c["id"]): c for c in configs} | {c["name"]: c for c in configs}
    bad = [w for w in wanted if w not in by_key]
    if bad:
        raise argparse.ArgumentTypeError(
            f"--configs: unknown {','.join(bad)}; known: "
            + ", ".join(f"{c['id']}={c['name']}" for c in configs))
    keep = {by_key[w]["id"] for w in wanted}
    return [c for c in configs if c["id"] in keep]


def engine_kwargs(cfg, opts, model_path, qk_fusion):
    """vllm.LLM's keyword arguments for one configuration (names as vLLM
    0.26's EngineArgs has them)."""
    batch = sorted(set(opts.batch))
    comp: dict[str, Any] = {"cudagraph_capture_sizes": batch}
    if cfg["model"] == "qwen3" and qk_fusion:
        comp["pass_config"] = {"enable_qk_norm_rope_fusion": True}
    kw = {"model": model_path, "skip_tokenizer_init": True, "dtype": "bfloat16", "seed": 0,
          "max_model_len": 256, "gpu_memory_utilization": opts.gpu_mem, "enforce_eager": False,
          "max_num_seqs": max(batch), "enable_prefix_caching": False,
          "attention_backend": "TRITON_ATTN", "compilation_config": comp}
    if cfg["quant"]:
        kw["quantization"] = cfg["quant"]
    if cfg["setting"] in FIRST:
        kw["ir_op_priority"] = {op: [FIRST[cfg["setting"]]] for op in IR_OPS}
    return kw


def child_env(child, cache, run_id, simulate=False):
    """The environment of one child process (cache: the caches' directory;
    run_id: a child started afresh gets a fresh Inductor cache)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    env.update(VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_USE_FLASHINFER_SAMPLER="0",
               VLLM_DISABLE_COMPILE_CACHE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_CACHE_ROOT=os.path.join(cache, "vllm"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, f"inductor-{child}-{run_id}"),
               TRITON_CACHE_DIR=os.path.join(cache, "triton"),
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1")
    if child.startswith("off"):
        env["VLLM_PLUGINS"] = ""
    else:
        env.pop("VLLM_PLUGINS", None)
        env["VLLM_FL_STATS"] = "1"
    if simulate:
        env["FLD_VLLM_CUDA_SIMULATE"] = "1"
    return env


def env_delta(env):
    """The variables env sets or changes against this process's."""
    return {k: v for k, v in sorted(env.items()) if os.environ.get(k) != v}


def plugin_entry_points():
    """The vllm.general_plugins entry points installed (name = value)."""
    try:
        from importlib.metadata import entry_points

        return [f"{e.name} = {e.value}" for e in entry_points(group="vllm.general_plugins")]
    except Exception as e:  # noqa: BLE001  (a report, never a failure)
        return [f"unknown ({type(e).__name__}: {e})"]


# ---------------------------------------------------------------- the models

def write_models(root, names, layers):
    """Writes each model of names, of layers layers, under root (once: a
    finished one has .complete); returns ({name: path}, {name: why it could
    not be written})."""
    paths, errors = {}, {}
    for name in names:
        path = model_path(root, name, layers)
        try:
            write_model(path, name, layers)
            paths[name] = path
        except Exception as e:  # noqa: BLE001  (its configurations report it)
            errors[name] = error_text(e)
    return paths, errors


def write_model(path, name, layers):
    import torch
    import transformers

    if not os.path.exists(os.path.join(path, ".complete")):
        config_class, seed = MODELS[name]
        config = getattr(transformers, config_class)(**model_shape(layers))
        config.initializer_range = 0.15  # larger than a real init: clear greedy winners
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(config)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "norm" in pname:  # norms start at 1: perturb them so they matter
                    p.add_(torch.randn_like(p) * 0.1)
        model = model.to(torch.bfloat16)
        aside = f"{path}.{os.getpid()}"
        model.save_pretrained(aside, safe_serialization=True)
        with open(os.path.join(aside, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}, f)
        open(os.path.join(aside, ".complete"), "w").close()
        if os.path.exists(path):
            import shutil

            shutil.rmtree(path)
        os.rename(aside, path)


def prompts(batch):
    """batch prompts of PROMPT_LEN token ids, the same for every run."""
    return [[FIRST_TOKEN + (7 * i + 13 * j + 3 * i * j) % (1024 - FIRST_TOKEN)
             for j in range(PROMPT_LEN)] for i in range(batch)]


# ---------------------------------------------------------------- measures

def decode_rate(batch, tokens, t1, tn):
    """Decode tokens/s of one pair (None where noise made it undefined)."""
    extra = tn - t1
    return batch * (tokens - 1) / extra if extra > 0 else None


def summarise_rates(rates):
    good = [r for r in rates if r is not None]
    return {"median": statistics.median(good) if good else None,
            "best": max(good) if good else None, "rates": rates}


def error_text(exc=None, head=8, tail=12):
    """A traceback's first and last lines (the whole one when short)."""
    lines = traceback.format_exc().rstrip().splitlines()
    if exc is not None and (not lines or lines == ["NoneType: None"]):
        lines = [f"{type(exc).__name__}: {exc}"]
    if len(lines) > head + tail:
        lines = lines[:head] + [f"... ({len(lines) - head - tail} lines) ..."] + lines[-tail:]
    return "\n".join(lines)


def compare_tokens(run, ref):
    """Tokens and sampled-token log-probs of one configuration's logprob run
    against the reference's (same prompts, greedy): per sequence identical
    or the first position where they part; the largest |log-prob difference|
    of the sampled tokens up to and including that position (the contexts
    are the same there), and at the parting position the margin by which
    each run preferred its own token to the other's where its top-k shows
    the other's (a near tie: a small margin)."""
    if not run or not ref:
        return None
    a_tok, b_tok = run.get("tokens"), ref.get("tokens")
    if not a_tok or not b_tok or len(a_tok) != len(b_tok):
        return {"comparable": False}
    a_lp, b_lp = run.get("logprobs") or [], ref.get("logprobs") or []
    a_top, b_top = run.get("top") or [], ref.get("top") or []
    identical, max_diff, parted = 0, 0.0, []
    for i, (a, b) in enumerate(zip(a_tok, b_tok, strict=True)):
        n = min(len(a), len(b))
        d = next((j for j in range(n) if a[j] != b[j]), None)
        if d is None and len(a) != len(b):
            d = n  # one ended there: they part where the shorter stops
        if d is None:
            identical += 1
        upto = n if d is None else d + 1
        if i < len(a_lp) and i < len(b_lp):
            for j in range(min(upto, len(a_lp[i]), len(b_lp[i]))):
                x, y = a_lp[i][j], b_lp[i][j]
                if x is not None and y is not None:
                    max_diff = max(max_diff, abs(x - y))
        if d is not None:  # a margin where both have a token there
            both = d < len(a) and d < len(b)
            parted.append({"seq": i, "pos": d,
                           "margin_run": _margin(a_top, a_lp, i, d, b[d]) if both else None,
                           "margin_ref": _margin(b_top, b_lp, i, d, a[d]) if both else None})
    return {"comparable": True, "sequences": len(a_tok), "identical": identical,
            "max_abs_logprob_diff": max_diff, "parted": parted}


def _margin(top, lp, i, d, other):
    """How much sequence i preferred its own token at position d to other
    (None where its top-k does not show other)."""
    try:
        own = lp[i][d]
        alt = top[i][d].get(str(other))
    except (IndexError, KeyError, TypeError, AttributeError):
        return None
    return None if own is None or alt is None else own - alt


def tokens_words(cmp):
    if cmp is None:
        return "no reference"
    if not cmp.get("comparable"):
        return "not comparable"
    n, same = cmp["sequences"], cmp["identical"]
    words = "identical" if same == n else f"{same}/{n} identical"
    if same != n:
        first = min(p["pos"] for p in cmp["parted"])
        margins = [abs(m) for p in cmp["parted"] for m in (p["margin_run"], p["margin_ref"])
                   if m is not None]
        words += f", first parts at token {first}"
        if margins:
            words += f" (margin <= {max(margins):.3f})"
    return words + f"; max |dlogprob| {cmp['max_abs_logprob_diff']:.4f}"


# ---------------------------------------------------------------- the child

_UNSET = object()
CAPTURE: dict[str, Any] = {"installed": None}


def _capture_reset():
    """Empties what the wrapper records (whether it is installed stays)."""
    CAPTURE.update(pm_calls=0, matches={}, pass_runs={}, configured=[], lowering={},
                   lowering_nodes={})


def install_capture():
    """Wraps vLLM's PostGradPassManager.__call__ to read, after each call,
    each pass's matched_count and the IR lowering pass's selected_impls.
    Returns None, or why it could not."""
    _capture_reset()
    CAPTURE["installed"] = False
    try:
        import vllm._custom_ops  # noqa: F401  (the fusion passes name torch.ops._C ops)
        from vllm.compilation.passes import pass_manager as pm
    except Exception as e:  # noqa: BLE001
        return f"vllm.compilation.passes.pass_manager: {type(e).__name__}: {e}"
    cls = getattr(pm, "PostGradPassManager", None)
    if cls is None:
        return "no PostGradPassManager in vllm.compilation.passes.pass_manager"
    CAPTURE["installed"] = True
    if getattr(cls.__call__, "_fld_capture", False):
        return None
    original = cls.__call__

    def call(self, graph):
        passes = list(getattr(self, "passes", None) or [])
        for p in passes:
            if hasattr(p, "matched_count"):
                with contextlib.suppress(Exception):
                    p.matched_count = _UNSET
        try:
            return original(self, graph)
        finally:
            _record_passes(self, passes)

    call._fld_capture = True  # type: ignore[attr-defined]  # a mark on the wrapper: installed once
    call.__doc__ = original.__doc__
    cls.__call__ = call
    return None


def _record_passes(manager, passes):
    try:
        CAPTURE["pm_calls"] += 1
        for p in passes:
            name = type(p).__name__
            if name not in CAPTURE["configured"]:
                CAPTURE["configured"].append(name)
            n = getattr(p, "matched_count", None)
            if n is _UNSET:  # skipped for this compile range
                p.matched_count = 0
                continue
            if isinstance(n, int):
                CAPTURE["matches"][name] = CAPTURE["matches"].get(name, 0) + n
                CAPTURE["pass_runs"][name] = CAPTURE["pass_runs"].get(name, 0) + 1
        lowering = getattr(manager, "ir_lowering", None)
        selected = getattr(lowering, "selected_impls", None) or {}
        for op, by_node in dict(selected).items():
            counts = CAPTURE["lowering"].setdefault(op, {})
            nodes = CAPTURE["lowering_nodes"].setdefault(op, [])
            for node, provider in dict(by_node).items():
                counts[provider] = counts.get(provider, 0) + 1
                if len(nodes) < 64:
                    nodes.append(f"{node}:{provider}")
    except Exception as e:  # noqa: BLE001  (never break vLLM's compile)
        CAPTURE.setdefault("errors", []).append(f"{type(e).__name__}: {e}")


def pass_log_handler(path):
    """A DEBUG file handler on vLLM's passes' loggers (their summaries are
    DEBUG lines); returns a function that removes it."""
    import logging

    logger = logging.getLogger("vllm.compilation.passes")
    handler = logging.FileHandler(path)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)

    def remove():
        logger.removeHandler(handler)
        logger.setLevel(old)
        handler.close()

    return remove


def pass_log_summary(path, limit=40):
    """The lines of a passes' DEBUG log that summarise a pass."""
    keys = ("Selected implementations", "lowered", "Replaced", "Fused", "fusion pass matches",
            "Failed to lower", "not enabled")
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if any(k in ln for k in keys)]
    except OSError:
        return []
    return lines[:limit]


def _get(obj, *names):
    for n in names:
        obj = getattr(obj, n, None)
        if obj is None:
            return None
    return obj


def _plain(x):
    """x as JSON can hold it."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_plain(v) for v in x]
    return str(x)


def engine_facts(llm):
    """What the engine was configured with, read from its VllmConfig and
    vLLM's IR registry ("unknown" where a name is not found)."""
    facts = {}
    vc = _get(llm, "llm_engine", "vllm_config")
    cc = _get(vc, "compilation_config")
    for key, get in (("compilation_mode", lambda: cc.mode),
                     ("cudagraph_mode", lambda: cc.cudagraph_mode),
                     ("cudagraph_capture_sizes", lambda: cc.cudagraph_capture_sizes),
                     ("custom_ops", lambda: cc.custom_ops),
                     ("backend", lambda: cc.backend),
                     ("attention_backend", lambda: vc.attention_config.backend),
                     ("quantization", lambda: vc.model_config.quantization),
                     ("max_num_batched_tokens",
                      lambda: vc.scheduler_config.max_num_batched_tokens)):
        try:
            facts[key] = _plain(get())
        except Exception:  # noqa: BLE001
            facts[key] = "unknown"
    try:
        pc = cc.pass_config
        facts["pass_config"] = {k: _plain(getattr(pc, k)) for k in (
            "fuse_norm_quant", "fuse_act_quant", "fuse_attn_quant", "enable_qk_norm_rope_fusion",
            "fuse_allreduce_rms", "eliminate_noops") if hasattr(pc, k)}
    except Exception:  # noqa: BLE001
        facts["pass_config"] = "unknown"
    try:
        from dataclasses import asdict

        facts["ir_op_priority"] = _plain(asdict(vc.kernel_config.ir_op_priority))
    except Exception:  # noqa: BLE001
        facts["ir_op_priority"] = "unknown"
    try:
        from vllm.ir.op import IrOp

        facts["installed_priority"] = {n: list(op.get_priority())
                                       for n, op in IrOp.registry.items()}
        facts["providers"] = {n: sorted(op.impls) for n, op in IrOp.registry.items()}
    except Exception as e:  # noqa: BLE001
        facts["installed_priority"] = f"unknown ({type(e).__name__})"
    return facts


def fld_state():
    """fldispatch in this process: loaded by the plugin or not, its IR
    providers and its counters."""
    if "fldispatch.vllm" not in sys.modules:
        return {"loaded": False}
    try:
        import fldispatch

        ir = sys.modules.get("fldispatch.vllm_ir")
        return {"loaded": True, "ir_providers": sorted(getattr(ir, "registered", {}) or {}),
                "stats": _plain(fldispatch.stats())}
    except Exception as e:  # noqa: BLE001
        return {"loaded": True, "error": f"{type(e).__name__}: {e}"}


def fld_reset():
    if "fldispatch.vllm" in sys.modules:
        with contextlib.suppress(Exception):
            import fldispatch

            fldispatch.stats_reset()


def compile_counter():
    """vLLM's compilation counters ({name: count}; None where unknown)."""
    try:
        import dataclasses

        from vllm.compilation.counter import compilation_counter

        return dataclasses.asdict(compilation_counter)
    except Exception:  # noqa: BLE001
        return None


class Child:
    """One process's engines, one configuration per "run" command."""

    def __init__(self, name, logdir):
        self.name = name
        self.logdir = logdir
        self.llm: Any = None

    def generate(self, batch, tokens, logprobs=None):
        from vllm import SamplingParams

        try:
            from vllm.inputs import TokensPrompt

            ps = [TokensPrompt(prompt_token_ids=p) for p in prompts(batch)]
        except ImportError:
            ps = [{"prompt_token_ids": p} for p in prompts(batch)]
        sp = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, detokenize=False,
                            logprobs=logprobs)
        t0 = time.perf_counter()
        outs = self.llm.generate(ps, sp, use_tqdm=False)
        t = time.perf_counter() - t0
        got = [len(o.outputs[0].token_ids) for o in outs]
        if got != [tokens] * batch:
            raise RuntimeError(f"asked {batch} x {tokens} new tokens, got {got}")
        return t, outs

    def logprob_run(self, batch, tokens, k):
        _, outs = self.generate(batch, tokens, logprobs=k)
        toks, lps, tops = [], [], []
        for o in outs:
            seq = list(o.outputs[0].token_ids)
            toks.append(seq)
            lp_seq: list[float | None] = []
            top_seq: list[dict[str, float]] = []
            positions = o.outputs[0].logprobs or []
            for j, tok in enumerate(seq):
                try:
                    pos = positions[j]
                    lp_seq.append(float(pos[tok].logprob))
                    top_seq.append({str(t): float(v.logprob) for t, v in pos.items()})
                except Exception:  # noqa: BLE001  (a shape this version does not have)
                    lp_seq.append(None)
                    top_seq.append({})
            lps.append(lp_seq)
            tops.append(top_seq)
        return {"tokens": toks, "logprobs": lps, "top": tops}

    def run(self, cmd):
        rec: dict[str, Any] = {"phase_s": {}, "errors": []}
        phase = "start"
        remove_log = None
        passes_log = os.path.join(self.logdir, f"{cmd['name']}.passes.log")
        counter0 = compile_counter()
        try:
            remove_log = pass_log_handler(passes_log)
        except Exception:  # noqa: BLE001
            remove_log = None
        _capture_reset()
        t = time.perf_counter()
        try:
            from vllm import LLM

            self.llm = LLM(**cmd["kwargs"])
            rec["phase_s"]["start"] = time.perf_counter() - t
            now = compile_counter()
            if counter0 is not None and now is not None:
                rec["compile_counter"] = {k: v - counter0.get(k, 0) for k, v in now.items()
                                          if isinstance(v, int) and v != counter0.get(k, 0)}
            rec["engine"] = engine_facts(self.llm)
            rec["fld_start"] = fld_state()
            fld_reset()
            phase = "warm-up"
            t = time.perf_counter()
            for b in cmd["batch"]:
                self.generate(b, 1)
                self.generate(b, cmd["tokens"])
            rec["phase_s"]["warmup"] = time.perf_counter() - t
            phase = "tokens"
            t = time.perf_counter()
            rec["tokens"] = self.logprob_run(max(cmd["batch"]), cmd["tokens"], cmd["logprobs"])
            rec["phase_s"]["tokens"] = time.perf_counter() - t
            phase = "timing"
            t = time.perf_counter()
            rec["timing"] = {}
            for b in cmd["batch"]:
                rates, pairs = [], []
                for _ in range(cmd["pairs"]):
                    t1, _ = self.generate(b, 1)
                    tn, _ = self.generate(b, cmd["tokens"])
                    pairs.append([t1, tn])
                    rates.append(decode_rate(b, cmd["tokens"], t1, tn))
                rec["timing"][str(b)] = dict(summarise_rates(rates), pairs=pairs)
            rec["phase_s"]["timing"] = time.perf_counter() - t
        except Exception as e:  # noqa: BLE001
            rec["errors"].append({"phase": phase, "error": error_text(e)})
            if phase == "start":
                rec["phase_s"]["start_failed"] = time.perf_counter() - t
                rec["unhealthy"] = True  # a half-made engine: start a fresh process
        finally:
            if remove_log:
                remove_log()
        if self.llm is not None:
            rec["fld_run"] = fld_state()
        rec["capture"] = dict(CAPTURE)
        rec["pass_log"] = pass_log_summary(passes_log)
        phase = "stop"
        t = time.perf_counter()
        try:
            rec["memory"] = self.stop()
            allocated = rec["memory"].get("allocated_gib")
            if allocated is not None and allocated > 1.0:
                rec["unhealthy"] = True
        except Exception as e:  # noqa: BLE001
            rec["errors"].append({"phase": phase, "error": error_text(e)})
            rec["unhealthy"] = True
        rec["phase_s"]["stop"] = time.perf_counter() - t
        return rec

    def stop(self):
        import gc

        import torch

        llm, self.llm = self.llm, None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except AttributeError:
                pass
            del llm
        gc.collect()
        try:
            from vllm.compilation.cuda_graph import CUDAGraphWrapper

            CUDAGraphWrapper.clear_all_graphs()
        except (ImportError, AttributeError):
            pass
        try:
            from vllm.distributed import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except ImportError:
            pass
        try:
            from vllm.model_executor.layers import rotary_embedding

            rotary_embedding._ROPE_DICT.clear()
        except (ImportError, AttributeError):
            pass
        torch._dynamo.reset()
        gc.collect()
        if not torch.cuda.is_available():
            return {}
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        return {"allocated_gib": torch.cuda.memory_allocated() / 2**30,
                "reserved_gib": torch.cuda.memory_reserved() / 2**30,
                "free_gib": free / 2**30, "total_gib": total / 2**30}


class SimulatedChild(Child):
    """A child without vLLM: fake figures, for testing the driver."""

    def run(self, cmd):
        import random

        rng = random.Random(cmd["name"])
        time.sleep(float(os.environ.get("FLD_VLLM_CUDA_SIMULATE_S", "0.2")))
        if cmd["name"] in os.environ.get("FLD_VLLM_CUDA_SIMULATE_CRASH", "").split(","):
            os._exit(3)
        if cmd["name"] in os.environ.get("FLD_VLLM_CUDA_SIMULATE_FAIL", "").split(","):
            try:
                raise RuntimeError("simulated failure to start")
            except RuntimeError as e:
                return {"errors": [{"phase": "start", "error": error_text(e)}],
                        "unhealthy": True, "phase_s": {}}
        b = max(cmd["batch"])
        toks = [[(i * 31 + j * 7) % 1000 + 4 for j in range(cmd["tokens"])] for i in range(b)]
        if cmd["name"].endswith("vllm_c"):
            toks[3][20] += 1
        lps = [[-0.1 - 0.01 * rng.random() for _ in s] for s in toks]
        first = (cmd["kwargs"].get("ir_op_priority") or {}).get("rms_norm", ["native"])[0]
        fld = first == "fldispatch"
        return {"phase_s": {"start": 1.0}, "errors": [],
                "engine": {"ir_op_priority": {op: [first, "native"] for op in IR_OPS}},
                "tokens": {"tokens": toks, "logprobs": lps, "top": [[{} for _ in s] for s in toks]},
                "timing": {str(x): summarise_rates([x * 300 * (1 + 0.02 * rng.random())
                                                    for _ in range(cmd["pairs"])])
                           for x in cmd["batch"]},
                "capture": {"pm_calls": 3, "configured": ["NoOpEliminationPass"],
                            "matches": {"RMSNormQuantFusionPass": 4} if cmd["kwargs"].get(
                                "quantization") else {},
                            "lowering": {"rms_norm": {first: 1}, "fused_add_rms_norm": {first: 4}}},
                "fld_run": {"loaded": self.name == "on", "stats": [
                    {"op": "rms_norm", "device": "cuda", "dtype": "bfloat16",
                     "impl_id": "cuda.rms_norm", "calls": 10 if fld else 0, "fallbacks": 0,
                     "failures": 0}]}}


def child_main(name, log, logdir):
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    hello = {"pid": os.getpid(), "child": name}
    t0 = time.perf_counter()
    simulate = os.environ.get("FLD_VLLM_CUDA_SIMULATE") == "1"
    try:
        if simulate:
            child: Child = SimulatedChild(name, logdir)
            hello["vllm"] = "simulated"
        else:
            import torch
            import vllm

            hello.update(vllm=vllm.__version__, torch=torch.__version__,
                         cuda=torch.version.cuda, device=torch.cuda.get_device_name(0)
                         if torch.cuda.is_available() else None)
            hello["capture_error"] = install_capture()
            child = Child(name, logdir)
    except Exception as e:  # noqa: BLE001
        hello["error"] = error_text(e)
        proto.write(json.dumps(hello) + "\n")
        return 1
    hello["import_s"] = time.perf_counter() - t0
    proto.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "exit":
            break
        print(f"=== {name}: {cmd['name']} {json.dumps(cmd['kwargs'])}", flush=True)
        try:
            reply = child.run(cmd)
        except Exception as e:  # noqa: BLE001
            reply = {"errors": [{"phase": "child", "error": error_text(e)}], "unhealthy": True}
        print(f"=== {name}: {cmd['name']} done", flush=True)
        proto.write(json.dumps(reply) + "\n")
    return 0


# --------------------------------------------------------------- the driver

class Driven:
    """One child process, driven by JSON lines; its own process group, so a
    kill reaches the compile workers it started."""

    def __init__(self, name, out, cache, run_id, simulate):
        self.name = name
        self.run_id = run_id
        self.log = os.path.join(out, "logs", f"{name}.{run_id}.log")
        self.env = child_env(name, cache, run_id, simulate)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--child", name, "--child-log", self.log,
             "--out", out],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env,
            start_new_session=True)
        self.hello = None
        self.started = time.perf_counter()
        self.buffer = ""

    def read(self, timeout):
        """One JSON line, or raises TimeoutError / EOFError."""
        deadline = time.perf_counter() + max(timeout, 0.1)
        assert self.proc.stdout is not None  # stdout=PIPE
        fd = self.proc.stdout.fileno()
        while "\n" not in self.buffer:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20).decode(errors="replace")
            if not chunk:
                raise EOFError(f"exit status {self.proc.wait()}")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition("\n")
        return json.loads(line)

    def ask(self, cmd, timeout):
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read(timeout)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self):
        if self.proc.poll() is None:
            assert self.proc.stdin is not None  # stdin=PIPE
            try:
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill()


def log_tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


class Run:
    def __init__(self, opts, configs):
        self.opts = opts
        self.configs = configs
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + opts.budget_s
        self.children = {}
        self.broken = {}  # child -> why it cannot import vLLM (not tried again)
        self.spawns = {}
        self.records = []
        self.skipped = []
        self.qk_fusion = opts.qk_norm_rope_fusion
        self.durations = []
        self.hellos = []
        self.out = opts.out

    def progress(self, msg):
        print(f"[{time.perf_counter() - self.t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    def left(self):
        return self.deadline - time.perf_counter()

    def spawn(self, name):
        n = self.spawns.get(name, 0) + 1
        self.spawns[name] = n
        self.children[name] = Driven(name, self.out, self.opts.cache_dir, n, self.opts.simulate)

    def hello(self, name):
        """Waits for a spawned child's hello; None where it came, else the
        error."""
        c = self.children[name]
        if c.hello is not None:
            return None
        try:
            c.hello = c.read(self.left() + self.opts.grace_s)
        except (TimeoutError, EOFError, ValueError) as e:
            c.kill()
            del self.children[name]
            return f"child {name} did not start ({type(e).__name__} {e}); log {c.log}:\n" \
                   + log_tail(c.log)
        c.hello["wait_s"] = time.perf_counter() - c.started
        self.hellos.append(c.hello)
        self.progress(f"child {name}: vLLM {c.hello.get('vllm')} imported in "
                      f"{c.hello.get('import_s', 0):.1f} s "
                      f"({c.hello.get('device') or 'no device'})"
                      + (f"; capture: {c.hello['capture_error']}" if c.hello.get(
                          "capture_error") else ""))
        if c.hello.get("error"):
            err = c.hello["error"]
            c.kill()
            del self.children[name]
            self.broken[name] = f"child {name} failed to import vLLM:\n{err}"
            return self.broken[name]
        return None

    def estimate(self, child):
        """Seconds the next configuration is expected to take (the median of
        those so far or the last one, the larger; none known: 0, so the
        first always runs), plus a child's start where it must be started."""
        d = self.durations
        est = max(statistics.median(d), d[-1]) if d else 0.0
        if child not in self.children and self.hellos:
            est += max(h.get("import_s", 0) for h in self.hellos)
        return est

    def run_config(self, cfg, paths):
        opts = self.opts
        qk = self.qk_fusion and cfg["model"] == "qwen3"
        kwargs = engine_kwargs(cfg, opts, paths.get(cfg["model"]), qk)
        rec = dict(cfg, kwargs=kwargs, qk_norm_rope_fusion=qk if cfg["model"] == "qwen3" else None)
        if cfg["child"] in self.broken:
            rec["errors"] = [{"phase": "child", "error": self.broken[cfg["child"]]}]
            return rec
        rec["fresh_child"] = cfg["child"] not in self.children
        if rec["fresh_child"]:
            self.spawn(cfg["child"])
        err = self.hello(cfg["child"])
        if err:
            rec["errors"] = [{"phase": "child", "error": err}]
            return rec
        c = self.children[cfg["child"]]
        rec["child_pid"] = c.proc.pid
        cmd = {"cmd": "run", "name": cfg["name"], "kwargs": kwargs, "batch": opts.batch,
               "tokens": opts.tokens, "pairs": opts.pairs, "logprobs": opts.logprobs}
        t = time.perf_counter()
        try:
            reply = c.ask(cmd, self.left() + opts.grace_s)
        except TimeoutError:
            c.kill()
            del self.children[cfg["child"]]
            reply = {"errors": [{"phase": "budget", "error": (
                f"killed {opts.grace_s:.0f} s past the budget ({opts.budget_s:.0f} s); "
                f"log {c.log}:\n" + log_tail(c.log))}]}
        except (EOFError, OSError, ValueError) as e:
            c.kill()
            del self.children[cfg["child"]]
            reply = {"errors": [{"phase": "child", "error": (
                f"child {cfg['child']} ended ({e}); log {c.log}:\n" + log_tail(c.log))}]}
        rec.update(reply)
        rec["wall_s"] = time.perf_counter() - t
        if reply.get("unhealthy") and cfg["child"] in self.children:
            self.progress(f"child {cfg['child']}: restarting after {cfg['name']}")
            self.children.pop(cfg["child"]).kill()
        return rec

    def execute(self, paths, model_errors):
        queue = list(self.configs)
        while queue:
            cfg = queue.pop(0)
            est = self.estimate(cfg["child"])
            if self.records and time.perf_counter() + est > self.deadline:
                self.skipped.append(dict(cfg, why=f"budget: {self.left():.0f} s left, "
                                                  f"about {est:.0f} s needed"))
                self.progress(f"skip {cfg['name']} (budget: {self.left():.0f} s left, "
                              f"about {est:.0f} s needed)")
                continue
            if cfg["model"] in model_errors:
                self.finish(dict(cfg, errors=[{"phase": "model",
                                               "error": model_errors[cfg["model"]]}]))
                continue
            self.progress(f"run {cfg['id']} {cfg['name']} in child {cfg['child']}")
            rec = self.run_config(cfg, paths)
            start_failed = any(e.get("phase") == "start" for e in rec.get("errors", []))
            if start_failed and not rec.get("fresh_child", True) and not cfg.get("retry"):
                # vLLM 0.26 may fail the start of a process's second engine
                # (PyTorch's CUDA allocator asserts): once more in a fresh one,
                # before anything else is blamed
                rec["retried_in_a_fresh_child"] = True
            elif start_failed and rec.get("qk_norm_rope_fusion") and self.qk_fusion:
                # the fusion pass may be what failed: once more without it, and
                # the later Qwen3 engines without it too
                self.qk_fusion = False
                rec["retried_without_qk_norm_rope_fusion"] = True
            self.finish(rec)
            if rec.get("retried_without_qk_norm_rope_fusion") or rec.get("retried_in_a_fresh_child"):
                queue.insert(0, dict(cfg, retry=True))

    def finish(self, rec):
        if rec.get("wall_s"):
            self.durations.append(rec["wall_s"])
        self.records.append(rec)
        with open(os.path.join(self.out, "results.partial.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        errs = rec.get("errors") or []
        t = rec.get("timing") or {}
        rates = " ".join(f"b{b} {fmt(v.get('median'), '.0f')} tok/s" for b, v in t.items())
        self.progress(f"done {rec['name']} in {rec.get('wall_s', 0):.1f} s: {rates or '-'}")
        for e in errs:
            self.progress(f"  error ({e['phase']}):\n" + e["error"])

    def close(self):
        for c in list(self.children.values()):
            c.close()
        self.children.clear()


# ---------------------------------------------------------------- report

def fmt(x, spec, unit=""):
    return "-" if x is None else format(x, spec) + unit


def derive(records, batch):
    """Adds to each record its reference, its ratios and its tokens against
    the reference, and returns the A/A control {batch: {"ratio", "spread"}}."""
    final: list[dict[str, Any]] = [r for r in records if not r.get("retried_without_qk_norm_rope_fusion")]
    by: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in final:
        if r.get("timing") or r.get("tokens"):
            by.setdefault((r["model"], r["quant"], r["setting"], r["child"]), r)
    aa = {}
    a, b = by.get(("llama", None, "off", "off-a")), by.get(("llama", None, "off", "off-b"))
    for x in batch:
        ma = _med(a, x)
        mb = _med(b, x)
        if ma and mb:
            aa[str(x)] = {"ratio": mb / ma, "spread": abs(mb / ma - 1)}
    for r in final:
        ref = by.get((r["model"], r["quant"], "off", "off-a"))
        if ref is None and r["quant"] and r["setting"] != "default":
            ref = by.get((r["model"], r["quant"], "default", "on"))
        if ref is r:
            r["reference"] = "itself"
            continue
        r["reference"] = ref["name"] if ref else None
        r["ratio"] = {str(x): (_med(r, x) / _med(ref, x)) if _med(r, x) and _med(ref, x) else None
                      for x in batch}
        r["ratio_best"] = {str(x): (_best(r, x) / _best(ref, x))
                           if _best(r, x) and _best(ref, x) else None for x in batch}
        r["tokens_vs_reference"] = compare_tokens(r.get("tokens"), ref.get("tokens")) \
            if ref else None
    return aa


def _med(rec, b):
    return (((rec or {}).get("timing") or {}).get(str(b)) or {}).get("median")


def _best(rec, b):
    return (((rec or {}).get("timing") or {}).get(str(b)) or {}).get("best")


def fld_calls(state):
    """Calls of fldispatch's rms_norm on a GPU device in a counters
    snapshot (None where fldispatch was not loaded)."""
    if not state or not state.get("loaded"):
        return None
    total = 0
    for row in state.get("stats") or []:
        if isinstance(row, dict) and "rms_norm" in str(row.get("op")) and \
                str(row.get("device", "cuda")) in ("cuda", "rocm", "gpu"):
            try:
                total += int(row.get("calls") or 0)
            except (TypeError, ValueError):
                pass
    return total


def providers_words(rec):
    low = (rec.get("capture") or {}).get("lowering") or {}
    if not low:
        return "none recorded"
    return "; ".join(f"{op}: " + ",".join(f"{p}*{n}" for p, n in sorted(v.items()))
                     for op, v in sorted(low.items()))


def fusion_words(rec):
    cap = rec.get("capture") or {}
    m = cap.get("matches") or {}
    if cap.get("installed") is False:
        return "unknown (vLLM's pass manager could not be wrapped; see the passes' log)"
    if not cap.get("pm_calls"):
        return "no pass ran (cached or not compiled)"
    words = ", ".join(f"{k}={v}" for k, v in sorted(m.items())) or "no pattern pass"
    return words + f" ({cap['pm_calls']} graph(s))"


def table(doc):
    opts_batch = doc["batch"]
    aa = doc["aa"]
    aa_words = ", ".join(f"b{b} {v['ratio']:.3f}x (spread {100 * v['spread']:.1f}%)"
                         for b, v in aa.items()) or "not measured"
    lines = [(f"vLLM {doc.get('vllm')} on {doc.get('device')}; torch {doc.get('torch')}; "
              f"{doc['tokens']} new tokens, prompts of {PROMPT_LEN}, greedy; "
              f"tok/s = B*(N-1)/(t(N)-t(1)), median (best) of {doc['pairs']} pairs; "
              f"ratio = median / reference's median; A/A = llama off-b/off-a"),
             "A/A control: " + aa_words,
             ""]
    head = f"{'#':>2} {'configuration':24} " + " ".join(
        f"{'b' + str(b) + ' tok/s':>16} {'ratio':>7} {'+-A/A':>6}" for b in opts_batch)
    head += "  start s"
    lines += [head, "-" * len(head)]
    for r in doc["results"]:
        cells = []
        for b in opts_batch:
            t = (r.get("timing") or {}).get(str(b)) or {}
            rt = (r.get("ratio") or {}).get(str(b))
            spread = (aa.get(str(b)) or {}).get("spread")
            pct = None if spread is None else 100 * spread
            cells.append(f"{fmt(t.get('median'), '8.0f'):>8} ({fmt(t.get('best'), '.0f'):>5}) "
                         f"{fmt(rt, '6.3f', 'x'):>7} {fmt(pct, '4.1f', '%'):>6}")
        start = (r.get("phase_s") or {}).get("start")
        lines.append(f"{r['id']:>2} {r['name'] + (' (retry)' if r.get('retry') else ''):24} "
                     + " ".join(cells) + f"  {fmt(start, '7.1f'):>7}")
        if r.get("retried_without_qk_norm_rope_fusion"):
            lines.append("     start failed with the q/k-norm + RoPE fusion pass on; "
                         "retried without it")
        elif r.get("retried_in_a_fresh_child"):
            lines.append("     start failed in a child that had run an engine; "
                         "retried in a fresh one")
        elif not r.get("engine") and not r.get("timing"):
            pass  # no engine: its errors say why
        else:
            ref = r.get("reference")
            if ref and ref != "itself" and r.get("tokens"):
                lines.append(f"     tokens vs {ref}: {tokens_words(r.get('tokens_vs_reference'))}")
            eng = r.get("engine") or {}
            if eng:
                lines.append(f"     ir_op_priority: {json.dumps(eng.get('ir_op_priority'))}; "
                             f"cudagraph {eng.get('cudagraph_mode')}, "
                             f"pass_config {json.dumps(eng.get('pass_config'))}")
            lines.append(f"     lowering chose: {providers_words(r)}")
            lines.append(f"     fusion matches: {fusion_words(r)}")
            fs, fr = fld_calls(r.get("fld_start")), fld_calls(r.get("fld_run"))
            lines.append("     fldispatch rms_norm calls on the GPU: "
                         + ("not loaded" if fs is None and fr is None else
                            f"{fmt(fs, 'd')} at start, {fmt(fr, 'd')} in the timed runs"))
            if r.get("model") == "qwen3":
                lines.append(f"     q/k-norm + RoPE fusion pass: "
                             f"{'on' if r.get('qk_norm_rope_fusion') else 'off'}")
        for e in r.get("errors") or []:
            text = e["error"].strip().splitlines() or [""]
            lines.append(f"     ERROR ({e['phase']}): " + text[0][:240])
            if len(text) > 1:
                lines.append(f"       ... {text[-1][:240]}")
    for s in doc["skipped"]:
        lines.append(f"{s['id']:>2} {s['name']:24} SKIPPED ({s['why']})")
    lines.append("")
    lines.append(f"wall {doc['wall_s']:.0f} s of a {doc['budget_s']:.0f} s budget; "
                 f"results in {doc['out']}")
    return "\n".join(lines)


# ---------------------------------------------------------------- main

def positive_list(text):
    try:
        got = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        got = []
    if not got or got[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of positive integers")
    return got


def positive_int(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="configurations, in the order they run:\n" + "\n".join(
                                     f"  {c['id']:2d} {c['name']:24} child {c['child']}"
                                     for c in all_configs()))
    ap.add_argument("--out", default="vllm_cuda_out", help="output directory (default %(default)s)")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="wall-time budget in seconds (default %(default)s)")
    ap.add_argument("--grace-s", type=float, default=20.0,
                    help="a configuration still running this long past the budget is killed "
                    "(default %(default)s)")
    ap.add_argument("--configs", help="ids or names to run (default: all, in plan order)")
    ap.add_argument("--batch", type=positive_list, default=[1, 32],
                    help="batch sizes, also the CUDA graph capture sizes (default 1,32)")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per sequence (default 32)")
    ap.add_argument("--pairs", type=int, default=3, help="timed pairs per batch size (default 3)")
    ap.add_argument("--layers", type=positive_int, default=MODEL_SHAPE["num_hidden_layers"],
                    help="decoder layers of the models (default %(default)s; more put more of a "
                         "step on the GPU, less on the host)")
    ap.add_argument("--logprobs", type=int, default=2,
                    help="top log-probs per token in the tokens run (default 2: the runner-up "
                    "shows whether a parting was a near tie)")
    ap.add_argument("--gpu-mem", type=float, default=0.3, help="gpu_memory_utilization (0.3)")
    ap.add_argument("--qk-norm-rope-fusion", action=argparse.BooleanOptionalAction, default=True,
                    help="turn on vLLM's q/k-norm + RoPE fusion pass in the Qwen3 engines "
                    "(default on)")
    tmp = tempfile.gettempdir()
    ap.add_argument("--model-dir", default=os.path.join(tmp, "fld-vllm-cuda-models"),
                    help="where the models are written, kept for a rerun (default %(default)s)")
    ap.add_argument("--cache-dir", default=os.path.join(tmp, "fld-vllm-cuda-cache"),
                    help="vLLM's, Inductor's and Triton's caches (default %(default)s; Inductor's "
                    "is fresh for every child process)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan, import neither vLLM nor torch")
    ap.add_argument("--simulate", action="store_true",
                    help="children fake vLLM (tests the harness without a GPU)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-log", help=argparse.SUPPRESS)
    return ap


def dry_run(opts, configs):
    model_dir = opts.model_dir
    print(f"budget {opts.budget_s:.0f} s (+{opts.grace_s:.0f} s grace); batch {opts.batch}; "
          f"{opts.tokens} tokens; {opts.pairs} pairs; logprobs {opts.logprobs}; out {opts.out}")
    print(f"models under {model_dir}: " + ", ".join(
        f"{m} ({MODELS[m][0]}, seed {MODELS[m][1]})" for m in MODELS))
    print("model shape: " + json.dumps(model_shape(opts.layers)))
    print("vllm.general_plugins entry points here: " + (", ".join(plugin_entry_points()) or "none"))
    for child in sorted({c["child"] for c in configs}):
        print(f"child {child} environment (changes): "
              + json.dumps(env_delta(child_env(child, opts.cache_dir, 1, opts.simulate))))
    for c in configs:
        qk = opts.qk_norm_rope_fusion and c["model"] == "qwen3"
        kw = engine_kwargs(c, opts, model_path(model_dir, c["model"], opts.layers), qk)
        print(f"{c['id']:2d} {c['name']:24} child {c['child']:5} LLM(**{json.dumps(kw)})")
    return 0


def main(argv=None):
    opts = parser().parse_args(argv)
    if opts.child:
        return child_main(opts.child, opts.child_log, os.path.join(opts.out, "logs"))
    try:
        configs = select_configs(opts.configs)
    except argparse.ArgumentTypeError as e:
        parser().error(str(e))
    if opts.tokens < 2 or opts.pairs < 1:
        parser().error("--tokens must be >= 2 and --pairs >= 1")
    if opts.dry_run:
        return dry_run(opts, configs)
    opts.out = os.path.abspath(opts.out)
    opts.cache_dir = os.path.abspath(opts.cache_dir)
    if os.path.exists(opts.cache_dir):  # Triton's kernels stay; Inductor's graphs must not
        import shutil

        for entry in os.listdir(opts.cache_dir):
            if entry.startswith("inductor-"):
                shutil.rmtree(os.path.join(opts.cache_dir, entry), ignore_errors=True)
    os.makedirs(os.path.join(opts.out, "logs"), exist_ok=True)
    partial = os.path.join(opts.out, "results.partial.jsonl")
    if os.path.exists(partial):
        os.rename(partial, partial + f".{int(time.time())}")
    run = Run(opts, configs)

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    run.progress(f"{len(configs)} configurations, budget {opts.budget_s:.0f} s, out {opts.out}; "
                 f"plugins: {', '.join(plugin_entry_points()) or 'none'}")
    paths, model_errors = {}, {}
    try:
        # the children import vLLM while the models are written
        for child in dict.fromkeys(c["child"] for c in configs):
            run.spawn(child)
        model_dir = opts.model_dir
        needed = sorted({c["model"] for c in configs})
        t = time.perf_counter()
        if opts.simulate:
            paths = {m: model_path(model_dir, m, opts.layers) for m in needed}
        else:
            paths, model_errors = write_models(model_dir, needed, opts.layers)
            for m, err in model_errors.items():
                run.progress(f"model {m} could not be written; its configurations fail:\n{err}")
        run.progress(f"models ready in {time.perf_counter() - t:.1f} s under {model_dir}")
        run.execute(paths, model_errors)
    except KeyboardInterrupt:
        run.progress("interrupted: writing what was measured")
    finally:
        run.close()
        aa = derive(run.records, opts.batch)
        first: dict[str, Any] = next((h for h in run.hellos if h.get("vllm")), {})
        doc = {"schema": 1, "benchmark": "vllm_cuda", "vllm": first.get("vllm"),
               "torch": first.get("torch"), "cuda": first.get("cuda"),
               "device": first.get("device"), "children": run.hellos,
               "plugins": plugin_entry_points(), "budget_s": opts.budget_s,
               "batch": opts.batch, "tokens": opts.tokens, "pairs": opts.pairs,
               "aa": aa, "results": run.records, "skipped": run.skipped,
               "wall_s": time.perf_counter() - run.t0, "out": opts.out}
        with open(os.path.join(opts.out, "results.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in run.records)
        with open(os.path.join(opts.out, "summary.json"), "w") as f:
            json.dump({k: v for k, v in doc.items() if k != "results"}, f, indent=1)
        text = table(doc)
        with open(os.path.join(opts.out, "table.txt"), "w") as f:
            f.write(text + "\n")
        print(text, flush=True)
    failed = sum(1 for r in run.records if r.get("errors"))
    return 1 if failed == len(run.records) else 0


if __name__ == "__main__":
    sys.exit(main())
