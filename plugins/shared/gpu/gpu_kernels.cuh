/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU kernels of the cuda and rocm plugins, one source for nvcc, hipcc
 * and the host emulator (gpu_compat.cuh), and the launchers that fill the
 * act/norm/rotary entries of struct fld__gpu_api (gpu_api.h).
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

#include "gpu_api.h"
#include "gpu_compat.cuh"
#include "gpu_launch.h"

namespace fld_gpu
{

/* ------------------------------------------------------------------------ */
/* Element access                                                           */
/* ------------------------------------------------------------------------ */

/* dtype index (0 f32, 1 f16, 2 bf16) -> bytes per element. */
template <int DT> struct dtype_size {
    static constexpr int value = DT == 0 ? 4 : 2;
};

template <int DT> FLD_GPU_DEV float load_elem(const void *row, int64_t i)
{
    if (DT == 0)
        return static_cast<const float *>(row)[i];
    const uint16_t h = static_cast<const uint16_t *>(row)[i];
    return DT == 1 ? fld__gpu_f16_to_f32(h) : fld__gpu_bf16_to_f32(h);
}

template <int DT> FLD_GPU_DEV uint16_t narrow(float v)
{
    return DT == 1 ? fld__gpu_f32_to_f16(v) : fld__gpu_f32_to_bf16(v);
}

template <int DT> FLD_GPU_DEV float widen(uint32_t h)
{
    return DT == 1 ? fld__gpu_f16_to_f32((uint16_t)h) : fld__gpu_bf16_to_f32((uint16_t)h);
}

template <int DT> FLD_GPU_DEV void store_elem(void *row, int64_t i, float v)
{
    if (DT == 0)
        static_cast<float *>(row)[i] = v;
    else
        static_cast<uint16_t *>(row)[i] = narrow<DT>(v);
}

/* v rounded to the dtype and back: what storing and re-loading gives. */
template <int DT> FLD_GPU_DEV float round_to(float v)
{
    return DT == 0 ? v : widen<DT>(narrow<DT>(v));
}

/* f[0..N) each rounded to DT and back (round_to); on CUDA two at a time
   (fld__gpu_round_pair: a NaN stays some NaN, for intermediate values). */
template <int DT, int N> FLD_GPU_DEV void round_all(float *f)
{
#if defined(FLD_GPU_TARGET_CUDA)
    constexpr bool PAIRS = DT != 0 && N % 2 == 0;
#else
    constexpr bool PAIRS = false;
#endif
    if constexpr (PAIRS) {
        for (int j = 0; j + 1 < N; j += 2)
            fld__gpu_round_pair<DT>(f[j], f[j + 1]);
    } else {
        for (int j = 0; j < N; j++)
            f[j] = round_to<DT>(f[j]);
    }
}

/* A group's bits as loaded: one 16-byte vector, or one element's bits. */
template <bool VEC> struct raw_bits {
    typedef fld__gpu_vec16 type;
};
template <> struct raw_bits<false> {
    typedef uint32_t type;
};

/*
 * Access to a row by groups of N elements: group k holds elements
 * [k N, k N + N). VEC: one 16-byte access per group (the row and k N
 * 16-byte aligned); otherwise N = 1, one scalar access.
 *
 * load() is fetch() then unpack(). A kernel that needs several operands
 * of a row fetches them all before it unpacks any: a load's registers are
 * waited for at their first use, so fetching the second operand after
 * unpacking the first costs a second trip to memory.
 */
template <int DT, bool VEC> struct group {
    static constexpr int N = VEC ? 16 / dtype_size<DT>::value : 1;
    typedef typename raw_bits<VEC>::type raw;

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, fld__gpu_vec16 &v)
    {
        v = fld__gpu_load16(static_cast<const char *>(row) + k * 16);
    }

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, uint32_t &bits)
    {
        bits = DT == 0 ? static_cast<const uint32_t *>(row)[k]
                       : static_cast<const uint16_t *>(row)[k];
    }

    static FLD_GPU_DEV void unpack(const fld__gpu_vec16 &v, float *f)
    {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        if (DT == 0) {
            for (int j = 0; j < N && j < 4; j++)
                f[j] = fld__gpu_float(w[j]);
        } else {
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++) {
                f[2 * j] = widen<DT>(w[j] & 0xffffu);
                f[2 * j + 1] = widen<DT>(w[j] >> 16);
            }
        }
    }

    static FLD_GPU_DEV void unpack(uint32_t bits, float *f)
    {
        f[0] = DT == 0 ? fld__gpu_float(bits) : widen<DT>(bits);
    }

    /* The fetch stays above this point (fld__gpu_issued). */
    static FLD_GPU_DEV void issued(const fld__gpu_vec16 &v)
    {
        fld__gpu_issued(v.x);
        fld__gpu_issued(v.y);
        fld__gpu_issued(v.z);
        fld__gpu_issued(v.w);
    }

    static FLD_GPU_DEV void issued(uint32_t bits)
    {
        fld__gpu_issued(bits);
    }

    /* x's words tied to y's (fld__gpu_tied: zero is 0 at run time) */
    static FLD_GPU_DEV void tie(fld__gpu_vec16 &x, const fld__gpu_vec16 &y, uint32_t zero)
    {
        x.x = fld__gpu_tied(x.x, y.x, zero);
        x.y = fld__gpu_tied(x.y, y.y, zero);
        x.z = fld__gpu_tied(x.z, y.z, zero);
        x.w = fld__gpu_tied(x.w, y.w, zero);
    }

    static FLD_GPU_DEV void tie(uint32_t &x, uint32_t y, uint32_t zero)
    {
        x = fld__gpu_tied(x, y, zero);
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    /* PAIRED: 16-bit groups rounded two at a time (fld__gpu_pack_pairs): on an
       H200 bfloat16 rotary, gated activations and the norms' outputs ran
       4-13% faster so; the norms' residual and the elementwise activations
       ran slower (0.93x, 0.97x) and round one at a time. Same bits either way. */
    template <bool PAIRED = false> static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        if (!VEC) {
            store_elem<DT>(row, k, f[0]);
            return;
        }
        fld__gpu_vec16 v;
        if (DT == 0 || PAIRED) {
            pack(f, v);
        } else {
            uint32_t w[4];
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++)
                w[j] = (uint32_t)narrow<DT>(f[2 * j]) | ((uint32_t)narrow<DT>(f[2 * j + 1]) << 16);
            v.x = w[0];
            v.y = w[1];
            v.z = w[2];
            v.w = w[3];
        }
        put(row, k, v);
    }

    /* f as the group's bits in DT (VEC 16-bit: rounded two at a time), which
       put() stores and unpack() reads back as the rounded values. */
    static FLD_GPU_DEV void pack(const float *f, uint32_t &bits)
    {
        bits = DT == 0 ? fld__gpu_bits(f[0]) : (uint32_t)narrow<DT>(f[0]);
    }

    static FLD_GPU_DEV void pack(const float *f, fld__gpu_vec16 &v)
    {
        pack_groups<1>(f, &v);
    }

    /* K groups' floats (f[i N + j]: group i's element j) as their bits, v[i]
       group i's, in one call: 16-bit groups rounded two at a time behind one
       NaN test for all of them (fld__gpu_pack_pairs), so that a thread's
       groups are rounded and stored without a branch between them; NAN_FREE:
       the caller knows that none is a NaN, and there is no test. */
    template <int K, bool NAN_FREE = false>
    static FLD_GPU_DEV void pack_groups(const float *f, fld__gpu_vec16 *v)
    {
        uint32_t w[4 * K];
        if (DT == 0) {
            for (int j = 0; j < K * N && j < 4 * K; j++)
                w[j] = fld__gpu_bits(f[j]);
        } else {
            fld__gpu_pack_pairs<DT, K * N, NAN_FREE>(f, w);
        }
        for (int i = 0; i < K; i++) {
            v[i].x = w[4 * i];
            v[i].y = w[4 * i + 1];
            v[i].z = w[4 * i + 2];
            v[i].w = w[4 * i + 3];
        }
    }

    static FLD_GPU_DEV void put(void *row, int64_t k, const fld__gpu_vec16 &v)
    {
        fld__gpu_store16(static_cast<char *>(row) + k * 16, v);
    }

    /* The group's bits as 32-bit words and back, and words stored as group k
       (VEC) */
    static FLD_GPU_DEV void words(const fld__gpu_vec16 &v, uint32_t *w)
    {
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }

    static FLD_GPU_DEV void from_words(const uint32_t *w, fld__gpu_vec16 &v)
    {
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
    }

    static FLD_GPU_DEV void put_words(void *row, int64_t k, const uint32_t *w)
    {
        fld__gpu_vec16 v;
        from_words(w, v);
        put(row, k, v);
    }

    static FLD_GPU_DEV void put(void *row, int64_t k, uint32_t bits)
    {
        if (DT == 0)
            static_cast<uint32_t *>(row)[k] = bits;
        else
            static_cast<uint16_t *>(row)[k] = (uint16_t)bits;
    }
};

/*
 * Elements [k N, k N + N) of a row of dtype SDT, where N is the group size
 * of another dtype (x's): the weight or residual of a 16-bit x may be
 * float32. VEC: N / (16 / size) 16-byte accesses (SDT = float32 with N = 8
 * takes two); otherwise N = 1.
 */
template <int SDT, int N, bool VEC> struct lanes {
    static constexpr int PER = 16 / dtype_size<SDT>::value; /* elements per 16 bytes */
    static constexpr int ACCESSES = VEC ? N / PER : 1;
    static_assert(!VEC || (N % PER == 0 && ACCESSES <= 2), "x's group is 1 or 2 accesses of SDT");

    /* The group's bits as loaded (fetch(), then unpack(): see group). */
    struct raw {
        typename group<SDT, VEC>::raw part[ACCESSES];
    };

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, raw &r)
    {
        for (int i = 0; i < ACCESSES; i++)
            group<SDT, VEC>::fetch(row, k * ACCESSES + i, r.part[i]);
    }

    static FLD_GPU_DEV void unpack(const raw &r, float *f)
    {
        for (int i = 0; i < ACCESSES; i++)
            group<SDT, VEC>::unpack(r.part[i], f + i * PER);
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        if (VEC) {
            group<SDT, true>::store(row, k * ACCESSES, f);
            if (ACCESSES == 2)
                group<SDT, true>::store(row, k * ACCESSES + 1, f + PER);
        } else {
            store_elem<SDT>(row, k, f[0]);
        }
    }
};

/*
 * Access to a row by groups of BYTES = 8 or 4 bytes (N = BYTES / size
 * elements; the row and k N aligned to BYTES): what an activation thread
 * reads per step where gpu_launch.h spreads a row over more threads than
 * 16-byte groups give. The same conversions as group's.
 */
template <int DT, int BYTES> struct narrow_group {
    static_assert(BYTES == 8 || BYTES == 4, "8- or 4-byte groups; 16 is group's");
    static constexpr int N = BYTES / dtype_size<DT>::value;
    static constexpr int WORDS = BYTES / 4;

    /* The group's bits as loaded (fetch(), then unpack(): see group). */
    struct raw {
        uint32_t w[WORDS];
    };

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, raw &r)
    {
        const char *p = static_cast<const char *>(row) + k * BYTES;
        if (WORDS == 2) {
            const uint64_t u = fld__gpu_load8(p);
            r.w[0] = (uint32_t)u;
            r.w[WORDS - 1] = (uint32_t)(u >> 32);
        } else {
            r.w[0] = fld__gpu_load4(p);
        }
    }

    static FLD_GPU_DEV void issued(const raw &r)
    {
        for (int i = 0; i < WORDS; i++)
            fld__gpu_issued(r.w[i]);
    }

    static FLD_GPU_DEV void tie(raw &x, const raw &y, uint32_t zero)
    {
        for (int i = 0; i < WORDS; i++)
            x.w[i] = fld__gpu_tied(x.w[i], y.w[i], zero);
    }

    static FLD_GPU_DEV void unpack(const raw &r, float *f)
    {
        const uint32_t *w = r.w;
        for (int i = 0; i < WORDS; i++) {
            if (DT == 0) {
                f[i] = fld__gpu_float(w[i]);
            } else {
                f[2 * i] = widen<DT>(w[i] & 0xffffu);
                f[2 * i + 1] = widen<DT>(w[i] >> 16);
            }
        }
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    /* The group's bits as 32-bit words, and words stored as group k */
    static FLD_GPU_DEV void words(const raw &r, uint32_t *w)
    {
        for (int i = 0; i < WORDS; i++)
            w[i] = r.w[i];
    }

    static FLD_GPU_DEV void put_words(void *row, int64_t k, const uint32_t *w)
    {
        char *p = static_cast<char *>(row) + k * BYTES;
        if (WORDS == 2)
            fld__gpu_store8(p, (uint64_t)w[0] | ((uint64_t)w[WORDS - 1] << 32));
        else
            fld__gpu_store4(p, w[0]);
    }

    template <bool PAIRED = false>
    static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        uint32_t w[WORDS];
        if (DT == 0) {
            for (int i = 0; i < WORDS; i++)
                w[i] = fld__gpu_bits(f[i]);
        } else if (PAIRED) {
            fld__gpu_pack_pairs<DT, N>(f, w);
        } else {
            for (int i = 0; i < WORDS; i++)
                w[i] = (uint32_t)narrow<DT>(f[2 * i]) | ((uint32_t)narrow<DT>(f[2 * i + 1]) << 16);
        }
        put_words(row, k, w);
    }
};

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

template <int DT> FLD_GPU_DEV const char *row_at(const void *base, int64_t r, int64_t stride)
{
    return static_cast<const char *>(base) + r * stride * dtype_size<DT>::value;
}

template <int DT> FLD_GPU_DEV char *row_at(void *base, int64_t r, int64_t stride)
{
    return static_cast<char *>(base) + r * stride * dtype_size<DT>::value;
}

/* ------------------------------------------------------------------------ */
/* Gated activations                                                        */
/* ------------------------------------------------------------------------ */

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
 * (fld__gpu_div_to_bf16_settled); the rare group where they do not loads
 * its elements again (fld__gpu_renewed: a load the compiler does not merge
 * with the first) and divides them by fld__gpu_div_rn, so that the usual
 * path need not keep the group's dividends and denominators up to that
 * branch. Otherwise fld__gpu_div_rn: one range test for the group, the /
 * operator's bits (on HIP, always).
 */
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
    if (DT == 2) {
        if (fld__gpu_div_to_bf16_settled<G::N>(in, den, q))
            return;
        float again[G::N];
        G::load(fld__gpu_renewed(row), k, again);
        for (int j = 0; j < G::N; j++)
            den[j] = denominator<OP>(again[j]);
        fld__gpu_div_rn<G::N>(again, den, q);
        return;
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
        if constexpr (DT != 0 && G::N % 2 == 0) {
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
    const int64_t size = a->dtype == 0 ? 4 : 2, limit = (int64_t)1 << 31;
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
    case 0:
        return launch_act<0, VEC, BYTES>(a, s, stream);
    case 1:
        return launch_act<1, VEC, BYTES>(a, s, stream);
    case 2:
        return launch_act<2, VEC, BYTES>(a, s, stream);
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
    if (!a || a->op < 0 || a->op >= FLD_GPU_ACT_OPS || a->dtype < 0 || a->dtype > 2 ||
        a->rows < 0 || a->d < 0)
        return FLD_GPU_EINVAL;
    if (a->rows == 0 || a->d == 0)
        return 0;
    if (variant == FLD_GPU_VECTOR && !fld__gpu_act_vector_ok(a))
        return FLD_GPU_EINVAL;
    if (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE)
        return FLD_GPU_EINVAL;
    const bool vec = variant == FLD_GPU_VECTOR;
    const int64_t groups = a->d / (vec ? (a->dtype == 0 ? 4 : 8) : 1);
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

/* ------------------------------------------------------------------------ */
/* RMS norm                                                                 */
/* ------------------------------------------------------------------------ */

/* Slots for the per-warp partials: 1024 threads / 32 lanes. */
#define FLD_GPU_MAX_WARPS 32

/*
 * Sum of v over the block; every thread gets the same value. All threads of
 * the block call it; blockDim.x is a multiple of the warp size. AGAIN: the
 * block sums again after this (its next row), so it waits until every warp
 * has read the partials; a block that sums once skips that second barrier.
 */
template <bool AGAIN = true> FLD_GPU_DEV float block_sum(float v)
{
    __shared__ float partial[FLD_GPU_MAX_WARPS];
    const int lanes = FLD_GPU_WARP_SIZE;
    const int lane = (int)threadIdx.x % lanes, warp = (int)threadIdx.x / lanes;
    const int warps = (int)blockDim.x / lanes;
    /* P - 1 for P below: the bits of warps - 1 (< 32) smeared right */
    int below = warps - 1;
    below |= below >> 1;
    below |= below >> 2;
    below |= below >> 4;
    v = fld__gpu_warp_sum(v);
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    /* Every warp sums the partials in the same order: one value block-wide.
       Lane l takes partial l mod P (P: the warps rounded up to a power of
       two; 0 past the last) and the butterfly runs its steps below P alone:
       in a whole warp's butterfly the steps from P up add zeros, which leave
       a sum of squares as it was (only a -0 would turn +0), so the bits
       are the same, and each step skipped is a shuffle off the row's
       critical path (4 steps instead of 5 at 16 warps, 3 at 8). */
    const int i = lane & below;
    v = i < warps ? partial[i] : 0.0f;
    FLD_GPU_UNROLL
    for (int m = FLD_GPU_MAX_WARPS / 2; m > 0; m >>= 1)
        if (m < warps) /* m < P: m and P are powers of two, P the least >= warps */
            v += fld__gpu_shfl_xor(v, m);
    if (AGAIN)
        __syncthreads(); /* partial is reused by the block's next row */
    return v;
}

/*
 * The sum of slots[0..W) (W a power of two, slots 16-byte aligned) in the
 * order of a butterfly over W lanes: slot i plus slot i + W/2, then the
 * same over the first half, and so on. Read as W/4 16-byte loads that every
 * lane of a warp shares, and added in log2(W) rounds of independent adds.
 */
template <int W> FLD_GPU_DEV float slot_sum(const float *slots)
{
    float s[W];
    FLD_GPU_UNROLL
    for (int i = 0; i < W; i += 4) {
        const fld__gpu_vec16 q = fld__gpu_load16(slots + i);
        s[i] = fld__gpu_float(q.x);
        s[i + 1] = fld__gpu_float(q.y);
        s[i + 2] = fld__gpu_float(q.z);
        s[i + 3] = fld__gpu_float(q.w);
    }
    /* rounds of W/2, W/4, ... 1 adds; constant trip counts, so that both
       loops unroll and s stays in registers */
    FLD_GPU_UNROLL
    for (int half = W / 2; half > 0; half /= 2) {
        FLD_GPU_UNROLL
        for (int i = 0; i < W / 2; i++)
            if (i < half)
                s[i] += s[i + half];
    }
    return s[0];
}

/*
 * block_sum<false>'s value, for a block that sums once (the one-row norm
 * kernel), with the second stage off the shuffles where the block has up
 * to MAX_SLOTS warps (8 or 16): each thread reads every warp's partial from
 * shared memory and adds them itself, P - 1 adds at most four deep (P: the
 * warps rounded up to a power of two; 8 or 16 slots read), instead of a
 * shuffle's latency per step. The slots past the last warp are written with
 * zeros, and the steps that add them leave a sum of squares as it was (only
 * a -0 would turn +0), so the bits are block_sum's. Wider blocks run
 * block_sum<false>. A kernel whose threads hold more of the row passes 8:
 * 16 slots in registers at once took the one-row kernel with two 16-bit
 * groups a thread from 42 to 49 registers (sm_90), and with one float32
 * group and a residual from no spills to 28 bytes on the usual path (sm_80).
 */
template <int MAX_SLOTS> FLD_GPU_DEV float block_sum_once(float v)
{
    static_assert(MAX_SLOTS == 8 || MAX_SLOTS == 16, "8 or 16 slots");
    const unsigned lanes = (unsigned)FLD_GPU_WARP_SIZE, warps = blockDim.x / lanes;
    if (warps > MAX_SLOTS)
        return block_sum<false>(v);
    alignas(16) __shared__ float slots[MAX_SLOTS];
    v = fld__gpu_warp_sum(v);
    if (threadIdx.x % lanes == 0)
        slots[threadIdx.x / lanes] = v;
    if (threadIdx.x >= warps && threadIdx.x < MAX_SLOTS) /* threads of the first warp */
        slots[threadIdx.x] = 0.0f;
    __syncthreads();
    return MAX_SLOTS == 8 || warps <= 8 ? slot_sum<8>(slots) : slot_sum<MAX_SLOTS>(slots);
}

/*
 * A thread's sum of squares, in four running sums that a group's elements
 * take in turn (element j adds to sum j mod 4), added pairwise at the end:
 * a chain of dependent adds a quarter as long as one running sum's, on a
 * decode row's critical path (norm_kernel_row; the general kernels keep one
 * running sum, which takes fewer registers where a thread holds more).
 */
struct square_sum {
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};

    template <int N> FLD_GPU_DEV void add(const float *v)
    {
        for (int j = 0; j < N; j++)
            part[j % 4] += v[j] * v[j];
    }

    FLD_GPU_DEV float total() const
    {
        return (part[0] + part[1]) + (part[2] + part[3]);
    }
};

/* The same in double, for the rare rows summed again (norm_kernel). */
FLD_GPU_DEV double warp_sum_d(double v)
{
    for (int m = FLD_GPU_WARP_SIZE / 2; m > 0; m >>= 1) {
        const uint64_t u = fld__gpu_double_bits(v);
        /* shuffled as two 32-bit halves: the float shuffle moves bits, no arithmetic */
        const uint32_t hi = fld__gpu_bits(fld__gpu_shfl_xor(fld__gpu_float((uint32_t)(u >> 32)), m));
        const uint32_t lo = fld__gpu_bits(fld__gpu_shfl_xor(fld__gpu_float((uint32_t)u), m));
        v += fld__gpu_double_from_bits(((uint64_t)hi << 32) | lo);
    }
    return v;
}

FLD_GPU_DEV double block_sum_d(double v)
{
    __shared__ double partial_d[FLD_GPU_MAX_WARPS];
    const int lanes = FLD_GPU_WARP_SIZE;
    const int lane = (int)threadIdx.x % lanes, warp = (int)threadIdx.x / lanes;
    const int warps = (int)blockDim.x / lanes;
    v = warp_sum_d(v);
    if (lane == 0)
        partial_d[warp] = v;
    __syncthreads();
    v = warp_sum_d(lane < warps ? partial_d[lane] : 0.0);
    __syncthreads();
    return v;
}

/* The largest float32 (FLT_MAX), spelled so that every compiler takes it. */
#define FLD_GPU_FLT_MAX 3.40282346638528859812e+38f

/* Whether a row's float32 sum of squares ss (mean plus eps: ms) normalises
   in float32: not inf or NaN, and not so small that eps cannot hide the
   squares' underflow (ms then in float32's normal range, where
   fld__gpu_rsqrt_approx holds). Block-uniform: every thread has the same
   sum. */
FLD_GPU_DEV bool norm_sum_ok(float ss, float ms)
{
    return ss <= FLD_GPU_FLT_MAX && ms >= 0x1p-100f;
}

/*
 * The rare row whose float32 sum does not normalise: summed again in double
 * from memory (the residual already stored, or x) and written as
 * out = float(v * inv) * scale with inv in double, as the reference does.
 * All threads of the block call it.
 */
template <int DT, int WDT, int RDT, bool VEC>
FLD_GPU_DEV void norm_row_in_double(const struct fld__gpu_norm_args &a, const char *xr, char *orow,
                                    const char *rr)
{
    typedef group<DT, VEC> G;
    typedef lanes<WDT, G::N, VEC> W;
    typedef lanes<RDT, G::N, VEC> R;
    const int64_t groups = a.width / G::N;
    const float add = a.gemma ? 1.0f : 0.0f;
    double sd = 0.0;
    for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
        float v[G::N];
        if (rr)
            R::load(rr, k, v);
        else
            G::load(xr, k, v);
        for (int j = 0; j < G::N; j++)
            sd += (double)v[j] * (double)v[j];
    }
    sd = block_sum_d(sd);
    const double invd = 1.0 / sqrt(sd / (double)a.width + (double)a.eps);
    for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
        float v[G::N], w[G::N];
        if (rr)
            R::load(rr, k, v);
        else
            G::load(xr, k, v);
        if (a.weight)
            W::load(a.weight, k, w);
        for (int j = 0; j < G::N; j++)
            v[j] = (float)((double)v[j] * invd) * (a.weight ? w[j] + add : 1.0f);
        G::template store<true>(orow, k, v);
    }
}

/*
 * One block per row (grid-stride). Pass 1: residual = round(x + residual)
 * in the residual's dtype RDT, written back, sum of squares of the stored
 * values (or of x). Pass 2: the row being normalised is re-read -- the
 * residual this thread just wrote, or x -- and out = v * inv * scale, the
 * weight of dtype WDT. out may alias x: all of x is read in pass 1, before
 * the block barrier of the reduction, when there is a residual; without
 * one, each element is read and written by the same thread.
 *
 * A float32 sum that is inf (overflowing squares, or an inf in the row),
 * NaN, or so small that eps cannot hide the squares' underflow sends the
 * block (the decision is block-uniform: every thread has the same sum) to a
 * third pass that sums the row again in double and writes
 * out = float(v * inv) * scale with inv in double, as the reference does.
 */
template <int DT, int WDT, int RDT, bool VEC>
__global__ void __launch_bounds__(1024) norm_kernel(struct fld__gpu_norm_args a)
{
    typedef group<DT, VEC> G;
    typedef lanes<WDT, G::N, VEC> W;
    typedef lanes<RDT, G::N, VEC> R;
    const int64_t groups = a.width / G::N;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const char *xr = row_at<DT>(a.x, r, a.x_stride);
        char *orow = row_at<DT>(a.out, r, a.out_stride);
        char *rr = a.residual ? row_at<RDT>(a.residual, r, a.residual_stride) : nullptr;
        float ss = 0.0f;
        for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
            typename G::raw xs;
            typename R::raw rs = {};
            G::fetch(xr, k, xs);
            if (rr)
                R::fetch(rr, k, rs);
            float v[G::N];
            G::unpack(xs, v);
            if (rr) {
                float s[G::N];
                R::unpack(rs, s);
                for (int j = 0; j < G::N; j++)
                    v[j] = round_to<RDT>(v[j] + s[j]);
                R::store(rr, k, v);
            }
            for (int j = 0; j < G::N; j++)
                ss += v[j] * v[j];
        }
        ss = block_sum(ss);
        const float add = a.gemma ? 1.0f : 0.0f;
        const float ms = ss / (float)a.width + a.eps;
        if (!norm_sum_ok(ss, ms)) {
            norm_row_in_double<DT, WDT, RDT, VEC>(a, xr, orow, rr);
            continue;
        }
        const float inv = fld__gpu_rsqrt_approx(ms);
        for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
            float v[G::N], w[G::N];
            if (rr)
                R::load(rr, k, v);
            else
                G::load(xr, k, v);
            if (a.weight) {
                W::load(a.weight, k, w);
                for (int j = 0; j < G::N; j++)
                    v[j] = v[j] * inv * (w[j] + add);
            } else {
                for (int j = 0; j < G::N; j++)
                    v[j] = v[j] * inv;
            }
            G::template store<true>(orow, k, v);
        }
    }
}

/*
 * norm_kernel in one pass over memory, for rows of at most K groups per
 * thread (K = 1, 2 or 4; gpu_launch.h picks it): each thread keeps its
 * groups in registers between the sum of squares and the scaling, so x (or
 * the residual) is read once instead of twice. K is the fewest that holds
 * the row, so the kernel takes no more registers (and keeps as many blocks
 * per SM) than the row needs. For the same reason a norm without a
 * residual runs the kernel made without one (RESIDUAL false): a kernel that
 * may read a residual holds its loads beside x's, and at 4 groups per
 * thread that decides how many blocks share an SM in the streaming regime
 * (bfloat16 on sm_90: 40 registers without, 58 with). With RESIDUAL the
 * residual is still tested per row, at run time: made for a residual known
 * to be there, ptxas schedules the fused kernel into 73 registers.
 *
 * A row's loads are all issued before the first of them is used (x's and
 * the residual's, and with EARLY_WEIGHT the weight's), so a decode row
 * waits for one trip to memory, not one per operand. Without EARLY_WEIGHT
 * the weight is read after the reduction: four (or eight) fewer registers
 * per group, which the 4-group kernel needs more than a decode row's
 * latency; EARLY_WEIGHT is for K <= 2. The residual's sum, where it has x's
 * dtype, is rounded once, to the bits stored, and read back (a float32
 * residual of a 16-bit x: rounded, stored, and kept as floats). out may
 * alias x: the block's whole row is read before the reduction's barrier,
 * and written after it.
 */
template <int DT, int WDT, int RDT, bool VEC, int K, bool EARLY_WEIGHT, bool RESIDUAL>
__global__ void __launch_bounds__(K <= 2 ? 1024 : 512) norm_kernel_reg(struct fld__gpu_norm_args a)
{
    typedef group<DT, VEC> G;
    typedef lanes<WDT, G::N, VEC> W;
    typedef lanes<RDT, G::N, VEC> R;
    static_assert(!EARLY_WEIGHT || K <= 2, "the weight is loaded early for at most 2 groups");
    /* the residual's sum packs into x's group: kept as bits like x; a
       float32 residual's sum of a 16-bit x is kept as floats */
    constexpr bool SUM_AS_BITS = RDT == DT, SUM_AS_FLOATS = RESIDUAL && !SUM_AS_BITS;
    const int64_t groups = a.width / G::N;
    const float add = a.gemma ? 1.0f : 0.0f;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const char *xr = row_at<DT>(a.x, r, a.x_stride);
        char *orow = row_at<DT>(a.out, r, a.out_stride);
        char *rr = RESIDUAL && a.residual ? row_at<RDT>(a.residual, r, a.residual_stride) : nullptr;
        /* Every load of the row first (read only where k < groups). */
        typename G::raw xs[K] = {};
        typename R::raw rs[RESIDUAL ? K : 1] = {};
        typename W::raw ws[EARLY_WEIGHT ? K : 1] = {};
        FLD_GPU_UNROLL
        for (int i = 0; i < K; i++) {
            const int64_t k = threadIdx.x + (int64_t)i * blockDim.x;
            if (k < groups) {
                G::fetch(xr, k, xs[i]);
                if (rr)
                    R::fetch(rr, k, rs[RESIDUAL ? i : 0]);
                if (EARLY_WEIGHT && a.weight)
                    W::fetch(a.weight, k, ws[EARLY_WEIGHT ? i : 0]);
            }
        }
        /* the values normalised: xs[i]'s bits (x's, or the residual's sum),
           or a float32 residual's sums[i] */
        float sums[SUM_AS_FLOATS ? K : 1][G::N] = {};
        float ss = 0.0f;
        FLD_GPU_UNROLL
        for (int i = 0; i < K; i++) {
            const int64_t k = threadIdx.x + (int64_t)i * blockDim.x;
            if (k < groups) {
                float v[G::N];
                G::unpack(xs[i], v);
                if (rr) {
                    float s[G::N];
                    R::unpack(rs[RESIDUAL ? i : 0], s);
                    for (int j = 0; j < G::N; j++)
                        v[j] += s[j];
                    if (SUM_AS_BITS) {
                        /* rounded once, to the bits stored, and read back */
                        G::pack(v, xs[i]);
                        G::put(rr, k, xs[i]);
                        G::unpack(xs[i], v);
                    } else {
                        for (int j = 0; j < G::N; j++)
                            sums[SUM_AS_FLOATS ? i : 0][j] = v[j] = round_to<RDT>(v[j]);
                        R::store(rr, k, v);
                    }
                }
                for (int j = 0; j < G::N; j++)
                    ss += v[j] * v[j];
            }
        }
        ss = block_sum(ss);
        const float ms = ss / (float)a.width + a.eps;
        if (!norm_sum_ok(ss, ms)) {
            norm_row_in_double<DT, WDT, RDT, VEC>(a, xr, orow, rr);
            continue;
        }
        const float inv = fld__gpu_rsqrt_approx(ms);
        FLD_GPU_UNROLL
        for (int i = 0; i < K; i++) {
            const int64_t k = threadIdx.x + (int64_t)i * blockDim.x;
            if (k < groups) {
                float v[G::N];
                if (SUM_AS_BITS || !rr)
                    G::unpack(xs[i], v);
                else
                    for (int j = 0; j < G::N; j++)
                        v[j] = sums[SUM_AS_FLOATS ? i : 0][j];
                if (a.weight) {
                    float w[G::N];
                    if (EARLY_WEIGHT)
                        W::unpack(ws[EARLY_WEIGHT ? i : 0], w);
                    else
                        W::load(a.weight, k, w);
                    for (int j = 0; j < G::N; j++)
                        v[j] = v[j] * inv * (w[j] + add);
                } else {
                    for (int j = 0; j < G::N; j++)
                        v[j] = v[j] * inv;
                }
                G::template store<true>(orow, k, v);
            }
        }
    }
}

/*
 * The latency regime's kernel (gpu_launch.h, lean): norm_kernel_reg's
 * algorithm with what a decode row does not need taken out, because at a
 * few rows a block's time is the instructions its warps issue: one row per
 * block (grid = rows, no row loop), byte offsets in 32 bits (the launcher
 * checks that the rows fit), x, weight and residual of one dtype, the
 * residual and gemma's 1 + w decided at compile time, the weight loaded
 * with the row, a reduction with one barrier (block_sum_once), and a width
 * that is a power of two divided by multiplying with its exact reciprocal,
 * per_width, which the launcher computes (0 for another width; the same
 * rounding, no division's slow-path test, no conversion of the width on the
 * row's critical path). K = 1 or 2 groups per thread.
 */
template <int DT, int K, bool RESIDUAL, bool GEMMA>
__global__ void __launch_bounds__(1024)
    norm_kernel_row(struct fld__gpu_norm_args a, float per_width)
{
    typedef group<DT, true> G;
    constexpr uint32_t S = dtype_size<DT>::value;
    const uint32_t r = blockIdx.x, groups = (uint32_t)a.width / G::N;
    const char *xr = (const char *)a.x + r * ((uint32_t)a.x_stride * S);
    char *orow = (char *)a.out + r * ((uint32_t)a.out_stride * S);
    char *rr = RESIDUAL ? (char *)a.residual + r * ((uint32_t)a.residual_stride * S) : nullptr;
    /* Every load first, unconditionally and in one straight run: a thread
       past the row's end reads its last group again and uses nothing of it
       (a load under the bounds test is one that ptxas moves below the first
       use of the others). */
    typename G::raw xs[K], rs[K], ws[K];
    FLD_GPU_UNROLL
    for (int i = 0; i < K; i++) {
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        const uint32_t at = k < groups ? k : groups - 1;
        G::fetch(xr, at, xs[i]);
        if (RESIDUAL)
            G::fetch(rr, at, rs[i]);
        G::fetch(a.weight, at, ws[i]);
    }
    /* In bfloat16, whether every weight of the thread is finite: then no
       product below is a NaN (the rows that get there are finite, since
       their sum of squares is, their scale 1 / sqrt of a normal mean square
       is finite, and a product of finite floats is finite or an inf), and
       the outputs are packed without the NaN test, which is then off the
       path after the reduction: the weight's bits arrive with the row's. */
    bool weights_finite = false;
    if constexpr (DT == 2) {
        uint32_t words[4 * K];
        for (int i = 0; i < K; i++)
            G::words(ws[i], words + 4 * i);
        weights_finite = fld__gpu_bf16_words_finite<4 * K>(words);
        /* decided here, before the reduction (LLVM would sink the test
           next to its use, after the barrier and the square root) */
        fld__gpu_issued((uint32_t)weights_finite);
    }
    float v[K][G::N];
    square_sum squares;
    FLD_GPU_UNROLL
    for (int i = 0; i < K; i++) {
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        G::unpack(xs[i], v[i]);
        if (RESIDUAL) {
            /* the sum rounded once, to the bits stored, and read back (on
               CUDA, 16-bit: one packed add a pair, fld__gpu_add2, the
               same bits) */
            typename G::raw sum;
#if defined(FLD_GPU_TARGET_CUDA)
            if constexpr (DT != 0) {
                /* the residual's words tied to the weight's (a.gemma is
                   GEMMA: the launcher picks the kernel by it), so that ptxas
                   issues the weight's load with the row's, not after the
                   add that the packed words reach sooner */
                G::tie(rs[i], ws[i], (uint32_t)a.gemma ^ (uint32_t)GEMMA);
                uint32_t xw[4], rw[4];
                G::words(xs[i], xw);
                G::words(rs[i], rw);
                for (int j = 0; j < 4; j++)
                    xw[j] = fld__gpu_add2<DT>(xw[j], rw[j]);
                G::from_words(xw, sum);
            } else
#endif
            {
                float s[G::N];
                G::unpack(rs[i], s);
                for (int j = 0; j < G::N; j++)
                    v[i][j] += s[j];
                G::pack(v[i], sum);
            }
            if (k < groups)
                G::put(rr, k, sum);
            G::unpack(sum, v[i]);
        }
        for (int j = 0; j < G::N; j++)
            v[i][j] = k < groups ? v[i][j] : 0.0f; /* adds +0 to the sum */
        squares.add<G::N>(v[i]);
    }
    /* 16 slots for one 16-bit group a thread; two groups or float32 ones
       keep more registers live across the sum, and take 8 (block_sum_once) */
    constexpr int SLOTS = K == 1 && DT != 0 ? 16 : 8;
    const float ss = block_sum_once<SLOTS>(squares.total());
    const float ms = (per_width != 0.0f ? ss * per_width : ss / (float)a.width) + a.eps;
    if (!norm_sum_ok(ss, ms)) {
        norm_row_in_double<DT, DT, DT, true>(a, xr, orow, rr);
        return;
    }
    const float inv = fld__gpu_rsqrt_approx(ms);
    /* every group scaled, then rounded together (one NaN test, or none
       where the weights are finite; no branch between the groups' stores);
       a group past the row's end is computed from zeros and not stored */
    typename G::raw outs[K];
    FLD_GPU_UNROLL
    for (int i = 0; i < K; i++) {
        float w[G::N];
        G::unpack(ws[i], w);
        for (int j = 0; j < G::N; j++)
            v[i][j] = v[i][j] * inv * (GEMMA ? w[j] + 1.0f : w[j]);
    }
    if (weights_finite)
        G::template pack_groups<K, true>(&v[0][0], outs);
    else
        G::template pack_groups<K>(&v[0][0], outs);
    FLD_GPU_UNROLL
    for (int i = 0; i < K; i++) {
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        if (k < groups)
            G::put(orow, k, outs[i]);
    }
}

/* Whether the one-row kernel can take a's rows: a weight, one dtype for x,
   weight and residual, a block for every row within the launcher's grid
   (2^20 blocks), and every byte offset of the rows under 2^31. */
static inline bool norm_row_ok(const struct fld__gpu_norm_args *a)
{
    if (!a->weight || a->weight_dtype != a->dtype || (a->residual && a->residual_dtype != a->dtype))
        return false;
    const int64_t size = a->dtype == 0 ? 4 : 2, limit = (int64_t)1 << 31;
    if (a->rows > (1 << 20) || a->width * size >= limit)
        return false;
    const int64_t strides[3] = {a->x_stride, a->out_stride, a->residual ? a->residual_stride : 0};
    for (int64_t stride : strides)
        if (stride < 0 || stride > limit / size || (a->rows - 1) * stride * size + a->width * size >= limit)
            return false;
    return true;
}

template <int DT, int K>
static int launch_norm_row(const struct fld__gpu_norm_args *a, const dim3 &grid, const dim3 &block,
                           void *stream)
{
    /* 1 / width where the width is a power of two (exact), else 0: the
       kernel divides */
    const float per_width = (a->width & (a->width - 1)) == 0 ? 1.0f / (float)a->width : 0.0f;
    switch ((a->residual ? 2 : 0) + (a->gemma ? 1 : 0)) {
    case 0:
        return fld__gpu_launch(norm_kernel_row<DT, K, false, false>, grid, block, stream, *a,
                               per_width);
    case 1:
        return fld__gpu_launch(norm_kernel_row<DT, K, false, true>, grid, block, stream, *a,
                               per_width);
    case 2:
        return fld__gpu_launch(norm_kernel_row<DT, K, true, false>, grid, block, stream, *a,
                               per_width);
    default:
        return fld__gpu_launch(norm_kernel_row<DT, K, true, true>, grid, block, stream, *a,
                               per_width);
    }
}

/* norm_kernel_reg for a's residual (with one, or without) */
template <int DT, int WDT, int RDT, bool VEC, int K, bool EARLY_WEIGHT>
static int launch_norm_reg(const struct fld__gpu_norm_args *a, const dim3 &grid, const dim3 &block,
                           void *stream)
{
    if (a->residual)
        return fld__gpu_launch(norm_kernel_reg<DT, WDT, RDT, VEC, K, EARLY_WEIGHT, true>, grid,
                               block, stream, *a);
    return fld__gpu_launch(norm_kernel_reg<DT, WDT, DT, VEC, K, EARLY_WEIGHT, false>, grid, block,
                           stream, *a);
}

/* The kernel of shape s (gpu_launch.h): one pass with s.per_thread groups in
   registers (the weight loaded with the row where s.early_weight), or two
   passes (per_thread 0). */
template <int DT, int WDT, int RDT, bool VEC>
static int launch_norm(const struct fld__gpu_norm_args *a, const struct fld__gpu_shape &s,
                       void *stream)
{
    const dim3 grid((unsigned)(s.blocks < (1 << 20) ? s.blocks : (1 << 20))), block(s.threads);
    if (VEC && s.lean && norm_row_ok(a)) /* norm_shape_ok: blocks = rows, 1 or 2 groups */
        return s.per_thread == 1 ? launch_norm_row<DT, 1>(a, grid, block, stream)
                                 : launch_norm_row<DT, 2>(a, grid, block, stream);
    switch (s.per_thread * 2 + (s.early_weight ? 1 : 0)) {
    case 2:
        return launch_norm_reg<DT, WDT, RDT, VEC, 1, false>(a, grid, block, stream);
    case 3:
        return launch_norm_reg<DT, WDT, RDT, VEC, 1, true>(a, grid, block, stream);
    case 4:
        return launch_norm_reg<DT, WDT, RDT, VEC, 2, false>(a, grid, block, stream);
    case 5:
        return launch_norm_reg<DT, WDT, RDT, VEC, 2, true>(a, grid, block, stream);
    case 8:
        return launch_norm_reg<DT, WDT, RDT, VEC, 4, false>(a, grid, block, stream);
    default:
        return fld__gpu_launch(norm_kernel<DT, WDT, RDT, VEC>, grid, block, stream, *a);
    }
}

/* A 16-bit x's weight and residual: its own dtype (DT) or float32 (0). */
template <int DT, bool VEC>
static int launch_norm_mixed(const struct fld__gpu_norm_args *a, const struct fld__gpu_shape &s,
                             void *stream)
{
    const bool w32 = a->weight && a->weight_dtype == 0, r32 = a->residual && a->residual_dtype == 0;
    if (w32 && r32)
        return launch_norm<DT, 0, 0, VEC>(a, s, stream);
    if (w32)
        return launch_norm<DT, 0, DT, VEC>(a, s, stream);
    if (r32)
        return launch_norm<DT, DT, 0, VEC>(a, s, stream);
    return launch_norm<DT, DT, DT, VEC>(a, s, stream);
}

/* Groups per row of x: 16-byte groups (VEC) or elements. */
static inline int64_t norm_groups(const struct fld__gpu_norm_args *a, bool vec)
{
    return a->width / (vec ? (a->dtype == 0 ? 4 : 8) : 1);
}

/* Whether shape s is one the norm kernels can run for these arguments. */
static inline bool norm_shape_ok(const struct fld__gpu_norm_args *a, bool vec,
                                 const struct fld__gpu_shape &s)
{
    const int64_t groups = norm_groups(a, vec);
    if (s.threads < 64 || s.threads > 1024 || s.threads % 64 || s.blocks < 1)
        return false;
    if (s.per_thread == 0)
        return !s.early_weight;
    if (s.early_weight && s.per_thread > 2)
        return false;
    if (s.lean && (!s.early_weight || s.blocks != a->rows))
        return false;
    const unsigned bound = s.per_thread <= 2 ? 1024u : 512u;
    return (s.per_thread == 1 || s.per_thread == 2 || s.per_thread == 4) && s.threads <= bound &&
           groups <= (int64_t)s.threads * s.per_thread;
}

template <bool VEC>
static int launch_norm_dt(const struct fld__gpu_norm_args *a, const struct fld__gpu_shape &s,
                          void *stream)
{
    switch (a->dtype) {
    case 0:
        return launch_norm<0, 0, 0, VEC>(a, s, stream);
    case 1:
        return launch_norm_mixed<1, VEC>(a, s, stream);
    case 2:
        return launch_norm_mixed<2, VEC>(a, s, stream);
    default:
        return FLD_GPU_EINVAL;
    }
}

/* weight_dtype / residual_dtype: the dtype's own, or float32 (0) with a 16-bit dtype. */
static inline bool norm_operand_dtype_ok(int dtype, const void *p, int operand_dtype)
{
    return !p || operand_dtype == dtype || (operand_dtype == 0 && dtype != 0);
}

/*
 * The norm of a; shape: the launch to use (bench/gpu_sweep.cu times the
 * alternatives), or NULL for gpu_launch.h's choice for this device.
 */
static inline int run_norm_shaped(const struct fld__gpu_norm_args *a, int variant, void *stream,
                                  const struct fld__gpu_shape *shape)
{
    if (!a || a->dtype < 0 || a->dtype > 2 || a->rows < 0 || a->width < 0 ||
        !norm_operand_dtype_ok(a->dtype, a->weight, a->weight_dtype) ||
        !norm_operand_dtype_ok(a->dtype, a->residual, a->residual_dtype))
        return FLD_GPU_EINVAL;
    if (a->rows == 0 || a->width == 0)
        return 0;
    if (variant == FLD_GPU_VECTOR && !fld__gpu_norm_vector_ok(a))
        return FLD_GPU_EINVAL;
    if (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE)
        return FLD_GPU_EINVAL;
    const bool vec = variant == FLD_GPU_VECTOR;
    const struct fld__gpu_shape s =
        shape ? *shape
              : fld__gpu_norm_shape(a->rows, norm_groups(a, vec), fld__gpu_sm_count(), a->residual);
    if (!norm_shape_ok(a, vec, s))
        return FLD_GPU_EINVAL;
    return vec ? launch_norm_dt<true>(a, s, stream) : launch_norm_dt<false>(a, s, stream);
}

static inline int run_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    return run_norm_shaped(a, variant, stream, nullptr);
}

/* ------------------------------------------------------------------------ */
/* Rotary embedding                                                         */
/* ------------------------------------------------------------------------ */

FLD_GPU_DEV int64_t position_of(const struct fld__gpu_rotary_args &a, int64_t t)
{
    return a.positions_int32 ? (int64_t) static_cast<const int32_t *>(a.positions)[t]
                             : static_cast<const int64_t *>(a.positions)[t];
}

/*
 * The rotated pair (x c - y s, y c + x s). float32: as written (nvcc may fuse
 * a product into the sum, as in vLLM's CUDA kernel). 16-bit: each product
 * and the sum rounded to DT, as vLLM's forward_native computes on 16-bit
 * tensors; the stores round the sum. c and s are already rounded to DT.
 */
template <int DT> FLD_GPU_DEV float rot_x(float x, float y, float c, float s)
{
    if (DT == 0)
        return x * c - y * s;
    float p = x * c, q = y * s;
    fld__gpu_round_pair<DT>(p, q);
    return p - q;
}

template <int DT> FLD_GPU_DEV float rot_y(float x, float y, float c, float s)
{
    if (DT == 0)
        return y * c + x * s;
    float p = y * c, q = x * s;
    fld__gpu_round_pair<DT>(p, q);
    return p + q;
}

/*
 * Work units per head: pairs (one thread each), or in the vector family
 * 16-byte groups -- neox: N consecutive pairs, whose x and y halves are two
 * runs of N elements; gptj: N consecutive elements, N/2 adjacent pairs.
 */
FLD_GPU_DEV_HOST int64_t rotary_units(int64_t rot_dim, bool neox, int n)
{
    return n == 1 ? rot_dim / 2 : neox ? rot_dim / 2 / n : rot_dim / n;
}

/* Head h of token t: of the query (q) or the key, as read (in) or written. */
template <int DT>
FLD_GPU_DEV char *head_at(const struct fld__gpu_rotary_args &a, bool q, bool in, int64_t t,
                          uint32_t h)
{
    const bool out = !in && a.query_out;
    void *base = q ? (out ? a.query_out : a.query) : (out ? a.key_out : a.key);
    const int64_t ts = q ? (out ? a.qo_token_stride : a.q_token_stride)
                         : (out ? a.ko_token_stride : a.k_token_stride);
    const int64_t hs = q ? (out ? a.qo_head_stride : a.q_head_stride)
                         : (out ? a.ko_head_stride : a.k_head_stride);
    return row_at<DT>(base, t, ts) + (int64_t)h * hs * dtype_size<DT>::value;
}

/*
 * M consecutive cos (or sin) values of a cache row of dtype CDT from element
 * i on, rounded to DT. CVEC: the run is one or two 16-byte accesses, or one
 * 8-byte access (rotary_cache_vector_ok() checked the alignment); otherwise
 * M scalar loads.
 */
template <int DT, int CDT, int M, bool CVEC>
FLD_GPU_DEV void load_cos_sin_run(const char *crow, int64_t i, float *f)
{
    constexpr int BYTES = M * dtype_size<CDT>::value;
    if (CVEC && (BYTES == 16 || BYTES == 32)) {
        group<CDT, true>::load(crow, i * dtype_size<CDT>::value / 16, f);
        if (BYTES == 32)
            group<CDT, true>::load(crow, i * dtype_size<CDT>::value / 16 + 1,
                                   f + 16 / dtype_size<CDT>::value);
    } else if (CVEC && BYTES == 8) {
        const uint64_t u = fld__gpu_load8(crow + i * dtype_size<CDT>::value);
        if (CDT == 0) {
            f[0] = fld__gpu_float((uint32_t)u);
            f[1] = fld__gpu_float((uint32_t)(u >> 32));
        } else {
            for (int j = 0; j < 4 && j < M; j++)
                f[j] = widen<CDT>((uint32_t)(u >> (16 * j)) & 0xffffu);
        }
    } else {
        for (int j = 0; j < M; j++)
            f[j] = load_elem<CDT>(crow, i + j);
    }
    for (int j = 0; j < M; j++)
        f[j] = round_to<DT>(f[j]);
}

#if defined(FLD_GPU_TARGET_CUDA)
/* load_cos_sin_run's values as M / 2 words of the 16-bit DT's bits: a
   16- or 8-byte run of a cache of x's dtype as loaded, any other rounded
   two at a time (cvt.rn, the bits round_to gives) */
template <int DT, int CDT, int M, bool CVEC>
FLD_GPU_DEV void load_cos_sin_words(const char *crow, int64_t i, uint32_t *w)
{
    if constexpr (CDT == DT && CVEC && M * dtype_size<CDT>::value == 16) {
        group<CDT, true>::words(fld__gpu_load16(crow + i * dtype_size<CDT>::value), w);
    } else if constexpr (CDT == DT && CVEC && M * dtype_size<CDT>::value == 8) {
        const uint64_t u = fld__gpu_load8(crow + i * dtype_size<CDT>::value);
        w[0] = (uint32_t)u;
        w[1] = (uint32_t)(u >> 32);
    } else {
        float f[M];
        load_cos_sin_run<DT, CDT, M, CVEC>(crow, i, f);
        fld__gpu_pack_words<DT, M / 2>(f, w);
    }
}
#endif

/*
 * Tokens grid-stride over blockIdx.x; a token's units (query heads' first,
 * then the key's) over the threads of gridDim.y blocks (gpu_launch.h: one
 * block at many tokens, several at few). A thread issues the token's
 * position first and its head's elements while the position is in flight:
 * the cos/sin row, the one load that waits for another, then starts as
 * early as it can, and the elements' trip overlaps the position's. The
 * cos/sin row is read by every head (from L1). The index within a token
 * fits in 32 bits (at most 2^31 units per token), which keeps the division
 * by the units per head cheap. Out of place, the elements past rot_dim are
 * then copied, one thread each. CVEC: the cos/sin runs are read as vectors.
 */
template <int DT, int CDT, bool VEC, bool CVEC>
__global__ void __launch_bounds__(512) rotary_kernel(struct fld__gpu_rotary_args a)
{
    typedef group<DT, VEC> G;
    const int64_t half = a.rot_dim / 2;
    const uint32_t per_head = (uint32_t)rotary_units(a.rot_dim, a.is_neox, G::N);
    const uint32_t nq = (uint32_t)a.q_heads * per_head;
    const uint32_t nk = a.key ? (uint32_t)a.k_heads * per_head : 0u;
    const uint32_t tail = a.query_out ? (uint32_t)(a.head_size - a.rot_dim) : 0u;
    const uint32_t tq = (uint32_t)a.q_heads * tail;
    const uint32_t tk = a.key ? (uint32_t)a.k_heads * tail : 0u;
    const uint32_t first = blockIdx.y * blockDim.x + threadIdx.x, step = gridDim.y * blockDim.x;
    for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
        const int64_t pos = position_of(a, t);
        const bool pos_ok = pos >= 0 && pos < a.max_pos; /* else left unchanged: see gpu_api.h */
        for (uint32_t w = first; w < nq + nk; w += step) {
            const bool q = w < nq;
            const uint32_t u = q ? w : w - nq;
            const uint32_t h = u / per_head, k = u - h * per_head;
            const char *src = head_at<DT>(a, q, true, t, h);
            char *dst = head_at<DT>(a, q, false, t, h);
            if (VEC && a.is_neox) {
                /* pairs (i, i + half) for i in [k N, k N + N) */
                const int64_t yoff = half * dtype_size<DT>::value;
                typename G::raw xs, ys;
                G::fetch(src, k, xs);
                G::fetch(src + yoff, k, ys);
                if (!pos_ok)
                    continue;
#if defined(FLD_GPU_TARGET_CUDA)
                if constexpr (DT != 0 && VEC) {
                    /* 16-bit: the products and sums on the words, packed
                       (fld__gpu_rotate_pairs: rot_x's and rot_y's bits) */
                    const char *crow = static_cast<const char *>(a.cache) +
                                       pos * a.cache_stride * dtype_size<CDT>::value;
                    uint32_t xw[4], yw[4], cw[4], sw[4], ox[4], oy[4];
                    G::words(xs, xw);
                    G::words(ys, yw);
                    load_cos_sin_words<DT, CDT, G::N, CVEC>(crow, (int64_t)k * G::N, cw);
                    load_cos_sin_words<DT, CDT, G::N, CVEC>(crow, half + (int64_t)k * G::N, sw);
                    fld__gpu_rotate_pairs<DT, 4>(xw, yw, cw, sw, ox, oy);
                    G::put_words(dst, k, ox);
                    G::put_words(dst + yoff, k, oy);
                    continue;
                }
#endif
                float x[G::N], y[G::N], c[G::N], sn[G::N];
                G::unpack(xs, x);
                G::unpack(ys, y);
                const char *crow = static_cast<const char *>(a.cache) +
                                   pos * a.cache_stride * dtype_size<CDT>::value;
                load_cos_sin_run<DT, CDT, G::N, CVEC>(crow, (int64_t)k * G::N, c);
                load_cos_sin_run<DT, CDT, G::N, CVEC>(crow, half + (int64_t)k * G::N, sn);
                for (int j = 0; j < G::N; j++) {
                    const float xv = x[j], yv = y[j];
                    x[j] = rot_x<DT>(xv, yv, c[j], sn[j]);
                    y[j] = rot_y<DT>(xv, yv, c[j], sn[j]);
                }
                G::template store<true>(dst, k, x);
                G::template store<true>(dst + yoff, k, y);
            } else if (VEC) {
                /* pairs (2i, 2i + 1) for i in [k N/2, k N/2 + N/2) */
                constexpr int P = G::N / 2 > 0 ? G::N / 2 : 1;
                typename G::raw xs;
                G::fetch(src, k, xs);
                if (!pos_ok)
                    continue;
#if defined(FLD_GPU_TARGET_CUDA)
                if constexpr (DT != 0 && VEC) {
                    /* 16-bit: the pairs' x halves gathered into words and
                       their y halves into others (two byte permutes a pair
                       of words), rotated packed as neox's, and put back */
                    const char *crow = static_cast<const char *>(a.cache) +
                                       pos * a.cache_stride * dtype_size<CDT>::value;
                    uint32_t w[4], xw[2], yw[2], cw[2], sw[2], ox[2], oy[2];
                    G::words(xs, w);
                    for (int j = 0; j < 2; j++) {
                        xw[j] = __byte_perm(w[2 * j], w[2 * j + 1], 0x5410);
                        yw[j] = __byte_perm(w[2 * j], w[2 * j + 1], 0x7632);
                    }
                    load_cos_sin_words<DT, CDT, P, CVEC>(crow, (int64_t)k * P, cw);
                    load_cos_sin_words<DT, CDT, P, CVEC>(crow, half + (int64_t)k * P, sw);
                    fld__gpu_rotate_pairs<DT, 2>(xw, yw, cw, sw, ox, oy);
                    for (int j = 0; j < 2; j++) {
                        w[2 * j] = __byte_perm(ox[j], oy[j], 0x5410);
                        w[2 * j + 1] = __byte_perm(ox[j], oy[j], 0x7632);
                    }
                    G::put_words(dst, k, w);
                    continue;
                }
#endif
                float x[G::N], c[P], sn[P];
                G::unpack(xs, x);
                const char *crow = static_cast<const char *>(a.cache) +
                                   pos * a.cache_stride * dtype_size<CDT>::value;
                load_cos_sin_run<DT, CDT, P, CVEC>(crow, (int64_t)k * P, c);
                load_cos_sin_run<DT, CDT, P, CVEC>(crow, half + (int64_t)k * P, sn);
                for (int j = 0; j + 1 < G::N; j += 2) {
                    const float xv = x[j], yv = x[j + 1];
                    x[j] = rot_x<DT>(xv, yv, c[j / 2], sn[j / 2]);
                    x[j + 1] = rot_y<DT>(xv, yv, c[j / 2], sn[j / 2]);
                }
                G::template store<true>(dst, k, x);
            } else {
                const int64_t ix = a.is_neox ? k : 2 * (int64_t)k;
                const int64_t iy = a.is_neox ? k + half : 2 * (int64_t)k + 1;
                const float x = load_elem<DT>(src, ix), y = load_elem<DT>(src, iy);
                if (!pos_ok)
                    continue;
                const char *crow = static_cast<const char *>(a.cache) +
                                   pos * a.cache_stride * dtype_size<CDT>::value;
                const float c = round_to<DT>(load_elem<CDT>(crow, k)),
                            sn = round_to<DT>(load_elem<CDT>(crow, half + k));
                store_elem<DT>(dst, ix, rot_x<DT>(x, y, c, sn));
                store_elem<DT>(dst, iy, rot_y<DT>(x, y, c, sn));
            }
        }
        if (tq + tk == 0 || !pos_ok)
            continue; /* out of place, a bad position: the token's output heads are not written */
        for (uint32_t w = first; w < tq + tk; w += step) {
            const bool q = w < tq;
            const uint32_t u = q ? w : w - tq;
            const uint32_t h = u / tail, i = u - h * tail;
            /* Raw element copy: the bits of the input, whatever the dtype. */
            const int64_t e = a.rot_dim + i;
            const char *src = head_at<DT>(a, q, true, t, h);
            char *dst = head_at<DT>(a, q, false, t, h);
            if (DT == 0)
                reinterpret_cast<uint32_t *>(dst)[e] = reinterpret_cast<const uint32_t *>(src)[e];
            else
                reinterpret_cast<uint16_t *>(dst)[e] = reinterpret_cast<const uint16_t *>(src)[e];
        }
    }
}

static inline bool aligned16(const void *p, int64_t elems, int size)
{
    return (uintptr_t)p % 16 == 0 && (elems * size) % 16 == 0;
}

/*
 * Whether the vector kernel may run: every head's rotated run starts on a
 * 16-byte boundary and splits into whole groups (neox: each half does), in
 * the inputs and, out of place, in the outputs.
 */
static inline bool rotary_vector_ok(const struct fld__gpu_rotary_args *a)
{
    const int size = a->dtype == 0 ? 4 : 2;
    const int64_t run = a->is_neox ? a->rot_dim / 2 : a->rot_dim;
    bool ok = aligned16(a->query, run, size) && aligned16(nullptr, a->q_token_stride, size) &&
              aligned16(nullptr, a->q_head_stride, size);
    if (a->key)
        ok = ok && aligned16(a->key, run, size) && aligned16(nullptr, a->k_token_stride, size) &&
             aligned16(nullptr, a->k_head_stride, size);
    if (a->query_out)
        ok = ok && aligned16(a->query_out, run, size) &&
             aligned16(nullptr, a->qo_token_stride, size) &&
             aligned16(nullptr, a->qo_head_stride, size);
    if (a->key_out)
        ok = ok && aligned16(a->key_out, run, size) &&
             aligned16(nullptr, a->ko_token_stride, size) &&
             aligned16(nullptr, a->ko_head_stride, size);
    return ok;
}

/*
 * Whether the cos/sin runs of the vector kernel may be read as vectors: the
 * cache, its row stride and the offset of the sin half keep the alignment
 * of the widest access (16 bytes, or 8 for gptj's runs of 8 bytes).
 */
static inline bool rotary_cache_vector_ok(const struct fld__gpu_rotary_args *a)
{
    const int64_t size = a->cache_dtype == 0 ? 4 : 2;
    const int64_t n = a->dtype == 0 ? 4 : 8; /* x's elements per 16 bytes */
    const int64_t run = (a->is_neox ? n : n / 2) * size; /* bytes of one cos run */
    const int64_t align = run >= 16 ? 16 : run;
    if (align != 8 && align != 16)
        return false;
    return (uintptr_t)a->cache % (uintptr_t)align == 0 && (a->cache_stride * size) % align == 0 &&
           (a->rot_dim / 2 * size) % align == 0;
}

/* Units of one token (query and key heads' (head, group) units), vec or not. */
static inline int64_t rotary_token_units(const struct fld__gpu_rotary_args *a, bool vec)
{
    const int64_t per_head = rotary_units(a->rot_dim, a->is_neox, vec ? (a->dtype == 0 ? 4 : 8) : 1);
    return (a->q_heads + (a->key ? a->k_heads : 0)) * per_head;
}

template <int DT, int CDT>
static int launch_rotary(const struct fld__gpu_rotary_args *a, bool vec, bool cvec,
                         const struct fld__gpu_shape &s, void *stream)
{
    const dim3 block(s.threads);
    const dim3 grid((unsigned)(s.blocks < (1 << 20) ? s.blocks : (1 << 20)),
                    (unsigned)(s.blocks_y < 65535 ? s.blocks_y : 65535));
    if (vec && cvec)
        return fld__gpu_launch(rotary_kernel<DT, CDT, true, true>, grid, block, stream, *a);
    if (vec)
        return fld__gpu_launch(rotary_kernel<DT, CDT, true, false>, grid, block, stream, *a);
    return fld__gpu_launch(rotary_kernel<DT, CDT, false, false>, grid, block, stream, *a);
}

/* Rotary of a; shape: the launch to use, or NULL for gpu_launch.h's. */
static inline int run_rotary_shaped(const struct fld__gpu_rotary_args *a, int variant,
                                    void *stream, const struct fld__gpu_shape *shape)
{
    if (!a || a->dtype < 0 || a->dtype > 2 || (a->cache_dtype != 0 && a->cache_dtype != a->dtype) ||
        a->tokens < 0 || a->rot_dim < 0 || a->rot_dim % 2 || a->q_heads < 0 ||
        (a->key && a->k_heads < 0) || (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE) ||
        (a->query_out && (a->rot_dim > a->head_size || (!a->key != !a->key_out))) ||
        (!a->query_out && a->key_out))
        return FLD_GPU_EINVAL;
    const int64_t heads = a->q_heads + (a->key ? a->k_heads : 0);
    if (a->tokens == 0 || heads == 0 || (a->rot_dim == 0 && !a->query_out))
        return 0;
    const bool vec = variant == FLD_GPU_VECTOR && rotary_vector_ok(a);
    const bool cvec = vec && rotary_cache_vector_ok(a);
    const int64_t work = rotary_token_units(a, vec);
    const int64_t tail = a->query_out ? heads * (a->head_size - a->rot_dim) : 0;
    if (work > INT32_MAX || tail > INT32_MAX)
        return FLD_GPU_EINVAL;
    const struct fld__gpu_shape s =
        shape ? *shape
              : fld__gpu_rotary_shape(a->tokens, work > tail ? work : tail, fld__gpu_sm_count());
    if (s.threads < 1 || s.threads > 512 || s.blocks < 1 || s.blocks_y < 1)
        return FLD_GPU_EINVAL;
    switch (a->dtype * 3 + a->cache_dtype) {
    case 0: /* f32, f32 cache */
        return launch_rotary<0, 0>(a, vec, cvec, s, stream);
    case 3: /* f16, f32 cache */
        return launch_rotary<1, 0>(a, vec, cvec, s, stream);
    case 4:
        return launch_rotary<1, 1>(a, vec, cvec, s, stream);
    case 6: /* bf16, f32 cache */
        return launch_rotary<2, 0>(a, vec, cvec, s, stream);
    default:
        return launch_rotary<2, 2>(a, vec, cvec, s, stream);
    }
}

static inline int run_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    return run_rotary_shaped(a, variant, stream, nullptr);
}

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_KERNELS_CUH */
