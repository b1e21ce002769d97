# SPDX-License-Identifier: Apache-2.0
"""The vLLM plugin's tables: the vLLM layers fldispatch replaces as
out-of-tree CustomOps (LAYERS) and the vLLM IR ops it provides (IR_OPS).

Every other module of the plugin (fldispatch.vllm, vllm_ir, vllm_path,
vllm_compile) reads them here; this module imports none of them. A layer's
op, and the column of the mode tables (fldispatch.vllm_path) it takes, come
from the library's catalog (_C.catalog(): the op's family).

    vLLM layer       OOT name (VLLM_FL_OOT_*)   fldispatch op
    RMSNorm          rms_norm                   rms_norm (fused residual)
    GemmaRMSNorm     gemma_rms_norm             gemma_rms_norm
    SiluAndMul       silu_and_mul               silu_and_mul
    MulAndSilu       mul_and_silu               mul_and_silu
    GeluAndMul       gelu_and_mul               gelu_and_mul / gelu_tanh_and_mul
    RotaryEmbedding  rotary_embedding           rotary_embedding

    IR op               our op     mapping
    rms_norm            rms_norm   out = new; rms_norm(out, x, weight, None, epsilon)
    fused_add_rms_norm  rms_norm   rms_norm(x, x, weight, x_residual, epsilon): both in place
"""

from dataclasses import dataclass, field

from . import _C

#: Each catalog op's family (<fldispatch/catalog.def>).
CATALOG_FAMILIES = {op: family for op, family, _doc in _C.catalog()}

#: The catalog family of a layer's op -> the layer's column of the mode
#: tables (fldispatch.vllm_path.MODE_TABLE).
MODE_COLUMNS = {"NORM": "norm", "GATED": "activation", "ROTARY": "rotary"}

#: The catalog's gated activations: the ops the activation layers call.
ACTIVATIONS = tuple(op for op, family in CATALOG_FAMILIES.items() if family == "GATED")


@dataclass(frozen=True)
class Layer:
    """A vLLM layer fldispatch replaces: oot, its name in VLLM_FL_OOT_* (and
    fldispatch's op of the same name, whose catalog family makes its
    column); module and class_name, vLLM's layer class; forward, how
    fldispatch.vllm builds its forward: "norm", "gemma_norm", "gated" (the
    op oot), "gelu_gated" (the op GELU_APPROXIMATE names) or "rotary"."""

    oot: str
    module: str
    class_name: str
    forward: str

    @property
    def family(self) -> str:
        """The layer's column of the mode tables: "norm", "activation" or "rotary"."""
        return MODE_COLUMNS[CATALOG_FAMILIES[self.oot]]


_LAYERNORM = "vllm.model_executor.layers.layernorm"
_ACTIVATION = "vllm.model_executor.layers.activation"
_ROTARY = "vllm.model_executor.layers.rotary_embedding"

#: OOT name -> the layer, in the order register() replaces them.
LAYERS = {layer.oot: layer for layer in (
    Layer("rms_norm", _LAYERNORM, "RMSNorm", "norm"),
    Layer("gemma_rms_norm", _LAYERNORM, "GemmaRMSNorm", "gemma_norm"),
    Layer("silu_and_mul", _ACTIVATION, "SiluAndMul", "gated"),
    Layer("mul_and_silu", _ACTIVATION, "MulAndSilu", "gated"),
    Layer("gelu_and_mul", _ACTIVATION, "GeluAndMul", "gelu_gated"),
    Layer("rotary_embedding", _ROTARY, "RotaryEmbedding", "rotary"),
)}

#: GeluAndMul's `approximate` -> the op it calls.
GELU_APPROXIMATE = {"none": "gelu_and_mul", "tanh": "gelu_tanh_and_mul"}


@dataclass(frozen=True)
class IrOp:
    """One IR op fldispatch serves: ir_op (vllm.ir.ops.<ir_op>), oot (the
    VLLM_FL_OOT_* name that switches it), layers (the OOT names of the vLLM
    layers that call it, which fldispatch does not replace where the IR op exists), op (our op),
    inplace (the impl writes its activations) and weights (the weights
    served: "none", "same" dtype as x, "float32" with a 16-bit x where the
    library takes it). Its call and supports_args are fldispatch.vllm_ir's."""

    ir_op: str
    oot: str
    layers: tuple[str, ...]
    op: str
    inplace: bool
    weights: tuple[str, ...] = field(default=("none", "same", "float32"))


#: IR op name -> the row.
IR_OPS = {row.ir_op: row for row in (
    IrOp("rms_norm", "rms_norm", ("rms_norm", "gemma_rms_norm"), "rms_norm", False),
    IrOp("fused_add_rms_norm", "rms_norm", ("rms_norm", "gemma_rms_norm"), "rms_norm", True),
)}
