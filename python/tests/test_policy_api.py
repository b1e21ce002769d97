# SPDX-License-Identifier: Apache-2.0
"""The policy from Python: scopes that a KeyboardInterrupt cannot leave
behind, the thread's reset, whole-policy scopes and policy files, the
global policy, the names check, the failure memory and the log level."""

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

import fldispatch
from conftest import fixture_plugin

BASELINE = fldispatch.describe_policy()


def clean():
    return fldispatch.describe_policy() == BASELINE and fldispatch._C.policy_depth() == 0


# ---- KeyboardInterrupt at every point of a with block -------------------------------


def run_interrupted_at(k, body):
    """Runs body() with a trace and profile hook that raises KeyboardInterrupt
    at the k-th point where CPython may run a signal handler: the start of a
    Python function ('call') and the return of a C function ('c_return').
    True when it fired (k was within the run). ('line' events also fire
    where no handler can run, e.g. between a with body and its __exit__
    call, a window every context manager has under a tracer.)"""
    seen = 0
    fired = False

    def hook(frame, event, arg):
        nonlocal seen, fired
        if event in ("call", "c_return"):
            seen += 1
            if seen == k and not fired:
                fired = True
                raise KeyboardInterrupt
        return hook

    sys.settrace(hook)
    sys.setprofile(hook)
    try:
        body()
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)
        sys.settrace(None)
    return fired


@pytest.mark.parametrize("kind", ["fields", "nested", "reused"])
def test_keyboard_interrupt_anywhere_leaves_no_override(kind):
    outer = fldispatch.policy(prefer="reference", per_op={"rms_norm": "vendor|reference"})
    inner = fldispatch.policy(deny_vendors="cpu", strict=False)

    def body():
        if kind == "fields":
            with outer:
                fldispatch.resolve("rms_norm")
        elif kind == "nested":
            with outer:
                with inner:
                    fldispatch.resolve("rms_norm")
        else:
            with outer:
                with outer:
                    pass

    assert fldispatch.describe_policy() == BASELINE
    fldispatch.plugins()  # discovery done first: test_discovery.py interrupts that
    k = 1
    while run_interrupted_at(k, body):
        assert fldispatch.describe_policy() == BASELINE, f"override left behind at event {k}"
        k += 1
    assert k > 3  # the hook did fire inside the blocks
    assert clean()


def test_reset_thread_policy_clears_what_was_left():
    p = fldispatch.policy(prefer="reference")
    p.__enter__()
    p.__enter__()
    fldispatch._C.PolicyScope((), (), 0, None)  # not entered: nothing
    assert fldispatch.resolve("rms_norm") == "reference.c"
    fldispatch.reset_thread_policy()
    assert clean()
    # a block still open when the thread is reset leaves quietly
    with fldispatch.policy(prefer="reference"):
        fldispatch.reset_thread_policy()
        assert clean()
        with fldispatch.policy(deny_vendors="cpu"):
            assert fldispatch.resolve("rms_norm") == "reference.c"
        assert clean()
    assert clean()
    p.__exit__(None, None, None)  # its entries survived the reset: no error
    assert clean()


def test_reset_thread_policy_is_per_thread():
    with fldispatch.policy(prefer="reference"):
        t = threading.Thread(target=fldispatch.reset_thread_policy)
        t.start()
        t.join()
        assert fldispatch.resolve("rms_norm") == "reference.c"
    assert clean()


# ---- arguments -----------------------------------------------------------------------


def test_per_op_none_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match=r"per_op\['rms_norm'\]"):
        fldispatch.policy(per_op={"rms_norm": None})
    with pytest.raises(TypeError, match=r"per_op\['rms_norm'\]"):
        fldispatch.set_policy(per_op={"rms_norm": [None]})
    with pytest.raises(TypeError, match="unexpected keyword argument 'prefered'"):
        fldispatch.policy(prefered="vendor")
    with pytest.raises(TypeError, match="enabled must be a bool"):
        fldispatch.set_policy(enabled="no")
    with pytest.raises(TypeError, match="inherit"):
        fldispatch.policy(inherit="no")  # type: ignore[arg-type]  # the refusal under test
    with pytest.raises(TypeError, match="file="):
        fldispatch.policy(prefer="vendor", file="x.yaml")


@pytest.mark.parametrize("fields, named", [
    (dict(allow_vendors=["cpu,cuda"]), "allow_vendors: 'cpu,cuda'"),
    (dict(deny_vendors=("a,b", "c")), "deny_vendors: 'a,b'"),
    (dict(per_op={"rms_norm": ["vendor|reference"]}), "per_op['rms_norm']: 'vendor|reference'"),
    (dict(per_op={"rms_norm": ["vendor;x=y"]}), "per_op['rms_norm']: 'vendor;x=y'"),
])
def test_a_list_item_holding_a_separator_is_refused(fields, named):
    """An item of a list is one name: 'cpu,cuda' is not taken for two vendors,
    nor 'vendor|reference' for two tokens (a str in the variable's form is)."""
    for make in (fldispatch.policy, fldispatch.set_policy):
        with pytest.raises(fldispatch.ConfigError, match="^" + re.escape(
                f"{make.__name__}(): {named} is not one name")):
            make(**fields)
    with fldispatch.policy(allow_vendors="cpu,cuda", per_op={"rms_norm": "vendor|reference"}):
        pass


# ---- names --------------------------------------------------------------------------


def test_scoped_names_are_checked_as_the_environment():
    with pytest.raises(fldispatch.ConfigError, match="rms_nrom.*did you mean 'rms_norm'"):
        with fldispatch.policy(per_op={"rms_nrom": "vendor"}, strict=True):
            pass
    with pytest.raises(fldispatch.ConfigError, match="no vendor named 'cpux'"):
        with fldispatch.policy(strict=True, allow_vendors=["cpux"]):
            pass
    assert clean()
    with fldispatch.policy(per_op={"rms_nrom": "vendor"}):  # not strict: a warning
        assert "rms_nrom" in fldispatch.describe_policy()
    assert clean()


def test_resolve_of_a_misspelt_op_says_did_you_mean():
    with pytest.raises(fldispatch.NotFoundError, match="did you mean 'rms_norm'"):
        fldispatch.resolve("rms_nrom")
    with pytest.raises(fldispatch.NotFoundError, match="did you mean 'silu_and_mul'"):
        fldispatch.explain("silu_and_mull")
    with pytest.raises(fldispatch.NotFoundError, match="did you mean 'rms_norm'"):
        fldispatch.clear_failed_impls("rms_nrom")


# ---- whole policies -------------------------------------------------------------------


def test_whole_policy_scope_and_policy_file(tmp_path):
    with fldispatch.policy(deny_vendors="cpu"):
        with fldispatch.policy(prefer="vendor"):
            assert fldispatch.resolve("rms_norm") == "reference.c"  # deny inherited
        with fldispatch.policy(prefer="vendor", inherit=False):
            assert fldispatch.resolve("rms_norm") == "vendor.cpu"
            assert "deny" not in fldispatch.describe_policy()
        path = tmp_path / "scope.yaml"
        path.write_text("prefer: reference\nop_backends:\n  silu_and_mul: [vendor]\n")
        with fldispatch.policy(file=path):
            assert fldispatch.resolve("rms_norm") == "reference.c"
            assert fldispatch.resolve("silu_and_mul") == "vendor.cpu"
        path.write_text("prefer: fastest\n")
        with pytest.raises(fldispatch.ConfigError, match="scope.yaml:1"):
            with fldispatch.policy(file=str(path)):
                pass
        assert "deny=cpu" in fldispatch.describe_policy()
    assert clean()


# ---- the global policy ------------------------------------------------------------------


def test_set_reset_and_load_policy(tmp_path):
    try:
        fldispatch.set_policy(prefer="reference", deny_vendors=["cuda"])
        assert fldispatch.resolve("rms_norm") == "reference.c"
        seen = []
        t = threading.Thread(target=lambda: seen.append(fldispatch.resolve("rms_norm")))
        t.start()
        t.join()
        assert seen == ["reference.c"]  # global: every thread
        with pytest.raises(fldispatch.ConfigError, match="field 1"):
            fldispatch.set_policy(prefer="vendor", per_op="rms_norm=nonsense")
        assert fldispatch.resolve("rms_norm") == "reference.c"  # all or nothing
        with pytest.raises(fldispatch.ConfigError, match="did you mean 'rms_norm'"):
            fldispatch.set_policy(strict=True, per_op={"rms_nrom": "vendor"})
        fldispatch.set_policy(inherit=False, per_op={"rms_norm": ["reference"]})
        assert "deny" not in fldispatch.describe_policy()
        assert fldispatch.resolve("rms_norm") == "reference.c"
        assert fldispatch.resolve("silu_and_mul") == "vendor.cpu"
        fldispatch.reset_policy()
        assert fldispatch.describe_policy() == BASELINE
        path = tmp_path / "global.yaml"
        path.write_text("prefer: reference\n")
        fldispatch.load_policy(path)
        assert fldispatch.resolve("silu_and_mul") == "reference.c"
        path.write_text("prefer: [1]\n")
        with pytest.raises(fldispatch.ConfigError, match="global.yaml:1"):
            fldispatch.load_policy(str(path))
        assert fldispatch.resolve("silu_and_mul") == "reference.c"
    finally:
        fldispatch.reset_policy()
    assert clean()


# ---- the log level ------------------------------------------------------------------------


def test_log_level():
    before = fldispatch.get_log_level()
    try:
        fldispatch.set_log_level("DEBUG")
        assert fldispatch.get_log_level() == "debug"
        fldispatch.set_log_level(40)
        assert fldispatch.get_log_level() == "error"
        fldispatch.set_log_level(25)
        assert fldispatch.get_log_level() == 25
        with pytest.raises(fldispatch.InvalidArgumentError, match="unknown level 'loud'"):
            fldispatch.set_log_level("loud")
        with pytest.raises(TypeError):
            fldispatch.set_log_level(None)  # type: ignore[arg-type]  # the refusal under test
    finally:
        fldispatch.set_log_level(before)


# ---- the failure memory (in a child: the fixture plugin stays loaded) ------------------


def test_failed_impls_and_clear():
    plugin = fixture_plugin("failing")
    code = textwrap.dedent("""
        import json, sys
        sys.path[:0] = %r
        import numpy as np, fldispatch
        fldispatch.set_log_level("error")
        fldispatch.load_plugin(%r)
        x = np.ones((2, 8), np.float32)
        out = np.zeros((2, 4), np.float32)
        report = {"before": fldispatch.failed_impls()}
        with fldispatch.policy(per_op={"silu_and_mul": "vendor:failing|reference"}):
            fldispatch.silu_and_mul(out, x)
            report["scope"] = fldispatch.failed_impls()
        report["after_scope"] = fldispatch.failed_impls()
        fldispatch.set_policy(per_op={"silu_and_mul": "vendor:failing|vendor"})
        fldispatch.silu_and_mul(out, x)
        report["global"] = fldispatch.failed_impls()
        fldispatch.clear_failed_impls("rms_norm")
        report["other_cleared"] = fldispatch.failed_impls()
        fldispatch.clear_failed_impls("silu_and_mul")
        report["cleared"] = fldispatch.failed_impls()
        fldispatch.silu_and_mul(out, x)
        fldispatch.clear_failed_impls()
        report["all_cleared"] = fldispatch.failed_impls()
        print(json.dumps(report))
    """) % (sys.path, plugin)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ))
    assert child.returncode == 0, child.stderr[-2000:]
    r = json.loads(child.stdout.strip().splitlines()[-1])
    entry = ["silu_and_mul", "cpu", "f32", "vendor.failing"]  # as explain() names them
    assert r["before"] == []
    assert r["scope"] == [entry]
    assert r["after_scope"] == []  # a failure inside a scope is that scope's
    assert r["global"] == [entry]
    assert r["other_cleared"] == [entry]
    assert r["cleared"] == []
    assert r["all_cleared"] == []


# ---- the library's policy-field table -------------------------------------------------

_SAMPLES: dict[str, Any] = {"prefer": "vendor", "flag": True, "switch": False, "names": ["rms_norm"],
                            "vendors": ["cpu"], "orders": {"rms_norm": "reference"}, "custom": "-rms_norm"}


def test_every_policy_field_is_a_keyword_and_reported_with_its_type():
    """Each row of fldispatch.POLICY_FIELDS is a keyword of policy() and comes back
    from config() under its YAML key, set by the scope, in its value's Python type."""
    assert fldispatch.POLICY_KEYS == tuple(f["key"] for f in fldispatch.POLICY_FIELDS)
    for field in fldispatch.POLICY_FIELDS:
        value = _SAMPLES[field["kind"]]
        with fldispatch.policy(**{field["key"]: value}):
            reported = [f for f in fldispatch.config()["policy"]
                        if f["key"].partition(".")[0] == field["yaml_key"]]
        assert reported and reported[0]["source"] == "scoped override", field
        got = reported[0]["value"]
        if field["kind"] in ("flag", "switch"):
            assert got is value, field
        elif field["kind"] in ("names", "vendors"):
            assert got == value, field
        elif field["kind"] == "orders":
            assert reported[0]["key"] == field["yaml_key"] + ".rms_norm" and got == ["reference"]
        elif field["kind"] == "custom":
            assert "-rms_norm" in got, field
        else:
            assert got == value, field
    assert clean()
