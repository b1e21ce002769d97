/*
 * The GPU kernels of the cuda and rocm plugins, one source for nvcc, hipcc
 * and the host emulator (gpu_compat.cuh), and the launchers that fill the
 * act/norm/rotary entries of struct fld_gpu_api (gpu_api.h).
 *
 * Semantics are those of the library's reference.c (core/reference_*.c):
 * float32 math, one rounding per stored value, the fused residual rounded
 * before it is normalised, gemma's (1 + w) in float32, rotary pairs rotated
 * in float32 with cos/sin from the cache's dtype. Two families:
 *
 *   FLD_GPU_VECTOR     128-bit loads and stores (4 x f32 or 8 x f16/bf16 per
 *                      access); the caller checks fld_gpu_*_vector_ok().
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
 * These kernels have been compiled for sm_80/sm_90 and gfx90a/gfx908/gfx1030
 * but only ever run under the emulator (tests/gpu): no GPU was available.
 */
#ifndef FLD_PLUGINS_GPU_KERNELS_CUH
#define FLD_PLUGINS_GPU_KERNELS_CUH

#include "gpu_api.h"
#include "gpu_compat.cuh"

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
    return DT == 1 ? fld_gpu_f16_to_f32(h) : fld_gpu_bf16_to_f32(h);
}

template <int DT> FLD_GPU_DEV uint16_t narrow(float v)
{
    return DT == 1 ? fld_gpu_f32_to_f16(v) : fld_gpu_f32_to_bf16(v);
}

template <int DT> FLD_GPU_DEV float widen(uint32_t h)
{
    return DT == 1 ? fld_gpu_f16_to_f32((uint16_t)h) : fld_gpu_bf16_to_f32((uint16_t)h);
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

/*
 * Access to a row by groups of N elements: group k holds elements
 * [k N, k N + N). VEC: one 16-byte access per group (the row and k N
 * 16-byte aligned); otherwise N = 1, one scalar access.
 */
template <int DT, bool VEC> struct group {
    static constexpr int N = VEC ? 16 / dtype_size<DT>::value : 1;

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        if (!VEC) {
            f[0] = load_elem<DT>(row, k);
            return;
        }
        const fld_gpu_vec16 v = fld_gpu_load16(static_cast<const char *>(row) + k * 16);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        if (DT == 0) {
            for (int j = 0; j < N && j < 4; j++)
                f[j] = fld_gpu_float(w[j]);
        } else {
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++) {
                f[2 * j] = widen<DT>(w[j] & 0xffffu);
                f[2 * j + 1] = widen<DT>(w[j] >> 16);
            }
        }
    }

    static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        if (!VEC) {
            store_elem<DT>(row, k, f[0]);
            return;
        }
        uint32_t w[4];
        if (DT == 0) {
            for (int j = 0; j < N && j < 4; j++)
                w[j] = fld_gpu_bits(f[j]);
        } else {
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++)
                w[j] = (uint32_t)narrow<DT>(f[2 * j]) | ((uint32_t)narrow<DT>(f[2 * j + 1]) << 16);
        }
        fld_gpu_vec16 v;
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
        fld_gpu_store16(static_cast<char *>(row) + k * 16, v);
    }
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

/* The tail-accurate forms of core/reference_activation.c. */
FLD_GPU_DEV float silu(float a)
{
    return a / (1.0f + expf(-a));
}

FLD_GPU_DEV float gelu_erf(float a)
{
    return 0.5f * a * erfcf(-a * 0.70710678118654752f);
}

FLD_GPU_DEV float gelu_tanh(float a)
{
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    const float u = k * (a + 0.044715f * a * a * a);
    return a / (1.0f + expf(-2.0f * u));
}

template <int OP> FLD_GPU_DEV float gated(float a, float b)
{
    switch (OP) {
    case FLD_GPU_SILU_AND_MUL:
        return silu(a) * b;
    case FLD_GPU_MUL_AND_SILU:
        return a * silu(b);
    case FLD_GPU_GELU_AND_MUL:
        return gelu_erf(a) * b;
    default:
        return gelu_tanh(a) * b;
    }
}

/* blockIdx.y strides over rows, (blockIdx.x, threadIdx.x) over the row's groups. */
template <int DT, bool VEC, int OP>
__global__ void __launch_bounds__(256) act_kernel(struct fld_gpu_act_args a)
{
    typedef group<DT, VEC> G;
    const int64_t groups = a.d / G::N;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const char *xr = row_at<DT>(a.x, r, a.x_stride);
        const char *yr = xr + a.d * dtype_size<DT>::value;
        char *orow = row_at<DT>(a.out, r, a.out_stride);
        for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < groups; k += step) {
            float x[G::N], y[G::N];
            G::load(xr, k, x);
            G::load(yr, k, y);
            for (int j = 0; j < G::N; j++)
                x[j] = gated<OP>(x[j], y[j]);
            G::store(orow, k, x);
        }
    }
}

static inline unsigned blocks_for(int64_t work, unsigned threads, int64_t cap)
{
    int64_t b = (work + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

template <int DT, bool VEC> static int launch_act(const struct fld_gpu_act_args *a, void *stream)
{
    const int64_t groups = a->d / group<DT, VEC>::N;
    const unsigned threads = 256;
    /* Enough blocks to fill every SM several times over (grid-stride beyond). */
    const dim3 grid(blocks_for(groups, threads, 1 << 16),
                    (unsigned)(a->rows < 65535 ? a->rows : 65535));
    switch (a->op) {
    case FLD_GPU_SILU_AND_MUL:
        return fld_gpu_launch(act_kernel<DT, VEC, FLD_GPU_SILU_AND_MUL>, grid, dim3(threads),
                              stream, *a);
    case FLD_GPU_MUL_AND_SILU:
        return fld_gpu_launch(act_kernel<DT, VEC, FLD_GPU_MUL_AND_SILU>, grid, dim3(threads),
                              stream, *a);
    case FLD_GPU_GELU_AND_MUL:
        return fld_gpu_launch(act_kernel<DT, VEC, FLD_GPU_GELU_AND_MUL>, grid, dim3(threads),
                              stream, *a);
    case FLD_GPU_GELU_TANH_AND_MUL:
        return fld_gpu_launch(act_kernel<DT, VEC, FLD_GPU_GELU_TANH_AND_MUL>, grid, dim3(threads),
                              stream, *a);
    default:
        return FLD_GPU_EINVAL;
    }
}

template <bool VEC> static int launch_act_dt(const struct fld_gpu_act_args *a, void *stream)
{
    switch (a->dtype) {
    case 0:
        return launch_act<0, VEC>(a, stream);
    case 1:
        return launch_act<1, VEC>(a, stream);
    case 2:
        return launch_act<2, VEC>(a, stream);
    default:
        return FLD_GPU_EINVAL;
    }
}

static inline int run_act(const struct fld_gpu_act_args *a, int variant, void *stream)
{
    if (!a || a->dtype < 0 || a->dtype > 2 || a->rows < 0 || a->d < 0)
        return FLD_GPU_EINVAL;
    if (a->rows == 0 || a->d == 0)
        return 0;
    if (variant == FLD_GPU_VECTOR) {
        if (!fld_gpu_act_vector_ok(a))
            return FLD_GPU_EINVAL;
        return launch_act_dt<true>(a, stream);
    }
    return variant == FLD_GPU_REFERENCE ? launch_act_dt<false>(a, stream) : FLD_GPU_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* RMS norm                                                                 */
/* ------------------------------------------------------------------------ */

/* Slots for the per-warp partials: 1024 threads / 32 lanes. */
#define FLD_GPU_MAX_WARPS 32

/*
 * Sum of v over the block; every thread gets the same value. All threads of
 * the block call it; blockDim.x is a multiple of the warp size.
 */
FLD_GPU_DEV float block_sum(float v)
{
    __shared__ float partial[FLD_GPU_MAX_WARPS];
    const int lanes = FLD_GPU_WARP_SIZE;
    const int lane = (int)threadIdx.x % lanes, warp = (int)threadIdx.x / lanes;
    const int warps = (int)blockDim.x / lanes;
    v = fld_gpu_warp_sum(v);
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    /* Every warp sums the partials in the same order: one value block-wide. */
    v = fld_gpu_warp_sum(lane < warps ? partial[lane] : 0.0f);
    __syncthreads(); /* partial is reused by the block's next row */
    return v;
}

/*
 * One block per row (grid-stride). Pass 1: residual = round(x + residual)
 * written back, sum of squares of the rounded values (or of x). Pass 2: the
 * row being normalised is re-read -- the residual this thread just wrote, or
 * x -- and out = v * inv * scale. out may alias x: all of x is read in pass
 * 1, before the block barrier of the reduction, when there is a residual;
 * without one, each element is read and written by the same thread.
 */
template <int DT, bool VEC>
__global__ void __launch_bounds__(1024) norm_kernel(struct fld_gpu_norm_args a)
{
    typedef group<DT, VEC> G;
    const int64_t groups = a.width / G::N;
    for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const char *xr = row_at<DT>(a.x, r, a.x_stride);
        char *orow = row_at<DT>(a.out, r, a.out_stride);
        char *rr = a.residual ? row_at<DT>(a.residual, r, a.residual_stride) : nullptr;
        float ss = 0.0f;
        for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
            float v[G::N];
            G::load(xr, k, v);
            if (rr) {
                float s[G::N];
                G::load(rr, k, s);
                for (int j = 0; j < G::N; j++)
                    v[j] = round_to<DT>(v[j] + s[j]);
                G::store(rr, k, v);
            }
            for (int j = 0; j < G::N; j++)
                ss += v[j] * v[j];
        }
        ss = block_sum(ss);
        const float inv = 1.0f / sqrtf(ss / (float)a.width + a.eps);
        const char *src = rr ? rr : xr;
        const float add = a.gemma ? 1.0f : 0.0f;
        for (int64_t k = threadIdx.x; k < groups; k += blockDim.x) {
            float v[G::N], w[G::N];
            G::load(src, k, v);
            if (a.weight) {
                G::load(a.weight, k, w);
                for (int j = 0; j < G::N; j++)
                    v[j] = v[j] * inv * (w[j] + add);
            } else {
                for (int j = 0; j < G::N; j++)
                    v[j] = v[j] * inv;
            }
            G::store(orow, k, v);
        }
    }
}

/* Multiple of 64 threads: a whole number of warps on every target. */
static inline unsigned norm_threads(int64_t groups, int64_t rows)
{
    /* Few rows: wide blocks so one row's reduction is spread far; many rows:
       256-thread blocks, several per SM, so loads of other rows hide the
       reduction's barriers. */
    const int64_t cap = rows < 256 ? 1024 : 256;
    int64_t t = (groups + 63) / 64 * 64;
    return (unsigned)(t < 64 ? 64 : t > cap ? cap : t);
}

template <bool VEC> static int launch_norm_dt(const struct fld_gpu_norm_args *a, void *stream)
{
    const int n = a->dtype == 0 ? (VEC ? 4 : 1) : (VEC ? 8 : 1);
    const dim3 grid((unsigned)(a->rows < (1 << 20) ? a->rows : (1 << 20)));
    const dim3 block(norm_threads(a->width / n, a->rows));
    switch (a->dtype) {
    case 0:
        return fld_gpu_launch(norm_kernel<0, VEC>, grid, block, stream, *a);
    case 1:
        return fld_gpu_launch(norm_kernel<1, VEC>, grid, block, stream, *a);
    case 2:
        return fld_gpu_launch(norm_kernel<2, VEC>, grid, block, stream, *a);
    default:
        return FLD_GPU_EINVAL;
    }
}

static inline int run_norm(const struct fld_gpu_norm_args *a, int variant, void *stream)
{
    if (!a || a->dtype < 0 || a->dtype > 2 || a->rows < 0 || a->width < 0)
        return FLD_GPU_EINVAL;
    if (a->rows == 0 || a->width == 0)
        return 0;
    if (variant == FLD_GPU_VECTOR) {
        if (!fld_gpu_norm_vector_ok(a))
            return FLD_GPU_EINVAL;
        return launch_norm_dt<true>(a, stream);
    }
    return variant == FLD_GPU_REFERENCE ? launch_norm_dt<false>(a, stream) : FLD_GPU_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* Rotary embedding                                                         */
/* ------------------------------------------------------------------------ */

FLD_GPU_DEV int64_t position_of(const struct fld_gpu_rotary_args &a, int64_t t)
{
    return a.positions_int32 ? (int64_t) static_cast<const int32_t *>(a.positions)[t]
                             : static_cast<const int64_t *>(a.positions)[t];
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

/*
 * One block per token (grid-stride); its threads take the units of the
 * query's heads, then of the key's. The cos/sin row of the token's position
 * is read by every head (from L1). The index within a token fits in 32 bits
 * (at most 2^31 units per token), which keeps the division by the units per
 * head cheap.
 */
template <int DT, int CDT, bool VEC>
__global__ void __launch_bounds__(512) rotary_kernel(struct fld_gpu_rotary_args a)
{
    typedef group<DT, VEC> G;
    const int64_t half = a.rot_dim / 2;
    const uint32_t per_head = (uint32_t)rotary_units(a.rot_dim, a.is_neox, G::N);
    const uint32_t nq = (uint32_t)a.q_heads * per_head;
    const uint32_t nk = a.key ? (uint32_t)a.k_heads * per_head : 0u;
    for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
        const int64_t pos = position_of(a, t);
        if (pos < 0 || pos >= a.max_pos)
            continue; /* left unchanged: see gpu_api.h */
        const char *crow =
            static_cast<const char *>(a.cache) + pos * a.cache_stride * dtype_size<CDT>::value;
        for (uint32_t w = threadIdx.x; w < nq + nk; w += blockDim.x) {
            const bool q = w < nq;
            const uint32_t u = q ? w : w - nq;
            const uint32_t h = u / per_head, k = u - h * per_head;
            char *head = q ? row_at<DT>(a.query, t, a.q_token_stride) +
                                 (int64_t)h * a.q_head_stride * dtype_size<DT>::value
                           : row_at<DT>(a.key, t, a.k_token_stride) +
                                 (int64_t)h * a.k_head_stride * dtype_size<DT>::value;
            if (VEC && a.is_neox) {
                /* pairs (i, i + half) for i in [k N, k N + N) */
                float x[G::N], y[G::N];
                char *yrow = head + half * dtype_size<DT>::value;
                G::load(head, k, x);
                G::load(yrow, k, y);
                for (int j = 0; j < G::N; j++) {
                    const int64_t i = (int64_t)k * G::N + j;
                    const float c = load_elem<CDT>(crow, i), s = load_elem<CDT>(crow, half + i);
                    const float xv = x[j], yv = y[j];
                    x[j] = xv * c - yv * s;
                    y[j] = yv * c + xv * s;
                }
                G::store(head, k, x);
                G::store(yrow, k, y);
            } else if (VEC) {
                /* pairs (2i, 2i + 1) for i in [k N/2, k N/2 + N/2) */
                float x[G::N];
                G::load(head, k, x);
                for (int j = 0; j + 1 < G::N; j += 2) {
                    const int64_t i = ((int64_t)k * G::N + j) / 2;
                    const float c = load_elem<CDT>(crow, i), s = load_elem<CDT>(crow, half + i);
                    const float xv = x[j], yv = x[j + 1];
                    x[j] = xv * c - yv * s;
                    x[j + 1] = yv * c + xv * s;
                }
                G::store(head, k, x);
            } else {
                const float c = load_elem<CDT>(crow, k), s = load_elem<CDT>(crow, half + k);
                const int64_t ix = a.is_neox ? k : 2 * (int64_t)k;
                const int64_t iy = a.is_neox ? k + half : 2 * (int64_t)k + 1;
                const float x = load_elem<DT>(head, ix), y = load_elem<DT>(head, iy);
                store_elem<DT>(head, ix, x * c - y * s);
                store_elem<DT>(head, iy, y * c + x * s);
            }
        }
    }
}

static inline bool aligned16(const void *p, int64_t elems, int size)
{
    return (uintptr_t)p % 16 == 0 && (elems * size) % 16 == 0;
}

/*
 * Whether the vector kernel may run: every head's rotated run starts on a
 * 16-byte boundary and splits into whole groups (neox: each half does).
 */
static inline bool rotary_vector_ok(const struct fld_gpu_rotary_args *a)
{
    const int size = a->dtype == 0 ? 4 : 2;
    const int64_t run = a->is_neox ? a->rot_dim / 2 : a->rot_dim;
    bool ok = aligned16(a->query, run, size) && aligned16(nullptr, a->q_token_stride, size) &&
              aligned16(nullptr, a->q_head_stride, size);
    if (a->key)
        ok = ok && aligned16(a->key, run, size) && aligned16(nullptr, a->k_token_stride, size) &&
             aligned16(nullptr, a->k_head_stride, size);
    return ok;
}

template <int DT, int CDT>
static int launch_rotary(const struct fld_gpu_rotary_args *a, bool vec, void *stream)
{
    const int64_t per_head =
        rotary_units(a->rot_dim, a->is_neox, vec ? 16 / dtype_size<DT>::value : 1);
    const int64_t work = (a->q_heads + (a->key ? a->k_heads : 0)) * per_head;
    if (work > INT32_MAX)
        return FLD_GPU_EINVAL;
    int64_t t = (work + 63) / 64 * 64;
    const dim3 block((unsigned)(t < 64 ? 64 : t > 512 ? 512 : t));
    const dim3 grid((unsigned)(a->tokens < (1 << 20) ? a->tokens : (1 << 20)));
    if (vec)
        return fld_gpu_launch(rotary_kernel<DT, CDT, true>, grid, block, stream, *a);
    return fld_gpu_launch(rotary_kernel<DT, CDT, false>, grid, block, stream, *a);
}

static inline int run_rotary(const struct fld_gpu_rotary_args *a, int variant, void *stream)
{
    if (!a || a->dtype < 0 || a->dtype > 2 || (a->cache_dtype != 0 && a->cache_dtype != a->dtype) ||
        a->tokens < 0 || a->rot_dim < 0 || a->rot_dim % 2 || a->q_heads < 0 ||
        (a->key && a->k_heads < 0) || (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE))
        return FLD_GPU_EINVAL;
    const int64_t heads = a->q_heads + (a->key ? a->k_heads : 0);
    if (a->tokens == 0 || a->rot_dim == 0 || heads == 0)
        return 0;
    const bool vec = variant == FLD_GPU_VECTOR && rotary_vector_ok(a);
    switch (a->dtype * 3 + a->cache_dtype) {
    case 0: /* f32, f32 cache */
        return launch_rotary<0, 0>(a, vec, stream);
    case 3: /* f16, f32 cache */
        return launch_rotary<1, 0>(a, vec, stream);
    case 4:
        return launch_rotary<1, 1>(a, vec, stream);
    case 6: /* bf16, f32 cache */
        return launch_rotary<2, 0>(a, vec, stream);
    default:
        return launch_rotary<2, 2>(a, vec, stream);
    }
}

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_KERNELS_CUH */
