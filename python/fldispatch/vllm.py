# SPDX-License-Identifier: Apache-2.0
"""The vLLM plugin: fldispatch's ops in place of vLLM's own layer kernels.

vLLM loads it through the entry point group `vllm.general_plugins`
(name `fldispatch`, target `fldispatch.vllm:register`) in every process it
starts. For the ops vLLM dispatches through its IR (vllm.ir: rms_norm and
fused_add_rms_norm, which RMSNorm and GemmaRMSNorm call), register() adds
fldispatch as an IR provider (fldispatch.vllm_ir) and leaves those layers
to vLLM; vLLM's ir_op_priority chooses the provider (the plugin's default
per vLLM mode: fldispatch.vllm_path), and fldispatch's switches enter vLLM's
compile-cache key (fldispatch.vllm_compile). The
other layers (and the norms on a vLLM without IR) register() replaces with
out-of-tree CustomOps (vLLM's CustomOp.register_oot), each a subclass of
vLLM's layer with the same constructor, arguments and return values: the
layers of fldispatch.vllm_layers.LAYERS. What register() decides is held
on fldispatch.vllm_state.DECIDED; the plugin's wraps of vLLM's own
functions are in fldispatch.vllm_patches.

Which layers are replaced follows vllm-plugin-FL's switches, read by the
library (fld_oot_op_enabled): none when VLLM_FL_PREFER_ENABLED or
VLLM_FL_OOT_ENABLED is off; only the listed ones with VLLM_FL_OOT_WHITELIST;
all but the listed ones with VLLM_FL_OOT_BLACKLIST (or the platform file's
oot_blacklist). Which implementation then runs each call is the library's
dispatch policy (VLLM_FL_PREFER, VLLM_FL_PER_OP, ...).

The layers call torch.ops.fldispatch.*, so vLLM's torch.compile and CUDA
graphs capture them as opaque custom ops. Whether a replaced layer runs
fldispatch's op or vLLM's forward_native is vLLM's custom_ops, as for any
CustomOp, unless VLLM_FL_OOT_FORCE says otherwise (fldispatch.vllm_path):
a "+name" or "-name" of custom_ops (vLLM's name or the class name) decides;
else a layer VLLM_FL_OOT_FORCE names runs fldispatch's op; else custom_ops'
base mode: "all" (vLLM's default in eager mode) runs ours, "none" (vLLM's
default when Inductor compiles the model, which fuses these layers with
their neighbours) runs vLLM's forward_native. Each layer class logs, once
per process and decision, which path it took and why. Calls the ops cannot
take (a device fldispatch does not serve, RMSNorm's var_hidden_size) also
run the layer's forward_native.

The forward functions below take plain tensors and hold all the logic, so
they can be tested without vLLM.
"""

import logging
from collections.abc import Callable
from typing import Any

import torch

from . import _C, devices, prometheus, vllm_compile, vllm_ir, vllm_log, vllm_patches, vllm_path
from .vllm_layers import ACTIVATIONS, GELU_APPROXIMATE, LAYERS, Layer
from .vllm_state import DECIDED

logger = logging.getLogger(__name__)

# Filled by fldispatch.torch, which register() and layer_class() import: not
# at this module's import, because defining the declared ops starts the
# library, and HOST_DEFAULTS must be in the environment before it starts.
_ops = torch.ops.fldispatch


def _define_torch_ops() -> None:
    from . import torch as _fld_torch  # noqa: F401  (defines torch.ops.fldispatch)


# torch device types whose tensors fldispatch's plugins can take (the
# library's device table: ROCm builds of PyTorch call their GPUs "cuda";
# torch_npu calls Ascend NPUs "npu").
SERVED_DEVICES = devices.TORCH_TYPES


def served(x: Any) -> bool:
    # x.is_cpu first: a torch.device object per call costs more than the rest
    # of the check
    return x.is_cpu or x.device.type in SERVED_DEVICES


# ---- forward functions (vLLM's argument conventions) -------------------------


def rms_norm_forward(x: Any, weight: Any | None, eps: float, residual: Any | None = None,
                     gemma: bool = False) -> Any:
    """RMSNorm / GemmaRMSNorm.forward: without residual returns the
    normalised x (a new tensor); with residual returns (x, residual), both
    updated in place as vLLM's fused_add_rms_norm kernel does."""
    op = _ops.gemma_rms_norm if gemma else _ops.rms_norm
    if residual is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        op(out, x, weight, None, eps)
        return out
    op(x, x, weight, residual, eps)
    return x, residual


# The activation ops (the catalog's gated ones), {op name:
# torch.ops.fldispatch.<op>.default}, each resolved on first use (the torch
# ops are defined once per process, and a call reads the library's policy in
# force then).
_ACTIVATIONS: dict[str, Any] = dict.fromkeys(ACTIVATIONS)


def _activation_op(op_name: str) -> Any:
    """torch.ops.fldispatch.<op_name>.default for an activation op name
    (KeyError for another name)."""
    op = _ACTIVATIONS[op_name]
    if op is None:
        _define_torch_ops()
        op = _ACTIVATIONS[op_name] = getattr(torch.ops.fldispatch, op_name).default
    return op


def _act_and_mul(op: Any, x: Any) -> Any:
    # the shape as a list: torch.Size arguments cost more to parse
    shape = list(x.shape)
    shape[-1] //= 2
    out = x.new_empty(shape)
    op(out, x)
    return out


def act_and_mul_forward(op_name: str, x: Any) -> Any:
    """SiluAndMul / MulAndSilu / GeluAndMul.forward: [..., 2d] -> [..., d]."""
    return _act_and_mul(_activation_op(op_name), x)


def gelu_op_name(approximate: str) -> str:
    op = GELU_APPROXIMATE.get(approximate)
    if op is None:
        raise ValueError(f"GeluAndMul: unknown approximate mode {approximate!r} "
                         f"({', '.join(GELU_APPROXIMATE)})")
    return op


def rotary_out_devices() -> frozenset[str]:
    """The torch device types whose tensors rotary_embedding_out serves now,
    for every dtype (DECIDED.rotary_out_devices): resolved once, by
    register() (or the first eager call), not while Dynamo traces a layer.
    Until then a traced layer takes the CPU: the library's reference kernel
    serves every CPU call."""
    if DECIDED.rotary_out_devices is None:
        served_now = set()
        for device_type in sorted(SERVED_DEVICES):
            try:
                for dtype in ("float32", "float16", "bfloat16"):
                    _C.resolve("rotary_embedding_out", devices.library_name(device_type), dtype)
            except _C.Error:
                continue
            served_now.add(device_type)
        DECIDED.rotary_out_devices = frozenset(served_now)
    return DECIDED.rotary_out_devices


def rotary_forward(positions: Any, query: Any, key: Any | None, head_size: int, cos_sin_cache: Any,
                   is_neox_style: bool) -> tuple[Any, Any | None]:
    """RotaryEmbedding.forward: rotates query and key in place, returns them.

    While torch.compile traces it, out of place instead: new query_out and
    key_out, written by rotary_embedding_out, are returned in their place.
    vLLM passes views of one qkv tensor, and an op that writes views of an
    intermediate makes functionalization (vLLM's CPU Inductor configuration
    keeps its version 1) copy the whole qkv storage for each written view
    and scatter the results back, two copy kernels per layer; an op that
    only reads query and key and writes tensors nothing else holds leaves
    the graph without any copy of them. (Callers take the returned tensors:
    vLLM's own forward_native, which compiled models run, rotates out of
    place.) On a device no implementation of rotary_embedding_out serves,
    the traced layer rotates contiguous copies of query and key in place,
    one copy kernel of them."""
    if torch.compiler.is_compiling():
        served_now = DECIDED.rotary_out_devices
        if query.device.type in (served_now if served_now is not None else ("cpu",)):
            query_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
            key_out = None
            if key is not None:
                key_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
            _ops.rotary_embedding_out(positions, query, key, head_size, cos_sin_cache,
                                      is_neox_style, query_out, key_out)
            return query_out, key_out
        query = query.clone(memory_format=torch.contiguous_format)
        if key is not None:
            key = key.clone(memory_format=torch.contiguous_format)
    elif DECIDED.rotary_out_devices is None:
        rotary_out_devices()
    _ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox_style)
    return query, key


# ---- the vLLM layers ------------------------------------------------------------


def _enabled(cls: Any) -> bool:
    """CustomOp.enabled() of our layers: vLLM's custom_ops, with
    VLLM_FL_OOT_FORCE over its base mode (fldispatch.vllm_path.custom_op);
    logs the decision once per class per process."""
    from vllm.config import get_cached_compilation_config

    device = vllm_path.device_type()
    serve, theirs, why = vllm_path.custom_op_route(cls.oot_name, getattr(cls, "vllm_name", None),
                                                   get_cached_compilation_config(), device)
    vllm_path.log_custom_op(LAYERS[cls.oot_name].class_name, serve, why)
    if vllm_path.mode_table(device) is vllm_path.GPU_MODE_TABLE:
        # vLLM's dispatch_forward() binds forward_cuda / forward_hip right
        # after asking enabled(): ours where fldispatch serves, else vLLM's own
        # GPU kernel, so stepping aside keeps vLLM's kernel, not forward_native
        for name, theirs_fn in cls.vllm_gpu_forwards.items():
            setattr(cls, name, cls.forward_fl if serve or theirs_fn is None else theirs_fn)
        return serve or theirs
    return serve


def _dispatching(base: Any, oot_name: str, forward_fl: Callable[..., Any]) -> dict[str, Any]:
    """forward_fl, and as the forward_* methods vLLM's dispatch_forward() may
    pick (forward_xpu and forward_tpu keep vLLM's: no plugin serves them);
    enabled() as above; vllm_name, the name vLLM registered its own layer
    under (register_oot renames ours to the class name); oot_name, the
    layer's name in VLLM_FL_OOT_*."""
    methods: dict[str, Any] = dict.fromkeys(("forward_fl", "forward_cuda", "forward_hip", "forward_cpu",
                                             "forward_oot"), forward_fl)
    methods["enabled"] = classmethod(_enabled)
    # vLLM's own GPU forwards, which _enabled() puts back where fldispatch steps aside
    methods["vllm_gpu_forwards"] = {name: getattr(base, name, None)
                                    for name in ("forward_cuda", "forward_hip")}
    methods["vllm_name"] = getattr(base, "name", None)
    methods["oot_name"] = oot_name
    return methods


def _rms_norm_class(base: Any, layer: Layer) -> type[Any]:
    def forward_fl(self: Any, x: Any, residual: Any | None = None) -> Any:
        if self.variance_size_override is not None or not served(x):
            return self.forward_native(x, residual)
        use_weight = self.pass_weight if residual is None else self.pass_weight_add
        weight = self.weight.data if use_weight else None
        if weight is not None and weight.dtype != x.dtype and not _mixed_weight_ok():
            return self.forward_native(x, residual)
        return rms_norm_forward(x, weight, self.variance_epsilon, residual)

    return type(layer.class_name + "FL", (base,), _dispatching(base, layer.oot, forward_fl))


def _gemma_rms_norm_class(base: Any, layer: Layer) -> type[Any]:
    def forward_fl(self: Any, x: Any, residual: Any | None = None) -> Any:
        weight = self.weight.data
        if not served(x) or (weight.dtype != x.dtype and not _mixed_weight_ok()):
            return self.forward_native(x, residual)
        return rms_norm_forward(x, weight, self.variance_epsilon, residual, gemma=True)

    return type(layer.class_name + "FL", (base,), _dispatching(base, layer.oot, forward_fl))


def _activation_class(base: Any, layer: Layer) -> type[Any]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)
        # MulAndSilu pins forward_native on CPU in its constructor:
        # choose again, now that forward_cpu is ours.
        self._forward_method = self.dispatch_forward(compile_native=False)
        # the op, resolved once (as vLLM's layers resolve theirs)
        op_name = gelu_op_name(self.approximate) if layer.forward == "gelu_gated" else layer.oot
        self._fl_op = _activation_op(op_name)

    def forward_fl(self: Any, x: Any) -> Any:
        if not served(x):
            return self.forward_native(x)
        return _act_and_mul(self._fl_op, x)

    return type(layer.class_name + "FL", (base,),
                {"__init__": __init__, **_dispatching(base, layer.oot, forward_fl)})


def _rotary_class(base: Any, layer: Layer) -> type[Any]:
    def forward_fl(self: Any, positions: Any, query: Any, key: Any | None = None) -> tuple[Any, Any | None]:
        if not served(query):
            return self.forward_native(positions, query, key)
        # vLLM's buffer read directly where it needs no conversion (what
        # _match_cos_sin_cache_dtype returns then): nn.Module's attribute
        # lookup of a buffer costs more than the rest of the layer's Python
        cache = self._buffers.get("cos_sin_cache")
        if cache is None or cache.dtype != query.dtype or not (cache.is_cpu and query.is_cpu):
            cache = self._match_cos_sin_cache_dtype(query)
        return rotary_forward(positions, query, key, self.head_size, cache, self.is_neox_style)

    return type(layer.class_name + "FL", (base,), _dispatching(base, layer.oot, forward_fl))


# Layer.forward (fldispatch.vllm_layers) -> the factory of our class,
# factory(vLLM's class, the layer)
_CLASS_FACTORIES: dict[str, Callable[[Any, Layer], type[Any]]] = {
    "norm": _rms_norm_class, "gemma_norm": _gemma_rms_norm_class,
    "gated": _activation_class, "gelu_gated": _activation_class,
    "rotary": _rotary_class}


def _mixed_weight_ok() -> bool:
    """Whether the library takes a float32 weight with 16-bit x (newer
    libraries do; older ones refuse, and the layer runs forward_native);
    asked once (DECIDED.mixed_weight)."""
    if DECIDED.mixed_weight is None:
        x = torch.zeros(1, 8, dtype=torch.float16)  # a dtype the models here do not run
        try:
            _C.rms_norm(torch.empty_like(x), x, torch.ones(8), None, 1e-6)
            DECIDED.mixed_weight = True
        except _C.InvalidArgumentError:
            DECIDED.mixed_weight = False
    return DECIDED.mixed_weight


# ---- the entry point ---------------------------------------------------------------

# What the CPU plugin does inside vLLM unless the user says otherwise:
#   VLLM_FL_CPU_ACTIVATIONS=torch  silu and gelu as PyTorch's CPU kernels, to
#       the bit: what vLLM's own layers run on CPU (forward_native), so that
#       the plugin changes no result there;
#   VLLM_FL_CPU_THREADS=1  the plugin's kernels run on the calling thread:
#       vLLM's CPU workers bind torch's OpenMP team to their cores, and a
#       second pool on those cores only contends with it (OpenMP threads spin
#       after each parallel region); see bench/vllm_layers.py.
HOST_DEFAULTS = {"VLLM_FL_CPU_ACTIVATIONS": "torch", "VLLM_FL_CPU_THREADS": "1"}


def _host_defaults() -> None:
    """Sets HOST_DEFAULTS' variables that are unset. The CPU plugin reads them
    when it registers, as the library starts: in vLLM's processes register()
    is the first thing that starts it (importing this module does not); where
    the process started the library before, they apply from its next
    fld_init() after fld_shutdown()."""
    import os

    for name, value in HOST_DEFAULTS.items():
        os.environ.setdefault(name, value)


def note_rank() -> None:
    """Puts this process's rank in torch.distributed into RANK, where the
    library reads it for %r in VLLM_FL_STATS_FILE and VLLM_FL_TRACE: vLLM's
    worker processes get their rank as arguments, not in the environment,
    and inherit their parent's RANK if it has one (a driver that ran an
    in-process engine has one). The IO dump, which may have taken its rank
    from that inherited RANK before the process group came up, reads it
    again. Called as each layer is made (vLLM makes the model after its
    distributed setup); does nothing before torch.distributed is
    initialised."""
    import os
    import sys

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        os.environ["RANK"] = str(dist.get_rank())
        dump = sys.modules.get("fldispatch.iodump")
        if dump is not None:
            dump.reset_rank()


def layer_class(op_name: str) -> tuple[type[Any], str]:
    """The OOT class for an op name, built on the installed vLLM's layer."""
    import importlib

    _define_torch_ops()
    layer = LAYERS[op_name]
    class_name = layer.class_name
    base = getattr(importlib.import_module(layer.module), class_name)
    cls = _CLASS_FACTORIES[layer.forward](base, layer)
    made = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        note_rank()

    cls.__init__ = __init__
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__
    return cls, class_name


# The first process of a vLLM deployment to load the plugin (the one
# `vllm serve` runs) puts its start here, and the processes it starts
# inherit it: with several API servers, each server's /metrics then merges
# the counters files written since the deployment started, its engine
# cores' included, which start before the API servers do.
DEPLOYMENT_START_VARIABLE = "FLDISPATCH_VLLM_STARTED"


def _deployment_start() -> float:
    """The deployment's start for /metrics' files, in seconds since the
    epoch (a file's time may run FILE_TIME_SLACK_S behind)."""
    import os
    import time

    try:
        return float(os.environ[DEPLOYMENT_START_VARIABLE])
    except (KeyError, ValueError):
        started = time.time() - prometheus.FILE_TIME_SLACK_S
        os.environ[DEPLOYMENT_START_VARIABLE] = repr(started)
        return started


def _write_counters_as_the_engine_stops() -> None:
    """The counters and the trace (VLLM_FL_STATS, VLLM_FL_STATS_FILE,
    VLLM_FL_TRACE), written as vLLM's engine core leaves its busy loop: the
    process that runs the model on one GPU. After the loop vLLM restores
    the default action of SIGTERM, and its API server's SIGTERM or its
    process manager's kill can then end the engine core before its exit
    handler runs. The exit handlers then write only what came after (none,
    the loop having ended): one table per process. Nothing is written with
    none of them set."""
    try:
        _C._stats_flush_changed()
    except Exception as e:  # never in the way of vLLM's shutdown
        logger.warning("fldispatch: the counters could not be written as vLLM's engine core "
                       "stopped: %s", e)


def register() -> dict[str, str]:
    """vLLM's general-plugin hook: routes fldispatch's log lines into vLLM's
    log (fldispatch.vllm_log), registers fldispatch's vLLM IR provider for
    the IR ops of the installed vLLM (fldispatch.vllm_ir) and its place in
    the platform's default priority (per vLLM mode, fldispatch.vllm_path),
    adds fldispatch's variables to vLLM's variable table (vllm_compile: the
    compile-cache key, and the names its environment check accepts),
    has the engine core write fldispatch's counters as its busy loop ends,
    puts the counters files of VLLM_FL_STATS_FILE on vLLM's /metrics
    (fldispatch.prometheus: the files written since the deployment
    started, also with several API servers),
    and registers the OOT layers that VLLM_FL_OOT_* allow, but those whose
    layer calls an IR op. Idempotent; returns {op name: vLLM class name} of
    the OOT layers (DECIDED.oot_layers)."""
    from vllm.model_executor import custom_op

    registered = DECIDED.oot_layers
    vllm_log.settle()  # first: the library's lines too go to vLLM's log
    _host_defaults()  # before the library starts: the CPU plugin reads them as it registers
    _C.init()  # a bad VLLM_FL_* configuration raises ConfigError here, naming it
    vllm_path.forced()  # likewise a bad VLLM_FL_OOT_FORCE
    _define_torch_ops()
    mixed = _mixed_weight_ok()  # decided now, not while Dynamo traces a layer
    rotary_out_devices()  # likewise

    vllm_ir.register_providers(mixed)
    enabled = vllm_ir.default_first_ops()
    vllm_ir.install_default_priority(enabled)
    for name in sorted(DECIDED.ir_providers):
        oot = vllm_ir.IR_OPS[name].oot
        if name in enabled:
            logger.info("fldispatch: vLLM IR op %s: fldispatch first in the platform's default "
                        "priority in the modes where it serves %s by default (VLLM_FL_OOT_* "
                        "enable it)", name, oot)
        else:
            logger.info("fldispatch: vLLM IR op %s: the platform's default priority unchanged "
                        "(VLLM_FL_OOT_* or VLLM_FL_PREFER_ENABLED leave %s to vLLM)", name, oot)
    vllm_compile.register_variables()
    vllm_patches.patch_engine_busy_loop(_write_counters_as_the_engine_stops)
    prometheus.register_default(since=_deployment_start())
    superseded = vllm_ir.superseded_layers()
    for op_name, layer in LAYERS.items():
        if op_name in registered:
            continue
        class_name = layer.class_name
        if op_name in superseded:
            continue  # its line comes as vLLM installs the IR priority (vllm_ir)
        if not _C.oot_op_enabled(op_name):
            vllm_path.log_custom_op(class_name, False, "VLLM_FL_OOT_* or VLLM_FL_PREFER_ENABLED "
                                    f"leave {op_name} to vLLM: not replaced")
            continue
        cls, class_name = layer_class(op_name)
        if class_name in custom_op.op_registry_oot:
            logger.warning("fldispatch: vLLM's %s is already replaced by %s; leaving it",
                           class_name, custom_op.op_registry_oot[class_name].__qualname__)
            continue
        custom_op.CustomOp.register_oot(_decorated_op_cls=cls, name=class_name)
        registered[op_name] = class_name
        logger.info("fldispatch: vLLM's %s replaced by fldispatch's %s layer; vLLM's "
                    "custom_ops and VLLM_FL_OOT_FORCE decide per mode whether it runs "
                    "fldispatch's op", class_name, op_name)
    return dict(registered)
