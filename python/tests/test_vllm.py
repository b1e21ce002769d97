# SPDX-License-Identifier: Apache-2.0
"""fldispatch.vllm: the entry point, VLLM_FL_OOT_* handling, the layer
shims, and which path each layer takes (fldispatch.vllm_path: vLLM's
custom_ops, VLLM_FL_OOT_FORCE, the mode table) with its log line. Without
vLLM (this machine's make check) the layers are checked on a stand-in
(fakevllm.py) carrying vLLM's constructor arguments, forward_native
formulas and CustomOp.enabled() rule; with vLLM importable, the
test_real_vllm_* tests run the same checks on vLLM's own classes and
configuration."""

import contextlib
import importlib.metadata
import logging
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import torch

import fakevllm
import fldispatch
import fldispatch.vllm as fv
from fldispatch import vllm_patches, vllm_path
from fldispatch.vllm_layers import LAYERS
from fldispatch.vllm_state import DECIDED

ALL = {"rms_norm": "RMSNorm", "gemma_rms_norm": "GemmaRMSNorm", "silu_and_mul": "SiluAndMul",
       "mul_and_silu": "MulAndSilu", "gelu_and_mul": "GeluAndMul",
       "rotary_embedding": "RotaryEmbedding"}


def have_real_vllm():
    try:
        import vllm.model_executor.custom_op  # noqa: F401
        return not getattr(sys.modules["vllm"], "__fake__", False)
    except ImportError:
        return False


HAVE_VLLM = have_real_vllm()


# vLLM modules the stand-in has not: hidden while it stands in
HIDDEN = ["vllm.ir", "vllm.ir.op", "vllm.envs", "vllm.platforms"]


@pytest.fixture
def fake_vllm(monkeypatch):
    saved = {name: sys.modules.get(name) for name in fakevllm.MODULES + HIDDEN}
    fakevllm.install()
    for name in HIDDEN:  # a real vLLM imported earlier in this process stays out of sight
        sys.modules[name] = None  # type: ignore[assignment]  # None there makes the import fail
    sys.modules["vllm"].__fake__ = True  # type: ignore[attr-defined]  # marks the stand-in
    monkeypatch.setattr(DECIDED, "oot_layers", {})
    monkeypatch.setattr(DECIDED, "logged", set())  # each test sees its own lines
    # register() sets them; undone after the test
    for name in (*fv.HOST_DEFAULTS, fv.DEPLOYMENT_START_VARIABLE):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    yield sys.modules
    for name, mod in saved.items():
        if mod is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = mod


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


def layers(mods) -> tuple[Any, Any, Any]:
    ln = mods["vllm.model_executor.layers.layernorm"]
    act = mods["vllm.model_executor.layers.activation"]
    rope = mods["vllm.model_executor.layers.rotary_embedding"]
    return ln, act, rope


# ---- the entry point ------------------------------------------------------------------


def test_entry_point_is_declared():
    eps = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins")
           if e.name == "fldispatch"]
    if not eps:
        pytest.skip("fldispatch is not installed as a distribution here (make python "
                    "builds it in the tree; pip install ./python declares the entry point)")
    assert eps[0].value == "fldispatch.vllm:register"


def test_register_replaces_the_six_layers(fake_vllm):
    assert fv.register() == ALL
    registry = fake_vllm["vllm.model_executor.custom_op"].op_registry_oot
    assert sorted(registry) == sorted(ALL.values())
    assert registry["RMSNorm"].__name__ == "RMSNormFL"
    ln, act, rope = layers(fake_vllm)
    assert type(ln.RMSNorm(64)).__name__ == "RMSNormFL"
    assert type(act.GeluAndMul("tanh")).__name__ == "GeluAndMulFL"
    assert fv.register() == ALL  # idempotent: nothing registered twice


@pytest.mark.parametrize("variables, expected", [
    ({"VLLM_FL_OOT_WHITELIST": "rms_norm,rotary_embedding"}, {"rms_norm", "rotary_embedding"}),
    ({"VLLM_FL_OOT_BLACKLIST": "silu_and_mul,gelu_and_mul"},
     set(ALL) - {"silu_and_mul", "gelu_and_mul"}),
    ({"VLLM_FL_OOT_ENABLED": "0"}, set()),
    ({"VLLM_FL_PREFER_ENABLED": "false"}, set()),
])
def test_oot_switches(fake_vllm, env, variables, expected):
    env(**variables)
    assert set(fv.register()) == expected
    registry = fake_vllm["vllm.model_executor.custom_op"].op_registry_oot
    assert set(registry) == {ALL[op] for op in expected}


def test_bad_oot_configuration_is_an_error():
    """In a fresh process (a reload keeps the configuration in force when the
    new one is bad), register() raises the library's ConfigError."""
    import os
    import subprocess

    code = ("import fakevllm; fakevllm.install(); import fldispatch, fldispatch.vllm as fv\n"
            "try:\n    fv.register()\nexcept fldispatch.ConfigError as e:\n    print(e)\n")
    env = dict(os.environ, VLLM_FL_OOT_WHITELIST="rms_norm",
               VLLM_FL_OOT_BLACKLIST="rotary_embedding",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "VLLM_FL_OOT_WHITELIST" in out.stdout and "VLLM_FL_OOT_BLACKLIST" in out.stdout


def test_host_defaults_are_in_force_in_a_fresh_process():
    """As vLLM loads the plugin: a fresh process imports fldispatch.vllm and
    calls register(). The CPU plugin must start under HOST_DEFAULTS: the
    layers' activations are PyTorch's to the bit, and the plugin runs its
    kernels on the calling thread."""
    import json
    import os
    import subprocess

    code = ("import json, torch, torch.nn.functional as F\n"
            "import fakevllm; fakevllm.install()\n"
            "import fldispatch, fldispatch.vllm as fv\n"
            "fv.register()\n"
            "x = torch.randn(64, 2 * 4096, generator=torch.Generator().manual_seed(1))\n"
            "out = torch.empty(64, 4096)\n"
            "torch.ops.fldispatch.silu_and_mul(out, x)\n"
            "want = F.silu(x[:, :4096]) * x[:, 4096:]\n"
            "cpu = [p for p in fldispatch.plugins() if p['name'] == 'cpu'][0]\n"
            "print(json.dumps({'differ': int((out != want).sum()), 'detail': cpu['detail']}))\n")
    env = {k: v for k, v in os.environ.items() if k not in fv.HOST_DEFAULTS}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__)] + sys.path)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["differ"] == 0, got
    assert "; 1 thread " in got["detail"], got


def test_the_fingerprint_is_the_same_in_every_process_and_follows_the_switches():
    """fldispatch.vllm_ir.fingerprint() enters vLLM's compile-cache key: equal
    in two fresh processes under one configuration (else the cache would
    never hit), different when a VLLM_FL_OOT_* switch differs (the policy:
    test_vllm_ir.py's uuid test)."""
    import os
    import subprocess

    code = ("import fldispatch, fldispatch.vllm as fv\n"
            "from fldispatch import vllm_ir\n"
            "fv._host_defaults(); fldispatch.init()\n"
            "print(vllm_ir.fingerprint())\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    base["VLLM_FL_PLATFORM"] = "cpu"
    base["PYTHONPATH"] = os.pathsep.join(sys.path)

    def fingerprint(**extra):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(base, **extra))
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    first = fingerprint()
    assert len(first) == 64 and fingerprint() == first
    assert fingerprint(VLLM_FL_OOT_BLACKLIST="silu_and_mul") != first


def test_register_sets_the_host_defaults_it_finds_unset(fake_vllm, monkeypatch):
    import os

    monkeypatch.setenv("VLLM_FL_CPU_THREADS", "2")
    fv.register()
    assert os.environ["VLLM_FL_CPU_ACTIVATIONS"] == "torch"
    assert os.environ["VLLM_FL_CPU_THREADS"] == "2"  # the user's value stays


def test_register_notes_the_deployment_start_for_the_processes_it_starts(fake_vllm,
                                                                         monkeypatch):
    # the first process of a deployment notes its start; the processes it
    # starts inherit it, and their /metrics take the files written since
    import os
    import time

    from fldispatch import prometheus

    before = time.time()
    fv.register()
    started = float(os.environ[fv.DEPLOYMENT_START_VARIABLE])
    slack = prometheus.FILE_TIME_SLACK_S
    assert before - slack <= started <= time.time() - slack
    monkeypatch.setenv(fv.DEPLOYMENT_START_VARIABLE, "1234.5")  # as a started process has it
    assert fv._deployment_start() == 1234.5
    assert os.environ[fv.DEPLOYMENT_START_VARIABLE] == "1234.5"


def test_a_worker_layer_puts_its_rank_in_the_environment(fake_vllm, monkeypatch):
    """vLLM's workers get their rank as arguments: the library's %r reads
    RANK, which a worker may have inherited from its parent (here 0), and so
    may the IO dump (its rank_NNNN directory) before the process group is up."""
    import os

    from fldispatch import iodump

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(iodump, "_rank", None)
    fv.register()
    assert iodump.get_rank() == 0  # from the inherited RANK
    ln, _, _ = layers(fake_vllm)
    ln.RMSNorm(64)
    assert os.environ["RANK"] == "0"  # torch.distributed not initialised: left alone
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    ln.RMSNorm(64)
    assert os.environ["RANK"] == "1"
    assert iodump.get_rank() == 1


def test_a_layer_another_plugin_replaced_is_left_alone(fake_vllm, caplog):
    registry = fake_vllm["vllm.model_executor.custom_op"].op_registry_oot
    other = type("OtherRMSNorm", (), {})
    registry["RMSNorm"] = other
    got = fv.register()
    assert "rms_norm" not in got and len(got) == 5
    assert registry["RMSNorm"] is other
    assert "already replaced" in caplog.text


# ---- the layers against forward_native ------------------------------------------------------

TOL = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-3, 1.6e-2),
       torch.float16: (1e-3, 1e-3)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_layers_match_forward_native(fake_vllm, dtype):
    fv.register()
    check_layers(*layers(fake_vllm), dtype)


def check_layers(ln, act, rope, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 256, generator=g).to(dtype)
    atol, rtol = TOL[dtype]
    for layer in (act.SiluAndMul(), act.MulAndSilu(), act.GeluAndMul("none"),
                  act.GeluAndMul("tanh")):
        assert type(layer).__name__.endswith("FL")
        torch.testing.assert_close(layer(x), layer.forward_native(x), atol=atol, rtol=rtol)

    norm = ln.RMSNorm(256, eps=1e-5, dtype=dtype)
    norm.weight.data.normal_(1.0, 0.1, generator=g)
    h = x / 16
    torch.testing.assert_close(norm(h), norm.forward_native(h), atol=1e-2, rtol=1e-2)
    residual = torch.randn(7, 256, generator=g).to(dtype) / 16
    want = norm.forward_native(h.clone(), residual.clone())
    h2, r2 = h.clone(), residual.clone()
    got = norm(h2, r2)
    if type(norm).__module__ == fv.__name__:
        assert got[0] is h2 and got[1] is r2  # updated in place, as vLLM's kernel
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)

    gemma = ln.GemmaRMSNorm(256)
    gemma.weight.data = (torch.randn(256, generator=g) * 0.1).to(dtype)
    torch.testing.assert_close(gemma(h), gemma.forward_native(h), atol=1e-2, rtol=1e-2)
    want = gemma.forward_native(h.clone(), residual.clone())
    for a, b in zip(gemma(h.clone(), residual.clone()), want):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)

    for is_neox in (True, False):
        for rot_dim in (64, 32):
            rotary = rope.RotaryEmbedding(64, rot_dim, 100, 10000.0, is_neox, dtype)
            positions = torch.randint(0, 100, (7,), generator=g)
            q = torch.randn(7, 4 * 64, generator=g).to(dtype)
            k = torch.randn(7, 2 * 64, generator=g).to(dtype)
            want_q, want_k = rotary.forward_native(positions, q.clone(), k.clone())
            got_q, got_k = rotary(positions, q, k)
            assert got_q is q and got_k is k
            tol = dict(atol=2e-2, rtol=2e-2) if dtype != torch.float32 else dict(atol=atol,
                                                                                  rtol=rtol)
            torch.testing.assert_close(got_q, want_q, **tol)
            torch.testing.assert_close(got_k, want_k, **tol)
            got_q, got_k = rotary(positions, q.clone(), None)
            assert got_k is None


def test_the_layers_run_fldispatch(fake_vllm):
    """A policy that names no implementation makes our op fail: seeing
    the error proves the layer called fldispatch (MulAndSilu included, which
    vLLM pins to forward_native on CPU in its constructor)."""
    fv.register()
    ln, act, rope = layers(fake_vllm)
    x = torch.randn(3, 64)
    for op, layer, args in (("mul_and_silu", act.MulAndSilu(), (x,)),
                            ("silu_and_mul", act.SiluAndMul(), (x,)),
                            ("rms_norm", ln.RMSNorm(64), (x,)),
                            ("gemma_rms_norm", ln.GemmaRMSNorm(64), (x,))):
        with fldispatch.policy(per_op={op: "impl:no.such"}):  # strict would refuse the name
            with pytest.raises(fldispatch.UnavailableError, match=op):
                layer(*args)
        layer(*args)


def test_layers_built_before_a_reload_follow_the_library_after_it(fake_vllm, env):
    """The layers hold torch.ops.fldispatch's overloads, resolved once: a
    layer built before the library is re-initialised under another policy
    runs that policy (an implementation that does not exist: the call
    fails), and the default again after the next re-initialisation."""
    fv.register()
    ln, act, rope = layers(fake_vllm)
    x = torch.randn(3, 64)
    positions, q, k = torch.arange(3), torch.randn(3, 2 * 32), torch.randn(3, 32)
    built = [("silu_and_mul", act.SiluAndMul(), (x,)), ("mul_and_silu", act.MulAndSilu(), (x,)),
             ("gelu_and_mul", act.GeluAndMul("none"), (x,)),
             ("gelu_tanh_and_mul", act.GeluAndMul("tanh"), (x,)),
             ("rms_norm", ln.RMSNorm(64), (x,)),
             ("rotary_embedding", rope.RotaryEmbedding(32, 32, 16, 10000.0, True, torch.float32),
              (positions, q, k))]
    want = [layer(*args) for _, layer, args in built]
    for op, layer, args in built:
        env(VLLM_FL_PER_OP=f"{op}=impl:no.such")
        with pytest.raises(fldispatch.UnavailableError, match=op):
            layer(*args)
    env(VLLM_FL_PER_OP="")
    for (op, layer, args), w in zip(built, want):
        if op == "rotary_embedding":  # in place: rotates q and k again
            continue
        torch.testing.assert_close(layer(*args), w)


def test_what_fldispatch_cannot_take_runs_forward_native(fake_vllm, monkeypatch):
    fv.register()
    ln, act, _ = layers(fake_vllm)
    norm = ln.RMSNorm(64, var_hidden_size=32)
    with pytest.raises(NotImplementedError, match="var_hidden_size"):
        norm(torch.randn(3, 64))  # went to forward_native
    calls = []
    layer = act.SiluAndMul()
    monkeypatch.setattr(layer, "forward_native",
                        lambda x: calls.append(x.device.type) or x)  # type: ignore[func-returns-value]  # None or x
    layer(torch.empty(3, 64, device="meta"))
    assert calls == ["meta"]


def test_gelu_mode_names():
    assert fv.gelu_op_name("none") == "gelu_and_mul"
    assert fv.gelu_op_name("tanh") == "gelu_tanh_and_mul"
    with pytest.raises(ValueError, match="approximate"):
        fv.gelu_op_name("fast")


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not importable here (see docs/python.md)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_real_vllm_layers(dtype):
    from vllm.config import CompilationConfig, DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor import custom_op
    from vllm.model_executor.layers import activation, layernorm, rotary_embedding

    from fldispatch import vllm_ir

    got = fv.register()
    # the layers that call vLLM IR ops stay vLLM's: fldispatch serves their
    # IR calls where the priority names it first
    ours = {op: cls for op, cls in ALL.items() if op not in vllm_ir.superseded_layers()}
    assert set(got) == set(ours) or all(custom_op.op_registry_oot[c].__module__ == fv.__name__
                                        for c in ours.values())
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"),
                     compilation_config=CompilationConfig(custom_ops=["all"]))
    with set_current_vllm_config(cfg), contextlib.ExitStack() as stack:
        for impl in DECIDED.ir_providers.values():
            stack.enter_context(impl.op.set_priority([vllm_ir.PROVIDER, "native"]))
        check_layers(layernorm, activation, rotary_embedding, dtype)


# ---- which path each layer takes: custom_ops, VLLM_FL_OOT_FORCE, the mode --------------

EAGER = dict(mode=0)
INDUCTOR = dict(mode=2)  # vLLM's default compilation on CPU (VLLM_COMPILE on GPUs: 3)
CUSTOM_OPS_LAYERS = ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "rotary_embedding",
                     "rms_norm", "gemma_rms_norm")


def make_layer(mods, op_name):
    ln, act, rope = layers(mods)
    return {"rms_norm": lambda: ln.RMSNorm(64), "gemma_rms_norm": lambda: ln.GemmaRMSNorm(64),
            "silu_and_mul": act.SiluAndMul, "mul_and_silu": act.MulAndSilu,
            "gelu_and_mul": lambda: act.GeluAndMul("tanh"),
            "rotary_embedding": lambda: rope.RotaryEmbedding(64, 64, 100, 10000.0, True,
                                                             torch.float32)}[op_name]()


def runs_fldispatch(layer, op_name):
    """Whether the layer's forward reaches fldispatch's op: a policy that
    names no implementation makes our op fail, vLLM's forward_native not."""
    op = op_name if op_name != "gelu_and_mul" else "gelu_tanh_and_mul"
    if op_name == "rotary_embedding":
        args: tuple[Any, ...] = (torch.arange(3), torch.randn(3, 128), torch.randn(3, 64))
    else:
        args = (torch.randn(3, 64),)
    with fldispatch.policy(per_op={op: "impl:no.such"}):
        try:
            layer(*args)
        except fldispatch.UnavailableError as e:
            assert op in str(e)
            return True
    return False


@pytest.mark.parametrize("compilation, force, expected", [
    # vLLM's defaults per mode: eager "all", Inductor "none"
    (EAGER, None, set(CUSTOM_OPS_LAYERS)),
    (INDUCTOR, None, set()),
    (dict(mode=3), None, set()),  # VLLM_COMPILE with Inductor (vLLM's GPU default)
    (dict(mode=2, backend="eager"), None, set(CUSTOM_OPS_LAYERS)),  # no Inductor: "all"
    # custom_ops names a layer, by vLLM's name or the class name
    (dict(INDUCTOR, custom_ops=["none", "+silu_and_mul"]), None, {"silu_and_mul"}),
    (dict(INDUCTOR, custom_ops=["none", "+RotaryEmbedding"]), None, {"rotary_embedding"}),
    (dict(EAGER, custom_ops=["all", "-rotary_embedding", "-MulAndSilu"]), None,
     set(CUSTOM_OPS_LAYERS) - {"rotary_embedding", "mul_and_silu"}),
    (dict(INDUCTOR, custom_ops=["all"]), None, set(CUSTOM_OPS_LAYERS)),  # the operator's "all"
    (dict(EAGER, custom_ops=["none"]), None, set()),
    # VLLM_FL_OOT_FORCE over the base mode, not over a minus
    (INDUCTOR, "all", set(CUSTOM_OPS_LAYERS)),
    (INDUCTOR, "rotary_embedding, silu_and_mul", {"rotary_embedding", "silu_and_mul"}),
    (dict(INDUCTOR, custom_ops=["none", "-silu_and_mul"]), "ALL",
     set(CUSTOM_OPS_LAYERS) - {"silu_and_mul"}),
])
def test_custom_ops_and_force_decide_the_path(fake_vllm, monkeypatch, compilation, force,
                                              expected):
    if force is not None:
        monkeypatch.setenv(vllm_path.FORCE, force)
    fv.register()
    fakevllm.set_compilation(**compilation)
    got = {op for op in CUSTOM_OPS_LAYERS if runs_fldispatch(make_layer(fake_vllm, op), op)}
    assert got == expected


@pytest.mark.parametrize("value, message", [
    ("silu", "VLLM_FL_OOT_FORCE: unknown layer 'silu' (valid: all, gelu_and_mul, "),
    ("rms_norm,,silu_and_mul", "VLLM_FL_OOT_FORCE: empty item in 'rms_norm,,silu_and_mul'"),
    ("SiluAndMul", "unknown layer 'SiluAndMul'"),
])
def test_a_bad_force_value_is_an_error(fake_vllm, monkeypatch, value, message):
    monkeypatch.setenv(vllm_path.FORCE, value)
    with pytest.raises(fldispatch.ConfigError) as e:
        fv.register()
    assert message in str(e.value)
    assert not fake_vllm["vllm.model_executor.custom_op"].op_registry_oot


@pytest.fixture
def gpu_platform(fake_vllm, monkeypatch):
    """The stand-in as on a GPU: vLLM's device type "cuda", and CustomOp's
    dispatch_forward choosing forward_cuda, vLLM's own CUDA kernel, where
    enabled() says so. Returns the list of layer classes whose vLLM
    forward_cuda ran."""
    monkeypatch.setattr(vllm_path, "device_type", lambda: "cuda")
    custom_op = fake_vllm["vllm.model_executor.custom_op"].CustomOp
    ran = []

    def forward_cuda(self, *args, **kwargs):
        ran.append(type(self).__name__)
        return self.forward_native(*args, **kwargs)

    monkeypatch.setattr(custom_op, "forward_cuda", forward_cuda, raising=False)
    monkeypatch.setattr(custom_op, "dispatch_forward", lambda self, compile_native:
                        self.forward_cuda if self.enabled() else self.forward_native)
    return ran


@pytest.mark.parametrize("compilation, force, expected", [
    # GPU_MODE_TABLE: vLLM's own kernels by default, in every mode
    (EAGER, None, set()),
    (dict(mode=3), None, set()),
    (dict(mode=2, backend="eager"), None, set()),
    # the operator's word still wins
    (dict(EAGER, custom_ops=["all", "+silu_and_mul"]), None, {"silu_and_mul"}),
    (dict(mode=3, custom_ops=["none", "+RMSNorm"]), None, {"rms_norm"}),
    (EAGER, "rotary_embedding", {"rotary_embedding"}),
    (dict(mode=3), "all", set(CUSTOM_OPS_LAYERS)),
])
def test_on_a_gpu_layers_keep_vllms_kernels_by_default(fake_vllm, gpu_platform, monkeypatch,
                                                       compilation, force, expected):
    if force is not None:
        monkeypatch.setenv(vllm_path.FORCE, force)
    fv.register()
    fakevllm.set_compilation(**compilation)
    got = {op for op in CUSTOM_OPS_LAYERS if runs_fldispatch(make_layer(fake_vllm, op), op)}
    assert got == expected


def test_on_a_gpu_stepping_aside_keeps_vllms_cuda_kernel(fake_vllm, gpu_platform, caplog):
    """In eager mode vLLM runs its CUDA kernel (forward_cuda), and a layer
    fldispatch does not serve must still run it, not forward_native; one line
    per class says why."""
    caplog.set_level(logging.INFO, logger="fldispatch.vllm")
    fv.register()
    fakevllm.set_compilation(**EAGER)
    layer = make_layer(fake_vllm, "silu_and_mul")
    out = layer(torch.randn(3, 64))
    assert out.shape == (3, 32)
    assert len(gpu_platform) == 1
    lines = [line for line in path_lines(caplog) if line.startswith("fldispatch: SiluAndMul")]
    assert len(lines) == 1 and "vLLM's own" in lines[0] and "on a GPU" in lines[0], lines
    # Inductor: vLLM's default custom_ops "none", forward_native, as without the plugin
    gpu_platform.clear()
    fakevllm.set_compilation(mode=3)
    make_layer(fake_vllm, "silu_and_mul")(torch.randn(3, 64))
    assert gpu_platform == []


def test_the_ir_rms_norm_takes_heads_of_a_fused_qkv_tensor():
    """A q/k-norm (Qwen3) normalises [tokens, heads, head_dim] views of a
    fused qkv tensor, whose leading dimensions have no single row stride:
    the IR provider's rms_norm serves them, with native's result."""
    from fldispatch import vllm_ir

    qkv = torch.randn(5, 16 * 8 + 2 * 4 * 8)
    q = qkv[:, :16 * 8].view(5, 16, 8)  # strides (192, 8, 1)
    weight = torch.rand(8) + 0.5
    out = vllm_ir._rms_norm(q, weight, 1e-6)
    want = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
    assert out.shape == q.shape and out.is_contiguous()
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    # a row-strided 2-D view needs no copy and keeps working
    k = qkv[:, 16 * 8:16 * 8 + 32]
    torch.testing.assert_close(vllm_ir._rms_norm(k, torch.ones(32), 1e-6),
                               k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6),
                               rtol=1e-5, atol=1e-5)


def test_the_gpu_mode_table_names_every_family_and_mode():
    assert set(vllm_path.GPU_MODE_TABLE) == set(vllm_path.MODE_TABLE)
    for mode, row in vllm_path.GPU_MODE_TABLE.items():
        assert set(row) == set(vllm_path.FAMILIES.values()), mode
        assert not any(first for first, _ in row.values()), mode
    assert vllm_path.mode_table("cuda") is vllm_path.GPU_MODE_TABLE
    assert vllm_path.mode_table("cpu") is vllm_path.MODE_TABLE
    assert vllm_path.mode_table("npu") is vllm_path.MODE_TABLE


def test_the_mode_table_names_every_layer_and_mode():
    assert set(vllm_path.FAMILIES) == set(LAYERS)
    for mode, row in vllm_path.MODE_TABLE.items():
        assert set(row) == set(vllm_path.FAMILIES.values()), mode
    # the CustomOp column is vLLM's default base mode (fakevllm: as vLLM fills it in)
    for compilation, mode in ((EAGER, "eager"), (INDUCTOR, "inductor"),
                              (dict(mode=3, backend="eager"), "compiled")):
        config = fakevllm.CompilationConfig(**compilation)
        assert vllm_path.mode(config) == mode
        for family in ("activation", "rotary"):
            assert vllm_path.MODE_TABLE[mode][family][0] == ("all" in config.custom_ops)


def path_lines(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "fldispatch.vllm" and " -> " in r.getMessage()]


def test_one_log_line_per_layer_class_and_decision(fake_vllm, monkeypatch, caplog, env):
    caplog.set_level("INFO", logger="fldispatch.vllm")
    env(VLLM_FL_OOT_BLACKLIST="mul_and_silu")
    fv.register()
    assert path_lines(caplog) == [
        "fldispatch: MulAndSilu -> vLLM's own (VLLM_FL_OOT_* or VLLM_FL_PREFER_ENABLED leave "
        "mul_and_silu to vLLM: not replaced)"]
    caplog.clear()
    for _ in range(3):  # three layers of a model: one line
        make_layer(fake_vllm, "silu_and_mul")
    assert path_lines(caplog) == [
        "fldispatch: SiluAndMul -> fldispatch CustomOp (custom_ops all: vLLM's default in eager "
        "mode, where fldispatch's kernel was measured faster than vLLM's unfused one)"]
    caplog.clear()
    fakevllm.set_compilation(**INDUCTOR)
    make_layer(fake_vllm, "silu_and_mul")
    make_layer(fake_vllm, "rotary_embedding")
    make_layer(fake_vllm, "rotary_embedding")
    assert path_lines(caplog) == [
        "fldispatch: SiluAndMul -> vLLM's own (custom_ops none: vLLM's default compiled by "
        "Inductor, which fuses the activation with its neighbours, measured faster than "
        "fldispatch's opaque call; VLLM_FL_OOT_FORCE does not name silu_and_mul)",
        "fldispatch: RotaryEmbedding -> vLLM's own (custom_ops none: vLLM's default compiled by "
        "Inductor, which fuses rope with its neighbours, measured faster than fldispatch's "
        "opaque call; VLLM_FL_OOT_FORCE does not name rotary_embedding)"]
    caplog.clear()
    monkeypatch.setenv(vllm_path.FORCE, "rotary_embedding")
    make_layer(fake_vllm, "rotary_embedding")
    make_layer(fake_vllm, "silu_and_mul")
    fakevllm.set_compilation(mode=2, custom_ops=["none", "+gelu_and_mul"])
    make_layer(fake_vllm, "gelu_and_mul")
    fakevllm.set_compilation(mode=0, custom_ops=["all", "-RMSNorm"])
    make_layer(fake_vllm, "rms_norm")
    fakevllm.set_compilation(mode=2, custom_ops=["all"])
    make_layer(fake_vllm, "gemma_rms_norm")
    assert path_lines(caplog) == [
        "fldispatch: RotaryEmbedding -> fldispatch CustomOp (VLLM_FL_OOT_FORCE=rotary_embedding, "
        "over custom_ops none)",
        "fldispatch: SiluAndMul -> vLLM's own (custom_ops none: vLLM's default compiled by "
        "Inductor, which fuses the activation with its neighbours, measured faster than "
        "fldispatch's opaque call; VLLM_FL_OOT_FORCE=rotary_embedding does not name "
        "silu_and_mul)",
        "fldispatch: GeluAndMul -> fldispatch CustomOp (custom_ops +gelu_and_mul)",
        "fldispatch: RMSNorm -> vLLM's own (custom_ops -RMSNorm)",
        "fldispatch: GemmaRMSNorm -> fldispatch CustomOp (custom_ops all, the operator's (vLLM's "
        "default compiled by Inductor is none))"]
    assert all(r.levelname == "INFO" for r in caplog.records if r.name == "fldispatch.vllm")


# ---- rotary under torch.compile: no copies of the qkv storage ------------------------------


def functionalized_graph(fn, *args):
    """fn compiled by Dynamo, then functionalized as Inductor's input is
    (auto_functionalized version 1, as vLLM's CPU Inductor configuration
    sets it): (the call targets of that graph, fn's compiled result)."""
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs = []

    def backend(gm, example_inputs):
        def capture(g, inputs):
            graphs.append(g)
            return g.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=capture)

    torch._dynamo.reset()
    with torch._inductor.config.patch(enable_auto_functionalized_v2=False), torch.no_grad():
        got = torch.compile(fn, backend=backend, fullgraph=True)(*args)
    torch._dynamo.reset()
    return [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"], got


def _qkv_attention(fake_vllm):
    rope = make_layer(fake_vllm, "rotary_embedding")
    w = torch.randn(32, 8 * 64, generator=torch.Generator().manual_seed(3))

    def attention_input(x, positions):
        q, k, v = (x @ w).split([4 * 64, 2 * 64, 2 * 64], dim=-1)
        q, k = rope(positions, q, k)
        return q * 2, k * 2, v * 2

    return attention_input


def test_compiled_rotary_copies_nothing_of_qkv(fake_vllm):
    """vLLM passes q and k as views of one qkv tensor. Compiled, the layer
    rotates them out of place (rotary_embedding_out into new tensors) and
    returns the results: functionalization then needs no scatter of written
    views back into qkv, nor any copy of q or k, and the tokens are the
    eager layer's."""
    fv.register()
    attention_input = _qkv_attention(fake_vllm)
    x, positions = torch.randn(5, 32), torch.randint(0, 100, (5,))
    targets, got = functionalized_graph(attention_input, x, positions)
    assert "auto_functionalized" in targets  # the layer called fldispatch's op
    copies = [t for t in targets if "scatter" in t or "copy" in t or "clone" in t]
    assert not copies, targets
    for a, b in zip(got, attention_input(x, positions)):
        torch.testing.assert_close(a, b)


def test_compiled_rotary_calls_the_out_of_place_op(fake_vllm):
    """The traced layer's op is rotary_embedding_out, writing two new
    tensors (query_out, key_out) and reading q and k where they lie."""
    fv.register()
    attention_input = _qkv_attention(fake_vllm)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(attention_input, backend=backend, fullgraph=True)(
            torch.randn(5, 32), torch.randint(0, 100, (5,)))
    torch._dynamo.reset()
    called = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    ours = [t for t in called if t.startswith("fldispatch.")]
    assert ours and all(t.startswith("fldispatch.rotary_embedding_out") for t in ours), called


def test_rotary_out_devices_is_resolved_once(fake_vllm):
    """Which devices take the out-of-place op is the library's resolution,
    decided outside the trace: the CPU (reference.c serves every CPU call)."""
    fv.register()
    assert "cpu" in fv.rotary_out_devices()
    assert fv.rotary_out_devices() is fv.rotary_out_devices()


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not importable here (see docs/python.md)")
@pytest.mark.parametrize("mode, force, custom_ops, expected", [
    ("eager", None, None, {"silu_and_mul", "gelu_and_mul", "rotary_embedding"}),
    ("inductor", None, None, set()),
    ("inductor", "rotary_embedding", None, {"rotary_embedding"}),
    ("inductor", None, ["none", "+silu_and_mul"], {"silu_and_mul"}),
    ("eager", "all", ["all", "-GeluAndMul"], {"silu_and_mul", "rotary_embedding"}),
])
def test_real_vllm_paths(monkeypatch, caplog, mode, force, custom_ops, expected):
    """vLLM's own layers and configuration: eager (enforce_eager) runs
    fldispatch's, vLLM's default compilation (Inductor, custom_ops "none")
    vLLM's own, custom_ops and VLLM_FL_OOT_FORCE as documented; the line of
    each layer class says so."""
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.config.compilation import CompilationMode
    from vllm.model_executor.layers import activation, rotary_embedding

    if force:
        monkeypatch.setenv(vllm_path.FORCE, force)
    monkeypatch.setattr(DECIDED, "logged", set())
    # get_rope() keeps the layers it made for the process: each case makes its own
    monkeypatch.setattr(rotary_embedding, "_ROPE_DICT", {})
    caplog.set_level("INFO", logger="fldispatch.vllm")
    fv.register()
    compilation = {"mode": CompilationMode.NONE} if mode == "eager" else {}
    if custom_ops:
        compilation["custom_ops"] = custom_ops
    cfg = VllmConfig(compilation_config=CompilationConfig(**compilation))
    assert vllm_path.mode(cfg.compilation_config) == mode
    with set_current_vllm_config(cfg):
        made = {"silu_and_mul": activation.SiluAndMul(),
                "gelu_and_mul": activation.GeluAndMul("tanh"),
                "rotary_embedding": rotary_embedding.get_rope(
                    64, 100, is_neox_style=True, dtype=torch.float32,
                    rope_parameters={"rope_type": "default", "rope_theta": 10000})}
        for layer in made.values():
            assert type(layer).__module__ == fv.__name__
        got = {op for op, layer in made.items() if runs_fldispatch(layer, op)}
    assert got == expected
    lines = path_lines(caplog)
    for op in made:
        name = LAYERS[op].class_name
        path = "fldispatch CustomOp" if op in expected else "vLLM's own"
        assert sum(line.startswith(f"fldispatch: {name} -> {path} (") for line in lines) == 1, \
            lines


# ---- the engine core's counters -----------------------------------------------------

# An engine core as vLLM's run_engine_core runs it: its busy loop counts
# calls and ends by SystemExit; then vLLM restores SIGTERM's default action,
# and a SIGTERM (its API server's) ends the process before any exit
# handler. A subclass's loop calls its base's, as a data-parallel engine
# core's may: both are wrapped, and the counters are written once. Two
# engine cores of a platform plugin's have loops of their own: one defined
# before the patch, outside the core module, the other after it (a plugin
# module imported later).
ENGINE_CORE = textwrap.dedent("""
    import os, signal, sys, types
    import numpy as np
    import fldispatch
    import fldispatch.vllm as fv
    from fldispatch import vllm_patches

    def busy():
        x = np.ones((2, 16), np.float32)
        out = np.zeros((2, 8), np.float32)
        for _ in range(4):
            fldispatch.silu_and_mul(out, x)
        raise SystemExit

    class EngineCoreProc:
        def run_busy_loop(self):
            busy()

    class DPEngineCoreProc(EngineCoreProc):
        def run_busy_loop(self):
            super().run_busy_loop()

    class PluginEngineCoreProc(DPEngineCoreProc):
        def run_busy_loop(self):
            busy()

    core = types.SimpleNamespace(EngineCoreProc=EngineCoreProc, DPEngineCoreProc=DPEngineCoreProc)
    if sys.argv[1] == "patched":
        for _ in range(2):  # the second call leaves the wraps as they are
            vllm_patches.patch_engine_busy_loop(fv._write_counters_as_the_engine_stops, core)

    class LatePluginEngineCoreProc(DPEngineCoreProc):
        def run_busy_loop(self):
            busy()

    try:
        globals()[sys.argv[2]]().run_busy_loop()
    except SystemExit:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
""")


@pytest.mark.parametrize("engine_core", ["DPEngineCoreProc", "PluginEngineCoreProc",
                                         "LatePluginEngineCoreProc"])
@pytest.mark.parametrize("sink", ["table", "file"])
def test_the_engine_core_writes_its_counters_as_its_busy_loop_ends(tmp_path, sink, engine_core):
    script = tmp_path / "engine_core.py"
    script.write_text(ENGINE_CORE)
    stats_file = tmp_path / "stats-%p.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_FL_")}
    env.update({"VLLM_FL_STATS": "1"} if sink == "table" else
               {"VLLM_FL_STATS_FILE": str(stats_file)})
    written: dict[str, tuple[int, list[str]] | list[int]] = {}
    for mode in ("patched", "unpatched"):
        out = subprocess.run([sys.executable, str(script), mode, engine_core], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == -signal.SIGTERM, (mode, out.returncode, out.stderr)
        if sink == "table":
            tables = out.stderr.count("fldispatch stats (pid ")
            rows = [line.split() for line in out.stderr.splitlines()
                    if line.startswith("silu_and_mul ")]
            written[mode] = (tables, [row[4] for row in rows])
        else:
            files = sorted(tmp_path.glob("stats-*.json"))
            written[mode] = [f.read_text().count('"silu_and_mul"') for f in files]
            for f in files:
                f.unlink()
    if sink == "table":
        assert written == {"patched": (1, ["4"]), "unpatched": (0, [])}, written
    else:
        assert written == {"patched": [1], "unpatched": []}, written


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed here")
def test_real_vllm_engine_core_busy_loops_are_wrapped():
    from vllm.v1.engine import core

    vllm_patches.patch_engine_busy_loop(fv._write_counters_as_the_engine_stops)
    loops = {name: cls.__dict__["run_busy_loop"] for name, cls in vars(core).items()
             if isinstance(cls, type) and issubclass(cls, core.EngineCoreProc)
             and "run_busy_loop" in cls.__dict__}
    assert "EngineCoreProc" in loops, loops
    for name, loop in loops.items():
        assert getattr(loop, "_fldispatch", False), name
        assert not getattr(loop.__wrapped__, "_fldispatch", False), name

    # a platform plugin's engine core defined now, with a loop of its own
    class LaterEngineCoreProc(core.DPEngineCoreProc):
        def run_busy_loop(self):
            pass

    assert getattr(LaterEngineCoreProc.__dict__["run_busy_loop"], "_fldispatch", False)
