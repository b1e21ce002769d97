"""torch.ops.fldispatch.*: fldispatch's ops as PyTorch custom operators.

    import torch, fldispatch.torch
    torch.ops.fldispatch.silu_and_mul(out, x)

Importing this module defines, in the `fldispatch` namespace, one operator per
fldispatch function with the same arguments in the same order. Outputs are
mutated in place and declared so in the schemas (Tensor(a!)), and every op
has a fake (meta) implementation, so the ops trace into
torch.compile(fullgraph=True) graphs without a graph break, and functionalise
like any mutating ATen op.

The kernels are fldispatch's C functions themselves, registered for the CPU,
CUDA (also PyTorch's ROCm build) and PrivateUse1 (torch_npu) dispatch keys:
a call goes from PyTorch's dispatcher straight into the C extension. For
tensors on a GPU the extension asks PyTorch, through the DLPack exchange API,
for its current stream on that device at every call and passes it to the
library (fld_set_stream): the ops run on torch.cuda.current_stream(), also
while a CUDA graph is being captured. With a PyTorch that has no exchange API
(older releases) the CUDA kernels set the stream from torch.cuda.current_stream()
themselves.
"""

import os as _os

import torch

from . import _C

SCHEMAS = {
    "silu_and_mul": "(Tensor(a!) out, Tensor x) -> ()",
    "mul_and_silu": "(Tensor(a!) out, Tensor x) -> ()",
    "gelu_and_mul": "(Tensor(a!) out, Tensor x) -> ()",
    "gelu_tanh_and_mul": "(Tensor(a!) out, Tensor x) -> ()",
    "rms_norm": "(Tensor(a!) out, Tensor x, Tensor? weight=None, Tensor(b!)? residual=None, "
                "float eps=1e-06) -> ()",
    "gemma_rms_norm": "(Tensor(a!) out, Tensor x, Tensor? weight=None, "
                      "Tensor(b!)? residual=None, float eps=1e-06) -> ()",
    "rotary_embedding": "(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
                        "Tensor cos_sin_cache, bool is_neox) -> ()",
    "attention_backend": "(str device, bool use_mla=False, bool use_sparse=False) -> str",
}

# Dispatch keys the C kernels serve: PyTorch's ROCm build uses CUDA's key,
# torch_npu uses PrivateUse1.
TENSOR_KEYS = ("CPU", "CUDA", "PrivateUse1")

# The ops python/native/torch_ops.cpp serves on the CPU.
NATIVE_OPS = ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul", "rms_norm",
              "gemma_rms_norm", "rotary_embedding")

HAS_EXCHANGE_API = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")

library = torch.library.Library("fldispatch", "DEF")


def _with_torch_stream(kernel, tensor_arg):
    """Wraps a kernel for a PyTorch without the DLPack exchange API: the
    library gets torch's current stream of the tensor's device explicitly."""

    def run(*args):
        device = args[tensor_arg].device
        device_name = "rocm" if torch.version.hip else "cuda"
        stream = torch.cuda.current_stream(device).cuda_stream
        previous = _C.get_stream(device_name)
        _C.set_stream(device_name, stream)
        try:
            return kernel(*args)
        finally:
            _C.set_stream(device_name, previous)

    return run


def _nothing(*args):
    """The fake implementation of every tensor op: they return nothing and
    only write into their (already allocated) outputs."""
    return None


# The optional native CPU kernels (make python-torch-native): registered in C++
# with the dispatcher, so a CPU call does not enter Python; their errors are
# ValueError (invalid arguments) or RuntimeError with the library's message.
_NATIVE_CPU = _os.path.join(_os.path.dirname(__file__), "_torch_ops.so")
NATIVE_CPU = _os.path.exists(_NATIVE_CPU)

for _name, _schema in SCHEMAS.items():
    library.define(_name + _schema)
    _kernel = getattr(_C, _name)
    if _name == "attention_backend":
        # No tensors: one kernel for every backend.
        library.impl(_name, _kernel, "CompositeExplicitAutograd")
        continue
    for _key in TENSOR_KEYS:
        if _key == "CPU" and NATIVE_CPU and _name in NATIVE_OPS:
            continue
        if _key == "CUDA" and not HAS_EXCHANGE_API:
            library.impl(_name, _with_torch_stream(_kernel, 1), _key)
        else:
            library.impl(_name, _kernel, _key)
    torch.library.register_fake(f"fldispatch::{_name}", _nothing, lib=library)

del _name, _schema, _kernel

if NATIVE_CPU:
    torch.ops.load_library(_NATIVE_CPU)

OPS = tuple(SCHEMAS)

# An IO dump already on (VLLM_FL_IO_DUMP) records these ops too.
from . import iodump as _iodump  # noqa: E402

_iodump.install_torch_hooks()
