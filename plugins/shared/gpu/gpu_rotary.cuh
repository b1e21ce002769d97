/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rotary embedding kernels (gpu_kernels.cuh): neox and gptj, in place
 * or out of place, one thread per (head, pair) or per (head, 16-byte group
 * of pairs), and run_rotary, which fills struct fld__gpu_api's rotary entry.
 */
#ifndef FLD_PLUGINS_GPU_ROTARY_CUH
#define FLD_PLUGINS_GPU_ROTARY_CUH

#include "gpu_access.cuh"
#include "gpu_api.h"
#include "gpu_launch.h"

namespace fld_gpu
{

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
    if (DT == FLD_GPU_F32)
        return x * c - y * s;
    float p = x * c, q = y * s;
    fld__gpu_round_pair<DT>(p, q);
    return p - q;
}

template <int DT> FLD_GPU_DEV float rot_y(float x, float y, float c, float s)
{
    if (DT == FLD_GPU_F32)
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

/* Head h of token t: of the query (q) or the key, as read (in) or written
   (to the outputs where OUT: the kernel made for rotary_embedding_out). */
template <int DT, bool OUT>
FLD_GPU_DEV char *head_at(const struct fld__gpu_rotary_args &a, bool q, bool in, int64_t t,
                          uint32_t h)
{
    const bool out = OUT && !in;
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
        if (CDT == FLD_GPU_F32) {
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
 * by the units per head cheap. CVEC: the cos/sin runs are read as vectors.
 * OUT: out of place (rotary_embedding_out), the elements past rot_dim then
 * copied, one thread each. The in-place kernel is made without the
 * outputs' pointers, strides and copy loop: with them, chosen at run time,
 * the 16-bit vector kernel kept 62 registers a thread where it keeps 36
 * (sm_90), and so half the warps an SM can hold at prefill.
 */
template <int DT, int CDT, bool VEC, bool CVEC, bool OUT>
__global__ void __launch_bounds__(512) rotary_kernel(struct fld__gpu_rotary_args a)
{
    typedef group<DT, VEC> G;
    const int64_t half = a.rot_dim / 2;
    const uint32_t per_head = (uint32_t)rotary_units(a.rot_dim, a.is_neox, G::N);
    const uint32_t nq = (uint32_t)a.q_heads * per_head;
    const uint32_t nk = a.key ? (uint32_t)a.k_heads * per_head : 0u;
    const uint32_t tail = OUT ? (uint32_t)(a.head_size - a.rot_dim) : 0u;
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
            const char *src = head_at<DT, OUT>(a, q, true, t, h);
            char *dst = head_at<DT, OUT>(a, q, false, t, h);
            if (VEC && a.is_neox) {
                /* pairs (i, i + half) for i in [k N, k N + N) */
                const int64_t yoff = half * dtype_size<DT>::value;
                typename G::raw xs, ys;
                G::fetch(src, k, xs);
                G::fetch(src + yoff, k, ys);
                if (!pos_ok)
                    continue;
#if defined(FLD_GPU_TARGET_CUDA)
                if constexpr (DT != FLD_GPU_F32 && VEC) {
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
                if constexpr (DT != FLD_GPU_F32 && VEC) {
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
        if constexpr (OUT) {
            /* nothing past rot_dim, or a bad position (the token's output heads are
               then not written) */
            if (tq + tk == 0 || !pos_ok)
                continue;
            for (uint32_t w = first; w < tq + tk; w += step) {
                const bool q = w < tq;
                const uint32_t u = q ? w : w - tq;
                const uint32_t h = u / tail, i = u - h * tail;
                /* Raw element copy: the bits of the input, whatever the dtype. */
                const int64_t e = a.rot_dim + i;
                const char *src = head_at<DT, OUT>(a, q, true, t, h);
                char *dst = head_at<DT, OUT>(a, q, false, t, h);
                if (DT == FLD_GPU_F32)
                    reinterpret_cast<uint32_t *>(dst)[e] =
                        reinterpret_cast<const uint32_t *>(src)[e];
                else
                    reinterpret_cast<uint16_t *>(dst)[e] =
                        reinterpret_cast<const uint16_t *>(src)[e];
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
 * 16-byte boundary and splits into whole groups (neox: each half does), in
 * the inputs and, out of place, in the outputs.
 */
static inline bool rotary_vector_ok(const struct fld__gpu_rotary_args *a)
{
    const int size = (int)fld__gpu_elem_size(a->dtype);
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
    const int64_t size = (int64_t)fld__gpu_elem_size(a->cache_dtype);
    const int64_t n = fld__gpu_group_size(a->dtype);     /* x's elements per 16 bytes */
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
    const int64_t per_head =
        rotary_units(a->rot_dim, a->is_neox, vec ? fld__gpu_group_size(a->dtype) : 1);
    return (a->q_heads + (a->key ? a->k_heads : 0)) * per_head;
}

template <int DT, int CDT, bool OUT>
static int launch_rotary_kernel(const struct fld__gpu_rotary_args *a, bool vec, bool cvec,
                                const dim3 &grid, const dim3 &block, void *stream)
{
    if (vec && cvec)
        return fld__gpu_launch(rotary_kernel<DT, CDT, true, true, OUT>, grid, block, stream, *a);
    if (vec)
        return fld__gpu_launch(rotary_kernel<DT, CDT, true, false, OUT>, grid, block, stream, *a);
    return fld__gpu_launch(rotary_kernel<DT, CDT, false, false, OUT>, grid, block, stream, *a);
}

template <int DT, int CDT>
static int launch_rotary(const struct fld__gpu_rotary_args *a, bool vec, bool cvec,
                         const struct fld__gpu_shape &s, void *stream)
{
    const dim3 block(s.threads);
    const dim3 grid((unsigned)(s.blocks < (1 << 20) ? s.blocks : (1 << 20)),
                    (unsigned)(s.blocks_y < 65535 ? s.blocks_y : 65535));
    if (a->query_out)
        return launch_rotary_kernel<DT, CDT, true>(a, vec, cvec, grid, block, stream);
    return launch_rotary_kernel<DT, CDT, false>(a, vec, cvec, grid, block, stream);
}

/* One case label for x's dtype and the cache's. */
static constexpr int dtype_pair(int x, int cache)
{
    return x * FLD_GPU_DTYPES + cache;
}

/* Rotary of a; shape: the launch to use, or NULL for gpu_launch.h's. */
static inline int run_rotary_shaped(const struct fld__gpu_rotary_args *a, int variant,
                                    void *stream, const struct fld__gpu_shape *shape)
{
    if (!a || a->dtype < 0 || a->dtype >= FLD_GPU_DTYPES ||
        (a->cache_dtype != FLD_GPU_F32 && a->cache_dtype != a->dtype) || a->tokens < 0 ||
        a->rot_dim < 0 || a->rot_dim % 2 || a->q_heads < 0 || (a->key && a->k_heads < 0) ||
        (variant != FLD_GPU_VECTOR && variant != FLD_GPU_REFERENCE) ||
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
    switch (dtype_pair(a->dtype, a->cache_dtype)) { /* the cache: float32 or x's dtype */
    case dtype_pair(FLD_GPU_F32, FLD_GPU_F32):
        return launch_rotary<FLD_GPU_F32, FLD_GPU_F32>(a, vec, cvec, s, stream);
    case dtype_pair(FLD_GPU_F16, FLD_GPU_F32):
        return launch_rotary<FLD_GPU_F16, FLD_GPU_F32>(a, vec, cvec, s, stream);
    case dtype_pair(FLD_GPU_F16, FLD_GPU_F16):
        return launch_rotary<FLD_GPU_F16, FLD_GPU_F16>(a, vec, cvec, s, stream);
    case dtype_pair(FLD_GPU_BF16, FLD_GPU_F32):
        return launch_rotary<FLD_GPU_BF16, FLD_GPU_F32>(a, vec, cvec, s, stream);
    default:
        return launch_rotary<FLD_GPU_BF16, FLD_GPU_BF16>(a, vec, cvec, s, stream);
    }
}

static inline int run_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    return run_rotary_shaped(a, variant, stream, nullptr);
}

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_ROTARY_CUH */
