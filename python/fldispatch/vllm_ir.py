# SPDX-License-Identifier: Apache-2.0
"""fldispatch as a vLLM IR provider.

vLLM dispatches some ops through its IR (vllm.ir): a layer such as RMSNorm
calls vllm.ir.ops.rms_norm, and vLLM picks, per call, the first provider of
the op's priority list (KernelConfig.ir_op_priority) whose supports_args
accepts the arguments. register() adds the provider "fldispatch" to every IR
op of the installed vLLM that a row of IR_OPS (fldispatch.vllm_layers)
describes; the layer stays vLLM's, and only its IR call reaches fldispatch.

GemmaRMSNorm calls the norms' two IR ops with a float32 weight (its 1 + w),
which the provider takes where the library does (mixed_weight_ok). An op
vLLM adds later is one more row of IR_OPS (its name, the OOT name that
switches it, the vLLM layers whose CustomOp replacement it supersedes, our
op, whether it runs in place) and its call and supports_args here (CALLS).

Which provider runs is vLLM's priority list. Where the operator gave none for
an op, the platform's default is used; the plugin puts "fldispatch" in front
of that default for the ops whose OOT name VLLM_FL_OOT_* (and
VLLM_FL_PREFER_ENABLED) enable, in the vLLM modes where fldispatch serves
them by default or VLLM_FL_OOT_FORCE names them (fldispatch.vllm_path:
eager mode, not under Inductor), so an explicit list always wins and
VLLM_FL_OOT_BLACKLIST=rms_norm leaves the norms to vLLM.

supports_args accepts what fldispatch's resolution serves: the device, the
dtype of x and of the weight, no variance_size, and no tensor autograd
would record (the ops have no derivative). It reads only device, dtype and
requires_grad, never a size, so it returns a plain bool on FakeTensors with unbacked
sizes, and Dynamo traces it without a graph break: the set it looks up is
computed when the provider is registered. The provider's uuid (part of
vLLM's compile-cache key) hashes this file and fingerprint(): the library's
version, policy, plugin set, manifest, the layers VLLM_FL_OOT_* replace and
the served set, so whatever changes what the provider selects changes the
key.
"""

import hashlib
import inspect
import json
import logging
import os
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from . import _C, devices, vllm_layers, vllm_patches, vllm_path
from .vllm_layers import IR_OPS, LAYERS
from .vllm_state import DECIDED

logger = logging.getLogger(__name__)

PROVIDER = "fldispatch"

# torch device type -> the library's device name (the library's device table)
DEVICE_NAMES = {torch_type: devices.library_name(torch_type) for torch_type in devices.TORCH_TYPES}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# What a provider serves: {(torch device type, x dtype, weight dtype or None)}
Served = frozenset[tuple[str, Any, Any]]


def _overload(op: str) -> Any:
    """torch.ops.fldispatch.<op>.default. Resolved once, by register_providers()
    or the first call (defining the torch ops starts the library, which
    importing this module must not): an OpOverload stays valid for the
    process (the torch library is defined once; fldispatch.reload() does not
    redefine it), and each call runs the library's policy in force then."""
    from . import torch as _fld_torch  # noqa: F401  (defines torch.ops.fldispatch)

    return getattr(torch.ops.fldispatch, op).default


# The IR calls and supports_args below keep no annotations of their own:
# what vLLM registers is a copy of each with native's signature
# (_with_signature), from which vLLM and torch infer the schema. Their types
# are comments.
def _rms_norm(x, weight, epsilon, variance_size=None):
    # type: (Any, Any | None, float, int | None) -> Any
    # Rows as the library takes them: one row stride. A q/k-norm's x is a
    # [tokens, heads, head_dim] view of a fused qkv tensor whose leading
    # dimensions do not collapse into one stride (Qwen3); reshape copies
    # exactly those, and is a view of every other x.
    rows = x.reshape(-1, x.shape[-1])
    # empty_like: a FakeTensor where x is one (vLLM's lowering traces this)
    out = torch.empty_like(rows, memory_format=torch.contiguous_format)
    _RMS_NORM(out, rows, weight, None, epsilon)
    return out.view(x.shape)


def _fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size=None):
    # type: (Any, Any, Any | None, float, int | None) -> tuple[Any, Any]
    _RMS_NORM(x, x, weight, x_residual, epsilon)
    return x, x_residual


def _bind_overloads() -> None:
    global _RMS_NORM
    _RMS_NORM = _overload("rms_norm")


def _rms_norm_first_call(*args: Any) -> Any:
    """_RMS_NORM until the overload is bound: binds it and calls it."""
    _bind_overloads()
    return _RMS_NORM(*args)


_RMS_NORM: Callable[..., Any] = _rms_norm_first_call


def _norm_accepts(served: Served, residual: bool) -> Callable[..., bool]:
    """supports_args of the norm rows, for the served set of (device type, x
    dtype, weight dtype or None): the key served, no variance_size, a
    residual of x's dtype and device, and no tensor autograd would record
    (fldispatch's ops have no derivative and refuse such tensors; native
    serves them). Reads device, dtype and requires_grad only, never a size,
    and returns a plain bool. A CPU x (x.is_cpu, also on a FakeTensor) is
    looked up by its dtypes alone: a torch.device object per call costs
    more than the rest of the check."""
    cpu = frozenset((xd, wd) for dev, xd, wd in served if dev == "cpu")
    grad_enabled = torch.is_grad_enabled

    def rms_norm(x, weight, epsilon, variance_size=None):
        # type: (Any, Any | None, float, int | None) -> bool
        if variance_size is not None:
            return False
        wdtype = None if weight is None else weight.dtype
        if not ((x.dtype, wdtype) in cpu if x.is_cpu
                else (x.device.type, x.dtype, wdtype) in served):
            return False
        return not (grad_enabled() and (x.requires_grad
                                        or (weight is not None and weight.requires_grad)))

    def fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size=None):
        # type: (Any, Any, Any | None, float, int | None) -> bool
        if variance_size is not None or x_residual.dtype != x.dtype:
            return False
        wdtype = None if weight is None else weight.dtype
        if x.is_cpu:
            if not (x_residual.is_cpu and (x.dtype, wdtype) in cpu):
                return False
        elif x_residual.device != x.device or (x.device.type, x.dtype, wdtype) not in served:
            return False
        return not (grad_enabled() and (x.requires_grad or x_residual.requires_grad
                                        or (weight is not None and weight.requires_grad)))

    return fused_add_rms_norm if residual else rms_norm


# IR op name -> (the call, with the IR op's arguments; accepts(served), the
# supports_args for the served set of (device type, x dtype, weight dtype):
# a function of the IR op's arguments, named as native's, returning a plain
# bool). One per row of IR_OPS.
CALLS: dict[str, tuple[Callable[..., Any], Callable[[Served], Callable[..., bool]]]] = {
    "rms_norm": (_rms_norm, lambda served: _norm_accepts(served, residual=False)),
    "fused_add_rms_norm": (_fused_add_rms_norm,
                           lambda served: _norm_accepts(served, residual=True)),
}


def ir_module() -> types.ModuleType | None:
    """vllm.ir, or None where the installed vLLM has no IR."""
    try:
        import vllm.ir as ir
        from vllm.ir.op import IrOp  # noqa: F401
    except ImportError:
        return None
    return ir


def available_rows() -> dict[str, vllm_layers.IrOp]:
    """The rows of IR_OPS whose IR op the installed vLLM has."""
    ir = ir_module()
    if ir is None:
        return {}
    from vllm.ir.op import IrOp

    return {name: row for name, row in IR_OPS.items() if name in IrOp.registry}


def superseded_layers() -> set[str]:
    """OOT names of the layers that an IR op of the installed vLLM serves:
    the CustomOp route leaves them to vLLM."""
    return {layer for row in available_rows().values() for layer in row.layers}


def served_set(row: vllm_layers.IrOp, mixed_weight_ok: bool) -> Served:
    """{(device type, x dtype, weight dtype or None)} the library serves for
    row's op, from its resolution now."""
    served: set[tuple[str, Any, Any]] = set()
    for device_type, device in DEVICE_NAMES.items():
        for dtype in DTYPES:
            try:
                _C.resolve(row.op, device, str(dtype).rpartition(".")[2])
            except _C.Error:
                continue
            for w in row.weights:
                if w == "none":
                    served.add((device_type, dtype, None))
                elif w == "same":
                    served.add((device_type, dtype, dtype))
                elif dtype != torch.float32 and mixed_weight_ok:
                    served.add((device_type, dtype, torch.float32))
    return frozenset(served)


def _file_sha(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return f"unreadable: {e.strerror}"


def fingerprint(served: dict[str, Served] | None = None) -> str:
    """A hash of what decides fldispatch's part of a vLLM graph: the
    library's version and policy (with each value's source), its plugins
    (name, version, path, status, implementations), the manifest's content,
    the OOT switches' answer for every layer and the served sets."""
    parts: dict[str, Any] = {"version": _C.version()}
    try:
        import fldispatch

        cfg = fldispatch.config()
        parts["policy"] = cfg.get("policy")
        parts["plugins"] = [(p.get("name"), p.get("version"), p.get("path"), p.get("status"),
                             p.get("impl_count"), p.get("detail")) for p in fldispatch.plugins()]
    except _C.Error as e:
        parts["error"] = str(e)
    manifest = os.environ.get("VLLM_FL_MANIFEST")
    if manifest:
        parts["manifest"] = _file_sha(manifest)
    oot: dict[str, bool | str] = {}
    for name in sorted(set(LAYERS) | {row.oot for row in IR_OPS.values()}):
        try:
            oot[name] = bool(_C.oot_op_enabled(name))
        except _C.Error as e:
            oot[name] = str(e)
    parts["oot"] = oot
    if served:
        parts["served"] = {op: sorted(map(str, s)) for op, s in sorted(served.items())}
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _impl_class() -> type[Any]:
    from vllm.ir.op import IrOpImpl
    from vllm.ir.util import hash_source

    class FldIrOpImpl(IrOpImpl):
        """vLLM's IrOpImpl whose uuid also hashes fldispatch's fingerprint:
        computed at each call (vLLM calls it as it hashes its configuration),
        so a change of policy in the process is seen too."""

        def uuid(self) -> str:
            source = hash_source(Path(inspect.getfile(self.impl_fn)))
            return hashlib.sha256(
                f"{source}|{fingerprint(DECIDED.served_by_ir_op)}".encode()).hexdigest()

    return FldIrOpImpl


def _supported_here(served: Served) -> bool:
    """vLLM's static `supported`: whether the library serves the op at all on
    the current platform's device."""
    from vllm.platforms import current_platform

    device_type = getattr(current_platform, "device_type", None)
    return any(key[0] == device_type for key in served)


def _same_parameters(a: inspect.Signature, b: inspect.Signature) -> bool:
    """Whether two signatures have the same parameters (names, kinds,
    defaults), annotations aside."""
    return [(p.name, p.kind, p.default) for p in a.parameters.values()] == \
        [(p.name, p.kind, p.default) for p in b.parameters.values()]


def _with_signature(fn: Callable[..., Any], native: Callable[..., Any], name: str) -> Callable[..., Any]:
    """fn with the native implementation's signature (names, annotations,
    defaults): vLLM requires the provider's schema and supports_args'
    parameters to equal native's. Where fn's own parameters are native's
    (names, kinds, defaults), a copy of fn that carries native's signature,
    so a call costs what fn's does; else a wrapper that binds a keyword
    caller's arguments by position (vLLM passes them by position)."""

    signature = inspect.signature(native)
    wrapper: Callable[..., Any]
    if _same_parameters(inspect.signature(fn), signature):
        wrapper = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__,
                                     fn.__closure__)
        wrapper.__kwdefaults__ = fn.__kwdefaults__
        wrapper.__doc__ = fn.__doc__
    else:
        def wrapper(*args, **kwargs):
            # type: (*Any, **Any) -> Any
            if kwargs:
                args = signature.bind(*args, **kwargs).args
            return fn(*args)

    wrapper.__signature__ = signature  # type: ignore[attr-defined]  # what inspect.signature reads
    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__module__ = __name__
    return wrapper


def register_providers(mixed_weight_ok: bool) -> dict[str, Any]:
    """Registers provider "fldispatch" for every row of IR_OPS the installed
    vLLM has. Idempotent; returns {IR op name: vLLM's IrOpImpl}."""
    registered = DECIDED.ir_providers
    if not available_rows():
        return dict(registered)
    from vllm.ir.op import IrOp

    _bind_overloads()
    impl_class = _impl_class()
    for name, row in available_rows().items():
        if name in registered:
            continue
        op = IrOp.registry[name]
        if PROVIDER in op.impls:
            logger.warning("fldispatch: vLLM IR op %s already has a provider %r; leaving it",
                           name, PROVIDER)
            continue
        native = op.impls["native"].impl_fn
        served = served_set(row, mixed_weight_ok)
        DECIDED.served_by_ir_op[name] = served
        call, accepts = CALLS[name]
        impl = op.register_impl(
            PROVIDER,
            supported=_supported_here(served),
            supports_args=_with_signature(accepts(served), native, f"{name}_supports_args"),
            inplace=row.inplace,
        )(_with_signature(call, native, name))
        impl.__class__ = impl_class
        registered[name] = impl
        kinds = sorted(f"{d}/{str(x).rpartition('.')[2]}" for d, x, w in served if w in (None, x))
        vllm_path.logger.info("fldispatch: vLLM IR op %s has provider %r (%s; %s)", name,
                              PROVIDER, "in place" if row.inplace else "functional",
                              ", ".join(sorted(set(kinds))) or "serves nothing here")
    return dict(registered)


# ---- priority: the VLLM_FL_OOT_* switches and the mode as vLLM's platform default ---


def default_first_ops() -> set[str]:
    """The IR ops (of the installed vLLM, with our provider) whose OOT name
    VLLM_FL_OOT_* and VLLM_FL_PREFER_ENABLED enable."""
    return {name for name, row in available_rows().items()
            if name in DECIDED.ir_providers and _C.oot_op_enabled(row.oot)}


def _compilation_config(vllm_config: Any) -> Any:
    return getattr(vllm_config, "compilation_config", None)


def install_default_priority(ops: Iterable[str]) -> None:
    """Puts PROVIDER in front of the current platform's default IR priority
    for each op in ops where fldispatch.vllm_path.ir_default() says so for
    the configuration's mode (MODE_TABLE, VLLM_FL_OOT_FORCE). vLLM appends
    the platform default to the list the operator gave (ir_op_priority) and
    dispatches to the first provider that takes the arguments: an op the
    operator left empty gets the plugin's default, one the operator listed
    keeps the operator's order (a list ending in native never reaches what
    follows). Also logs, as each vLLM worker installs the lists, which
    provider each layer calling the ops gets first and why."""
    DECIDED.first_by_default.clear()
    DECIDED.first_by_default.update(ops)
    if not DECIDED.ir_providers or not available_rows():  # a vLLM without IR: nothing to extend
        return
    from vllm.platforms import current_platform

    vllm_patches.patch_default_ir_priority(type(current_platform), _with_fldispatch_first)
    vllm_patches.patch_priority_set_default(log_layers)


def _with_fldispatch_first(vllm_config: Any, priority: Any) -> Any:
    """The platform's default priority with PROVIDER in front for the ops of
    DECIDED.first_by_default whose mode says so (vllm_path.ir_default); notes
    the operator's lists first (vLLM asks for the default before it appends
    it to them)."""
    _note_operator_lists(vllm_config)
    config = _compilation_config(vllm_config)
    for name in sorted(DECIDED.first_by_default):
        if not vllm_path.ir_default(IR_OPS[name].oot, config)[0]:
            continue
        current = list(getattr(priority, name, None) or [])
        if PROVIDER not in current:
            setattr(priority, name, [PROVIDER] + current)
    return priority


# On the configuration's IrOpPriorityConfig: the IR ops whose list the operator gave
OPERATOR_LISTS = "_fldispatch_operator_lists"


def _note_operator_lists(vllm_config: Any) -> None:
    """Records on the configuration's IrOpPriorityConfig which IR ops of
    IR_OPS have a list the operator gave (KernelConfig.ir_op_priority), as
    vLLM asks for the platform's default before it appends it to them, so
    that the log tells an operator's list from the default (log_layers).
    Once per configuration: vLLM extends the lists in place and may ask
    again. The record goes with the configuration to vLLM's workers."""
    priority = getattr(getattr(vllm_config, "kernel_config", None), "ir_op_priority", None)
    if priority is None or OPERATOR_LISTS in getattr(priority, "__dict__", {}):
        return
    given = frozenset(name for name in IR_OPS if getattr(priority, name, None))
    try:
        object.__setattr__(priority, OPERATOR_LISTS, given)
    except (AttributeError, TypeError):
        pass  # a configuration that takes no attribute: the log infers the source


def log_layers(vllm_config: Any = None) -> None:
    """One line per vLLM layer class whose IR ops fldispatch serves: the
    provider lists installed now and why fldispatch is, or is not, first
    (fldispatch.vllm_path.log_ir; once per class, decision and process)."""
    if vllm_config is None:
        try:
            from vllm.config import get_current_vllm_config

            vllm_config = get_current_vllm_config()
        except (ImportError, AssertionError):
            vllm_config = None
    from vllm.ir.op import IrOp

    # OOT layer name -> ({IR op: installed list}, OOT name of the ops)
    layers: dict[str, tuple[dict[str, list[str]], str]] = {}
    for name in sorted(DECIDED.ir_providers):
        for layer in IR_OPS[name].layers:
            lists, _ = layers.setdefault(layer, ({}, IR_OPS[name].oot))
            lists[name] = list(IrOp.registry[name].get_priority())
    kernel = getattr(vllm_config, "kernel_config", None)
    given: frozenset[str] = getattr(getattr(kernel, "ir_op_priority", None), OPERATOR_LISTS, frozenset())
    for layer, (lists, oot) in layers.items():
        vllm_path.log_ir(LAYERS[layer].class_name, lists, oot,
                         _compilation_config(vllm_config), given)
