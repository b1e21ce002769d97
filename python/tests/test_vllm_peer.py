# SPDX-License-Identifier: Apache-2.0
"""bench/vllm_peer.py picks the vLLM CPU library vLLM itself would load, from an
injected CPU feature set (never the host's), and never one the CPU cannot run."""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location(
    "vllm_peer", os.path.join(ROOT, "bench", "vllm_peer.py"))
assert spec is not None and spec.loader is not None
vp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(vp)


def cpu(avx2=True, avx512=False, avx512_bf16=False, x86=True):
    return {"x86": x86, "avx2": avx2, "avx512": avx512, "avx512_bf16": avx512_bf16}


ZEN3 = cpu()
SKYLAKE_X = cpu(avx512=True)
SAPPHIRE = cpu(avx512=True, avx512_bf16=True)
ARM = cpu(avx2=False, x86=False)


@pytest.mark.parametrize("features, lib", [
    (ZEN3, "_C_AVX2"), (SKYLAKE_X, "_C_AVX512"), (SAPPHIRE, "_C"), (ARM, "_C")])
def test_follows_vllms_rule(features, lib):
    got, how = vp.choose(features, env={})
    assert got == lib
    assert "vLLM's own choice" in how


@pytest.mark.parametrize("features, cap, lib", [
    (SAPPHIRE, "avx2", "_C_AVX2"), (SKYLAKE_X, "avx2", "_C_AVX2"),
    (SAPPHIRE, "avx512", "_C_AVX512"), (SAPPHIRE, "portable", "_C_AVX2")])
def test_isa_cap_caps_the_peer_and_says_so(features, cap, lib):
    got, how = vp.choose(features, env={"VLLM_FL_CPU_ISA": cap})
    assert got == lib
    assert "a cap" in how and f"VLLM_FL_CPU_ISA={cap}" in how


@pytest.mark.parametrize("features, cap", [
    (ZEN3, "avx512"), (ZEN3, "avx512_bf16"), (SKYLAKE_X, "avx512"), (SAPPHIRE, "avx512_bf16")])
def test_cap_at_or_above_the_cpu_changes_nothing(features, cap):
    assert vp.choose(features, env={"VLLM_FL_CPU_ISA": cap}) == vp.choose(features, env={})


def test_named_library_is_used_when_the_cpu_runs_it():
    assert vp.choose(SAPPHIRE, env={"FLD_VLLM_PEER": "_C_AVX512"})[0] == "_C_AVX512"
    assert vp.choose(ZEN3, env={"FLD_VLLM_PEER": "_C_AVX2"})[0] == "_C_AVX2"


@pytest.mark.parametrize("features, env, words", [
    (ZEN3, {"FLD_VLLM_PEER": "_C"}, "needs AVX-512"),
    (ZEN3, {"FLD_VLLM_PEER": "_C_AVX512"}, "needs AVX-512"),
    (SKYLAKE_X, {"FLD_VLLM_PEER": "_C"}, "AVX512_BF16"),
    (ARM, {"FLD_VLLM_PEER": "_C_AVX2"}, "not x86"),
    (cpu(avx2=False), {}, "needs AVX2"),
    (ZEN3, {"FLD_VLLM_PEER": "_C_AVX1024"}, "expected one of"),
])
def test_never_a_library_the_cpu_cannot_run(features, env, words):
    with pytest.raises(vp.PeerError, match=words):
        vp.choose(features, env=env)


def test_load_refuses_before_importing(monkeypatch):
    imported = []
    monkeypatch.setattr(vp, "host_features", lambda: ZEN3)
    monkeypatch.setattr(importlib, "import_module", lambda name: imported.append(name))
    with pytest.raises(vp.PeerError):
        vp.load(env={"FLD_VLLM_PEER": "_C"})
    assert imported == []


def test_rounding_note_tells_truncation_from_nearest():
    assert "truncates" in vp.rounding_note(0.499, 0.06)
    assert "nearest even" in vp.rounding_note(0.001, 0.03)


def test_bf16_rounding_measures_truncation():
    torch = pytest.importorskip("torch")

    def norm(out, x, w, eps, *, truncate):
        xf, wf = x.float(), w.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * wf
        if truncate:  # drop the low 16 bits: toward zero
            bits = y.view(torch.int32) & -65536
            out.copy_((bits.view(torch.float32)).to(torch.bfloat16))
        else:
            out.copy_(y.to(torch.bfloat16))

    trunc = vp.bf16_rounding(lambda *a: norm(*a, truncate=True), tokens=8, hidden=512)
    near = vp.bf16_rounding(lambda *a: norm(*a, truncate=False), tokens=8, hidden=512)
    assert 0.4 < trunc[0] < 0.6
    assert near[0] < 0.01
    assert trunc[1] > near[1]
