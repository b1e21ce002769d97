# SPDX-License-Identifier: Apache-2.0
"""python -m fldispatch tune: the tool's tune in this process, timing a
Python implementation (torch eager rms_norm from a plugin module) beside the
C ones, checked against the reference, and a manifest that the library loads."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")


def run_tune(tmp_path, *args):
    (tmp_path / "eager_norm.py").write_text(textwrap.dedent("""
        import torch

        def rms_norm(out, x, weight, residual, eps):
            if residual is not None:
                residual.add_(x)
                x = residual
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            if weight is not None:
                y = y * weight.float()
            out.copy_(y.to(out.dtype))

        def register(registry):
            registry.register_impl("rms_norm", rms_norm, impl_id="vendor.torch_eager",
                                   kind="vendor", vendor="torch_eager", devices=["cpu"],
                                   dtypes=["float32"])
    """))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["VLLM_FL_PLUGIN_MODULES"] = "eager_norm"
    env.pop("VLLM_FL_MANIFEST", None)
    return subprocess.run([sys.executable, "-m", "fldispatch", "tune", "rms_norm", "--dtype", "f32",
                           "--quick", "--hidden", "256"] + list(args),
                          capture_output=True, text=True, env=env, timeout=300)


def test_tune_times_a_python_implementation(tmp_path):
    manifest = tmp_path / "tuned.yaml"
    r = run_tune(tmp_path, "--shapes", "1-4=1,4;5-=64", "--out", str(manifest), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["manifest"] == str(manifest)
    assert [res["rows"] for res in doc["results"]] == ["1-4", "5-"]
    for res in doc["results"]:
        by_id = {i["impl_id"]: i for i in res["impls"]}
        assert by_id["vendor.torch_eager"]["correct"], by_id["vendor.torch_eager"]["why"]
        assert by_id["vendor.torch_eager"]["ns"] > 0
        assert by_id["reference.c"]["correct"]
        # The policy's choice stays unless a challenger wins by more than the spread.
        assert res["default"] == "vendor.cpu"
        winner = by_id[res["winner"]]
        assert winner["why"] is None
        if res["decision"] == "pinned":
            assert winner["min_ns"] < by_id["vendor.cpu"]["min_ns"]
            assert res["reason"].startswith("faster than the default winner vendor.cpu by ")
        else:
            assert res["winner"] == "vendor.cpu"
        for i in res["impls"]:
            assert (i["why"] is None) == (i["impl_id"] == res["winner"])
    text = manifest.read_text()
    assert "version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32, " in text
    for res in doc["results"]:
        assert f"impl: {res['winner']}" in text


def test_tune_leaves_out_a_wrong_python_implementation(tmp_path):
    (tmp_path / "wrong_norm.py").write_text(textwrap.dedent("""
        import torch  # noqa: F401  (the tensors come as torch tensors once torch is imported)

        def rms_norm(out, x, weight, residual, eps):
            out.copy_(x)  # not normalised

        def register(registry):
            registry.register_impl("rms_norm", rms_norm, impl_id="vendor.wrong",
                                   kind="vendor", vendor="wrong", devices=["cpu"],
                                   dtypes=["float32"])
    """))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    env["VLLM_FL_PLUGIN_MODULES"] = "wrong_norm"
    r = subprocess.run([sys.executable, "-m", "fldispatch", "tune", "rms_norm", "--dtype", "f32",
                        "--quick", "--hidden", "256", "--shapes", "1-4=2", "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stderr  # a wrong implementation: left out, the run says so
    res = json.loads(r.stdout)["results"][0]
    wrong = [i for i in res["impls"] if i["impl_id"] == "vendor.wrong"][0]
    assert not wrong["correct"] and wrong["why"].startswith("wrong: max error ")
    assert " at out[" in wrong["why"]
    assert res["winner"] != "vendor.wrong"
