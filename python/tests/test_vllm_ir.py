# SPDX-License-Identifier: Apache-2.0
"""fldispatch as a vLLM IR provider (fldispatch.vllm_ir), held to vLLM's
IR contract, with the installed vLLM (make check-vllm; skipped where vLLM
or its IR is absent):

- the provider is registered for every IR op of IR_OPS the installed vLLM
  has, with vLLM's schema, and the layers calling those ops stay vLLM's;
- supports_args returns a plain bool, also on FakeTensors whose sizes are
  unbacked SymInts, and the same answer as on real tensors;
- on the IR ops' own input generators, the provider matches native within
  the op's tolerances (vllm/ir/tolerances.py and the op's overrides),
  through the functional and the maybe_inplace overloads, and with
  GemmaRMSNorm's float32 weight;
- vLLM's lowering pass (VLLM_COMPILE) selects the provider eager dispatch
  selects, and a function compiled with Dynamo tracing through dispatch
  (vLLM's CPU path) calls what eager calls;
- torch.library.opcheck passes on the IR ops with the provider first and on
  our torch ops with the IR ops' arguments;
- the default priority follows VLLM_FL_OOT_* and the mode (fldispatch first
  in eager mode, vLLM's own under Inductor unless VLLM_FL_OOT_FORCE names
  the norms), an explicit ir_op_priority wins, each worker's installation of
  the lists logs one line per norm layer saying which provider is first and
  why, and the provider's uuid (part of vLLM's compile-cache key) changes
  with what the provider would select, as do vLLM's compile factors.
"""

import re
import sys

import pytest
import torch

ir = pytest.importorskip("vllm.ir", reason="vLLM with its IR is not installed here")
if getattr(sys.modules.get("vllm"), "__fake__", False):
    pytest.skip("a stand-in vLLM", allow_module_level=True)

import fldispatch  # noqa: E402
import fldispatch.vllm as fv  # noqa: E402
from fldispatch import vllm_compile, vllm_ir, vllm_path  # noqa: E402
from fldispatch.vllm_state import DECIDED  # noqa: E402
from vllm.ir.op import IrOp  # noqa: E402

PROVIDER = vllm_ir.PROVIDER
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
OPS = sorted(vllm_ir.available_rows())
# The provider's numerics, lowering and schema run on every device PyTorch
# has here: the CPU, and a GPU where one is (vLLM's CUDA engine, its IR ops
# on CUDA tensors, fldispatch's cuda plugin).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# The plugin's defaults follow vLLM's platform (fldispatch.vllm_path's mode
# tables): the tests of the CPU's run where vLLM's platform is the CPU, the
# GPU's test everywhere (on the CPU as the plugin sees a GPU platform).
ON_GPU_PLATFORM = vllm_path.mode_table(vllm_path.device_type()) is vllm_path.GPU_MODE_TABLE
cpu_platform_defaults = pytest.mark.skipif(
    ON_GPU_PLATFORM, reason=f"vLLM's platform here is {vllm_path.device_type()!r}: these check "
    "the CPU platform's defaults (test_a_gpu_platform_keeps_vllms_defaults checks a GPU's)")


@pytest.fixture(scope="module", autouse=True)
def registered():
    fv.register()
    return DECIDED.ir_providers


@pytest.fixture
def env(monkeypatch):
    """Sets VLLM_FL_* variables and reloads the library; restores both."""
    def set_env(**values):
        for k, v in values.items():
            monkeypatch.setenv(k, v)
        fldispatch.reload()

    yield set_env
    monkeypatch.undo()
    fldispatch.reload()


def op(name):
    return IrOp.registry[name]


def test_the_installed_vllm_has_the_ops_of_the_table():
    assert {"rms_norm", "fused_add_rms_norm"} <= set(OPS)


def test_a_provider_for_every_ir_op_of_the_table(registered):
    from vllm.model_executor import custom_op

    for name in OPS:
        impl = op(name).impls[PROVIDER]
        assert registered[name] is impl
        assert impl.supported
        assert impl.inplace == vllm_ir.IR_OPS[name].inplace
    assert op("fused_add_rms_norm").impls[PROVIDER].inplace
    # the norm layers call IR ops: they stay vLLM's
    assert "RMSNorm" not in custom_op.op_registry_oot or \
        custom_op.op_registry_oot["RMSNorm"].__module__ != fv.__name__
    assert "rms_norm" not in DECIDED.oot_layers and "gemma_rms_norm" not in DECIDED.oot_layers
    assert {"rms_norm", "gemma_rms_norm"} <= vllm_ir.superseded_layers()


# ---- supports_args ----------------------------------------------------------------


def args_of(name, x, weight, variance_size=None):
    if name == "rms_norm":
        return (x, weight, 1e-6, variance_size)
    return (x, torch.empty_like(x), weight, 1e-6, variance_size)


def weight_cases(dtype):
    cases = [("none", None), ("same", dtype)]
    if dtype != torch.float32:
        cases.append(("float32", torch.float32))
    return cases


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_supports_args_is_a_bool_under_unbacked_symints(name, dtype):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    impl = op(name).impls[PROVIDER]
    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        tokens, hidden = shape_env.create_unbacked_symint(), shape_env.create_unbacked_symint()
        for _, wdtype in weight_cases(dtype):
            x = torch.empty((tokens, hidden), dtype=dtype)
            w = None if wdtype is None else torch.empty((hidden,), dtype=wdtype)
            for variance_size in (None, 16):
                got = impl.supports_args(*args_of(name, x, w, variance_size))
                assert type(got) is bool
                real = impl.supports_args(*args_of(
                    name, torch.empty(3, 64, dtype=dtype),
                    None if wdtype is None else torch.empty(64, dtype=wdtype), variance_size))
                assert got == real
                if variance_size is not None:
                    assert got is False


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("device", DEVICES)
def test_supports_args_follows_the_resolution(name, device):
    """What the library serves on the device is accepted; a device it has no
    plugin for (meta) is not."""
    impl = op(name).impls[PROVIDER]
    x = torch.empty(2, 64, device=device)
    assert impl.supports_args(*args_of(name, x, torch.ones(64, device=device))) is True
    assert impl.supports_args(*args_of(name, x.to("meta"), torch.ones(64, device="meta"))) \
        is False


@pytest.mark.parametrize("name", OPS)
def test_calls_autograd_records_are_left_to_native(name):
    """GemmaRMSNorm's weight.float() + 1 requires grad outside inference:
    native serves it (fldispatch's ops have no derivative)."""
    impl = op(name).impls[PROVIDER]
    x, w = torch.empty(2, 64), torch.ones(64, requires_grad=True)
    assert impl.supports_args(*args_of(name, x, w)) is False
    with torch.no_grad():
        assert impl.supports_args(*args_of(name, x, w)) is True
    with torch.inference_mode():
        assert impl.supports_args(*args_of(name, x, torch.ones(64))) is True


# ---- numerics: the IR ops' own input generators and tolerances -------------------


def assert_close(name, dtype, got, want):
    tol = op(name).get_tolerance(dtype)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, **tol)


SHAPES = [(1, 64), (7, 256), (83, 2048), (16, 4096)]


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, hidden", SHAPES)
@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("device", DEVICES)
def test_provider_matches_native(name, dtype, tokens, hidden, gemma, device):
    torch.manual_seed(tokens * hidden)
    ir_op = op(name)
    args = [a.to(device) if isinstance(a, torch.Tensor) else a
            for a in ir_op.generate_inputs(num_tokens=tokens, hidden_size=hidden, dtype=dtype)]
    w_at = 1 if name == "rms_norm" else 2
    if gemma:  # GemmaRMSNorm: weight.float() + 1
        args[w_at] = args[w_at].float() + 1.0
    native = ir_op.impls["native"].impl_fn
    want = native(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    with ir_op.set_priority([PROVIDER, "native"]):
        assert ir_op.dispatch(*args).provider == PROVIDER
        kept = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        got = ir_op(*args)
        # the functional overload leaves its inputs alone
        for a, k in zip(args, kept):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, k)
        assert_close(name, dtype, got, want)
        if ir_op.allow_inplace:
            got = ir_op.maybe_inplace(*args)
            assert_close(name, dtype, got, want)
            assert got[0].data_ptr() == args[0].data_ptr()
            assert got[1].data_ptr() == args[1].data_ptr()


@pytest.mark.parametrize("name", OPS)
def test_weightless_and_unserved_calls(name):
    """weight None is served; variance_size is left to native, which the
    list's last entry serves."""
    ir_op = op(name)
    args = list(ir_op.generate_inputs(num_tokens=5, hidden_size=128, dtype=torch.float32))
    w_at = 1 if name == "rms_norm" else 2
    args[w_at] = None
    native = ir_op.impls["native"].impl_fn
    with ir_op.set_priority([PROVIDER, "native"]):
        want = native(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
        assert_close(name, torch.float32, ir_op(*args), want)
        args.append(64)
        assert ir_op.dispatch(*args).provider == "native"


@pytest.mark.parametrize("name", OPS)
def test_the_provider_follows_the_library_after_reload_and_policy_changes(name, env):
    """The provider calls torch.ops.fldispatch's overload resolved once: after
    the library is re-initialised under another policy, and under a policy
    set later in the process, each call runs the policy in force then."""
    ir_op = op(name)
    impl = ir_op.impls[PROVIDER].impl_fn
    args = list(ir_op.generate_inputs(num_tokens=3, hidden_size=64, dtype=torch.float32))

    def call():
        return impl(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])

    want = ir_op.impls["native"].impl_fn(*[a.clone() if isinstance(a, torch.Tensor) else a
                                           for a in args])
    assert_close(name, torch.float32, call(), want)
    env(VLLM_FL_PER_OP="rms_norm=impl:no.such")
    with pytest.raises(fldispatch.UnavailableError, match="rms_norm"):
        call()
    env(VLLM_FL_PER_OP="rms_norm=reference", VLLM_FL_STATS="1")
    fldispatch.stats_reset()
    assert_close(name, torch.float32, call(), want)
    assert {r["impl_id"] for r in fldispatch.stats() if r["op"] == "rms_norm"} == {"reference.c"}
    with fldispatch.policy(per_op={"rms_norm": "impl:no.such"}):
        with pytest.raises(fldispatch.UnavailableError, match="rms_norm"):
            call()
    assert_close(name, torch.float32, call(), want)


# ---- compiled: the same selection as eager ------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_lowering_selects_what_eager_selects(dtype, device):
    """vLLM's IR lowering pass (VLLM_COMPILE) picks the provider from each
    node's fake arguments: the same as eager dispatch on the real ones."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx
    from vllm.compilation.passes.ir.lowering_pass import VllmIRLoweringPass
    from vllm.config import VllmConfig, set_current_vllm_config

    def fn(x, r, w):
        y = ir.ops.rms_norm(x, w, 1e-6)
        z, r2 = ir.ops.fused_add_rms_norm(y, r, w, 1e-6)
        u = ir.ops.rms_norm(z, w, 1e-6, 32)  # variance_size: native
        return u, r2

    x, r, w = torch.randn(8, 64, dtype=dtype, device=device), \
        torch.randn(8, 64, dtype=dtype, device=device), torch.randn(64, dtype=dtype, device=device)
    priority = [PROVIDER, "native"]
    with op("rms_norm").set_priority(priority), \
            op("fused_add_rms_norm").set_priority(priority), ir.enable_torch_wrap(True):
        eager = [op("rms_norm").dispatch(x, w, 1e-6).provider,
                 op("fused_add_rms_norm").dispatch(x, r, w, 1e-6).provider,
                 op("rms_norm").dispatch(x, w, 1e-6, 32).provider]
        gm = make_fx(fn, tracing_mode="fake")(x, r, w)
        cfg = VllmConfig()
        # as in Inductor, where vLLM runs the pass: under the graph's fake mode
        fake_mode = detect_fake_mode([n.meta["val"] for n in gm.graph.nodes if "val" in n.meta])
        with set_current_vllm_config(cfg), fake_mode:
            lowering = VllmIRLoweringPass(cfg)
            lowering(gm.graph)
        picked = dict(lowering.selected_impls)
        assert eager == [PROVIDER, PROVIDER, "native"]
        assert sorted(picked["rms_norm"].values()) == sorted([eager[0], eager[2]])
        assert list(picked["fused_add_rms_norm"].values()) == [eager[1]]
        gm.recompile()
        got = gm(x, r, w)
        want = fn(x, r, w)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, **op("rms_norm").get_tolerance(dtype))


def test_compiled_through_dispatch_calls_what_eager_calls():
    """vLLM's CPU path: Dynamo traces through dispatch (torch wrap off), so
    the graph calls the selected provider's op, without a graph break."""
    from torch._dynamo.testing import CompileCounterWithBackend

    def fn(x, r, w):
        y = ir.ops.rms_norm(x, w, 1e-6)
        return ir.ops.fused_add_rms_norm.maybe_inplace(y, r, w, 1e-6)

    priority = [PROVIDER, "native"]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    counter = CompileCounterWithBackend(backend)
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    with op("rms_norm").set_priority(priority), \
            op("fused_add_rms_norm").set_priority(priority), ir.enable_torch_wrap(False):
        want = fn(x.clone(), r.clone(), w)
        torch._dynamo.reset()
        got = torch.compile(fn, backend=counter, fullgraph=True)(x.clone(), r.clone(), w)
    assert counter.frame_count == 1
    code = graphs[0].code
    assert code.count("fldispatch.rms_norm") == 2, code
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("device", DEVICES)
def test_the_provider_serves_q_k_heads_of_a_fused_qkv_tensor(device):
    """Qwen3's q/k norm: [tokens, heads, head_dim] views of the fused qkv
    tensor, whose leading dimensions have no single row stride, through vLLM's
    IR dispatch with fldispatch first: served, with native's result."""
    ir_op = op("rms_norm")
    qkv = torch.randn(6, (16 + 2 * 8) * 64, dtype=torch.bfloat16, device=device)
    q = qkv[:, :16 * 64].view(6, 16, 64)
    w = torch.rand(64, dtype=torch.bfloat16, device=device) + 0.5
    want = ir_op.impls["native"].impl_fn(q, w, 1e-6)
    with ir_op.set_priority([PROVIDER, "native"]):
        assert ir_op.dispatch(q, w, 1e-6).provider == PROVIDER
        assert_close("rms_norm", torch.bfloat16, ir_op(q, w, 1e-6), want)


# ---- opcheck ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(dtype, device):
    x, r, w = torch.randn(5, 128, dtype=dtype, device=device), \
        torch.randn(5, 128, dtype=dtype, device=device), torch.randn(128, dtype=dtype, device=device)
    priority = [PROVIDER, "native"]
    with op("rms_norm").set_priority(priority), \
            op("fused_add_rms_norm").set_priority(priority):
        torch.library.opcheck(op("rms_norm").torch_op, (x, w, 1e-6))
        # the functional overloads (vLLM clones the activations for an in-place
        # provider); maybe_inplace returns the activations it wrote, as vLLM's
        # in-place providers do, which torch's schema check does not model
        torch.library.opcheck(op("fused_add_rms_norm").torch_op, (x, r, w, 1e-6))
    ops = torch.ops.fldispatch
    torch.library.opcheck(ops.rms_norm, (torch.empty_like(x), x, w, None, 1e-6))
    torch.library.opcheck(ops.rms_norm, (x.clone(), x.clone(), w, r.clone(), 1e-6))


# ---- priority and the compile-cache key ----------------------------------------------


def default_priority(name):
    from vllm.platforms import current_platform

    return list(getattr(current_platform.get_default_ir_op_priority(None), name))


def vllm_config(mode="eager", **compilation):
    """vLLM's configuration in eager mode (enforce_eager's compilation mode
    NONE) or its default compilation (Inductor)."""
    from vllm.config import CompilationConfig, VllmConfig
    from vllm.config.compilation import CompilationMode

    if mode == "eager":
        compilation.setdefault("mode", CompilationMode.NONE)
    return VllmConfig(compilation_config=CompilationConfig(**compilation))


def kernel_priority(given, mode="eager"):
    """KernelConfig's lists after vLLM appends the platform default to what
    the operator gave."""
    from vllm.config.kernel import IrOpPriorityConfig, KernelConfig

    kc = KernelConfig(ir_op_priority=IrOpPriorityConfig(**given))
    kc.set_platform_defaults(vllm_config(mode))
    return kc.ir_op_priority


def reinstall():
    vllm_ir.install_default_priority(vllm_ir.default_first_ops())


@cpu_platform_defaults
def test_default_priority_follows_the_oot_switches(env):
    reinstall()
    for name in OPS:
        assert default_priority(name)[0] == PROVIDER
    env(VLLM_FL_OOT_BLACKLIST="rms_norm")
    reinstall()
    for name in OPS:
        assert PROVIDER not in default_priority(name)
    env(VLLM_FL_OOT_BLACKLIST="", VLLM_FL_OOT_ENABLED="0")
    reinstall()
    for name in OPS:
        assert PROVIDER not in default_priority(name)
    env(VLLM_FL_OOT_ENABLED="1", VLLM_FL_OOT_WHITELIST="silu_and_mul")
    reinstall()
    assert PROVIDER not in default_priority("rms_norm")
    env(VLLM_FL_OOT_WHITELIST="rms_norm")
    reinstall()
    assert default_priority("rms_norm")[0] == PROVIDER


@cpu_platform_defaults
def test_the_operators_list_wins(env):
    env(VLLM_FL_OOT_BLACKLIST="")
    reinstall()
    pri = kernel_priority({})
    assert pri.rms_norm[0] == PROVIDER and pri.fused_add_rms_norm[0] == PROVIDER
    pri = kernel_priority({"rms_norm": ["native"]})
    assert pri.rms_norm[0] == "native" and pri.fused_add_rms_norm[0] == PROVIDER
    # the CLI's comma-separated form
    pri = kernel_priority({"rms_norm": "fldispatch,native"})
    assert pri.rms_norm == [PROVIDER, "native"]
    env(VLLM_FL_OOT_ENABLED="0")
    reinstall()
    pri = kernel_priority({"rms_norm": ["fldispatch"]})
    assert pri.rms_norm == [PROVIDER, "native"] and pri.fused_add_rms_norm == ["native"]
    env(VLLM_FL_OOT_ENABLED="1")
    reinstall()


@cpu_platform_defaults
def test_the_default_priority_follows_the_mode(env, monkeypatch):
    """fldispatch first for the norms in eager mode; under Inductor (vLLM's
    default compilation), which fuses add + norm, the platform's default
    alone, unless VLLM_FL_OOT_FORCE names rms_norm; a list the operator gave
    still wins."""
    env(VLLM_FL_OOT_BLACKLIST="")
    reinstall()
    assert vllm_path.mode(vllm_config("inductor").compilation_config) == "inductor"
    assert vllm_path.mode(vllm_config("eager").compilation_config) == "eager"
    eager, compiled = kernel_priority({}), kernel_priority({}, "inductor")
    for name in OPS:
        assert getattr(eager, name)[0] == PROVIDER
        assert PROVIDER not in getattr(compiled, name)
    monkeypatch.setenv(vllm_path.FORCE, "silu_and_mul")
    assert PROVIDER not in kernel_priority({}, "inductor").rms_norm
    monkeypatch.setenv(vllm_path.FORCE, "rms_norm")
    forced = kernel_priority({}, "inductor")
    assert forced.rms_norm[0] == PROVIDER and forced.fused_add_rms_norm[0] == PROVIDER
    assert kernel_priority({"rms_norm": ["native"]}, "inductor").rms_norm[0] == "native"
    monkeypatch.setenv(vllm_path.FORCE, "all")
    assert kernel_priority({}, "inductor").rms_norm[0] == PROVIDER
    # compiled by another backend, nothing is fused: fldispatch first (vLLM
    # decides its defaults before the CPU platform turns such a backend into
    # Inductor, as here)
    monkeypatch.delenv(vllm_path.FORCE)
    from types import SimpleNamespace

    from vllm.config import CompilationConfig
    from vllm.config.compilation import CompilationMode
    from vllm.platforms import current_platform

    other = SimpleNamespace(compilation_config=CompilationConfig(
        mode=CompilationMode.VLLM_COMPILE, backend="eager"))
    assert current_platform.get_default_ir_op_priority(other).rms_norm[0] == PROVIDER


def norm_lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "fldispatch.vllm" and "Norm -> " in r.getMessage()]


@pytest.fixture
def installed(monkeypatch):
    """Installs a configuration's lists as a vLLM worker does at its start
    (IrOpPriorityConfig.set_default under the configuration), with fresh
    log lines; restores the lists after."""
    from vllm.config import set_current_vllm_config

    monkeypatch.setattr(DECIDED, "logged", set())
    saved = {name: op(name).get_priority() for name in OPS}

    def install(cfg):
        with set_current_vllm_config(cfg):
            cfg.kernel_config.ir_op_priority.set_default()

    yield install
    for name, priority in saved.items():
        op(name).set_default(priority)


@cpu_platform_defaults
def test_a_worker_logs_which_provider_each_norm_layer_gets(env, monkeypatch, caplog, installed):
    caplog.set_level("INFO", logger="fldispatch.vllm")
    env(VLLM_FL_OOT_BLACKLIST="")
    reinstall()
    installed(vllm_config("eager"))
    why = ("fldispatch first by default in eager mode, where fldispatch's kernel was measured "
           "faster than vLLM's unfused one")
    assert norm_lines(caplog) == [
        f"fldispatch: {layer} -> vLLM IR provider fldispatch (ir_op_priority fused_add_rms_norm: "
        f"fldispatch, native; rms_norm: fldispatch, native; {why})"
        for layer in ("RMSNorm", "GemmaRMSNorm")]
    caplog.clear()
    installed(vllm_config("eager"))  # once per class and decision
    assert norm_lines(caplog) == []
    installed(vllm_config("inductor"))
    assert norm_lines(caplog)[0] == (
        "fldispatch: RMSNorm -> vLLM IR provider native (ir_op_priority fused_add_rms_norm: "
        "native; rms_norm: native; compiled by Inductor, which fuses add + norm with its "
        "neighbours, measured faster than fldispatch's opaque call; VLLM_FL_OOT_FORCE does not "
        "name rms_norm)")
    caplog.clear()
    monkeypatch.setenv(vllm_path.FORCE, "rms_norm")
    installed(vllm_config("inductor"))
    assert norm_lines(caplog)[0] == (
        "fldispatch: RMSNorm -> vLLM IR provider fldispatch (ir_op_priority fused_add_rms_norm: "
        "fldispatch, native; rms_norm: fldispatch, native; VLLM_FL_OOT_FORCE=rms_norm, over the "
        "default compiled by Inductor)")
    caplog.clear()
    monkeypatch.delenv(vllm_path.FORCE)
    cfg = vllm_config("eager")
    cfg.kernel_config.ir_op_priority.rms_norm = ["native"]
    cfg.kernel_config.ir_op_priority.fused_add_rms_norm = ["native"]
    installed(cfg)
    assert norm_lines(caplog)[0] == (
        "fldispatch: RMSNorm -> vLLM IR provider native (ir_op_priority fused_add_rms_norm: "
        "native; rms_norm: native; ir_op_priority puts native first)")


def test_a_gpu_platform_keeps_vllms_defaults(env, monkeypatch, caplog, installed):
    """On vLLM's CUDA platform fldispatch is first nowhere by default, in
    eager mode (vLLM's own C++ kernels) and under Inductor, and each norm
    layer's line says so; VLLM_FL_OOT_FORCE and an operator's list still put
    it first."""
    if not ON_GPU_PLATFORM:
        monkeypatch.setattr(vllm_path, "device_type", lambda: "cuda")
    caplog.set_level("INFO", logger="fldispatch.vllm")
    env(VLLM_FL_OOT_BLACKLIST="")
    reinstall()
    for mode in ("eager", "inductor"):
        pri = kernel_priority({}, mode)
        for name in OPS:
            assert PROVIDER not in getattr(pri, name), (mode, name, getattr(pri, name))
    installed(vllm_config("eager"))
    lines = norm_lines(caplog)
    assert lines and all(" -> vLLM IR provider fldispatch" not in line and
                         "in eager mode on a GPU" in line for line in lines), lines
    monkeypatch.setenv(vllm_path.FORCE, "rms_norm")
    forced = kernel_priority({}, "inductor")
    assert forced.rms_norm[0] == PROVIDER and forced.fused_add_rms_norm[0] == PROVIDER
    monkeypatch.delenv(vllm_path.FORCE)
    given = kernel_priority({"rms_norm": ["fldispatch"]})
    assert given.rms_norm[0] == PROVIDER and PROVIDER not in given.fused_add_rms_norm


def operator_config(mode="eager", **lists):
    """vLLM's configuration with the lists an operator gave
    (KernelConfig.ir_op_priority), made as vLLM makes it: the platform's
    default appended as the configuration is built."""
    from vllm.config import CompilationConfig, KernelConfig, VllmConfig
    from vllm.config.compilation import CompilationMode
    from vllm.config.kernel import IrOpPriorityConfig

    compilation = CompilationConfig(mode=CompilationMode.NONE) if mode == "eager" else \
        CompilationConfig()
    return VllmConfig(compilation_config=compilation,
                      kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(**lists)))


@cpu_platform_defaults
def test_the_log_tells_an_operators_list_from_the_default(env, caplog, installed):
    """In eager mode the default list of the norms is fldispatch, native: the
    same list given by the operator is said to be the operator's. Which
    lists the operator gave goes with the configuration to vLLM's workers
    (pickled, as vLLM sends it to a spawned process)."""
    import pickle

    caplog.set_level("INFO", logger="fldispatch.vllm")
    env(VLLM_FL_OOT_BLACKLIST="")
    reinstall()
    both = [PROVIDER, "native"]
    installed(pickle.loads(pickle.dumps(operator_config(rms_norm=both, fused_add_rms_norm=both))))
    assert norm_lines(caplog)[0] == (
        "fldispatch: RMSNorm -> vLLM IR provider fldispatch (ir_op_priority fused_add_rms_norm: "
        "fldispatch, native; rms_norm: fldispatch, native; ir_op_priority names fldispatch first)")
    caplog.clear()
    installed(operator_config(rms_norm=["native"]))  # one list the operator's, one the default
    assert norm_lines(caplog)[0] == (
        "fldispatch: RMSNorm -> vLLM IR providers fused_add_rms_norm: fldispatch, rms_norm: "
        "native (ir_op_priority fused_add_rms_norm: fldispatch, native; rms_norm: native; "
        "rms_norm: ir_op_priority puts native first; fused_add_rms_norm: fldispatch "
        "first by default in eager mode, where fldispatch's kernel was measured faster than "
        "vLLM's unfused one)")
    caplog.clear()
    installed(operator_config("inductor", rms_norm=[PROVIDER]))
    assert ("; rms_norm: ir_op_priority names fldispatch first; fused_add_rms_norm: compiled by "
            "Inductor, ") in norm_lines(caplog)[0]
    caplog.clear()
    installed(operator_config())  # no list of the operator's: the default, said so
    assert norm_lines(caplog)[0].endswith(
        "; fldispatch first by default in eager mode, where fldispatch's kernel was measured "
        "faster than vLLM's unfused one)")


def test_the_start_lines_wait_for_vllms_logging(tmp_path):
    """vLLM loads its plugins in its driver (and so in an engine run in the
    driver's process) before it configures its logging: register()'s lines
    come out once, as vLLM configures it, through vLLM's handlers; and from
    then on the library's lines are in vLLM's log too (fldispatch.vllm_log),
    also with the root logger at ERROR."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("vllm.config.logging") is None:
        pytest.skip("this vLLM configures its logging as vllm.logger is imported (no "
                    "vllm.config.logging): no line waits")

    script = tmp_path / "driver.py"
    script.write_text(
        "import logging, vllm.logger\n"
        "from vllm.config.logging import LoggingConfig\n"
        "from fldispatch import vllm as fv\n"
        "assert not logging.getLogger('vllm').handlers\n"
        "fv.register(); fv.register()\n"
        "print('registered', flush=True)\n"
        "vllm.logger.configure_logging_if_needed(LoggingConfig())\n"
        "vllm.logger.configure_logging_if_needed(LoggingConfig(log_level='DEBUG'))\n"
        # then a library warning, with the root logger at ERROR as in vLLM's API server
        "import os, fldispatch\n"
        "logging.getLogger().setLevel(logging.ERROR)\n"
        "os.environ['VLLM_FL_DENY_VENDORS'] = 'nvida'\n"
        "fldispatch.reload(); fldispatch.resolve('rms_norm'); fldispatch._C.log_flush()\n")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("VLLM_")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert "registered" in out.stdout, text
    for name in OPS:
        line = f"fldispatch: vLLM IR op {name} has provider 'fldispatch'"
        assert text.count(line) == 1, text
        assert out.stdout.index(line) > out.stdout.index("registered"), out.stdout
    # in vLLM's format (process, level, time, file), on vLLM's stream
    assert re.search(r"^\(MainProcess pid=\d+\) WARNING [-0-9]+ [:0-9.]+ \[libfldispatch\.so:0\] "
                     r"VLLM_FL_DENY_VENDORS: no vendor named 'nvida'", out.stdout, re.M), text


def test_the_mode_table_is_vllms_default_custom_ops():
    """The CustomOp column of fldispatch.vllm_path.MODE_TABLE is vLLM's own
    default base mode of custom_ops for each mode."""
    for cfg in (vllm_config("eager"), vllm_config("inductor")):
        cc = cfg.compilation_config
        for family in ("activation", "rotary"):
            assert vllm_path.MODE_TABLE[vllm_path.mode(cc)][family][0] == \
                ("all" in cc.custom_ops), (cc.mode, cc.backend, cc.custom_ops)


def test_cli_names_the_provider():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    args = parser.parse_args(["--kernel-config.ir_op_priority.rms_norm=fldispatch,native"])
    got = EngineArgs.from_cli_args(args)
    kc = got.kernel_config
    pri = kc["ir_op_priority"]["rms_norm"] if isinstance(kc, dict) else kc.ir_op_priority.rms_norm
    assert list(pri if not isinstance(pri, str) else pri.split(",")) == [PROVIDER, "native"]


def test_uuid_changes_with_what_the_provider_selects(env):
    impl = op("rms_norm").impls[PROVIDER]
    first = impl.uuid()
    assert impl.uuid() == first  # stable while nothing changes
    env(VLLM_FL_OOT_BLACKLIST="silu_and_mul")
    second = impl.uuid()
    assert second != first
    env(VLLM_FL_OOT_BLACKLIST="silu_and_mul", VLLM_FL_PREFER="reference")
    assert impl.uuid() not in (first, second)
    env(VLLM_FL_OOT_BLACKLIST="", VLLM_FL_PREFER="")
    assert impl.uuid() == first


def test_priority_hash_includes_the_fingerprint(env):
    """vLLM's KernelConfig hash, part of its compile-cache key, follows the
    provider's uuid where the provider is listed."""
    from vllm.config.kernel import IrOpPriorityConfig

    listed = IrOpPriorityConfig.with_default(["native"], rms_norm=[PROVIDER, "native"])
    unlisted = IrOpPriorityConfig.with_default(["native"])
    a, u = listed.compute_hash(), unlisted.compute_hash()
    env(VLLM_FL_OOT_BLACKLIST="rotary_embedding")
    assert listed.compute_hash() != a
    assert unlisted.compute_hash() == u


def test_compile_factors_follow_the_variables(env):
    import vllm.envs as envs

    assert vllm_compile.FINGERPRINT in envs.environment_variables
    base = envs.compile_factors()
    assert "VLLM_FL_OOT_BLACKLIST" in base and base["VLLM_FL_STATS"] is None
    assert "VLLM_FL_OOT_FORCE" in base
    env(VLLM_FL_OOT_BLACKLIST="rms_norm")
    got = envs.compile_factors()
    assert got["VLLM_FL_OOT_BLACKLIST"] == "rms_norm"
    assert got[vllm_compile.FINGERPRINT] != base[vllm_compile.FINGERPRINT]
    env(VLLM_FL_STATS="1")
    assert envs.compile_factors() == got


def test_vllms_environment_check_knows_fldispatchs_variables(monkeypatch, registered):
    """vLLM checks each VLLM_* variable set against its table (a warning, or
    an error under --fail-on-environ-validation): every VLLM_* variable of
    fldispatch's table and policy passes, whatever its value, and the
    observing ones stay out of the compile-cache key; a name no one
    knows is still refused."""
    import vllm.envs as envs
    from vllm.platforms import current_platform

    names = {v["name"] for v in fldispatch._C.variables() if v["name"].startswith("VLLM_")}
    names |= set(vllm_compile.GRAPH_VARIABLES)  # the policy's variables among them
    assert "VLLM_FL_STATS" in names and "VLLM_FL_IO_DUMP" in names
    base = envs.compile_factors()
    # as if set before vLLM started: the plugin registers in every process
    # (on a copy of vLLM's table, given back after the test)
    monkeypatch.setattr(envs, "environment_variables", dict(envs.environment_variables))
    for name in sorted(names):
        monkeypatch.setenv(name, "a value vLLM does not read")
    vllm_compile.register_variables()
    current_platform.validate_environ(True)
    factors = envs.compile_factors()
    for name in vllm_compile.known_variables():
        assert factors[name] == base[name] is None, name
    monkeypatch.setenv("VLLM_FL_NOT_A_VARIABLE", "1")
    with pytest.raises(ValueError, match="VLLM_FL_NOT_A_VARIABLE"):
        current_platform.validate_environ(True)
