/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The activation kernels (gpu_kernels.cuh): the gated ones (silu_and_mul,
 * mul_and_silu, gelu_and_mul, gelu_tanh_and_mul) and the elementwise GELUs,
 * their lean decode kernel and the looping one, and run_act, which fills
 * struct fld__gpu_api's act entry.
 */
#ifndef FLD_PLUGINS_GPU_ACT_CUH
#define FLD_PLUGINS_GPU_ACT_CUH

#include "gpu_access.cuh"
#include "gpu_api.h"
#include "gpu_launch.h"

namespace fld_gpu
{

/* An activation's access: scalar (!VEC), 16-byte groups, or narrower ones. */
template <int DT, bool VEC, int BYTES> struct act_access {
    typedef narrow_group<DT, BYTES> type;
};
template <int DT, int BYTES> struct act_access<DT, false, BYTES> {
    typedef group<DT, false> type;
};
template <int DT> struct act_access<DT, true, 16> {
    typedef group<DT, true> type;
};

/*
 * vLLM's activations (csrc/activation_kernels.cu silu_kernel, gelu_kernel,
 * gelu_tanh_kernel), written with the same operations in the same order so
 * that nvcc fuses and rounds them as it does vLLM's; the same formulas as
 * core/reference/reference_activation.c (under the emulator, the same bits).
 */
/* silu(f) = f / silu_denominator(f); act_group divides a group's elements
   after computing all their denominators. */
FLD_GPU_DEV float silu_denominator(float f)
{
    return 1.0f + expf(-f);
}

FLD_GPU_DEV float gelu_erf(float f)
{
    const float alpha = 0.70710678118654752440f; /* M_SQRT1_2 */
    return f * 0.5f * (1.0f + erff(f * alpha));
}

FLD_GPU_DEV float gelu_tanh(float f)
{
    const float beta = 0.7978845608028654f; /* M_SQRT2 * M_2_SQRTPI * 0.5 */
    const float kappa = 0.044715f;
    const float cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(beta * (f + kappa * cube)));
}

/*
 * The elementwise activations, in float32 with one rounding of the result
 * (core/reference/reference_activation.c): QuickGELU x * sigmoid(1.702 x) as
 * x / (1 + exp(-1.702 x)) (act_group divides by this denominator, as it
 * does silu's); NewGELU and FastGELU, the tanh GELU with c = 0.79788456
 * written as vLLM's kernels write it.
 */
FLD_GPU_DEV float gelu_quick_denominator(float f)
{
    return 1.0f + expf(-1.702f * f);
}

FLD_GPU_DEV float gelu_new(float f)
{
    const float c = 0.79788456f, cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(c * (f + 0.044715f * cube)));
}

FLD_GPU_DEV float gelu_fast(float f)
{
    const float c = 0.79788456f;
    return 0.5f * f * (1.0f + tanhf(c * f * (1.0f + 0.044715f * f * f)));
}

/* silu's or QuickGELU's denominator */
template <int OP> FLD_GPU_DEV float denominator(float f)
{
    return OP == FLD_GPU_GELU_QUICK ? gelu_quick_denominator(f) : silu_denominator(f);
}

/*
 * q[j] = in[j] / denominator(in[j]) for silu or QuickGELU (OP), in[] group
 * k of row as unpacked, rounding to DT as the / operator's quotients do:
 * every denominator first, then the divisions together. In bfloat16 the
 * products by the reciprocals where they settle the rounding
 * (fld__gpu_div_to_bf16_settled); the rare group where they do not divides
 * by fld__gpu_div_rn, from the dividends and denominators it holds if it has
 * at most DIVIDE_HELD_MAX elements, else from its elements loaded again
 * (fld__gpu_renewed: a load the compiler does not merge with the first), so
 * that the usual path of a wide group need not keep them up to that branch.
 * Otherwise fld__gpu_div_rn: one range test for the group, the / operator's
 * bits (on HIP, always).
 *
 * DIVIDE_HELD_MAX: a 4-byte bfloat16 group's two elements (and a scalar's
 * one) cost no registers held (the 4-byte lean kernel: 19 either way,
 * sm_90), and their rare path is then a range test and the refining
 * sequence: no second load, no exponentials again. A decode call takes
 * that path in some warp nearly every time (one element in about 3,900 is
 * in the window: about 3.7 of one row of 14,336), and its slowest warp is
 * the call's time. A 16-byte group's eight, held, took that kernel from 32
 * registers to 45.
 */
constexpr int DIVIDE_HELD_MAX = 2;

template <int DT, int OP, class G>
FLD_GPU_DEV void divide(const char *row, int64_t k, const float *in, float *q)
{
    float den[G::N];
    for (int j = 0; j < G::N; j++)
        den[j] = denominator<OP>(in[j]);
#if defined(FLD_GPU_TARGET_HIP)
    (void)row;
    (void)k;
#else
    if (DT == FLD_GPU_BF16) {
        if (fld__gpu_div_to_bf16_settled<G::N>(in, den, q))
            return;
        if (G::N > DIVIDE_HELD_MAX) {
            float again[G::N];
            G::load(fld__gpu_renewed(row), k, again);
            for (int j = 0; j < G::N; j++)
                den[j] = denominator<OP>(again[j]);
            fld__gpu_div_rn<G::N>(again, den, q);
            return;
        }
    }
#endif
    fld__gpu_div_rn<G::N>(in, den, q);
}

/* NewGELU and FastGELU (QuickGELU: act_group) */
template <int OP> FLD_GPU_DEV float elementwise(float f)
{
    return OP == FLD_GPU_GELU_NEW ? gelu_new(f) : gelu_fast(f);
}

/* Group k of one row of an activation: x's (and a gated op's second half's)
   loads, then the op, then the store. */
template <int DT, bool VEC, int OP, int BYTES>
FLD_GPU_DEV void act_group(const struct fld__gpu_act_args &a, const char *xr, char *orow, int64_t k)
{
    typedef typename act_access<DT, VEC, BYTES>::type G;
    constexpr bool GATED = OP <= FLD_GPU_GELU_TANH_AND_MUL; /* fld__gpu_act_gated() */
    constexpr bool SILU = OP == FLD_GPU_SILU_AND_MUL || OP == FLD_GPU_MUL_AND_SILU;
    const char *yr = xr + a.d * dtype_size<DT>::value;
    typename G::raw xs, ys = {};
    G::fetch(xr, k, xs); /* both operands' loads before either is used */
    if (GATED) {
        G::fetch(yr, k, ys);
        G::issued(ys);
        /* The GELUs' second operand, which ptxas would load after half of
           the first's erf or tanh, tied to the first (a.op is OP: the
           launcher picks this kernel by it); silu's loads go together
           without it. */
        if (!SILU)
            G::tie(xs, ys, (uint32_t)(a.op ^ OP));
    }
    float x[G::N];
    G::unpack(xs, x);
    if (GATED) {
        /* round(round(act(in)) * other), the activation rounded to DT as
           vLLM's ACT_FN returns it, two at a time (round_all). silu: every
           denominator first and the divisions together (divide), the
           group's exponentials and divisions in flight side by side, not
           each behind the previous element's division and its slow-path
           branch */
        float y[G::N], act[G::N];
        G::unpack(ys, y);
        const float *in = OP == FLD_GPU_MUL_AND_SILU ? y : x;
        if (SILU) {
            divide<DT, FLD_GPU_SILU_AND_MUL, G>(OP == FLD_GPU_MUL_AND_SILU ? yr : xr, k, in, act);
        } else {
            for (int j = 0; j < G::N; j++)
                act[j] = OP == FLD_GPU_GELU_AND_MUL ? gelu_erf(in[j]) : gelu_tanh(in[j]);
        }
#if defined(FLD_GPU_TARGET_CUDA)
        if constexpr (DT != FLD_GPU_F32 && G::N % 2 == 0) {
            /* the rounding, the product and its rounding in two packed
               instructions a pair, on the other operand's bits as loaded
               (fld__gpu_round_mul_pairs: the same bits as below) */
            uint32_t other[G::N / 2], out[G::N / 2];
            G::words(OP == FLD_GPU_MUL_AND_SILU ? xs : ys, other);
            fld__gpu_round_mul_pairs<DT, G::N / 2>(act, other, out);
            G::put_words(orow, k, out);
            return;
        }
#endif
        round_all<DT, G::N>(act);
        for (int j = 0; j < G::N; j++)
            x[j] = act[j] * (OP == FLD_GPU_MUL_AND_SILU ? x[j] : y[j]);
    } else if (OP == FLD_GPU_GELU_QUICK) {
        /* x / (1 + exp(-1.702 x)): the divisions together, as silu's */
        float q[G::N];
        divide<DT, OP, G>(xr, k, x, q);
        for (int j = 0; j < G::N; j++)
            x[j] = q[j];
    } else {
        for (int j = 0; j < G::N; j++)
            x[j] = elementwise<OP>(x[j]);
    }
    G::template store<GATED>(orow, k, x);
}

/* blockIdx.y strides over rows, (blockIdx.x, threadIdx.x) over the row's
   groups of BYTES (VEC) or elements. Gated ops read the row's second half
   too; elementwise ones not. */
template <int DT, bool VEC, int OP, int BYTES>
__global__ void __launch_bounds__(256) act_kernel(struct fld__gpu_act_args a)
{
    typedef typename act_access<DT, VEC, BYTES>::type G;
    const int64_t groups = a.d / G::N;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const char *xr = row_at<DT>(a.x, r, a.x_stride);
        char *orow = row_at<DT>(a.out, r, a.out_stride);
        for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < groups; k += step)
            act_group<DT, VEC, OP, BYTES>(a, xr, orow, k);
    }
}

/* The latency regime's kernel (gpu_launch.h, lean): act_kernel without its
   loops, for a grid that covers the call (blockIdx.y the row, one group per
   thread), with 32-bit row offsets (the launcher checks that they fit). */
template <int DT, int OP, int BYTES>
__global__ void __launch_bounds__(256) act_kernel_lean(struct fld__gpu_act_args a)
{
    typedef typename act_access<DT, true, BYTES>::type G;
    constexpr uint32_t S = dtype_size<DT>::value;
    const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
    if (k >= (uint32_t)a.d / G::N)
        return;
    const char *xr = static_cast<const char *>(a.x) + r * ((uint32_t)a.x_stride * S);
    char *orow = static_cast<char *>(a.out) + r * ((uint32_t)a.out_stride * S);
    act_group<DT, true, OP, BYTES>(a, xr, orow, k);
}

/* Whether the lean kernel can run a with shape s: its grid covers the rows
   and each row's groups (of size bytes / 16 of a 16-byte group), and every
   byte offset it forms is under 2^31. */
static inline bool act_lean_ok(const struct fld__gpu_act_args *a, const struct fld__gpu_shape &s,
                               int64_t groups)
{
    const int64_t size = (int64_t)fld__gpu_elem_size(a->dtype), limit = (int64_t)1 << 31;
    const int64_t stride = a->x_stride > a->out_stride ? a->x_stride : a->out_stride;
    return s.lean && s.blocks_y == a->rows && a->rows <= 65535 && s.blocks < (1 << 16) &&
           s.blocks * s.threads >= groups && a->x_stride >= 0 && a->out_stride >= 0 &&
           stride <= limit / size && (a->rows - 1) * stride * size + 2 * a->d * size < limit;
}

template <int DT, bool VEC, int BYTES>
static int launch_act(const struct fld__gpu_act_args *a, const struct fld__gpu_shape &s,
                      void *stream)
{
    /* grid.x over the row's groups (grid-stride beyond), grid.y over rows */
    const dim3 grid((unsigned)(s.blocks < (1 << 16) ? s.blocks : (1 << 16)),
                    (unsigned)(s.blocks_y < 65535 ? s.blocks_y : 65535));
#define FLD_GPU_ACT_SWITCH(KERNEL)                                                                 \
    switch (a->op) {                                                                               \
    case FLD_GPU_SILU_AND_MUL:                                                                     \
        return fld__gpu_launch(KERNEL(FLD_GPU_SILU_AND_MUL), grid, dim3(s.threads), stream, *a);   \
    case FLD_GPU_MUL_AND_SILU:                                                                     \
        return fld__gpu_launch(KERNEL(FLD_GPU_MUL_AND_SILU), grid, dim3(s.threads), stream, *a);   \
    case FLD_GPU_GELU_AND_MUL:                                                                     \
        return fld__gpu_launch(KERNEL(FLD_GPU_GELU_AND_MUL), grid, dim3(s.threads), stream, *a);   \
    case FLD_GPU_GELU_TANH_AND_MUL:                                                                \
        return fld__gpu_launch(KERNEL(FLD_GPU_GELU_TANH_AND_MUL), grid, dim3(s.threads), stream,   \
                               *a);                                                                \
    case FLD_GPU_GELU_QUICK:                                                                       \
        return fld__gpu_launch(KERNEL(FLD_GPU_GELU_QUICK), grid, dim3(s.threads), stream, *a);     \
    case FLD_GPU_GELU_NEW:                                                                         \
        return fld__gpu_launch(KERNEL(FLD_GPU_GELU_NEW), grid, dim3(s.threads), stream, *a);       \
    case FLD_GPU_GELU_FAST:                                                                        \
        return fld__gpu_launch(KERNEL(FLD_GPU_GELU_FAST), grid, dim3(s.threads), stream, *a);      \
    default:                                                                                       \
        return FLD_GPU_EINVAL;                                                                     \
    }
#define FLD_GPU_ACT_LEAN(OP) act_kernel_lean<DT, OP, BYTES>
#define FLD_GPU_ACT_LOOP(OP) act_kernel<DT, VEC, OP, BYTES>
    if constexpr (VEC) {
        if (act_lean_ok(a, s, a->d / act_access<DT, VEC, BYTES>::type::N))
            FLD_GPU_ACT_SWITCH(FLD_GPU_ACT_LEAN)
    }
    FLD_GPU_ACT_SWITCH(FLD_GPU_ACT_LOOP)
#undef FLD_GPU_ACT_LEAN
#undef FLD_GPU_ACT_LOOP
#undef FLD_GPU_ACT_SWITCH
}

template <bool VEC, int BYTES>
static int launch_act_dt(const struct fld__gpu_act_args *a, const struct fld__gpu_shape &s,
                         void *stream)
{
    switch (a->dtype) {
    case FLD_GPU_F32:
        return launch_act<FLD_GPU_F32, VEC, BYTES>(a, s, stream);
    case FLD_GPU_F16:
        return launch_act<FLD_GPU_F16, VEC, BYTES>(a, s, stream);
    case FLD_GPU_BF16:
        return launch_act<FLD_GPU_BF16, VEC, BYTES>(a, s, stream);
    default:
        return FLD_GPU_EINVAL;
    }
}

/* The vector family's kernel for s.access_bytes (16, 8 or 4; 0 is 16). */
static int launch_act_vector(const struct fld__gpu_act_args *a, const struct fld__gpu_shape &s,
                             void *stream)
{
    switch (s.access_bytes) {
    case 0:
    case 16:
        return launch_act_dt<true, 16>(a, s, stream);
    case 8:
        return launch_act_dt<true, 8>(a, s, stream);
    case 4:
        return launch_act_dt<true, 4>(a, s, stream);
    default:
        return FLD_GPU_EINVAL;
    }
}

/* The activation of a; shape: the launch to use, or NULL for gpu_launch.h's. */
static inline int run_act_shaped(const struct fld__gpu_act_args *a, int variant, void *stream,
                                 const struct fld__gpu_shape *shape)
{
    if (!a || a->op < 0 || a->op >= FLD_GPU_ACT_OPS || a->dtype < 0 || a->dtype >= FLD_GPU_DTYPES ||
        a->rows < 0 || a->d < 0)
        return FLD_GPU_EINVAL;
    if (a->rows == 0 || a->d == 0)
        return 0;
    if (variant == FLD_GPU_VECTOR && !fld__gpu_act_vector_ok(a))
        return FLD_GPU_EINVAL;
    if (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE)
        return FLD_GPU_EINVAL;
    const bool vec = variant == FLD_GPU_VECTOR;
    const int64_t groups = a->d / (vec ? fld__gpu_group_size(a->dtype) : 1);
    const struct fld__gpu_shape s =
        shape ? *shape : fld__gpu_act_shape(a->rows, groups, fld__gpu_sm_count());
    if (s.threads < 1 || s.threads > 256 || s.blocks < 1 || s.blocks_y < 1)
        return FLD_GPU_EINVAL;
    return vec ? launch_act_vector(a, s, stream) : launch_act_dt<false, 0>(a, s, stream);
}

static inline int run_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    return run_act_shaped(a, variant, stream, nullptr);
}

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_ACT_CUH */
