# SPDX-License-Identifier: Apache-2.0
"""The module surface: introspection, policy scopes, errors, streams."""

import json
import os
import subprocess
import sys
import threading
import typing

import pytest
import torch

import fldispatch
from conftest import unserved_device

TOOL_ARGS = [sys.executable, "-m", "fldispatch"]


def tool_json(*args):
    out = subprocess.run(TOOL_ARGS + list(args) + ["--json"], capture_output=True, text=True,
                         check=False, env=os.environ)
    assert out.returncode in (0, 3), out.stderr
    return json.loads(out.stdout)


def test_version_is_the_library_version():
    assert fldispatch.__version__ == fldispatch._C.version()
    assert fldispatch.__version__.count(".") == 2


def test_every_contract_name_exists():
    for name in fldispatch.OPS + ("resolve", "explain", "plugins", "config", "reload", "policy",
                                  "Error", "InvalidArgumentError", "ConfigError"):
        assert hasattr(fldispatch, name), name


def test_resolve_and_dtype_spellings():
    impl = fldispatch.resolve("rms_norm")
    assert impl == fldispatch.resolve("rms_norm", "cpu", "float32")
    for dtype in ("bfloat16", "bf16", torch.bfloat16):
        assert fldispatch.resolve("rms_norm", device="cpu", dtype=dtype) == \
            fldispatch.resolve("rms_norm", "cpu", "bf16")
    assert fldispatch.resolve("rms_norm", torch.device("cpu"), torch.float16)
    assert fldispatch.resolve("attention_backend") in {"vendor.cpu", "reference.c"}


def test_resolve_errors():
    e: pytest.ExceptionInfo[fldispatch.Error]
    with pytest.raises(fldispatch.NotFoundError) as e:
        fldispatch.resolve("no_such_op")
    assert e.value.status == -2 and "no_such_op" in str(e.value)
    with pytest.raises(fldispatch.InvalidArgumentError, match="unknown device 'tpu'"):
        fldispatch.resolve("rms_norm", "tpu")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        fldispatch.resolve("rms_norm", "cpu", "int8")
    with pytest.raises(fldispatch.UnavailableError) as e:
        fldispatch.resolve("rms_norm", unserved_device())
    assert e.value.status == -3


def test_explain_is_resolve_json():
    assert fldispatch.explain("rms_norm") == tool_json("resolve", "rms_norm")
    assert fldispatch.explain("rms_norm")["order"] == ["flagos", "vendor", "reference"]


def test_explain_of_an_unservable_device_selects_nothing():
    got = fldispatch.explain("silu_and_mul", unserved_device())
    assert got["selected"] is None and got["candidates"] == []


def fresh_process_api():
    """plugins(), impls() and config() of a new Python process in this environment: what the
    library finds by itself, whatever earlier tests of this process loaded at run time."""
    code = ("import json, fldispatch; print(json.dumps({'plugins': fldispatch.plugins(), "
            "'impls': fldispatch.impls(), 'config': fldispatch.config()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, env=os.environ)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_plugins_impls_config_are_the_tool_json():
    """The same keys, values and types as `fldispatch list/config --json` (schema 1), compared
    in a new process, so that plugins other tests load at run time do not count."""
    listing = tool_json("list")
    api = fresh_process_api()
    assert api["plugins"] == listing["plugins"]
    assert api["impls"] == listing["impls"]
    cpu = [p for p in api["plugins"] if p["name"] == "cpu"]
    assert cpu and cpu[0]["status"] == "loaded" and cpu[0]["impl_count"] > 0
    cfg = api["config"]
    assert cfg == tool_json("config")
    assert cfg["platform"]["name"] == "cpu"
    strict = [f for f in cfg["policy"] if f["key"] == "strict"][0]
    assert strict["value"] is False


def test_reload_rereads_the_environment(monkeypatch):
    assert fldispatch.resolve("silu_and_mul") != "reference.c"
    monkeypatch.setenv("VLLM_FL_PREFER", "reference")
    fldispatch.reload()
    try:
        assert fldispatch.resolve("silu_and_mul") == "reference.c"
        prefer = [f for f in fldispatch.config()["policy"] if f["key"] == "prefer"][0]
        assert prefer["source"] == "VLLM_FL_PREFER"
    finally:
        monkeypatch.delenv("VLLM_FL_PREFER")
        fldispatch.reload()
    assert fldispatch.resolve("silu_and_mul") != "reference.c"


def test_reload_with_a_bad_variable_is_a_config_error_and_changes_nothing(monkeypatch):
    before = fldispatch.resolve("rms_norm")
    monkeypatch.setenv("VLLM_FL_PREFER", "fastest")
    with pytest.raises(fldispatch.ConfigError) as e:
        fldispatch.reload()
    assert isinstance(e.value, ValueError) and e.value.status == -4
    assert "VLLM_FL_PREFER" in str(e.value)
    monkeypatch.delenv("VLLM_FL_PREFER")
    fldispatch.reload()
    assert fldispatch.resolve("rms_norm") == before


def test_error_classes():
    classes = [fldispatch.InvalidArgumentError, fldispatch.NotFoundError,
               fldispatch.UnavailableError, fldispatch.ConfigError, fldispatch.PluginError,
               fldispatch.ImplementationError, fldispatch.OutOfMemoryError,
               fldispatch.UnsupportedError, fldispatch.StateError]
    assert sorted(typing.cast(int, c.status) for c in classes) == list(range(-9, 0))
    for c in classes:
        assert issubclass(c, fldispatch.Error)
    assert issubclass(fldispatch.InvalidArgumentError, ValueError)
    assert issubclass(fldispatch.ConfigError, ValueError)
    assert not issubclass(fldispatch.NotFoundError, ValueError)


def test_error_message_is_fld_last_error():
    x = torch.randn(3, 7)
    with pytest.raises(fldispatch.InvalidArgumentError) as e:
        fldispatch.silu_and_mul(torch.empty(3, 3), x)
    assert str(e.value) == fldispatch._C.last_error()
    assert "'x'" in str(e.value) and "odd" in str(e.value)


def test_attention_backend():
    assert fldispatch.attention_backend("cpu") == "CPU_ATTN"
    assert fldispatch.attention_backend(device="cpu", use_mla=False, use_sparse=False)
    with pytest.raises(fldispatch.InvalidArgumentError):
        fldispatch.attention_backend("quantum")


def test_argument_errors_are_type_errors():
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        fldispatch.silu_and_mul(torch.empty(2, 4))  # type: ignore[call-arg]  # the refusal under test
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        fldispatch.silu_and_mul(torch.empty(2, 4), y=x)  # type: ignore[call-arg]  # the refusal under test
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        fldispatch.silu_and_mul(torch.empty(2, 4), x, x=x)  # type: ignore[misc]  # the refusal under test
    out = torch.empty(2, 4)
    fldispatch.silu_and_mul(x=x, out=out)
    assert torch.allclose(out, torch.nn.functional.silu(x[:, :4]) * x[:, 4:])


# ---- policy scopes -----------------------------------------------------------------


def test_policy_scope_applies_and_restores():
    default = fldispatch.resolve("rms_norm")
    with fldispatch.policy(prefer="reference") as p:
        assert isinstance(p, fldispatch.policy)
        assert fldispatch.resolve("rms_norm") == "reference.c"
        with fldispatch.policy(per_op={"rms_norm": ["vendor", "reference"]}):
            assert fldispatch.resolve("rms_norm") == default
            assert fldispatch.resolve("silu_and_mul") == "reference.c"
        assert fldispatch.resolve("rms_norm") == "reference.c"
    assert fldispatch.resolve("rms_norm") == default


def test_policy_fields():
    with fldispatch.policy(deny_vendors=["cpu"]):
        assert fldispatch.resolve("rms_norm") == "reference.c"
        assert "deny=cpu" in fldispatch.describe_policy()
    with fldispatch.policy(allow_vendors="cuda"):
        assert fldispatch.resolve("rms_norm") == "reference.c"
    with fldispatch.policy(per_op="rms_norm=reference", strict=True):
        assert fldispatch.resolve("rms_norm") == "reference.c"
        assert "strict=1" in fldispatch.describe_policy()
    assert "deny" not in fldispatch.describe_policy()


def test_policy_is_reusable_and_reentrant():
    p = fldispatch.policy(prefer="reference")
    for _ in range(2):
        with p:
            with p:
                assert fldispatch.resolve("rms_norm") == "reference.c"
            assert fldispatch.resolve("rms_norm") == "reference.c"
        assert fldispatch.resolve("rms_norm") != "reference.c"


def test_bad_policy_raises_and_applies_nothing():
    before = fldispatch.describe_policy()
    with pytest.raises(fldispatch.ConfigError):
        with fldispatch.policy(prefer="reference", per_op={"rms_norm": "nonsense"}):
            pass
    with pytest.raises(ValueError, match="prefer"):
        with fldispatch.policy(prefer="fastest"):
            pass
    assert fldispatch.describe_policy() == before
    with pytest.raises(TypeError):
        fldispatch.policy(strict="yes")  # type: ignore[arg-type]  # the refusal under test
    with pytest.raises(TypeError):
        fldispatch.policy(per_op=[("rms_norm", "vendor")])  # type: ignore[arg-type]  # the refusal under test


def test_policy_left_on_another_thread_is_a_state_error():
    p = fldispatch.policy(prefer="reference")
    p.__enter__()
    errors = []

    def leave():
        try:
            p.__exit__(None, None, None)
        except fldispatch.StateError as e:
            errors.append(e)

    t = threading.Thread(target=leave)
    t.start()
    t.join()
    assert errors and "thread" in str(errors[0])
    assert fldispatch.resolve("rms_norm") == "reference.c"
    p.__exit__(None, None, None)
    assert fldispatch.resolve("rms_norm") != "reference.c"


def test_policy_exit_on_exception_restores():
    with pytest.raises(RuntimeError):
        with fldispatch.policy(prefer="reference"):
            raise RuntimeError("boom")
    assert fldispatch.resolve("rms_norm") != "reference.c"


def test_streams_are_thread_local_handles():
    assert fldispatch.get_stream("cuda") == 0
    fldispatch.set_stream("cuda", 0x1234)
    try:
        assert fldispatch.get_stream("cuda") == 0x1234
        seen = []
        t = threading.Thread(target=lambda: seen.append(fldispatch.get_stream("cuda")))
        t.start()
        t.join()
        assert seen == [0]
    finally:
        fldispatch.set_stream("cuda", None)
    assert fldispatch.get_stream("cuda") == 0


def test_python_m_fldispatch_runs_the_bundled_tool():
    out = subprocess.run(TOOL_ARGS + ["resolve", "rms_norm"], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.splitlines()[0] == fldispatch.resolve("rms_norm")
