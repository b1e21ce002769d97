# SPDX-License-Identifier: Apache-2.0
"""The fixture's OpImpl records, built as upstream's register_ops.py files build theirs."""

from vllm_fl.dispatch.types import BackendImplKind, BackendPriority, OpImpl

OPS = ("silu_and_mul", "gelu_and_mul", "rms_norm", "rotary_embedding", "attention_backend")


def register_builtins(registry):
    from .reference import TorchReference

    backend = TorchReference()
    impls = [OpImpl(op_name=op, impl_id="reference.torch", kind=BackendImplKind.REFERENCE,
                    fn=getattr(backend, op), priority=BackendPriority.REFERENCE) for op in OPS]
    # a record the core cannot take (an op name with a space): rejected alone
    impls.append(OpImpl(op_name="bad op", impl_id="reference.torch",
                        kind=BackendImplKind.REFERENCE, fn=backend.silu_and_mul,
                        priority=BackendPriority.REFERENCE))
    registry.register_many(impls)
