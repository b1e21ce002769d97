# SPDX-License-Identifier: Apache-2.0
"""vLLM CPU decode tokens/s with fldispatch's plugin off and on, through
vllm.LLM, on the engine test's tiny random models and on a larger random
Llama-shaped model:

    VENV/bin/python bench/vllm_tokens.py [--quick | --full] [--models M,...]
        [--modes eager,compiled] [--dtypes f32,bf16] [--rounds N] [--tokens N]
        [--batch N,...] [--on default|forced] [--json] [--logdir DIR]

Run with vLLM installed (the environment of make check-vllm: VENV is the
path python/tests/engine/venv.sh prints, with this package installed into it
as make check-vllm installs it).

Models (python/tests/engine/models.py, made once and cached beside the venv,
in the directory the engine test uses): llama, qwen2 and gemma (hidden 256,
2 layers) and llama-big (hidden 2048, intermediate 5632, 4 layers, 32 query
and 8 key-value heads of 64, vocabulary 504: the LM head is 1 M parameters
against 45 M per layer, so the decoder layers, where the replaced ops are,
carry the step rather than the head).

Settings: "off" is vLLM alone (VLLM_PLUGINS=""); "on" is vLLM with the
plugin loaded (VLLM_FL_STATS=1, no other VLLM_FL_* variable: the caller's
are removed), in one of two forms (--on):
  default  the plugin's defaults, what an operator gets by installing it:
           fldispatch serves the layers in the modes where its path was
           measured faster (python/fldispatch/vllm_path.py MODE_TABLE) and
           steps aside elsewhere (compiled by Inductor, vLLM's default
           compiled mode, it leaves every layer to vLLM);
  forced   VLLM_FL_OOT_FORCE=all: fldispatch serves every layer in every
           mode, which measures what the default steps aside from.

Method. Four child processes, two identical ones per setting ("a" and "b":
the A/A control; vLLM loads its plugins once per process), each with
vLLM's engine in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0). For each
(model, mode, dtype) every child starts an engine, one after the other
(start-up, compilation included, is timed and printed apart) and runs an
untimed warm-up (each batch size's prefill and decode); then, round by
round, rotating which child goes first, each child times for each batch
size B pairs of generate calls on the same B prompts (16 tokens each,
greedy, ignore_eos, prefix caching off): max_tokens=1 (the prefill and the
first token), then max_tokens=N; pairs repeat until the round's pairs took
1 s (at most 10). Decode tokens/s of a pair = B * (N - 1) / (time(N) -
time(1)). Reported per row: each setting's median over all pairs of both
its children and all rounds and its best pair, on/off of the medians, and
beside it the A/A control: b/a of the medians of the two identical
children of each setting, and the spread, the larger distance of those two
from 1. An on/off ratio within the spread of 1 is noise. Where the spread
is wide, more pairs are taken: after --rounds rounds, a configuration with
a batch size whose spread is above --spread (default 3%) runs more rounds,
one at a time, until every batch size's spread is within it or
--max-rounds (default twice --rounds) rounds have run; each row says how
many rounds it took. After
the rounds each child takes fldispatch's counters from its worker
(fldispatch.stats() through collective_rpc; reset after the warm-up) and
fails the run unless, "on", every layer op of the model ran in fldispatch
with no fallback or failure (under --on default: every layer op that
MODE_TABLE gives fldispatch in the engine's mode ran in fldispatch, and
none of the others did), and "off", fldispatch was not loaded: a silent
fallback cannot produce a figure.

Default matrix (4.5 minutes on 2 quiet cores, more where extra rounds
run): eager on the four models,
compiled (vLLM's default compilation) on llama-big, f32 and bf16, batch 1
and 8, 32 new tokens, 3 rounds. --full: compiled on every model, 5 rounds,
64 tokens. --quick: llama, eager, f32, 2 rounds, 8 tokens (a smoke run).
Options given explicitly override both.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINE = os.path.join(ROOT, "python", "tests", "engine")

MODELS = ("llama", "qwen2", "gemma", "llama-big")
MODES = ("eager", "compiled")
DTYPES = {"f32": "float32", "bf16": "bfloat16"}
SETTINGS = ("off", "on")
# the A/A control: two identical children per setting
COPIES = ("a", "b")
CHILDREN = tuple(f"{s}-{c}" for s in SETTINGS for c in COPIES)
# GemmaRMSNorm calls vLLM IR's rms_norm ops, which fldispatch serves as an IR
# provider with its rms_norm op
LAYER_OPS = {"llama": ("rms_norm", "silu_and_mul", "rotary_embedding"),
             "qwen2": ("rms_norm", "silu_and_mul", "rotary_embedding"),
             "gemma": ("rms_norm", "gelu_tanh_and_mul", "rotary_embedding"),
             "llama-big": ("rms_norm", "silu_and_mul", "rotary_embedding")}
# the family (vllm_path.MODE_TABLE's column) of each layer op
OP_FAMILY = {"rms_norm": "norm", "silu_and_mul": "activation",
             "gelu_tanh_and_mul": "activation", "rotary_embedding": "rotary"}
ON_FORMS = ("default", "forced")
PROMPT_LEN = 16
# each round times pairs of generates until they took MIN_ROUND_S (at most
# MAX_PAIRS pairs): on the tiny models a pair lasts tens of milliseconds
MIN_ROUND_S = 1.0
MAX_PAIRS = 10
# the modes of each model in the default matrix: compiled where the ops
# weigh in the step (on the tiny models vLLM's own per-step work dominates)
DEFAULT_COMPILED = ("llama-big",)
PROFILES: dict[str, dict[str, Any]] = {"default": {"rounds": 3, "tokens": 32, "batch": "1,8"},
            "full": {"rounds": 5, "tokens": 64, "batch": "1,8"},
            "quick": {"rounds": 2, "tokens": 8, "batch": "1,8"}}


def names(text, allowed, what):
    """A comma-separated list, each in allowed (argparse's error otherwise)."""
    got = [s for s in text.split(",") if s]
    bad = [s for s in got if s not in allowed]
    if bad or not got:
        raise argparse.ArgumentTypeError(
            f"{what}: {','.join(bad) or repr(text)} not among {','.join(allowed)}")
    return got


def positive_list(text):
    try:
        got = [int(s) for s in text.split(",")]
    except ValueError:
        got = []
    if not got or min(got) < 1:
        raise argparse.ArgumentTypeError(f"--batch: {text!r} is not a list of positive integers")
    return got


def positive(minimum):
    def parse(text):
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or n < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {minimum}")
        return n
    return parse


def percent(text):
    try:
        x = float(text)
    except ValueError:
        x = None
    if x is None or not 0 < x < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage between 0 and 100")
    return x


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="llama, eager, f32, 2 rounds, 8 tokens")
    group.add_argument("--full", action="store_true",
                       help="compiled on every model, 5 rounds, 64 tokens")
    ap.add_argument("--models", type=lambda s: names(s, MODELS, "--models"))
    ap.add_argument("--modes", type=lambda s: names(s, MODES, "--modes"))
    ap.add_argument("--dtypes", type=lambda s: names(s, tuple(DTYPES), "--dtypes"))
    ap.add_argument("--rounds", type=positive(1))
    ap.add_argument("--max-rounds", type=positive(1),
                    help="rounds at most where the A/A spread stays wide (default: 2 x --rounds)")
    ap.add_argument("--spread", type=percent, default=3.0,
                    help="A/A spread (%%) above which more rounds run (default 3)")
    ap.add_argument("--tokens", type=positive(2), help="new tokens per sequence (>= 2)")
    ap.add_argument("--batch", type=positive_list, help="batch sizes, e.g. 1,8")
    ap.add_argument("--on", choices=ON_FORMS, default="default",
                    help="the plugin's defaults (default) or VLLM_FL_OOT_FORCE=all (forced)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("--logdir", help="where the children's vLLM output goes (default: a new "
                    "temporary directory)")
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    ap.add_argument("--child-log", help=argparse.SUPPRESS)
    ap.add_argument("--child-max-batch", type=positive(1), help=argparse.SUPPRESS)
    return ap


def plan(args):
    """The run a parsed command line asks for: {"configs": [(model, mode,
    dtype)], "rounds", "tokens", "batch"}. Explicit options override the
    profile (--quick, --full or the default)."""
    profile = "quick" if args.quick else "full" if args.full else "default"
    p = PROFILES[profile]
    models = args.models or (["llama"] if args.quick else list(MODELS))
    modes = args.modes or (["eager"] if args.quick else list(MODES))
    dtypes = args.dtypes or (["f32"] if args.quick else list(DTYPES))
    configs = []
    for model in models:
        for mode in modes:
            if (mode == "compiled" and profile == "default" and not args.modes
                    and model not in DEFAULT_COMPILED):
                continue
            configs += [(model, mode, d) for d in dtypes]
    rounds = args.rounds or p["rounds"]
    return {"configs": configs, "rounds": rounds,
            "max_rounds": max(rounds, args.max_rounds or 2 * rounds),
            "spread": args.spread / 100, "on": args.on,
            "tokens": args.tokens or p["tokens"],
            "batch": args.batch or positive_list(p["batch"])}


def decode_rate(sample):
    """Decode tokens/s of one timed pair: the tokens after the first over
    the time the longer generate took beyond the one-token generate (None
    where noise made that difference not positive)."""
    extra = sample["generate_s"] - sample["prefill_s"]
    if extra <= 0:
        return None
    return sample["batch"] * (sample["tokens"] - 1) / extra


def summarise(samples):
    """{"tok_s", "best_tok_s", "rates", "rounds"} over the rounds' samples
    of one setting (rates that noise made undefined left out of the median
    and counted in "dropped")."""
    rates = [decode_rate(s) for s in samples]
    good = [r for r in rates if r is not None]
    return {"tok_s": statistics.median(good) if good else None,
            "best_tok_s": max(good) if good else None,
            "rates": rates, "dropped": len(rates) - len(good), "pairs": len(samples)}


def ratio(on, off):
    """on/off of the medians (None when either is missing)."""
    if not on["tok_s"] or not off["tok_s"]:
        return None
    return on["tok_s"] / off["tok_s"]


def aa_control(copies):
    """{"off": b/a, "on": b/a, "spread"}: the ratio of the medians of the two
    identical children of each setting, and the larger distance of those
    ratios from 1 (None where a figure is missing)."""
    aa = {s: ratio(copies[f"{s}-b"], copies[f"{s}-a"]) for s in SETTINGS}
    known = [abs(r - 1) for r in aa.values() if r is not None]
    aa["spread"] = max(known) if len(known) == len(SETTINGS) else None
    return aa


def make_row(config, batch, tokens, samples, rounds):
    """One reported row: config (model, mode, dtype) at one batch size, from
    every child's samples so far (those of other batch sizes left out)."""
    model, mode, dt = config
    row = {"model": model, "mode": mode, "dtype": dt, "batch": batch, "tokens": tokens,
           "rounds": rounds}
    mine = {c: [x for x in samples[c] if x["batch"] == batch] for c in CHILDREN}
    for s in SETTINGS:
        both = mine[f"{s}-a"] + mine[f"{s}-b"]
        row[s] = summarise(both)
        row[s]["samples"] = both
    row["ratio"] = ratio(row["on"], row["off"])
    row["aa"] = aa_control({c: summarise(x) for c, x in mine.items()})
    return row


def wide(rows, spread):
    """The batch sizes of rows whose A/A spread is above spread, or unknown."""
    return [r["batch"] for r in rows if r["aa"]["spread"] is None or r["aa"]["spread"] > spread]


def child_order(round_no):
    """The order the children time in a round: rotated by one each round, so
    each goes first as often as the others."""
    k = round_no % len(CHILDREN)
    return CHILDREN[k:] + CHILDREN[:k]


def expected_ops(model, on_form, engine_mode):
    """The model's layer ops fldispatch must serve "on": all of them when
    forced, else those vllm_path.MODE_TABLE gives it in engine_mode
    ("eager", "inductor" or "compiled", vllm_path.mode())."""
    if on_form == "forced":
        return set(LAYER_OPS[model])
    from fldispatch import vllm_path

    table = vllm_path.MODE_TABLE[engine_mode]
    return {op for op in LAYER_OPS[model] if table[OP_FAMILY[op]][0]}


def layer_op(op):
    """The layer op a counted op serves: the rotary layer, traced by
    torch.compile, calls the out-of-place rotary_embedding_out."""
    return "rotary_embedding" if op == "rotary_embedding_out" else op


def check_served(setting, model, dtype, reports, expected=None):
    """None when the counters agree with the setting, else what is wrong:
    "on", every op of expected (default: the model's layer ops) ran in
    fldispatch in this dtype with no fallback and no failure, and no other
    layer op of the model did; "off", fldispatch was not loaded."""
    if expected is None:
        expected = set(LAYER_OPS[model])
    if setting == "off":
        loaded = [r["pid"] for r in reports if r and r.get("fldispatch")]
        return f"fldispatch was loaded in worker(s) {loaded} with the plugin off" if loaded else None
    if not reports or not all(r and r.get("fldispatch") for r in reports):
        return f"fldispatch was not loaded in every worker: {reports}"
    short = {v: k for k, v in DTYPES.items()}[dtype]
    rows = [row for r in reports for row in r.get("stats") or []
            if layer_op(row["op"]) in LAYER_OPS[model] and row["dtype"] in (dtype, short)]
    ran = {layer_op(row["op"]) for row in rows if int(row["calls"]) > 0}
    missing = sorted(expected - ran)
    if missing:
        return f"fldispatch did not serve {missing} ({dtype}); its counters: {rows}"
    extra = sorted(ran - expected)
    if extra:
        return f"fldispatch served {extra} ({dtype}), which its default leaves to vLLM here"
    bad = [row for row in rows if int(row["fallbacks"]) or int(row["failures"])]
    if bad:
        return f"fldispatch fell back or failed: {bad}"
    return None


def served_impls(model, dtype, reports):
    """{op: [impl_id]} that ran the model's layer ops."""
    short = {v: k for k, v in DTYPES.items()}[dtype]
    got: dict[str, set[str]] = {}
    for r in reports:
        for row in (r or {}).get("stats") or []:
            op = layer_op(row["op"])
            if op in LAYER_OPS[model] and row["dtype"] in (dtype, short) and row["calls"]:
                got.setdefault(op, set()).add(row["impl_id"])
    return {op: sorted(v) for op, v in sorted(got.items())}


# ---------------------------------------------------------------- the child

def prompts(batch):
    """batch prompts of PROMPT_LEN token ids (the models' word ids, 4..503),
    the same for every run."""
    return [[4 + (7 * i + 13 * j) % 500 for j in range(PROMPT_LEN)] for i in range(batch)]


def forget_cached_layers():
    """Drops the layers vLLM's model code keeps for the process's lifetime,
    so that each engine this process starts builds its own: vLLM's Gemma
    makes its activation layer once per process (functools.cache on
    _get_gemma_act_fn), and a CustomOp layer decides its forward when it is
    made, under the engine's mode of that time, so without this an engine
    compiled by Inductor would run the activation an earlier eager engine
    chose."""
    try:
        from vllm.model_executor.models import gemma
    except ImportError:
        return
    cached = getattr(gemma, "_get_gemma_act_fn", None)
    if cached is not None and hasattr(cached, "cache_clear"):
        cached.cache_clear()


class Child:
    """One setting's engine, driven by commands on stdin (one JSON object a
    line), answering one JSON line each on the original stdout; vLLM's own
    output goes to the log file."""

    def __init__(self, setting, max_batch):
        self.setting = setting
        self.max_batch = max_batch
        self.llm: Any = None

    def start(self, cmd):
        from vllm import LLM, SamplingParams

        import engine_runs

        forget_cached_layers()
        t0 = time.perf_counter()
        self.llm = LLM(model=cmd["model"], tokenizer=cmd["tokenizer"], dtype=cmd["dtype"],
                       enforce_eager=cmd["mode"] == "eager", max_model_len=256,
                       max_num_seqs=self.max_batch, seed=0, enable_prefix_caching=False)
        t1 = time.perf_counter()
        for b in cmd["batch"]:  # warm-up, untimed: each batch size's prefill and decode
            for n in (1, 2):
                self.generate(SamplingParams, b, n)
        t2 = time.perf_counter()
        self.llm.collective_rpc(engine_runs.worker_report, kwargs={"reset": True})
        return {"startup_s": t1 - t0, "warmup_s": t2 - t1}

    def generate(self, sampling_params, batch, tokens):
        from vllm.inputs import TokensPrompt

        sp = sampling_params(temperature=0.0, max_tokens=tokens, ignore_eos=True,
                             detokenize=False)
        t0 = time.perf_counter()
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts(batch)],
                                 sp, use_tqdm=False)
        t = time.perf_counter() - t0
        got = [len(o.outputs[0].token_ids) for o in outs]
        if got != [tokens] * batch:
            raise RuntimeError(f"asked {batch} x {tokens} new tokens, got {got}")
        return t

    def time(self, cmd):
        from vllm import SamplingParams

        out = []
        for b in cmd["batch"]:
            spent = 0.0
            for _ in range(MAX_PAIRS):
                t1 = self.generate(SamplingParams, b, 1)
                tn = self.generate(SamplingParams, b, cmd["tokens"])
                out.append({"batch": b, "tokens": cmd["tokens"], "prefill_s": t1,
                            "generate_s": tn})
                spent += t1 + tn
                if spent >= cmd["min_s"]:
                    break
        return {"samples": out}

    def stop(self, cmd):
        import engine_runs

        reports = self.llm.collective_rpc(engine_runs.worker_report)
        expected = None
        if self.setting == "on":
            from fldispatch import vllm_path

            engine_mode = vllm_path.mode(self.llm.llm_engine.vllm_config.compilation_config)
            expected = expected_ops(cmd["model_name"], cmd["on"], engine_mode)
        self.llm.llm_engine.engine_core.shutdown()
        self.llm = None
        import gc
        gc.collect()
        engine_runs.cleanup()
        return {"error": check_served(self.setting, cmd["model_name"], cmd["dtype"], reports,
                                      expected),
                "served": served_impls(cmd["model_name"], cmd["dtype"], reports)}


def child_main(setting, max_batch, log):
    sys.path.insert(0, ENGINE)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    t0 = time.perf_counter()
    import vllm

    child = Child(setting, max_batch)
    proto.write(json.dumps({"import_s": time.perf_counter() - t0,
                            "vllm": vllm.__version__}) + "\n")
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "exit":
            break
        print(f"--- {setting}: {line.strip()}", flush=True)
        try:
            reply = getattr(child, cmd["cmd"])(cmd)
        except Exception as e:  # the driver reports it and stops
            import traceback
            traceback.print_exc()
            reply = {"error": f"{type(e).__name__}: {e}"}
        proto.write(json.dumps(reply) + "\n")
    return 0


# --------------------------------------------------------------- the driver

def cache_dir():
    """The engine test's cache (python/tests/engine/test_engine.py)."""
    return os.environ.get("FLD_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fldispatch")


def cached_models(big):
    """The engine test's models (the same directory, keyed by models.py),
    plus llama-big when asked: each made aside and renamed into place."""
    import hashlib

    sys.path.insert(0, ENGINE)
    import models

    with open(models.__file__, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    root = os.path.join(cache_dir(), f"vllm-models-{key}")
    if not os.path.exists(os.path.join(root, ".complete")):
        aside = f"{root}.{os.getpid()}"
        models.make(aside)
        open(os.path.join(aside, ".complete"), "w").close()
        os.rename(aside, root)
    paths = models.make(root)
    if big:
        path = os.path.join(root, "llama-big")
        if not os.path.exists(os.path.join(path, "config.json")):
            from transformers import LlamaConfig

            t0 = time.perf_counter()
            aside = f"{path}.{os.getpid()}"
            models.save(aside, LlamaConfig(**models.BIG), seed=3)
            os.rename(aside, path)
            print(f"made {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        paths["llama-big"] = path
    return paths


def child_env(child, on_form):
    setting = child.partition("-")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_ALLOW_INSECURE_SERIALIZATION="1", VLLM_ENABLE_V1_MULTIPROCESSING="0",
               VLLM_CACHE_ROOT=os.path.join(cache_dir(), "vllm-cache"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_dir(), "inductor-cache"))
    if setting == "off":
        env["VLLM_PLUGINS"] = ""
    else:
        env.pop("VLLM_PLUGINS", None)
        env["VLLM_FL_STATS"] = "1"
        if on_form == "forced":
            env["VLLM_FL_OOT_FORCE"] = "all"
    return env


class Driven:
    def __init__(self, child, max_batch, logdir, on_form):
        self.setting = child
        self.log = os.path.join(logdir, f"{child}.log")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                                      child.partition("-")[0], "--child-max-batch",
                                      str(max_batch), "--child-log", self.log],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=child_env(child, on_form))
        self.hello = self.read()

    def read(self):
        assert self.proc.stdout is not None  # stdout=PIPE
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"vllm_tokens: the '{self.setting}' child ended (exit status "
                             f"{self.proc.wait()}); its output: {self.log}")
        return json.loads(line)

    def ask(self, cmd):
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self.read()
        if reply.get("error"):
            raise SystemExit(f"vllm_tokens: '{self.setting}' {cmd['cmd']} "
                             f"{cmd.get('model_name', '')}: {reply['error']} (log: {self.log})")
        return reply

    def close(self):
        if self.proc.poll() is None:
            assert self.proc.stdin is not None  # stdin=PIPE
            self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait()


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if m:
            return m.group(1).strip()
    except OSError:
        pass
    return "unknown"


def run(p, logdir, progress):
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    paths = cached_models(any(m == "llama-big" for m, _, _ in p["configs"]))
    children = {}
    try:
        for s in CHILDREN:
            children[s] = Driven(s, max(p["batch"]), logdir, p["on"])
            progress(f"{s}: vLLM {children[s].hello['vllm']} imported in "
                     f"{children[s].hello['import_s']:.1f} s")
        results, startups, served = [], [], {}
        for model, mode, dt in p["configs"]:
            cmd = {"model": paths[model], "tokenizer": paths["tokenizer"], "model_name": model,
                   "mode": mode, "dtype": DTYPES[dt], "tokens": p["tokens"], "batch": p["batch"],
                   "min_s": MIN_ROUND_S, "on": p["on"]}
            for s in CHILDREN:
                got = children[s].ask(dict(cmd, cmd="start"))
                startups.append({"model": model, "mode": mode, "dtype": dt, "setting": s,
                                 "startup_s": got["startup_s"], "warmup_s": got["warmup_s"]})
                progress(f"{model} {mode} {dt} {s}: engine start {got['startup_s']:.1f} s, "
                         f"warm-up {got['warmup_s']:.1f} s")
            samples: dict[str, list[dict[str, Any]]] = {s: [] for s in CHILDREN}
            config = (model, mode, dt)
            rounds = 0
            while True:
                for s in child_order(rounds):
                    samples[s] += children[s].ask(dict(cmd, cmd="time"))["samples"]
                rounds += 1
                if rounds < p["rounds"]:
                    continue
                rows = [make_row(config, b, p["tokens"], samples, rounds) for b in p["batch"]]
                still = wide(rows, p["spread"])
                if not still or rounds >= p["max_rounds"]:
                    break
                progress(f"{model} {mode} {dt}: A/A spread above {100 * p['spread']:g}% at "
                         f"batch {','.join(map(str, still))} after {rounds} rounds; one more")
            for s in CHILDREN:
                got = children[s].ask(dict(cmd, cmd="stop"))
                if s == "on-a":
                    served[f"{model} {mode} {dt}"] = got["served"]
            for row in rows:
                results.append(row)
                progress(format_row(row))
    finally:
        for c in children.values():
            c.close()
    return {"schema": 1, "benchmark": "vllm_decode_tokens",
            "machine": {"cpu": cpu_model(), "cpus": os.cpu_count(),
                        "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
            "vllm": children["off-a"].hello["vllm"],
            "rounds": p["rounds"], "max_rounds": p["max_rounds"], "spread_target": p["spread"],
            "tokens": p["tokens"], "batch": p["batch"],
            "on": p["on"], "prompt_len": PROMPT_LEN,
            "import_s": {s: c.hello["import_s"] for s, c in children.items()},
            "startup": startups, "served": served, "results": results,
            "wall_s": time.perf_counter() - t_start, "logdir": logdir}


def fmt(x, spec, unit=""):
    """x as spec, then unit; a missing figure as "-" of the same width."""
    if x is None:
        return format("-", ">" + str(int(spec.split(".")[0]) + len(unit)))
    return format(x, spec) + unit


def format_row(row):
    off, on, aa = row["off"], row["on"], row["aa"]
    return (f"{row['model']:10} {row['mode']:9} {row['dtype']:5} {row['batch']:5} "
            f"{fmt(off['tok_s'], '10.1f')} {fmt(off['best_tok_s'], '9.1f')} "
            f"{fmt(on['tok_s'], '10.1f')} {fmt(on['best_tok_s'], '9.1f')} "
            f"{fmt(row['ratio'], '7.2f', 'x')} "
            f"{fmt(None if aa['spread'] is None else 100 * aa['spread'], '5.1f', '%')}  "
            f"{fmt(aa['off'], '5.2f', 'x')} {fmt(aa['on'], '5.2f', 'x')} "
            f"{row['rounds']:6d}"
            + (f"  (pairs dropped: off {off['dropped']}, on {on['dropped']})"
               if off["dropped"] or on["dropped"] else ""))


def report(doc):
    m = doc["machine"]
    la = " ".join(f"{x:.2f}" for x in m["loadavg_start"])
    lb = " ".join(f"{x:.2f}" for x in m["loadavg_end"])
    on_words = {"default": "on (fldispatch with its defaults)",
                "forced": "on (fldispatch forced on every layer: VLLM_FL_OOT_FORCE=all)"}
    lines = [f"vLLM {doc['vllm']} CPU decode tokens/s, plugin off (vLLM alone) and "
             f"{on_words[doc['on']]}",
             f"cpu: {m['cpu']}, {m['cpus']} CPUs; load average at start {la}, at end {lb}",
             f"{doc['rounds']} rounds, up to {doc['max_rounds']} where the A/A spread is above "
             f"{100 * doc['spread_target']:.1f}%; "
             f"{doc['tokens']} new tokens per sequence, prompts of "
             f"{doc['prompt_len']} tokens, greedy; tok/s = B*(N-1) / (t(N) - t(1)): median "
             f"over the timed pairs of both children and all rounds, and the best pair; "
             f"A/A: b/a of two identical children per setting, spread = the larger |b/a - 1| "
             f"(an on/off within 1 +- spread is noise)",
             "",
             f"{'model':10} {'mode':9} {'dtype':5} {'batch':>5} {'off tok/s':>10} {'best':>9} "
             f"{'on tok/s':>10} {'best':>9} {'on/off':>8} {'+-A/A':>6}  {'off b/a':>6} "
             f"{'on b/a':>6} {'rounds':>6}"]
    lines += [format_row(r) for r in doc["results"]]
    lines += ["", "engine start (excluded from the figures; compilation included), s:"]
    for s in doc["startup"]:
        lines.append(f"  {s['model']:10} {s['mode']:9} {s['dtype']:5} {s['setting']:3} "
                     f"start {s['startup_s']:6.1f}  warm-up {s['warmup_s']:6.1f}")
    lines.append("vLLM import: " + ", ".join(f"{s} {t:.1f} s" for s, t in doc["import_s"].items()))
    lines.append("fldispatch served (plugin on): " + "; ".join(
        f"{k}: " + (", ".join(f"{op} {'/'.join(v)}" for op, v in ops.items()) or "nothing")
        for k, ops in doc["served"].items()))
    lines.append(f"wall {doc['wall_s']:.0f} s; children's vLLM output in {doc['logdir']}")
    return "\n".join(lines)


def main(argv=None):
    args = parser().parse_args(argv)
    if args.child:
        return child_main(args.child, args.child_max_batch, args.child_log)
    p = plan(args)
    logdir = args.logdir or tempfile.mkdtemp(prefix="fld-vllm-tokens-")
    os.makedirs(logdir, exist_ok=True)

    def progress(msg):
        print(msg, file=sys.stderr, flush=True)

    progress(f"{len(p['configs'])} configurations x {len(p['batch'])} batch sizes, "
             f"{p['rounds']} rounds, {p['tokens']} tokens; logs in {logdir}")
    doc = run(p, logdir, progress)
    print(json.dumps(doc, indent=1) if args.json else report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
