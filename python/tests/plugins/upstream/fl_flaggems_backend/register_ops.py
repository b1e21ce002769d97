# SPDX-License-Identifier: Apache-2.0
"""default.flagos records, kept only where vllm_fl.utils.use_flaggems_op says so."""

from vllm_fl.dispatch.types import BackendImplKind, BackendPriority, OpImpl
from vllm_fl.utils import use_flaggems_op


def register_builtins(registry):
    from .flaggems import GemsLike

    backend = GemsLike()
    impls = [OpImpl(op_name=op, impl_id="default.flagos", kind=BackendImplKind.DEFAULT,
                    fn=getattr(backend, op), vendor=None, priority=BackendPriority.DEFAULT)
             for op in ("silu_and_mul", "rms_norm")]
    registry.register_many([impl for impl in impls if use_flaggems_op(impl.op_name)])
