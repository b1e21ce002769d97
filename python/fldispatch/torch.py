# SPDX-License-Identifier: Apache-2.0
"""torch.ops.fldispatch.*: fldispatch's ops as PyTorch custom operators.

    import torch, fldispatch.torch
    torch.ops.fldispatch.silu_and_mul(out, x)

Importing this module defines, in the `fldispatch` namespace, one operator per
fldispatch function with the same arguments in the same order, and one per op
that a plugin or Python declared with a signature (fldispatch.signatures();
ops declared later are added as they are declared; define_declared() adds
those of plugins loaded later). Schemas come from the library: the catalog's
table and the declarations. Outputs are
mutated in place and declared so in the schemas (Tensor(a!)), and every op
has a fake (meta) implementation, so the ops trace into
torch.compile(fullgraph=True) graphs without a graph break, and functionalise
like any mutating ATen op.

One op PyTorch refuses (its schema parser is stricter than the library's,
or a later PyTorch changes it) does not take the others down: each op is
defined on its own, and one that fails is skipped with a WARNING naming the
op and who declared it (SKIPPED says why; fldispatch.call_op() still calls
it). The `fldispatch` torch library is created once per process, so an
import that failed halfway (an interrupt) can be repeated.

The kernels for the CPU and CUDA (also PyTorch's ROCm build) dispatch keys
are native (python/native/torch_ops.cpp, registered in C++ when
_torch_ops.so is built for this torch: NATIVE): a call goes from PyTorch's
dispatcher into the library without entering Python. On a GPU they pass the
library torch's current stream of the tensors' device at every call
(fld_set_stream, the thread's previous stream put back after it): the ops run
on torch.cuda.current_stream(), also while a CUDA graph is being captured.

Where the native kernels are not in use (NATIVE_REASON says why), and always
for PrivateUse1 (torch_npu), the kernels are fldispatch's Python-level C
functions, registered as Python callables: a call boxes its arguments into
Python objects and goes through the C extension, which asks PyTorch, through
the DLPack exchange API, for its current stream of the tensors' device and
passes it to the library in the same way. With a PyTorch that has no exchange
API (older releases) the CUDA kernels set the stream from
torch.cuda.current_stream() themselves. PrivateUse1 stays on that path: the
native kernels would take the stream from the device guard's native handle,
which c10's interface leaves optional (its default raises) and which torch_npu
is not known to provide, where the exchange-API path goes on without a
stream for a device other than CUDA and ROCm.
"""

import logging as _logging
import os as _os
from typing import Any, Callable

import torch

from . import _C
from . import devices as _devices
from . import native_abi as _native_abi
from . import registry as _registry

#: The catalog's schemas, {op: schema}, from the library's catalog table.
SCHEMAS = dict(_C.catalog_ops())

# Dispatch keys the C kernels serve: PyTorch's ROCm build uses CUDA's key,
# torch_npu uses PrivateUse1.
TENSOR_KEYS = ("CPU", "CUDA", "PrivateUse1")

# The ops python/native/torch_ops.cpp serves: every catalog op with tensors (its
# kernels follow the rows of <fldispatch/catalog.def>, as the catalog does).
NATIVE_OPS = tuple(op for op, schema in SCHEMAS.items() if "Tensor" in schema)
#: The dispatch keys python/native/torch_ops.cpp registers NATIVE_OPS' kernels for.
NATIVE_KEYS = ("CPU", "CUDA")

HAS_EXCHANGE_API = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")

_logger = _logging.getLogger(__name__)

# PyTorch takes one DEF library per namespace and process: kept outside this
# module, so that importing it again (after an import that failed) reuses it.
_STATE: dict[str, Any] = _registry.__dict__.setdefault("_torch_state", {})
if "library" not in _STATE:
    _STATE["library"] = torch.library.Library("fldispatch", "DEF")
library = _STATE["library"]
#: Every op defined as torch.ops.fldispatch.<op>, {op: schema}.
_DEFINED: dict[str, str] = _STATE.setdefault("defined", {})
#: The ops PyTorch refused, {op: reason}.
SKIPPED: dict[str, str] = _STATE.setdefault("skipped", {})


def _with_torch_stream(kernel: Callable[..., Any], tensor_arg: int) -> Callable[..., Any]:
    """Wraps a kernel for a PyTorch without the DLPack exchange API: the
    library gets torch's current stream of the tensor's device explicitly."""

    def run(*args: Any) -> Any:
        device = args[tensor_arg].device
        device_name = _devices.library_name(device.type)
        stream = torch.cuda.current_stream(device).cuda_stream
        previous = _C.get_stream(device_name)
        _C.set_stream(device_name, stream)
        try:
            return kernel(*args)
        finally:
            _C.set_stream(device_name, previous)

    return run


def _nothing(*args: Any) -> None:
    """The fake implementation of every tensor op: they return nothing and
    only write into their (already allocated) outputs."""
    return None


# The native kernels (python/native/torch_ops.cpp, built where torch's
# headers are present: make python-torch-native, pip install): registered in
# C++ with the dispatcher for NATIVE_KEYS, so a call does not enter Python;
# their errors are fldispatch's own exceptions, with the library's message.
# The .so is bound to the torch and the Python it was compiled against, which
# its build records in _torch_ops.abi; under any other, or when it does not
# load, the Python-level kernels serve every key and NATIVE_REASON says why.
_NATIVE_SO = _os.path.join(_os.path.dirname(__file__), "_torch_ops.so")


def _native_mismatch(path: str = _NATIVE_SO) -> str | None:
    """None when the native kernels at path can be loaded, else the reason they are not."""
    if _os.environ.get("FLDISPATCH_TORCH_NATIVE", "1") == "0":
        return "FLDISPATCH_TORCH_NATIVE=0"
    if not _os.path.exists(path):
        try:
            with open(_os.path.splitext(path)[0] + ".why") as f:
                return "not built: " + f.read().strip()
        except OSError:
            return "not built (_torch_ops.so absent)"
    try:
        with open(_os.path.splitext(path)[0] + ".abi") as f:
            built = f.read().strip()
    except OSError:
        return "_torch_ops.abi absent: the build of _torch_ops.so is incomplete"
    if built != _native_abi.record():
        return f"_torch_ops.so was built for {built}, this process runs {_native_abi.record()}"
    return None


#: Why the native kernels are not in use, None when they are.
NATIVE_REASON = _native_mismatch()
#: Whether the native kernels serve NATIVE_OPS on NATIVE_KEYS.
NATIVE = NATIVE_REASON is None


def _register_python_kernel(name: str, key: str) -> None:
    kernel = getattr(_C, name)
    if key == "CUDA" and not HAS_EXCHANGE_API:
        library.impl(name, _with_torch_stream(kernel, 1), key)
    else:
        library.impl(name, kernel, key)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _define_op(op: str, schema: str, declared_by: str, add_kernels: Callable[..., None], fake: bool = True) -> bool:
    """Defines torch.ops.fldispatch.<op>, add_kernels() registering its kernels;
    False, with a WARNING, when PyTorch refuses it (no other op is affected)."""
    if op in _DEFINED or op in SKIPPED:
        return op in _DEFINED
    # The steps done so far, kept across imports: an import interrupted
    # half-way through an op goes on from the step it had reached.
    done = _STATE.setdefault("steps", {}).setdefault(op, set())
    try:
        if "define" not in done:
            library.define(op + schema)
            done.add("define")
        if "kernels" not in done:
            add_kernels()
            done.add("kernels")
        # The tensor ops return nothing: their outputs are the tensors they write.
        if fake:
            torch.library.register_fake(f"fldispatch::{op}", _nothing, lib=library)
    except Exception as exc:  # noqa: BLE001 - one op's failure is that op's alone
        SKIPPED[op] = _first_line(exc)
        _logger.warning("torch.ops.fldispatch.%s is not defined: PyTorch refuses it (signature "
                        "'%s', declared by %s): %s; fldispatch.call_op(%r, ...) still calls it",
                        op, schema, declared_by, SKIPPED[op], op)
        return False
    _DEFINED[op] = schema
    return True


def _catalog_kernels(name: str) -> None:
    if name == "attention_backend":
        # No tensors: one kernel for every backend.
        library.impl(name, getattr(_C, name), "CompositeExplicitAutograd")
        return
    for key in TENSOR_KEYS:
        if NATIVE and key in NATIVE_KEYS and name in NATIVE_OPS:
            continue
        _register_python_kernel(name, key)


for _name, _schema in SCHEMAS.items():
    _define_op(_name, _schema, "the catalog", lambda n=_name: _catalog_kernels(n),
               fake=_name != "attention_backend")  # no tensors: no fake implementation

del _name, _schema

if NATIVE and not _STATE.get("native_loaded"):
    try:
        torch.ops.load_library(_NATIVE_SO)
        _STATE["native_loaded"] = True
    except (OSError, RuntimeError) as _e:
        NATIVE, NATIVE_REASON = False, f"_torch_ops.so did not load: {_e}"
        for _name in NATIVE_OPS:
            if _name in _DEFINED:
                for _key in NATIVE_KEYS:
                    _register_python_kernel(_name, _key)
        del _e

# Aliases of NATIVE and NATIVE_REASON, for callers asking about the CPU key.
NATIVE_CPU, NATIVE_CPU_REASON = NATIVE, NATIVE_REASON


def _native_hint(reason: str | None, package: str | None = None) -> str:
    """The line import logs when the native kernels are not in use: why, and how to get them
    (package: the installed package's folder, this module's by default)."""
    if package is None:
        package = _os.path.dirname(__file__)
    if _os.path.islink(_os.path.join(package, "lib")):  # a build tree (make python)
        how = "make python-torch-native builds them"
    else:
        how = ("reinstall with torch and a C++ compiler in this environment to build them: "
               "pip install --force-reinstall --no-deps ./python")
    return (f"fldispatch.torch: the native kernels are not in use ({reason}); the Python-level "
            f"kernels serve, each CPU and CUDA call through Python (1.4-1.7x slower on small CPU "
            f"tensors); {how}")


if not NATIVE:
    # A warning (shown once, on stderr, without any logging set up) unless
    # they were turned off on purpose.
    _logger.log(
        _logging.INFO if NATIVE_REASON == "FLDISPATCH_TORCH_NATIVE=0" else _logging.WARNING,
        "%s", _native_hint(NATIVE_REASON))

OPS = tuple(SCHEMAS)

# The dispatcher's floor: a do-nothing op per family of the native kernels,
# with the family's schema and a C++ kernel registered as theirs are
# (python/native/torch_ops.cpp), {family: the op whose schema it takes, the
# first of its catalog family (_C.catalog())}.
FLOOR_FAMILIES = {
    floor: next(op for op, family, _doc in _C.catalog() if family == catalog_family)
    for floor, catalog_family in (("activation", "GATED"), ("norm", "NORM"), ("rotary", "ROTARY"))}


def dispatch_floor(op: str) -> Any:
    """The do-nothing torch op with op's schema, torch.ops.fldispatch._floor_<family>,
    defined on first use: a call of it costs what PyTorch's dispatcher alone adds
    to a call of op (benchmarks subtract it). Needs the native kernels
    (RuntimeError naming why they are not in use); ValueError for an op outside
    the families."""
    schema = SCHEMAS.get(op)
    family = next((f for f, rep in FLOOR_FAMILIES.items() if schema is not None
                   and SCHEMAS.get(rep) == schema), None)
    if schema is None or family is None:
        raise ValueError(f"dispatch_floor: op '{op}' has no floor; the families are "
                         + ", ".join(f"{f} ({rep}'s schema)" for f, rep in FLOOR_FAMILIES.items()))
    if not NATIVE:
        raise RuntimeError(f"dispatch_floor: the native kernels are not in use ({NATIVE_REASON})")
    name = "_floor_" + family
    if name not in _STATE.setdefault("floors", set()):
        library.define(name + schema)
        _STATE["floors"].add(name)
    return getattr(torch.ops.fldispatch, name).default

#: The declared ops defined here so far, {op: schema}.
DECLARED: dict[str, str] = _STATE.setdefault("declared", {})


def _declared_kernel(op: str) -> Callable[..., Any]:
    call_op = _C.call_op

    def kernel(*args: Any) -> Any:
        return call_op(op, *args)

    kernel.__name__ = op
    return kernel


def _declared_kernels(op: str, schema: str) -> None:
    kernel = _declared_kernel(op)
    if "Tensor" in schema:
        for key in TENSOR_KEYS:
            library.impl(op, kernel, key)
    else:
        library.impl(op, kernel, "CompositeExplicitAutograd")


def _define(op: str, schema: str, declared_by: str) -> None:
    if op in DECLARED or op in SCHEMAS:
        return
    if _define_op(op, schema, declared_by, lambda: _declared_kernels(op, schema)):
        DECLARED[op] = schema


def define_declared() -> None:
    """Defines torch.ops.fldispatch.<op> for every declared op not defined yet
    (e.g. those of a plugin loaded after this module was imported); an op
    PyTorch refuses is skipped with a WARNING (SKIPPED)."""
    for op, schema, by, catalog in _C.signatures():
        if not catalog:
            _define(op, schema, by)


def _on_declaration(op: str) -> None:
    for name, schema, by, catalog in _C.signatures():
        if name == op and not catalog:
            _define(name, schema, by)


try:
    define_declared()
except _C.Error:  # the configuration error is the caller's to see, at its own call
    pass
# one hook however often this module is imported
_registry.declaration_hooks[:] = [h for h in _registry.declaration_hooks
                                  if getattr(h, "__module__", None) != __name__]
_registry.declaration_hooks.append(_on_declaration)


# torch.compile: Dynamo cannot look into the C function call_op, so a traced
# call_op(name, ...) is replaced by the torch op of that name, which calls the
# C function at run time: the policy in force when the graph runs selects the
# implementation (no recompilation needed after a policy change).
def _call_op_in_graph(name: str, *args: Any, **kwargs: Any) -> Any:
    return getattr(torch.ops.fldispatch, name)(*args, **kwargs)


try:
    from torch._dynamo import substitute_in_graph as _substitute_in_graph
except ImportError:  # pragma: no cover - PyTorch older than 2.5
    _substitute_in_graph = None
if _substitute_in_graph is not None:
    _substitute_in_graph(_C.call_op, skip_signature_check=True)(_call_op_in_graph)

# An IO dump already on (VLLM_FL_IO_DUMP) records these ops too.
from . import iodump as _iodump  # noqa: E402

_iodump.install_torch_hooks()
