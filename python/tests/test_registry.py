# SPDX-License-Identifier: Apache-2.0
"""Python implementations in the library's registry: registration, selection
under the policy, fallback and failure memory, errors chained to the Python
exception, any op by name (call_op / resolve_op), C callers without the GIL,
fork, and the bad-input cases."""

import ctypes
import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fldispatch

_counter = itertools.count()


def fresh_op(stem="pyop"):
    """An op name no other test registered (registrations last for the process)."""
    return f"{stem}_{os.getpid()}_{next(_counter)}"


def impl_ids(op):
    return [m["impl_id"] for m in fldispatch.impls() if m["op"] == op]


# ---- registration, listing, selection ------------------------------------------------


def test_registered_impl_is_listed_resolved_and_called():
    op = fresh_op()
    fldispatch.register_impl(op, lambda x, y=1: x * 2 + y, impl_id="reference.py",
                             kind="reference", plugin="pytest_reg")
    assert impl_ids(op) == ["reference.py"]
    info = [m for m in fldispatch.impls() if m["op"] == op][0]
    assert info["kind"] == "reference" and info["priority"] == 50
    assert info["plugin"] == "pytest_reg" and info["available"]
    assert fldispatch.resolve(op) == "reference.py"
    assert fldispatch.explain(op)["selected"] == "reference.py"
    out = fldispatch.call_op(op, torch.ones(2), y=3)
    assert torch.equal(out, torch.full((2,), 5.0))
    plugin = [p for p in fldispatch.plugins() if p["name"] == "pytest_reg"][0]
    assert plugin["status"] == "loaded" and plugin["path"] == "python:pytest_reg"


def test_default_priorities_and_kinds():
    op = fresh_op()
    for kind, iid in (("flagos", "default.a"), ("default", "default.b"), ("vendor", "vendor.c"),
                      ("reference", "reference.d")):
        fldispatch.register_impl(op, lambda: kind, impl_id=iid, kind=kind,
                                 vendor="acme" if kind == "vendor" else None, plugin="pytest_k")
    prio = {m["impl_id"]: (m["kind"], m["priority"]) for m in fldispatch.impls() if m["op"] == op}
    assert prio == {"default.a": ("flagos", 150), "default.b": ("flagos", 150),
                    "vendor.c": ("vendor", 100), "reference.d": ("reference", 50)}
    assert fldispatch.explain(op)["candidates"] == ["default.a", "default.b", "vendor.c",
                                                    "reference.d"]


def test_policy_selects_and_resolve_op_follows_changes():
    op = fresh_op()
    fldispatch.register_impl(op, lambda: "vendor", impl_id="vendor.acme", kind="vendor",
                             vendor="acme", plugin="pytest_pol")
    fldispatch.register_impl(op, lambda: "reference", impl_id="reference.torch",
                             kind="reference", plugin="pytest_pol")
    f = fldispatch.resolve_op(op)
    assert f() == "vendor" and fldispatch.call_op(op) == "vendor"
    with fldispatch.policy(prefer="reference"):
        assert f() == "reference"
    with fldispatch.policy(per_op={op: ["reference"]}):
        assert f() == "reference"
    with fldispatch.policy(deny_vendors="acme"):
        assert f() == "reference"
        assert fldispatch.resolve(op) == "reference.torch"
    assert f() == "vendor"
    # a later registration takes part at once: the cached choice is dropped
    fldispatch.register_impl(op, lambda: "flagos", impl_id="default.fast", kind="flagos",
                             plugin="pytest_pol")
    assert f() == "flagos"


def test_devices_dtypes_and_call_key():
    op = fresh_op()
    fldispatch.register_impl(op, lambda x: "cuda-only", impl_id="vendor.gpu", kind="vendor",
                             vendor="gpu", devices=["cuda"], plugin="pytest_dev")
    fldispatch.register_impl(op, lambda x: "f16", impl_id="vendor.half", kind="vendor",
                             vendor="half", dtypes=[torch.float16], plugin="pytest_dev")
    fldispatch.register_impl(op, lambda x: "any", impl_id="reference.any", kind="reference",
                             plugin="pytest_dev")
    assert fldispatch.call_op(op, torch.ones(2, dtype=torch.float16)) == "f16"
    assert fldispatch.call_op(op, torch.ones(2)) == "any"
    assert fldispatch.call_op(op, x=torch.ones(2, dtype=torch.float16)) == "f16"
    assert fldispatch.resolve(op, "cuda") == "vendor.gpu"


def test_unavailable_impl_is_listed_with_reason_and_skipped():
    op = fresh_op()
    fldispatch.register_impl(op, lambda: "no", impl_id="vendor.nodrv", kind="vendor",
                             vendor="nodrv", is_available=lambda: False, plugin="pytest_av")
    fldispatch.register_impl(op, lambda: "yes", impl_id="reference.ok", kind="reference",
                             plugin="pytest_av")

    def raising():
        raise OSError("no driver")

    fldispatch.register_impl(op, lambda: "no", impl_id="vendor.raises", kind="vendor",
                             vendor="raises", is_available=raising, plugin="pytest_av")
    info = {m["impl_id"]: m for m in fldispatch.impls() if m["op"] == op}
    assert not info["vendor.nodrv"]["available"]
    assert info["vendor.nodrv"]["reason"] and info["vendor.raises"]["reason"]
    assert "returned False" in info["vendor.nodrv"]["reason"]
    assert "OSError: no driver" in info["vendor.raises"]["reason"]
    assert fldispatch.call_op(op) == "yes"


# ---- failures: fallback, memory, chained exceptions -----------------------------------


def test_exception_falls_back_and_is_remembered():
    op = fresh_op()
    calls = []

    def broken(x):
        calls.append("broken")
        raise RuntimeError("kernel exploded")

    fldispatch.register_impl(op, broken, impl_id="vendor.broken", kind="vendor",
                             vendor="brk", plugin="pytest_fail")
    fldispatch.register_impl(op, lambda x: x + 1, impl_id="reference.ok", kind="reference",
                             plugin="pytest_fail")
    assert fldispatch.call_op(op, 1) == 2
    assert fldispatch.call_op(op, 1) == 2
    assert calls == ["broken"]  # failure memory: not tried again


def test_failure_on_the_direct_path_falls_back_and_is_remembered():
    """Once the winner served, later calls take the direct path (no selection);
    its failure there still falls back, is logged and remembered."""
    op = fresh_op()
    calls = []

    def flaky(x):
        calls.append(x)
        if x == 3:
            raise RuntimeError("third call fails")
        return x

    fldispatch.register_impl(op, flaky, impl_id="vendor.flaky", kind="vendor", vendor="flk",
                             plugin="pytest_flaky")
    fldispatch.register_impl(op, lambda x: -x, impl_id="reference.neg", kind="reference",
                             plugin="pytest_flaky")
    assert [fldispatch.call_op(op, i) for i in (1, 2, 3, 4)] == [1, 2, -3, -4]
    assert calls == [1, 2, 3]


def test_strict_error_chains_the_exception():
    op = fresh_op()

    def broken():
        raise KeyError("missing table")

    fldispatch.register_impl(op, broken, impl_id="vendor.broken", kind="vendor",
                             vendor="brk", plugin="pytest_strict")
    fldispatch.register_impl(op, lambda: "ok", impl_id="reference.ok", kind="reference",
                             plugin="pytest_strict")
    with fldispatch.policy(strict=True):
        with pytest.raises(fldispatch.ImplementationError) as err:
            fldispatch.call_op(op)
    assert isinstance(err.value.__cause__, KeyError)
    msg = str(err.value)
    assert op in msg and "vendor.broken" in msg and "KeyError" in msg


def test_no_candidate_left_chains_the_last_exception():
    op = fresh_op()

    def broken(x):
        raise ValueError(f"bad {x}")

    fldispatch.register_impl(op, broken, impl_id="reference.broken", kind="reference",
                             plugin="pytest_last")
    with pytest.raises(fldispatch.ImplementationError) as err:
        fldispatch.call_op(op, 7)
    assert isinstance(err.value.__cause__, ValueError)
    assert "bad 7" in str(err.value.__cause__)
    assert "reference.broken" in str(err.value)


def test_catalog_op_python_impl_through_the_typed_api():
    """A Python impl of a catalog op is called with the catalog's arguments
    (torch tensors) by fldispatch.silu_and_mul and by the C entry point."""
    seen = []

    def py_silu(out, x):
        seen.append((type(out), tuple(x.shape)))
        d = x.shape[-1] // 2
        out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])

    fldispatch.register_impl("silu_and_mul", py_silu, impl_id="vendor.pyt_silu", kind="vendor",
                             vendor="pytsilu", priority=1, devices=["cpu"], plugin="pytest_cat")
    x = torch.randn(4, 16)
    out = torch.zeros(4, 8)
    with fldispatch.policy(per_op={"silu_and_mul": ["vendor:pytsilu"]}):
        assert fldispatch.resolve("silu_and_mul") == "vendor.pyt_silu"
        fldispatch.silu_and_mul(out, x)
        fldispatch.call_op("silu_and_mul", out, x)
    assert seen == [(torch.Tensor, (4, 16))] * 2
    torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :8]) * x[:, 8:])


def test_catalog_impl_returning_a_value_is_a_failure():
    def returns_tensor(out, x):
        return out

    fldispatch.register_impl("gelu_and_mul", returns_tensor, impl_id="vendor.pyt_ret",
                             kind="vendor", vendor="pytret", priority=1, devices=["cpu"], plugin="pytest_ret")
    x = torch.randn(2, 8)
    out = torch.zeros(2, 4)
    with fldispatch.policy(per_op={"gelu_and_mul": ["vendor:pytret"]}):
        with pytest.raises(fldispatch.ImplementationError, match="returned a Tensor object"):
            fldispatch.gelu_and_mul(out, x)
    with fldispatch.policy(per_op={"gelu_and_mul": ["vendor:pytret", "reference"]}):
        fldispatch.gelu_and_mul(out, x)  # falls back to reference.c
    assert out.abs().sum() > 0


# ---- C callers without the GIL ---------------------------------------------------------


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def dltensor(t):
    shape = (ctypes.c_int64 * t.dim())(*t.shape)
    d = DLTensor(t.data_ptr(), DLDevice(1, 0), t.dim(), DLDataType(2, 32, 1), shape, None, 0)
    d._keep = shape
    return d


def library():
    path = os.path.join(os.path.dirname(fldispatch._C.__file__), "lib", "libfldispatch.so.0")
    lib = ctypes.CDLL(path)  # CDLL calls release the GIL: a C caller without it
    lib.fld_last_error.restype = ctypes.c_char_p
    return lib


def test_c_caller_without_the_gil_is_declined_with_a_message():
    calls = []

    def py_mul_and_silu(out, x):
        calls.append(1)

    fldispatch.register_impl("mul_and_silu", py_mul_and_silu, impl_id="vendor.pyt_nogil",
                             kind="vendor", vendor="pytnogil", priority=1, devices=["cpu"], plugin="pytest_gil")
    lib = library()
    x = torch.randn(2, 8)
    out = torch.zeros(2, 4)
    dx, dout = dltensor(x), dltensor(out)
    with fldispatch.policy(per_op={"mul_and_silu": ["vendor:pytnogil"]}):
        rc = lib.fld_mul_and_silu(ctypes.byref(dout), ctypes.byref(dx))
        msg = lib.fld_last_error().decode()
    assert rc != 0 and calls == []
    assert "mul_and_silu" in msg and "vendor.pyt_nogil" in msg and "GIL" in msg
    assert out.abs().sum() == 0  # nothing written
    with fldispatch.policy(per_op={"mul_and_silu": ["vendor:pytnogil", "reference"]}):
        assert lib.fld_mul_and_silu(ctypes.byref(dout), ctypes.byref(dx)) == 0
    torch.testing.assert_close(out, x[:, :4] * torch.nn.functional.silu(x[:, 4:]))
    # with the GIL (the package's own call) the Python impl serves
    with fldispatch.policy(per_op={"mul_and_silu": ["vendor:pytnogil"]}):
        fldispatch.mul_and_silu(out, x)
    assert calls == [1]


def test_large_call_releasing_the_gil_takes_it_back_for_python_impls():
    calls = []

    def py_gelu_tanh(out, x):
        calls.append(x.numel())
        d = x.shape[-1] // 2
        out.copy_(torch.nn.functional.gelu(x[..., :d], approximate="tanh") * x[..., d:])

    fldispatch.register_impl("gelu_tanh_and_mul", py_gelu_tanh, impl_id="vendor.pyt_big",
                             kind="vendor", vendor="pytbig", priority=1, devices=["cpu"], plugin="pytest_big")
    x = torch.randn(256, 256)  # 256 KiB: the package releases the GIL for the call
    out = torch.empty(256, 128)
    with fldispatch.policy(per_op={"gelu_tanh_and_mul": ["vendor:pytbig"]}):
        fldispatch.gelu_tanh_and_mul(out, x)
    assert calls == [256 * 256]


# ---- bad input -------------------------------------------------------------------------


def test_not_callable():
    with pytest.raises(TypeError, match=r"op 'x_op', impl 'vendor\.v': fn is not callable"):
        fldispatch.register_impl("x_op", 42, impl_id="vendor.v", kind="vendor", vendor="v")  # type: ignore[arg-type]  # refused


def test_bad_kind_and_impl_id():
    with pytest.raises(ValueError, match=r"op 'x_op', impl 'vendor\.v': invalid kind 'fast'"):
        fldispatch.register_impl("x_op", len, impl_id="vendor.v", kind="fast")
    with pytest.raises(ValueError, match=r"impl 'reference\.v'.*'vendor\.<name>'"):
        fldispatch.register_impl("x_op", len, impl_id="reference.v", kind="vendor", vendor="v")
    with pytest.raises(ValueError, match="requires vendor="):
        fldispatch.register_impl("x_op", len, impl_id="vendor.v", kind="vendor")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        fldispatch.register_impl("x_op", len, impl_id="reference.v", kind="reference",
                                 devices=["tpu"])
    assert "x_op" not in {m["op"] for m in fldispatch.impls()}


def test_duplicate_in_a_batch_registers_nothing():
    op = fresh_op()
    with pytest.raises(fldispatch.InvalidArgumentError, match=f"duplicate impl_id 'reference.a' "
                       f"for op '{op}'"):
        with fldispatch.registering("pytest_dup"):
            fldispatch.register_impl(op, len, impl_id="reference.a", kind="reference")
            fldispatch.register_impl(op + "_other", len, impl_id="reference.b", kind="reference")
            fldispatch.register_impl(op, len, impl_id="reference.a", kind="reference")
    assert impl_ids(op) == [] and impl_ids(op + "_other") == []
    p = [p for p in fldispatch.plugins() if p["name"] == "pytest_dup"][0]
    assert p["status"] == "rejected" and p["reason"] and "duplicate impl_id" in p["reason"]


def test_exception_in_a_batch_rejects_the_plugin():
    op = fresh_op()
    with pytest.raises(ZeroDivisionError):
        with fldispatch.registering("pytest_raise"):
            fldispatch.register_impl(op, len, impl_id="reference.a", kind="reference")
            raise ZeroDivisionError("division by zero")
    assert impl_ids(op) == []
    p = [p for p in fldispatch.plugins() if p["name"] == "pytest_raise"][0]
    assert p["status"] == "rejected" and p["reason"] and "ZeroDivisionError" in p["reason"]


def test_unknown_op_by_name():
    with pytest.raises(fldispatch.NotFoundError, match="no_such_op_anywhere"):
        fldispatch.call_op("no_such_op_anywhere", 1)


def run_child(code, env=None):
    full = dict(os.environ)
    full.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=full, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_registration_refused_when_a_manifest_freezes_the_registry(tmp_path):
    manifest = tmp_path / "frozen.yaml"
    manifest.write_text("version: 1\nentries:\n"
                        "  - {op: rms_norm, device: cpu, dtype: f32, impl: reference.c}\n")
    out = run_child("""
        import fldispatch
        try:
            fldispatch.register_impl("frozen_op", len, impl_id="reference.f", kind="reference",
                                     plugin="frozen_test")
        except fldispatch.StateError as e:
            print("refused:", e)
        print("ops:", [m["op"] for m in fldispatch.impls() if m["op"] == "frozen_op"])
    """, {"VLLM_FL_MANIFEST": str(manifest)})
    assert "refused:" in out and "frozen_op" in out and "reference.f" in out
    assert "VLLM_FL_MANIFEST" in out
    assert "ops: []" in out


def test_fork_after_python_registrations():
    op = fresh_op()
    fldispatch.register_impl(op, lambda x: x * 3, impl_id="reference.f", kind="reference",
                             plugin="pytest_fork")
    assert fldispatch.call_op(op, 2) == 6
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ok = fldispatch.call_op(op, 5) == 15 and fldispatch.resolve(op) == "reference.f"
            fldispatch.register_impl(op, lambda x: -x, impl_id="vendor.child", kind="vendor",
                                     vendor="child", plugin="pytest_fork_child")
            ok = ok and fldispatch.call_op(op, 5) == -5
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert fldispatch.call_op(op, 5) == 15  # the child's registration is the child's


# ---- Python plugin discovery -----------------------------------------------------------


def write_package(site, dist, module, source, entry_points=None):
    """A real installed distribution: module source plus a .dist-info with entry_points.txt."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    if entry_points:
        (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_entry_points_and_plugin_modules_are_loaded_on_first_use(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "good_pkg", "good_pkg", """
        def register(registry):
            import fldispatch
            registry.register_impl("disc_op", lambda x: x + 100, impl_id="vendor.good",
                                   kind="vendor", vendor="good")
    """, "[fldispatch.plugins]\ngood = good_pkg:register\n")
    # an upstream-style plugin: an OpImpl-shaped object handed to registry.register_impl
    write_package(site, "up_pkg", "up_pkg", """
        class OpImpl:
            def __init__(self, **kw):
                self.__dict__.update(kw)
            def is_available(self):
                return True
        def vllm_fl_register(registry):
            registry.register_impl(OpImpl(op_name="disc_op", impl_id="reference.up",
                                          kind="reference", fn=lambda x: x - 1, vendor=None,
                                          priority=50))
    """, "[vllm_fl.plugin]\nup = up_pkg\n")
    # registers one impl, then imports a module that does not exist: all or nothing
    write_package(site, "broken_pkg", "broken_pkg", """
        def register(registry):
            registry.register_impl("disc_op", lambda x: 0, impl_id="vendor.broken",
                                   kind="vendor", vendor="broken")
            import module_that_is_not_installed  # noqa: F401
    """, "[fldispatch.plugins]\nbroken = broken_pkg:register\n")
    write_package(site, "env_mod", "env_mod", """
        def register(registry):
            registry.register_impl("disc_env_op", lambda: "env", impl_id="reference.env",
                                   kind="reference")
    """)
    out = run_child("""
        import fldispatch
        print("call:", fldispatch.call_op("disc_op", 1))
        with fldispatch.policy(prefer="reference"):
            print("ref:", fldispatch.call_op("disc_op", 1))
        print("env:", fldispatch.call_op("disc_env_op"))
        ids = sorted(m["impl_id"] for m in fldispatch.impls() if m["op"] == "disc_op")
        print("ids:", ids)
        for p in fldispatch.plugins():
            if p["name"] in ("good", "up", "broken", "env_mod", "missing_mod"):
                print("plugin:", p["name"], p["status"], p["reason"])
    """, {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
          "VLLM_FL_PLUGIN_MODULES": "env_mod,missing_mod"})
    assert "call: 101" in out and "ref: 0" in out and "env: env" in out
    assert "ids: ['reference.up', 'vendor.good']" in out
    assert "plugin: good loaded None" in out and "plugin: up loaded None" in out
    assert "plugin: env_mod loaded None" in out
    assert ("plugin: broken rejected registration raised ModuleNotFoundError: No module named "
            "'module_that_is_not_installed'") in out
    assert "plugin: missing_mod rejected import failed: ModuleNotFoundError" in out


def test_python_list_runs_in_process_and_shows_python_plugins(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    write_package(site, "listed_pkg", "listed_pkg", """
        def register(registry):
            registry.register_impl("listed_op", len, impl_id="vendor.listed", kind="vendor",
                                   vendor="listed")
    """, "[fldispatch.plugins]\nlisted = listed_pkg:register\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-m", "fldispatch", "resolve", "listed_op"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "vendor.listed"
    r = subprocess.run([sys.executable, "-m", "fldispatch", "list"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert "listed" in r.stdout and "flagos" in r.stdout


def test_default_plugin_is_the_top_level_package():
    """Functions of two modules of one package land in one plugin record."""
    op = fresh_op()

    def one():
        return 1

    def two():
        return 2

    one.__module__, two.__module__ = "pytestpkg.a", "pytestpkg.b"
    fldispatch.register_impl(op, one, impl_id="vendor.one", kind="vendor", vendor="one")
    fldispatch.register_impl(op, two, impl_id="reference.two", kind="reference")
    owners = {m["impl_id"]: m["plugin"] for m in fldispatch.impls() if m["op"] == op}
    assert owners == {"vendor.one": "pytestpkg", "reference.two": "pytestpkg"}
    p = [p for p in fldispatch.plugins() if p["name"] == "pytestpkg"][0]
    assert p["path"] == "python:pytestpkg" and p["impl_count"] == 2


# ---- names with a NUL, interrupts, hostile predicates, messages -------------------------


def test_a_nul_inside_a_name_is_a_value_error_everywhere():
    """A C string ends at its first NUL: "silu_and_mul\\0zzz" must not pass the
    library's checks as "silu_and_mul" (and "vendor.hijack\\0x" win it)."""
    before = fldispatch.resolve("silu_and_mul")
    with pytest.raises(ValueError, match="NUL") as e:
        fldispatch.register_impl("silu_and_mul\x00zzz", lambda out, x: None,
                                 impl_id="vendor.hijack\x00x", kind="vendor", vendor="hijack")
    assert "silu_and_mul\\x00zzz" in str(e.value)
    for op, iid, vendor in (("nul_op", "vendor.hijack\x00x", "hijack"),
                            ("nul_op", "vendor.hijack", "hij\x00ack")):
        with pytest.raises(ValueError, match="NUL"):
            fldispatch.register_impl(op, len, impl_id=iid, kind="vendor", vendor=vendor)
    assert not [m for m in fldispatch.impls() if "hijack" in m["impl_id"] or m["op"] == "nul_op"]
    assert fldispatch.resolve("silu_and_mul") == before
    with pytest.raises(ValueError, match="NUL"):
        fldispatch.declare_op("nul_decl\x00x", "(Tensor(a!) out) -> ()")
    assert "nul_decl" not in fldispatch.signatures()
    for call in (lambda: fldispatch.resolve("silu_and_mul\x00x"),
                 lambda: fldispatch.explain("silu_and_mul\x00x"),
                 lambda: fldispatch.resolve("silu_and_mul", "cpu\x00x"),
                 lambda: fldispatch.resolve("silu_and_mul", "cpu", "f32\x00x"),
                 lambda: fldispatch.call_op("silu_and_mul\x00x"),
                 lambda: fldispatch.resolve_op("silu_and_mul\x00x"),
                 lambda: fldispatch.prepare("silu_and_mul\x00x")):
        with pytest.raises(ValueError, match="NUL"):
            call()
    for kwargs in ({"prefer": "vendor\x00x"}, {"per_op": "silu_and_mul=reference\x00|vendor"},
                   {"deny_vendors": "cpu\x00x"}):
        with pytest.raises(ValueError, match="NUL"):
            with fldispatch.policy(**kwargs):  # type: ignore[arg-type]  # each dict names fields that take a str
                pass
    with pytest.raises(ValueError, match="NUL"):
        with fldispatch.registering("nul\x00plugin"):
            fldispatch.register_impl("nul_op2", len, impl_id="reference.n", kind="reference")
    assert not [m for m in fldispatch.impls() if m["op"] == "nul_op2"]


def test_a_lone_surrogate_in_a_name_is_a_value_error():
    with pytest.raises(ValueError, match="UTF-8"):
        fldispatch.register_impl("sur\udc80op", len, impl_id="reference.s", kind="reference")
    with pytest.raises(ValueError, match="UTF-8"):
        fldispatch.resolve("rms\udc80norm")


def test_interrupt_in_an_implementation_propagates_and_is_not_a_failure():
    """KeyboardInterrupt and SystemExit from an implementation are not its
    failure: they reach the caller, the fallback's result is not returned,
    and the implementation is not remembered as failed."""
    for exc_type in (KeyboardInterrupt, SystemExit):
        op = fresh_op("interrupt")
        raised: list[int] = []

        def first(x):
            if not raised:
                raised.append(1)
                raise exc_type("stop")
            return "first"

        fldispatch.register_impl(op, first, impl_id="vendor.first", kind="vendor",
                                 vendor="first", plugin="pytest_interrupt")
        fldispatch.register_impl(op, lambda x: "fallback", impl_id="reference.fb",
                                 kind="reference", plugin="pytest_interrupt")
        with pytest.raises(exc_type):
            fldispatch.call_op(op, 1)
        assert not [f for f in fldispatch.failed_impls() if f[0] == op]
        # not remembered: the next call is served by the same implementation
        assert fldispatch.call_op(op, 1) == "first"
        caller = fldispatch.resolve_op(op)
        raised.clear()
        with pytest.raises(exc_type):
            caller(1)
        assert caller(1) == "first"


def test_interrupt_in_a_catalog_implementation_propagates():
    out = run_child("""
        import torch
        import fldispatch
        calls = []
        def kbd(out, x):
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt()
            out.fill_(7.0)
        fldispatch.register_impl("silu_and_mul", kbd, impl_id="vendor.kbd", kind="vendor",
                                 vendor="kbd", plugin="pytest_kbd")
        out, x = torch.zeros(2, 4), torch.randn(2, 8)
        with fldispatch.policy(per_op="silu_and_mul=impl:vendor.kbd|reference"):
            try:
                fldispatch.silu_and_mul(out, x)
                print("no interrupt")
            except KeyboardInterrupt:
                print("interrupted")
            print("failed", [f[3] for f in fldispatch.failed_impls()])
            fldispatch.silu_and_mul(out, x)
            print("second", float(out[0, 0]))
    """)
    assert "interrupted" in out and "failed []" in out and "second 7.0" in out, out


def test_is_available_whose_truth_value_raises_makes_it_unavailable():
    class Hostile:
        def __bool__(self):
            raise RuntimeError("no truth here")

    class HostileReason:
        def __str__(self):
            raise RuntimeError("no text here")

    op = fresh_op("avail")
    fldispatch.register_impl(op, len, impl_id="vendor.hostile", kind="vendor", vendor="hostile",
                             is_available=Hostile, plugin="pytest_avail")
    fldispatch.register_impl(op, len, impl_id="vendor.tuple", kind="vendor", vendor="hostile",
                             is_available=lambda: (Hostile(), "x"), plugin="pytest_avail")
    fldispatch.register_impl(op, len, impl_id="vendor.reason", kind="vendor", vendor="hostile",
                             is_available=lambda: (False, HostileReason()), plugin="pytest_avail")
    fldispatch.register_impl(op, len, impl_id="reference.ok", kind="reference",
                             plugin="pytest_avail")
    info = {m["impl_id"]: m for m in fldispatch.impls() if m["op"] == op}
    for iid in ("vendor.hostile", "vendor.tuple", "vendor.reason"):
        assert not info[iid]["available"]
        reason = info[iid]["reason"]
        assert reason and "RuntimeError" in reason, info[iid]
    assert fldispatch.resolve(op) == "reference.ok"


def test_call_op_of_a_misspelt_op_suggests_the_name():
    with pytest.raises(fldispatch.NotFoundError, match="did you mean 'rms_norm'"):
        fldispatch.call_op("rms_nrom")
    with pytest.raises(fldispatch.NotFoundError, match="did you mean 'rms_norm'"):
        fldispatch.resolve_op("rms_nrom")


def test_a_scalar_of_the_wrong_type_names_the_op_and_argument():
    out, x, w = torch.empty(2, 8), torch.randn(2, 8), torch.ones(8)
    with pytest.raises(TypeError, match=r"rms_norm\(\): argument 'eps' must be a float, not str"):
        fldispatch.rms_norm(out, x, w, eps="1e-6")  # type: ignore[arg-type]  # the refusal under test
    with pytest.raises(TypeError, match=r"gemma_rms_norm\(\): argument 'eps'"):
        fldispatch.gemma_rms_norm(out, x, w, None, [1e-6])  # type: ignore[arg-type]  # the refusal under test
    q = torch.randn(2, 16)
    cache = torch.randn(8, 16)
    pos = torch.zeros(2, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"rotary_embedding\(\): argument 'head_size' must be an int"):
        fldispatch.rotary_embedding(pos, q, None, "16", cache, True)  # type: ignore[arg-type]  # the refusal under test
    with pytest.raises(OverflowError, match=r"rotary_embedding\(\): argument 'head_size'"):
        fldispatch.rotary_embedding(pos, q, None, 2**70, cache, True)
    with pytest.raises(TypeError, match=r"rms_norm\(\): argument 'eps'"):
        fldispatch.prepare("rms_norm", out, x, w, eps="1e-6")


def test_a_python_ops_calls_are_counted_under_their_dtype():
    out = run_child("""
        import torch
        import fldispatch
        fldispatch.stats_enable("calls")
        def bad(x):
            raise RuntimeError("no")
        fldispatch.register_impl("dtype_op", bad, impl_id="vendor.bad", kind="vendor",
                                 vendor="bad", plugin="pytest_dtype")
        fldispatch.register_impl("dtype_op", lambda x: x, impl_id="reference.ok",
                                 kind="reference", plugin="pytest_dtype")
        fldispatch.call_op("dtype_op", torch.ones(2, dtype=torch.float16))
        fldispatch.call_op("dtype_op", torch.ones(2, dtype=torch.bfloat16))
        for s in fldispatch.stats():
            if s["op"] == "dtype_op":
                print("row", s["impl_id"], s["device"], s["dtype"], s["calls"], s["failures"])
    """)
    assert "row vendor.bad cpu f16 1 1" in out, out
    assert "row reference.ok cpu f16 1 0" in out and "row reference.ok cpu bf16 1 0" in out, out


@pytest.mark.parametrize("priority, edge", [(2**31, 2**31 - 1), (-2**31 - 1, -2**31),
                                            (10**30, 2**31 - 1)])
def test_a_priority_outside_a_c_int_names_op_and_impl(priority, edge):
    """The library keeps a priority as a C int: one outside it is a ValueError
    naming op, implementation and the range, and registers nothing."""
    op = f"pyprio_op_{priority}".replace("-", "m")
    with pytest.raises(ValueError, match=rf"^register_impl\(\): op '{op}', impl "
                                         r"'reference\.big': priority -?\d+ is out of range "
                                         r"\(-2147483648 to 2147483647\)$"):
        fldispatch.register_impl(op, lambda: 1, impl_id="reference.big", kind="reference",
                                 priority=priority)
    assert not [m for m in fldispatch.impls() if m["op"] == op]
    fldispatch.register_impl(op, lambda: 1, impl_id="reference.edge", kind="reference",
                             priority=edge)
    assert [m["priority"] for m in fldispatch.impls() if m["op"] == op] == [edge]
