/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU kernels of the cuda and rocm plugins, one source for nvcc, hipcc
 * and the host emulator (gpu_compat.cuh), and the launchers that fill the
 * act/norm/rotary entries of struct fld__gpu_api (gpu_api.h). A file each:
 *
 *   gpu_access.cuh   how a kernel reads and writes elements and groups
 *   gpu_act.cuh      the activations (run_act)
 *   gpu_norm.cuh     the RMS norms (run_norm)
 *   gpu_rotary.cuh   rotary embedding (run_rotary)
 *
 * A device source (cuda_kernels.cu, hip_kernels.hip, the emulator's tests)
 * includes this file.
 *
 * Semantics are those of the library's reference.c (core/reference/reference_*.c),
 * which are vLLM's:
 *   - activations: vLLM's CUDA formulas (csrc/activation_kernels.cu), term
 *     for term, so nvcc compiles them as it compiles vLLM's; a gated one's
 *     activation is rounded to the dtype, then multiplied and rounded again;
 *     an elementwise one (gelu_quick, gelu_new, gelu_fast) rounded once;
 *   - norms: float32 math, one rounding per output; weight and residual of
 *     x's dtype or float32 (weight_dtype, residual_dtype); the fused
 *     residual rounded to its own dtype before it is normalised; gemma's
 *     (1 + w) in float32; a row whose float32 sum of squares is inf, NaN or
 *     too small for eps to hide its underflow is summed again in double
 *     (so rows of 1e30 normalise);
 *   - rotary: float32 queries rotate in float32; 16-bit ones round cos and
 *     sin to their dtype and round every product and sum to it, as vLLM's
 *     forward_native computes on 16-bit tensors. In place, or out of place
 *     (rotary_embedding_out: the same bits into other tensors, the elements
 *     past rot_dim copied).
 * Two families:
 *
 *   FLD_GPU_VECTOR     128-bit loads and stores (4 x f32 or 8 x f16/bf16 per
 *                      access); the caller checks fld__gpu_*_vector_ok().
 *                      Rotary has no such check: its launcher takes the
 *                      vector kernel when the layout allows and the
 *                      one-thread-per-pair kernel otherwise.
 *   FLD_GPU_REFERENCE  the same algorithms one element per access: any
 *                      shape, stride and alignment.
 *
 * Activations grid-stride over (row, vector); norms run one block per row
 * with a block reduction (warp butterfly + shared memory); rotary runs one
 * block per token and one thread per (head, pair) -- or per (head, 16-byte
 * group of pairs) in the vector family, neox and gptj.
 *
 * The CUDA build has run on NVIDIA H100 and H200 GPUs (docs/BENCHMARKS.md,
 * tests/gpu_real); the HIP build, for gfx90a/gfx908/gfx1030, only under the
 * emulator (tests/gpu): no AMD GPU was available.
 */
#ifndef FLD_PLUGINS_GPU_KERNELS_CUH
#define FLD_PLUGINS_GPU_KERNELS_CUH

#include "gpu_act.cuh"
#include "gpu_norm.cuh"
#include "gpu_rotary.cuh"

#endif /* FLD_PLUGINS_GPU_KERNELS_CUH */
