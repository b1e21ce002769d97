# SPDX-License-Identifier: Apache-2.0
"""The pure parts of bench/vllm_tokens.py (its command line, the plan it
makes, the decode rate, medians and ratios, and the served-layers check),
without vLLM: nothing here times anything."""

import importlib.util
import os
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "vllm_tokens", os.path.join(ROOT, "bench", "vllm_tokens.py"))
assert spec is not None and spec.loader is not None
vt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vt)


def plan_of(*argv):
    return vt.plan(vt.parser().parse_args(list(argv)))


def test_default_plan_compiles_only_the_large_model():
    p = plan_of()
    assert (p["rounds"], p["tokens"], p["batch"]) == (3, 32, [1, 8])
    compiled = {m for m, mode, _ in p["configs"] if mode == "compiled"}
    assert compiled == {"llama-big"}
    eager = {m for m, mode, _ in p["configs"] if mode == "eager"}
    assert eager == set(vt.MODELS)
    assert len(p["configs"]) == (len(vt.MODELS) + 1) * 2


def test_full_plan_compiles_every_model():
    p = plan_of("--full")
    assert len(p["configs"]) == len(vt.MODELS) * 2 * 2
    assert (p["rounds"], p["tokens"]) == (5, 64)


def test_quick_plan_and_explicit_options_override_it():
    assert plan_of("--quick")["configs"] == [("llama", "eager", "f32")]
    p = plan_of("--quick", "--models", "gemma,llama-big", "--modes", "compiled",
                "--dtypes", "bf16", "--rounds", "4", "--tokens", "10", "--batch", "2")
    assert p == {"configs": [("gemma", "compiled", "bf16"), ("llama-big", "compiled", "bf16")],
                 "rounds": 4, "max_rounds": 8, "spread": 0.03, "tokens": 10, "batch": [2],
                 "on": "default"}
    # --modes given: compiled on every model asked for, not only the default's
    assert ("llama", "compiled", "f32") in plan_of("--modes", "compiled")["configs"]


@pytest.mark.parametrize("argv, named", [
    (["--models", "llama,mistral"], "--models: mistral"), (["--modes", "lazy"], "--modes: lazy"),
    (["--dtypes", "f16"], "--dtypes: f16"), (["--tokens", "1"], "--tokens: '1'"),
    (["--rounds", "0"], "--rounds: '0'"), (["--batch", "1,x"], "--batch: '1,x'"),
    (["--batch", "0"], "--batch: '0'"), (["--quick", "--full"], "--full: not allowed"),
    (["--spread", "0"], "--spread: '0'"), (["--spread", "x"], "--spread: 'x'"),
    (["--max-rounds", "0"], "--max-rounds: '0'")])
def test_bad_command_lines_are_usage_errors(argv, named, capsys):
    with pytest.raises(SystemExit) as e:
        vt.parser().parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert named in err, err


def test_decode_rate_leaves_the_prefill_out():
    # 8 sequences, 33 new tokens: 32 decoded after the first, in 2.0 - 0.4 s
    s = {"batch": 8, "tokens": 33, "prefill_s": 0.4, "generate_s": 2.0}
    assert vt.decode_rate(s) == pytest.approx(8 * 32 / 1.6)
    assert vt.decode_rate(dict(s, generate_s=0.3)) is None


def test_summary_median_best_and_ratio():
    def sample(t):
        return {"batch": 1, "tokens": 11, "prefill_s": 0.0, "generate_s": t}
    off = vt.summarise([sample(t) for t in (1.0, 2.0, 0.5)])
    assert off["tok_s"] == pytest.approx(10.0) and off["best_tok_s"] == pytest.approx(20.0)
    on = vt.summarise([sample(t) for t in (0.8, 0.8, 4.0, 0.4)])
    assert on["tok_s"] == pytest.approx((12.5 + 12.5) / 2)
    assert vt.ratio(on, off) == pytest.approx(1.25)
    dropped = vt.summarise([dict(sample(1.0), prefill_s=2.0), sample(0.5)])
    assert dropped["dropped"] == 1 and dropped["tok_s"] == pytest.approx(20.0)
    none = vt.summarise([dict(sample(1.0), prefill_s=2.0)])
    assert none["tok_s"] is None and vt.ratio(none, off) is None


def row(op, dtype="f32", calls=5, fallbacks=0, failures=0, impl="vendor.cpu"):
    return {"op": op, "impl_id": impl, "device": "cpu", "dtype": dtype, "calls": calls,
            "fallbacks": fallbacks, "failures": failures, "total_ns": 0}


def test_check_served():
    ops = vt.LAYER_OPS["llama"]
    ok: list[dict[str, Any]] = [{"pid": 1, "fldispatch": True, "stats": [row(op) for op in ops]}]
    assert vt.check_served("on", "llama", "float32", ok) is None
    assert vt.served_impls("llama", "float32", ok) == {op: ["vendor.cpu"] for op in sorted(ops)}
    # another dtype's counters do not count
    assert "did not serve" in vt.check_served("on", "llama", "bfloat16", ok)
    # one op missing, or never called
    assert "silu_and_mul" in vt.check_served(
        "on", "llama", "float32", [dict(ok[0], stats=[row("rms_norm"), row("rotary_embedding")])])
    assert "rms_norm" in vt.check_served(
        "on", "llama", "float32", [dict(ok[0], stats=[row("rms_norm", calls=0)]
                                        + [row(op) for op in ops[1:]])])
    assert "fell back" in vt.check_served(
        "on", "llama", "float32", [dict(ok[0], stats=ok[0]["stats"] + [row("rms_norm",
                                                                            fallbacks=1)])])
    assert "not loaded" in vt.check_served("on", "llama", "float32",
                                           [{"pid": 1, "fldispatch": False}])
    assert vt.check_served("off", "llama", "float32", [{"pid": 1, "fldispatch": False}]) is None
    assert "loaded" in vt.check_served("off", "llama", "float32", ok)
    # a compiled engine's rotary layer counts as rotary_embedding_out
    traced = [dict(ok[0], stats=[row("rotary_embedding_out" if op == "rotary_embedding" else op)
                                 for op in ops])]
    assert vt.check_served("on", "llama", "float32", traced) is None


def test_a_row_without_a_figure_keeps_its_columns():
    def sample(t):
        return {"batch": 1, "tokens": 8, "prefill_s": 1.0, "generate_s": t}
    row = {"model": "gemma", "mode": "eager", "dtype": "f32", "batch": 1, "rounds": 3,
           "off": vt.summarise([sample(0.5)]), "on": vt.summarise([sample(2.0)])}
    row["ratio"] = vt.ratio(row["on"], row["off"])
    row["aa"] = vt.aa_control({"off-a": row["off"], "off-b": row["off"], "on-a": row["on"],
                               "on-b": row["on"]})
    missing = vt.format_row(row)
    row["off"] = row["on"]
    row["ratio"] = vt.ratio(row["on"], row["off"])
    row["aa"] = vt.aa_control({c: row["on"] for c in vt.CHILDREN})
    full = vt.format_row(row)
    assert full.split()[8:] == ["1.00x", "0.0%", "1.00x", "1.00x", "3"]
    assert missing.split()[4:12] == ["-", "-", "7.0", "7.0", "-", "-", "-", "1.00x"]
    assert len(missing.split("  (pairs")[0]) == len(full)
    assert "pairs dropped: off 1, on 0" in missing


def test_aa_control_spread_is_the_wider_setting():
    def rate(tok_s):  # a summary with that median
        return {"tok_s": tok_s}
    aa = vt.aa_control({"off-a": rate(100.0), "off-b": rate(94.0), "on-a": rate(110.0),
                        "on-b": rate(112.2)})
    assert aa["off"] == pytest.approx(0.94) and aa["on"] == pytest.approx(1.02)
    assert aa["spread"] == pytest.approx(0.06)
    aa = vt.aa_control({"off-a": rate(None), "off-b": rate(94.0), "on-a": rate(110.0),
                        "on-b": rate(112.2)})
    assert aa["off"] is None and aa["spread"] is None


def test_children_take_turns_going_first():
    assert set(vt.CHILDREN) == {"off-a", "off-b", "on-a", "on-b"}
    firsts = [vt.child_order(r)[0] for r in range(len(vt.CHILDREN))]
    assert sorted(firsts) == sorted(vt.CHILDREN)
    for r in range(6):
        assert sorted(vt.child_order(r)) == sorted(vt.CHILDREN)


def test_on_forms_and_the_environment(monkeypatch):
    """"on" is the plugin with its defaults, or forced on every layer in
    every mode (compiled included, where the default leaves them to vLLM);
    the caller's VLLM_FL_* do not leak in."""
    monkeypatch.setenv("VLLM_FL_OOT_BLACKLIST", "silu_and_mul")
    monkeypatch.setenv("VLLM_FL_OOT_FORCE", "rms_norm")
    monkeypatch.setenv("VLLM_PLUGINS", "other")
    forced, default = vt.child_env("on-a", "forced"), vt.child_env("on-b", "default")
    off = vt.child_env("off-b", "forced")
    assert forced["VLLM_FL_OOT_FORCE"] == "all" and forced["VLLM_FL_STATS"] == "1"
    assert "VLLM_FL_OOT_FORCE" not in default and default["VLLM_FL_STATS"] == "1"
    for on in (forced, default):
        assert "VLLM_PLUGINS" not in on and "VLLM_FL_OOT_BLACKLIST" not in on
    assert off["VLLM_PLUGINS"] == "" and not any(k.startswith("VLLM_FL_") for k in off)
    assert vt.plan(vt.parser().parse_args([]))["on"] == "default"
    assert vt.plan(vt.parser().parse_args(["--on", "forced"]))["on"] == "forced"


def test_default_on_expects_what_the_mode_table_gives():
    """Under the defaults, eager serves every layer op and Inductor none;
    forced serves all in any mode; check_served holds the counters to it."""
    ops = set(vt.LAYER_OPS["gemma"])
    assert vt.expected_ops("gemma", "default", "eager") == ops
    assert vt.expected_ops("gemma", "default", "inductor") == set()
    assert vt.expected_ops("gemma", "forced", "inductor") == ops
    nothing = [{"pid": 1, "fldispatch": True, "stats": []}]
    assert vt.check_served("on", "llama", "float32", nothing, set()) is None
    served = [{"pid": 1, "fldispatch": True, "stats": [row("rotary_embedding")]}]
    assert "rotary_embedding" in vt.check_served("on", "llama", "float32", served, set())
    assert "which its default leaves to vLLM" in vt.check_served(
        "on", "llama", "float32", served, set())
    assert vt.check_served("on", "llama", "float32", served, {"rotary_embedding"}) is None


def test_spread_target_and_round_limit_in_the_plan():
    p = plan_of("--rounds", "5")
    assert (p["rounds"], p["max_rounds"], p["spread"]) == (5, 10, 0.03)
    p = plan_of("--rounds", "5", "--max-rounds", "3", "--spread", "1.5")
    # never fewer rounds than --rounds
    assert (p["rounds"], p["max_rounds"], p["spread"]) == (5, 5, 0.015)


def timed(batch, generate_s):
    return {"batch": batch, "tokens": 11, "prefill_s": 0.0, "generate_s": generate_s}


def test_rows_and_the_batch_sizes_whose_spread_is_wide():
    # batch 1: the two children of each setting agree; batch 8: off-b is 10% slower than off-a
    samples = {"off-a": [timed(1, 1.0), timed(8, 1.0)], "off-b": [timed(1, 1.0), timed(8, 1.1)],
               "on-a": [timed(1, 0.8), timed(8, 0.9)], "on-b": [timed(1, 0.8), timed(8, 0.9)]}
    rows = [vt.make_row(("llama", "eager", "f32"), b, 11, samples, 2) for b in (1, 8)]
    assert [r["batch"] for r in rows] == [1, 8] and rows[0]["rounds"] == 2
    assert rows[0]["ratio"] == pytest.approx(1.25) and rows[0]["aa"]["spread"] == 0
    assert rows[1]["aa"]["off"] == pytest.approx(1 / 1.1)
    assert len(rows[1]["off"]["samples"]) == 2
    assert vt.wide(rows, 0.03) == [8]
    assert vt.wide(rows, 0.10) == []
    # a row without an A/A figure is wide: more pairs may give one
    samples["on-b"] = [timed(1, 0.8)]
    rows = [vt.make_row(("llama", "eager", "f32"), b, 11, samples, 2) for b in (1, 8)]
    assert vt.wide(rows, 0.5) == [8]


class Scripted:
    """A stand-in child: its "time" answers are the next of a list of
    generate times, one sample per batch size."""

    hello: dict[str, Any]  # set by the test, as a child's hello

    def __init__(self, times, batch):
        self.times, self.batch, self.asked = list(times), batch, 0

    def ask(self, cmd):
        if cmd["cmd"] == "time":
            self.asked += 1
            t = self.times.pop(0)
            return {"samples": [timed(b, t) for b in self.batch]}
        if cmd["cmd"] == "start":
            return {"startup_s": 0.0, "warmup_s": 0.0}
        return {"served": {}}

    def close(self):
        pass


@pytest.mark.parametrize("off_b, max_rounds, rounds_run", [
    # the two off children agree from the start: the fixed rounds only
    ([1.0] * 8, 6, 2),
    # off-b is slow in its first round only: one extra round brings the medians together
    ([1.3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 6, 3),
    # always 20% apart: more rounds up to the limit, then the row reports its spread
    ([1.2] * 8, 5, 5)])
def test_more_rounds_run_while_the_spread_is_wide(monkeypatch, off_b, max_rounds, rounds_run):
    batch = [1, 4]
    kids = {"off-a": Scripted([1.0] * 8, batch), "off-b": Scripted(off_b, batch),
            "on-a": Scripted([0.9] * 8, batch), "on-b": Scripted([0.9] * 8, batch)}
    monkeypatch.setattr(vt, "Driven", lambda s, *a: kids[s])
    monkeypatch.setattr(vt, "cached_models", lambda big: {"llama": "m", "tokenizer": "t"})
    for k in kids.values():
        k.hello = {"vllm": "0", "import_s": 0.0}
    p = {"configs": [("llama", "eager", "f32")], "rounds": 2, "max_rounds": max_rounds,
         "spread": 0.03, "on": "default", "tokens": 11, "batch": batch}
    said: list[str] = []
    doc = vt.run(p, "/nonexistent", said.append)
    assert all(k.asked == rounds_run for k in kids.values())
    assert [r["rounds"] for r in doc["results"]] == [rounds_run] * len(batch)
    assert sum("one more" in m for m in said) == rounds_run - 2
    assert len(doc["results"][0]["off"]["samples"]) == 2 * rounds_run
