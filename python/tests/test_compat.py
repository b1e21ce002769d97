# SPDX-License-Identifier: Apache-2.0
"""fldispatch.compat: an upstream-style backend package loaded unmodified.

The backend below is written the way vllm-plugin-FL's backends are: a package
whose register_ops.py builds a list of OpImpl records and whose entry point
(group vllm_fl.plugin) registers them. Each scenario runs in a fresh Python
process, with the package in a temporary site directory and
fldispatch.compat.alias installed, so `import vllm_fl.dispatch` is ours.
"""

import os
import re
import subprocess
import sys
import textwrap

import pytest

REGISTER_OPS = '''
import functools

from vllm_fl.dispatch.backends.base import Backend
from vllm_fl.dispatch.types import OpImpl, BackendImplKind, BackendPriority

CALLS = []


class DemoBackend(Backend):
    def is_available(self):
        return True

    @property
    def name(self):
        return "demo"

    @property
    def vendor(self):
        return "demo"

    def scale(self, x, factor=2):
        CALLS.append("vendor")
        return x * factor + 0.5


def _bind_is_available(fn, is_available):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapper._is_available = is_available
    return wrapper


def _flagos_scale(x, factor=2):
    CALLS.append("flagos")
    if x < 0:
        raise ArithmeticError("demo flagos kernel: negative input")
    return x * factor


def _reference_scale(x, factor=2):
    CALLS.append("reference")
    return float(x * factor)


def _unavailable(x, factor=2):
    CALLS.append("unavailable")
    return None


_unavailable._is_available = lambda: False


def register_builtins(registry):
    backend = DemoBackend()
    registry.register_many([
        OpImpl(op_name="demo_scale", impl_id="default.flagos", kind=BackendImplKind.DEFAULT,
               fn=_flagos_scale, priority=BackendPriority.DEFAULT),
        OpImpl(op_name="demo_scale", impl_id="vendor.demo", kind=BackendImplKind.VENDOR,
               fn=_bind_is_available(backend.scale, backend.is_available),
               vendor=backend.vendor, priority=BackendPriority.VENDOR),
        OpImpl(op_name="demo_scale", impl_id="reference.torch", kind=BackendImplKind.REFERENCE,
               fn=_reference_scale, priority=BackendPriority.REFERENCE),
        OpImpl(op_name="demo_scale", impl_id="default.gone", kind=BackendImplKind.DEFAULT,
               fn=_unavailable, priority=BackendPriority.DEFAULT + 10),
    ])
'''

PACKAGE_INIT = '''
def register(registry):
    from .register_ops import register_builtins
    register_builtins(registry)
'''

BROKEN_INIT = '''
from vllm_fl.dispatch.types import OpImpl, BackendImplKind


def register(registry):
    registry.register_impl(OpImpl(op_name="demo_broken", impl_id="default.first",
                                  kind=BackendImplKind.DEFAULT, fn=lambda x: x))
    raise RuntimeError("broken demo backend: cannot finish")
'''


def make_site(tmp_path, packages, entry_points):
    site = tmp_path / "site"
    for name, files in packages.items():
        (site / name).mkdir(parents=True)
        for fname, text in files.items():
            (site / name / fname).write_text(textwrap.dedent(text))
    dist = site / "fl_demo_backend-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fl-demo-backend\nVersion: 0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points)
    (dist / "entry_points.txt").write_text(f"[vllm_fl.plugin]\n{lines}" if lines else "")
    return site


def run(site, body, **env):
    code = "import fldispatch.compat.alias as _a\nassert _a.install()\n" + textwrap.dedent(body)
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(site)] + [p for p in full_env.get("PYTHONPATH", "").split(os.pathsep) if p])
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


@pytest.fixture
def demo_site(tmp_path):
    return make_site(tmp_path, {"fl_demo_backend": {"__init__.py": PACKAGE_INIT,
                                                    "register_ops.py": REGISTER_OPS}},
                     [("demo", "fl_demo_backend")])


def test_entry_point_backend_is_selected_and_listed(demo_site):
    run(demo_site, """
        import fldispatch
        from vllm_fl.dispatch import (call_op, resolve_op, get_default_manager,
                                      get_discovered_plugins)
        from fl_demo_backend.register_ops import CALLS, _flagos_scale
        assert call_op("demo_scale", 3) == 6
        assert CALLS == ["flagos"], CALLS          # default.gone is unavailable
        assert resolve_op("demo_scale") is _flagos_scale
        assert ("demo", "entry_point", True) in get_discovered_plugins()
        # the C core sees them: the same registry as C plugins
        ids = {m["impl_id"] for m in fldispatch.impls() if m["op"] == "demo_scale"}
        assert ids == {"default.flagos", "vendor.demo", "reference.torch", "default.gone"}, ids
        assert fldispatch.resolve("demo_scale") == "default.flagos"
        cands = [i.impl_id for i in get_default_manager().resolve_candidates("demo_scale")]
        assert cands == ["default.flagos", "vendor.demo", "reference.torch"], cands
    """)


def test_fallback_and_failure_memory(demo_site):
    run(demo_site, """
        from vllm_fl.dispatch import call_op, get_failed_impls, clear_failed_impls
        from fl_demo_backend.register_ops import CALLS
        assert call_op("demo_scale", -1) == -1.5            # flagos raised, vendor served
        assert CALLS == ["flagos", "vendor"], CALLS
        assert "default.flagos" in get_failed_impls("demo_scale")["demo_scale"]
        CALLS.clear()
        assert call_op("demo_scale", 4) == 8.5              # remembered: flagos skipped
        assert CALLS == ["vendor"], CALLS
        clear_failed_impls("demo_scale")
        assert get_failed_impls("demo_scale") == {}
        CALLS.clear()
        assert call_op("demo_scale", 4) == 8                # forgiven: flagos again
        assert CALLS == ["flagos"], CALLS
    """)


def test_strict_mode_raises_the_kernels_exception(demo_site):
    run(demo_site, """
        from vllm_fl.dispatch import call_op, with_strict_mode
        from fl_demo_backend.register_ops import CALLS
        with with_strict_mode():
            try:
                call_op("demo_scale", -1)
            except ArithmeticError as e:
                assert "negative input" in str(e)
            else:
                raise AssertionError("strict mode fell back")
        assert CALLS == ["flagos"], CALLS
    """)


def test_policy_contexts_and_global_policy(demo_site):
    run(demo_site, """
        import fldispatch
        from vllm_fl.dispatch import (call_op, with_preference, with_denied_vendors,
            with_allowed_vendors, policy_context, SelectionPolicy, set_global_policy,
            reset_global_policy, get_default_manager)
        from vllm_fl.dispatch.policy import get_policy
        mgr = get_default_manager()
        assert call_op("demo_scale", 1) == 2
        with with_preference("vendor"):
            assert call_op("demo_scale", 1) == 2.5
            assert fldispatch.resolve("demo_scale") == "vendor.demo"   # one policy engine
            with with_denied_vendors("demo"):
                assert mgr.get_selected_impl_id("demo_scale") == "default.flagos"
            assert get_policy().prefer == "vendor"
        with with_preference("reference"):
            assert isinstance(call_op("demo_scale", 1), float)
        with with_allowed_vendors("other"), with_preference("vendor"):
            assert mgr.get_selected_impl_id("demo_scale") == "default.flagos"
        per_op = SelectionPolicy.from_dict(per_op_order={"demo_scale": ["reference"]})
        with policy_context(per_op):
            assert mgr.get_selected_impl_id("demo_scale") == "reference.torch"
        old = set_global_policy(SelectionPolicy(prefer="vendor"))
        assert old.prefer == "flagos"
        assert call_op("demo_scale", 1) == 2.5
        reset_global_policy()
        assert call_op("demo_scale", 1) == 2
    """)


def test_env_module_and_all_or_nothing(tmp_path):
    site = make_site(tmp_path, {"fl_demo_backend": {"__init__.py": PACKAGE_INIT,
                                                    "register_ops.py": REGISTER_OPS},
                                "fl_broken_backend": {"__init__.py": BROKEN_INIT}},
                     [("broken", "fl_broken_backend")])
    run(site, """
        import fldispatch
        from vllm_fl.dispatch import call_op, get_discovered_plugins
        assert call_op("demo_scale", 3) == 6           # loaded by module name
        found = get_discovered_plugins()
        assert ("fl_demo_backend", "env_module", True) in found, found
        assert ("broken", "entry_point", False) in found, found
        # the broken package registered nothing, not even its first record
        assert not [m for m in fldispatch.impls() if m["op"] == "demo_broken"]
        try:
            call_op("demo_broken", 1)
        except RuntimeError as e:
            assert "No available implementation" in str(e)
        else:
            raise AssertionError("a rejected plugin's op is callable")
    """, VLLM_FL_PLUGIN_MODULES="fl_demo_backend")


def test_alias_does_not_shadow_a_real_vllm_fl(tmp_path):
    site = tmp_path / "real"
    (site / "vllm_fl").mkdir(parents=True)
    (site / "vllm_fl" / "__init__.py").write_text("REAL = True\n")
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    code = textwrap.dedent("""
        import fldispatch.compat.alias as a
        assert a.install() is False
        import vllm_fl
        assert vllm_fl.REAL
        assert a.install(force=True) is True
        import vllm_fl.dispatch as d, fldispatch.compat as c
        assert d is c
    """)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_upstream_records_in_process():
    """OpImpl, SelectionPolicy and match_token as upstream defines them."""
    from fldispatch.compat import BackendImplKind, OpImpl, SelectionPolicy, match_token

    with pytest.raises(ValueError, match="must specify vendor name"):
        OpImpl(op_name="x", impl_id="vendor.a", kind=BackendImplKind.VENDOR, fn=len)
    impl = OpImpl(op_name="x", impl_id="vendor.a", kind=BackendImplKind.VENDOR, fn=len,
                  vendor="A")
    assert match_token(impl, "vendor:A") and not match_token(impl, "vendor:a")
    assert match_token(impl, "impl:vendor.a") and not match_token(impl, "flagos")
    with pytest.raises(ValueError, match="Invalid prefer value"):
        SelectionPolicy(prefer="fastest")
    assert SelectionPolicy(prefer="reference").get_default_order() == \
        ["reference", "flagos", "vendor"]


def test_bad_records_name_op_and_impl_and_register_nothing():
    from fldispatch.compat import BackendImplKind, OpImpl, OpRegistry

    registry = OpRegistry()
    with pytest.raises(TypeError, match=r"'bad_fn'.*'default\.x'|'default\.x'.*'bad_fn'"):
        registry.register_impl(OpImpl(op_name="bad_fn", impl_id="default.x",
                                      kind=BackendImplKind.DEFAULT, fn=42))  # type: ignore[arg-type]  # refused
    with pytest.raises(ValueError, match="OpImpl 'default.y' for op 'bad_kind': invalid kind"):
        registry.register_impl(OpImpl(op_name="bad_kind", impl_id="default.y",
                                      kind="fastest", fn=len))  # type: ignore[arg-type]  # refused
    assert registry.list_operators() == []
    registry.register_impl(OpImpl(op_name="ok", impl_id="default.z",
                                  kind=BackendImplKind.DEFAULT, fn=len))
    with pytest.raises(ValueError, match="Duplicate impl_id 'default.z' for op='ok'"):
        registry.register_impl(OpImpl(op_name="ok", impl_id="default.z",
                                      kind=BackendImplKind.DEFAULT, fn=len))
    assert [i.impl_id for i in registry.get_implementations("ok")] == ["default.z"]


# ---- an upstream implementation's result ------------------------------------------------


def serving(op, impl_id, fn):
    """A manager of a fresh registry whose only implementation of op is fn."""
    from fldispatch.compat import BackendImplKind, OpImpl, OpManager, OpRegistry

    registry = OpRegistry()
    registry.register_impl(OpImpl(op_name=op, impl_id=impl_id, kind=BackendImplKind.VENDOR,
                                  vendor="acme", fn=fn))
    return OpManager(registry)


@pytest.mark.parametrize("result, words", [
    ("one", ["returned a tensor of shape (1,) float32", "out: shape (2, 4) float32"]),
    ("float64", ["returned a tensor of shape (2, 4) float64", "out: shape (2, 4) float32"]),
    ("list", ["returned a list", "out: shape (2, 4) float32"]),
])
def test_an_upstream_activations_wrong_result_is_its_failure(result, words):
    """The result of an upstream implementation is copied into out only when it
    has out's shape and dtype: tensor([7.]) is not broadcast, float64 not
    converted; the failure names the implementation and both shapes."""
    import torch

    def fn(layer, x):
        if result == "one":
            return torch.tensor([7.0])
        if result == "float64":
            return torch.zeros(2, 4, dtype=torch.float64)
        return [0.0] * 4

    manager = serving("silu_and_mul", "vendor.wrong_act", fn)
    out = torch.full((2, 4), -1.0)
    with pytest.raises(RuntimeError) as info:
        manager.call("silu_and_mul", out, torch.randn(2, 8))
    text = str(info.value)
    assert "upstream implementation 'vendor.wrong_act' of silu_and_mul" in text, text
    for word in words:
        assert word in text, text
    assert torch.equal(out, torch.full((2, 4), -1.0))


def test_an_upstream_norms_single_tensor_for_a_pair_is_its_failure():
    """With a residual, an upstream rms_norm returns (out, residual): one [2, H]
    tensor is not unpacked into two rows that broadcast."""
    import torch

    manager = serving("rms_norm", "vendor.one_tensor", lambda layer, x, residual: x * 0 + 5)
    out, residual = torch.full((2, 8), -1.0), torch.full((2, 8), -2.0)
    with pytest.raises(RuntimeError) as info:
        manager.call("rms_norm", out, torch.randn(2, 8), torch.ones(8), residual, 1e-6)
    text = str(info.value)
    assert "upstream implementation 'vendor.one_tensor' of rms_norm returned a tensor of " \
           "shape (2, 8) float32 where a pair (out, residual) is due" in text, text
    assert torch.equal(out, torch.full((2, 8), -1.0))
    assert torch.equal(residual, torch.full((2, 8), -2.0))


def test_an_upstream_norms_wrong_residual_is_its_failure():
    import torch

    def fn(layer, x, residual):
        return x.clone(), torch.zeros(8)

    manager = serving("rms_norm", "vendor.short_residual", fn)
    out, residual = torch.empty(2, 8), torch.randn(2, 8)
    with pytest.raises(RuntimeError) as info:
        manager.call("rms_norm", out, torch.randn(2, 8), torch.ones(8), residual, 1e-6)
    text = str(info.value)
    assert "'vendor.short_residual' of rms_norm returned a tensor of shape (8,) float32 " \
           "for residual: shape (2, 8) float32" in text, text


def test_an_upstream_implementations_right_result_is_copied():
    import torch

    manager = serving("silu_and_mul", "vendor.right_act",
                      lambda layer, x: torch.nn.functional.silu(x[:, :4]) * x[:, 4:])
    x, out = torch.randn(2, 8), torch.empty(2, 4)
    manager.call("silu_and_mul", out, x)
    torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :4]) * x[:, 4:])


# ---- the caller's own arguments -----------------------------------------------------------


def no_backtrace(exc):
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert "frame #0" not in text and "Exception raised from" not in text, text


def test_a_layers_meta_weight_is_named_without_a_backtrace():
    """A layer whose weight is a meta tensor: the error names the argument, as
    fldispatch.rms_norm's does, with no PyTorch C++ backtrace and no "All
    implementation(s) failed" (no implementation ran)."""
    import torch

    import fldispatch
    from fldispatch.compat import call_op, get_default_manager

    class Layer:
        weight = torch.empty(8, device="meta")
        variance_epsilon = 1e-6

    for call in (lambda: get_default_manager().call("rms_norm", Layer(), torch.randn(2, 8)),
                 lambda: call_op("rms_norm", Layer(), torch.randn(2, 8))):
        with pytest.raises(fldispatch.InvalidArgumentError) as info:
            call()
        assert str(info.value) == ("rms_norm: argument 'weight' cannot be passed through DLPack "
                                   "(<class 'torch.Tensor'>): Cannot pack tensors on meta")
        no_backtrace(info.value)


def test_a_nul_in_an_op_name_is_named():
    import torch

    import fldispatch
    from fldispatch.compat import BackendImplKind, CachedOp, OpImpl, OpRegistry, call_op

    for call in (lambda: call_op("rms\0norm", torch.randn(2, 8)),
                 lambda: CachedOp("rms\0norm")(torch.randn(2, 8))):
        with pytest.raises(fldispatch.InvalidArgumentError,
                           match=r"argument 'op' contains a NUL character: 'rms\\x00norm'$"):
            call()
    with pytest.raises(ValueError, match=r"^OpImpl 'default\.x': op_name 'a\\x00b' contains a "
                                         r"NUL character$"):
        OpRegistry().register_impl(OpImpl(op_name="a\0b", impl_id="default.x",
                                          kind=BackendImplKind.DEFAULT, fn=len))


# ---- values checked as the core would, named by field ---------------------------------------


@pytest.mark.parametrize("priority, shown", [("high", "str ('high')"), (1.7, "float (1.7)"),
                                             (True, "bool (True)")])
def test_an_opimpls_priority_must_be_an_int(priority, shown):
    """priority="high" is refused naming the field, 1.7 is refused rather than
    truncated to 1, and nothing is registered."""
    from fldispatch.compat import BackendImplKind, OpImpl, OpRegistry

    registry = OpRegistry()
    with pytest.raises(TypeError, match="^" + re.escape(f"OpImpl 'vendor.p' for op 'prio_op': "
                                                        f"priority must be an int, not {shown}")
                       + "$"):
        registry.register_impl(OpImpl(op_name="prio_op", impl_id="vendor.p",
                                      kind=BackendImplKind.VENDOR, vendor="acme", fn=len,
                                      priority=priority))
    assert registry.get_implementations("prio_op") == []


def test_an_opimpls_priority_outside_a_c_int_is_named():
    from fldispatch.compat import BackendImplKind, OpImpl, OpRegistry

    with pytest.raises(ValueError, match=r"op 'prio_op', impl 'vendor\.q': priority 2147483648 "
                                         r"is out of range"):
        OpRegistry().register_impl(OpImpl(op_name="prio_op", impl_id="vendor.q",
                                          kind=BackendImplKind.VENDOR, vendor="acme", fn=len,
                                          priority=2**31))


def test_per_op_order_and_vendor_lists_given_as_strings():
    """As in vllm-plugin-FL's configuration, a per-op order given as one string
    is 'a|b' and a vendor list given as one string is comma-separated: neither
    is split into characters."""
    from fldispatch.compat import SelectionPolicy

    p = SelectionPolicy.from_dict(per_op_order={"rms_norm": "vendor|reference"},
                                  allow_vendors="cpu, cuda", deny_vendors="ascend")
    assert p.get_per_op_order("rms_norm") == ["vendor", "reference"]
    assert p.allow_vendors == frozenset({"cpu", "cuda"})
    assert p.deny_vendors == frozenset({"ascend"})
    q = SelectionPolicy(per_op_order=(("rms_norm", "reference"),))  # type: ignore[arg-type]  # a str, read as 'a|b'
    assert q.per_op_order == (("rms_norm", ("reference",)),)


@pytest.mark.parametrize("fields, word", [
    (dict(allow_vendors={"cpu,cuda"}), "allow_vendors: vendor name 'cpu,cuda'"),
    (dict(deny_vendors={"a,b"}), "deny_vendors: vendor name 'a,b'"),
    (dict(per_op_order={"rms_norm": ["vendor|reference"]}),
     "per_op_order['rms_norm']: token 'vendor|reference'"),
])
def test_a_name_holding_a_separator_is_refused(fields, word):
    """A vendor name 'a,b' in a vendor set is one name the core cannot hold
    (it would be split in two): refused, naming the field, as is a per-op
    token holding '|'."""
    from fldispatch.compat import SelectionPolicy, with_allowed_vendors

    with pytest.raises(ValueError, match="^" + re.escape("SelectionPolicy: " + word)):
        SelectionPolicy.from_dict(**fields)
    with pytest.raises(ValueError, match=r"allow_vendors: vendor name 'x,y'"):
        with_allowed_vendors("x,y")


def test_a_policy_context_left_on_another_thread_is_a_state_error():
    """Leaving a policy_context on a thread that did not enter it raises the
    library's StateError (as fldispatch.policy does), not AttributeError; the
    entering thread then leaves it."""
    import threading

    import fldispatch
    from fldispatch.compat import SelectionPolicy, get_policy, policy_context

    before = get_policy()
    ctx = policy_context(SelectionPolicy.from_dict(prefer="reference"))
    ctx.__enter__()
    errors = []

    def leave():
        try:
            ctx.__exit__(None, None, None)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=leave)
    t.start()
    t.join()
    assert get_policy().prefer == "reference"
    ctx.__exit__(None, None, None)
    assert get_policy() == before
    assert len(errors) == 1 and isinstance(errors[0], fldispatch.StateError), errors
    assert "policy_context" in str(errors[0]) and "did not enter it" in str(errors[0])
