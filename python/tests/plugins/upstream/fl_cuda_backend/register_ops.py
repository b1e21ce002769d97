# SPDX-License-Identifier: Apache-2.0
"""vendor.cuda records, the impl_id fldispatch's own cuda plugin has for silu_and_mul."""

import functools

from vllm_fl.dispatch.types import BackendImplKind, BackendPriority, OpImpl


def _bind_is_available(fn, is_available_fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapper._is_available = is_available_fn  # type: ignore[attr-defined]  # read by OpImpl.is_available
    return wrapper


def register_builtins(registry):
    from .cuda import CudaLike

    backend = CudaLike()
    registry.register_many([
        OpImpl(op_name=op, impl_id="vendor.cuda", kind=BackendImplKind.VENDOR,
               fn=_bind_is_available(getattr(backend, op), backend.is_available),
               vendor="cuda", priority=BackendPriority.VENDOR)
        for op in ("silu_and_mul", "vendor_only_op")
    ])
