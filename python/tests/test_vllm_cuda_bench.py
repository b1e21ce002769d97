# SPDX-License-Identifier: Apache-2.0
"""bench/vllm_cuda.py without a GPU: its plan (configurations, engine
arguments, the children's environments), its measures (decode rate, tokens
against a reference, the A/A control and the references of each
configuration) and its driver, run with children that fake vLLM
(--simulate): failures to start, a child that dies, the budget. The GPU runs
are the scarce part of that benchmark; what they depend on here is checked
before one is spent."""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "vllm_cuda.py")
spec = importlib.util.spec_from_file_location("vllm_cuda", SCRIPT)
assert spec is not None and spec.loader is not None
vc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vc)


def opts_of(*argv):
    return vc.parser().parse_args(list(argv))


def config(name):
    return next(c for c in vc.all_configs() if c["name"] == name)


def test_plan_names_children_and_the_aa_pair():
    configs = vc.all_configs()
    assert [c["id"] for c in configs] == list(range(1, len(vc.PLAN) + 1))
    assert len({c["name"] for c in configs}) == len(configs)
    for c in configs:
        # vLLM alone runs in the children that load no plugin, and only there
        assert (c["setting"] == "off") == c["child"].startswith("off")
    aa = [c for c in configs if c["child"] == "off-b"]
    assert [c["name"] for c in aa] == ["llama-bf16-off-aa"]
    # the A/A pair's first half runs before anything else
    assert configs[0]["name"] == "llama-bf16-off" and configs[0]["child"] == "off-a"


def test_configs_by_id_or_name_in_plan_order():
    got = vc.select_configs("qwen3-bf16-off, 2,1")
    assert [c["id"] for c in got] == [1, 2, 5]
    assert vc.select_configs(None) == vc.all_configs()
    with pytest.raises(argparse.ArgumentTypeError, match="unknown 99,llama-f16-off"):
        vc.select_configs("1,99,llama-f16-off")


@pytest.mark.parametrize("argv, words", [
    (["--configs", "0"], "--configs: unknown 0"), (["--tokens", "1"], "--tokens must be >= 2"),
    (["--pairs", "0"], "--pairs >= 1"), (["--batch", "0,1"], "not a list of positive"),
    (["--layers", "0"], "not a positive integer")])
def test_bad_command_lines_are_usage_errors(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        vc.main(argv + ["--dry-run"])
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_engine_arguments_per_setting():
    opts = opts_of("--batch", "32,1,32", "--gpu-mem", "0.25")
    kw = vc.engine_kwargs(config("llama-bf16-fldispatch"), opts, "/m", False)
    assert kw["ir_op_priority"] == {"rms_norm": ["fldispatch"], "fused_add_rms_norm": ["fldispatch"]}
    assert kw["compilation_config"] == {"cudagraph_capture_sizes": [1, 32]}
    assert (kw["max_num_seqs"], kw["gpu_memory_utilization"], kw["model"]) == (32, 0.25, "/m")
    assert kw["enforce_eager"] is False and "quantization" not in kw
    # vLLM's own default: no priority given
    assert "ir_op_priority" not in vc.engine_kwargs(config("llama-bf16-default"), opts, "/m", False)
    assert "ir_op_priority" not in vc.engine_kwargs(config("llama-bf16-off"), opts, "/m", False)
    fp8 = vc.engine_kwargs(config("llama-fp8-vllm_c"), opts, "/m", False)
    assert fp8["quantization"] == "fp8" and fp8["ir_op_priority"]["rms_norm"] == ["vllm_c"]
    qwen = vc.engine_kwargs(config("qwen3-bf16-off"), opts, "/m", True)
    assert qwen["compilation_config"]["pass_config"] == {"enable_qk_norm_rope_fusion": True}
    # the q/k-norm pass is Qwen3's: a Llama engine never gets it
    llama = vc.engine_kwargs(config("llama-bf16-off"), opts, "/m", True)
    assert "pass_config" not in llama["compilation_config"]


def test_children_environments(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_FL_OOT_FORCE", "rms_norm")
    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    off = vc.child_env("off-a", str(tmp_path), 1)
    on = vc.child_env("on", str(tmp_path), 2, simulate=True)
    # nothing of this process's fldispatch configuration reaches a child
    assert not [k for k in off if k.startswith("VLLM_FL_")]
    assert [k for k in on if k.startswith("VLLM_FL_")] == ["VLLM_FL_STATS"]
    assert off["VLLM_PLUGINS"] == "" and "VLLM_PLUGINS" not in on
    assert on["FLD_VLLM_CUDA_SIMULATE"] == "1" and "FLD_VLLM_CUDA_SIMULATE" not in off
    for env in (off, on):
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
        assert env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    # a child started afresh compiles into an Inductor cache of its own
    assert off["TORCHINDUCTOR_CACHE_DIR"] != vc.child_env("off-a", str(tmp_path), 2)[
        "TORCHINDUCTOR_CACHE_DIR"]
    assert off["TRITON_CACHE_DIR"] == on["TRITON_CACHE_DIR"]


def test_decode_rate_and_its_summary():
    assert vc.decode_rate(4, 33, 0.5, 1.5) == 128.0
    assert vc.decode_rate(4, 33, 0.5, 0.5) is None  # noise: no rate
    s = vc.summarise_rates([100.0, None, 300.0, 200.0])
    assert (s["median"], s["best"]) == (200.0, 300.0)
    assert vc.summarise_rates([None])["median"] is None


def run_of(tokens, lp=None, top=None):
    lp = lp or [[-0.5] * len(s) for s in tokens]
    return {"tokens": tokens, "logprobs": lp, "top": top or [[{} for _ in s] for s in tokens]}


def test_tokens_against_the_reference():
    ref = run_of([[5, 6, 7], [8, 9, 10]])
    same = vc.compare_tokens(run_of([[5, 6, 7], [8, 9, 10]], [[-0.5, -0.4, -0.5], [-0.5] * 3]), ref)
    assert same["identical"] == 2 and same["parted"] == []
    assert same["max_abs_logprob_diff"] == pytest.approx(0.1)
    assert vc.tokens_words(same).startswith("identical; max |dlogprob| 0.1000")
    # sequence 1 parts at token 1: a near tie its top-k shows
    top = [[{}, {}, {}], [{}, {"9": -0.55}, {}]]
    parted = vc.compare_tokens(run_of([[5, 6, 7], [8, 11, 12]], top=top), ref)
    assert parted["identical"] == 1
    assert parted["parted"] == [{"seq": 1, "pos": 1, "margin_run": pytest.approx(0.05),
                                 "margin_ref": None}]
    assert "1/2 identical, first parts at token 1 (margin <= 0.050)" in vc.tokens_words(parted)
    # one sequence shorter: not identical, parted where it stops
    short = vc.compare_tokens(run_of([[5, 6, 7], [8, 9]]), ref)
    assert short["identical"] == 1 and short["parted"][0]["pos"] == 2
    assert "first parts at token 2" in vc.tokens_words(short)
    assert vc.compare_tokens(run_of([[5]]), ref) == {"comparable": False}
    assert vc.tokens_words(None) == "no reference"


def record(name, median=None, **extra):
    rec = dict(config(name), **extra)
    if median is not None:
        rec["timing"] = {"1": {"median": median, "best": median * 1.01}}
        rec["tokens"] = run_of([[5, 6, 7]])
    return rec


def test_references_ratios_and_the_aa_control():
    recs = [record("llama-bf16-off", 100.0), record("llama-bf16-fldispatch", 90.0),
            record("llama-bf16-off-aa", 102.0), record("llama-fp8-default", 80.0),
            record("llama-fp8-fldispatch", 88.0),
            record("qwen3-bf16-fldispatch", retried_without_qk_norm_rope_fusion=True,
                   errors=[{"phase": "start", "error": "x"}])]
    aa = vc.derive(recs, [1])
    assert aa == {"1": {"ratio": pytest.approx(1.02), "spread": pytest.approx(0.02)}}
    by = {r["name"]: r for r in recs}
    assert by["llama-bf16-off"]["reference"] == "itself"
    assert by["llama-bf16-fldispatch"]["reference"] == "llama-bf16-off"
    assert by["llama-bf16-fldispatch"]["ratio"] == {"1": pytest.approx(0.9)}
    # no fp8 run of vLLM alone: an fp8 setting is held against fp8's default
    assert by["llama-fp8-fldispatch"]["reference"] == "llama-fp8-default"
    assert by["llama-fp8-fldispatch"]["ratio"] == {"1": pytest.approx(1.1)}
    # an attempt retried with another pass_config is no configuration's figure
    assert "reference" not in by["qwen3-bf16-fldispatch"]


def simulate(tmp_path, *argv, **env):
    out = tmp_path / "out"
    child_env = dict(os.environ, **{"FLD_VLLM_CUDA_SIMULATE_S": "0.01", **env})
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--simulate", "--out", str(out), "--model-dir",
         str(tmp_path / "models"), "--cache-dir", str(tmp_path / "cache"), *argv],
        env=child_env, capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "table.txt").read_text().strip() in proc.stdout
    return proc, records, summary


def test_a_simulated_run_retries_failed_starts_and_survives_a_dead_child(tmp_path):
    proc, records, summary = simulate(
        tmp_path, "--configs", "1,2,3,4,5,6,7,8", "--budget-s", "120",
        FLD_VLLM_CUDA_SIMULATE_FAIL="llama-bf16-default,qwen3-bf16-fldispatch",
        FLD_VLLM_CUDA_SIMULATE_CRASH="llama-fp8-default")
    assert proc.returncode == 0, proc.stderr
    names = [(r["name"], bool(r.get("retry"))) for r in records]
    assert names == [("llama-bf16-off", False), ("llama-bf16-fldispatch", False),
                     ("llama-bf16-default", False), ("llama-bf16-default", True),
                     ("llama-bf16-off-aa", False), ("qwen3-bf16-off", False),
                     ("qwen3-bf16-fldispatch", False), ("qwen3-bf16-fldispatch", True),
                     ("llama-fp8-default", False), ("llama-fp8-fldispatch", False)]
    by = {(r["name"], bool(r.get("retry"))): r for r in records}
    # a start that fails in a child that ran an engine before: once more, in a fresh child
    first = by[("llama-bf16-default", False)]
    assert first["retried_in_a_fresh_child"] and not first["fresh_child"]
    assert by[("llama-bf16-default", True)]["fresh_child"]
    assert "retried in a fresh one" in proc.stdout
    # a Qwen3 start that fails in a fresh child: once more without the q/k-norm pass
    qwen = by[("qwen3-bf16-fldispatch", False)]
    assert qwen["fresh_child"] and qwen["retried_without_qk_norm_rope_fusion"]
    retry = by[("qwen3-bf16-fldispatch", True)]
    assert retry["qk_norm_rope_fusion"] is False
    assert "pass_config" not in retry["kwargs"]["compilation_config"]
    assert "retried without it" in proc.stdout
    # a child that dies: that configuration's error, and the next one runs in a new child
    dead = by[("llama-fp8-default", False)]
    assert dead["errors"][0]["phase"] == "child" and "exit status 3" in dead["errors"][0]["error"]
    after = by[("llama-fp8-fldispatch", False)]
    assert after["fresh_child"] and after["timing"] and not after.get("errors")
    assert after["kwargs"]["quantization"] == "fp8"
    # what ran is measured and compared: the A/A pair, the ratios, the tokens
    assert set(summary["aa"]) == {"1", "32"}
    fld = by[("llama-bf16-fldispatch", False)]
    assert fld["reference"] == "llama-bf16-off" and fld["tokens_vs_reference"]["identical"] == 32
    assert fld["capture"]["lowering"]["rms_norm"] == {"fldispatch": 1}
    assert summary["skipped"] == []


def test_a_simulated_run_stops_at_its_budget(tmp_path):
    proc, records, summary = simulate(tmp_path, "--configs", "1,2,3", "--budget-s", "1",
                                      FLD_VLLM_CUDA_SIMULATE_S="0.8")
    assert proc.returncode == 0, proc.stderr
    # the first always runs; the next would pass the budget and is skipped, by name
    assert [r["name"] for r in records] == ["llama-bf16-off"]
    assert [s["name"] for s in summary["skipped"]] == ["llama-bf16-fldispatch",
                                                       "llama-bf16-default"]
    assert re.search(r"^ 3 llama-bf16-default +SKIPPED \(budget: ", proc.stdout, re.M)


def test_every_configuration_failing_is_a_failed_run(tmp_path):
    proc, records, _ = simulate(tmp_path, "--configs", "1", FLD_VLLM_CUDA_SIMULATE_FAIL="llama-bf16-off")
    assert proc.returncode == 1
    assert records[0]["errors"][0]["phase"] == "start"


def test_the_dry_run_imports_neither_vllm_nor_torch(tmp_path):
    code = ("import runpy, sys; sys.argv = [sys.argv[0], '--dry-run', '--configs', '2,6'];\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('imported:', sorted({'torch', 'vllm'} & set(sys.modules)))" % SCRIPT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "imported: []" in proc.stdout
    plan = [line for line in proc.stdout.splitlines() if "LLM(**" in line]
    assert [line.split()[1] for line in plan] == ["llama-bf16-fldispatch", "qwen3-bf16-fldispatch"]
    assert '"enable_qk_norm_rope_fusion": true' in plan[1]
