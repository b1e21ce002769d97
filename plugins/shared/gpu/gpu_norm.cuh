/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The RMS norm kernels (gpu_kernels.cuh): rms_norm, fused add + rms_norm and
 * their gemma forms. The block sums; the general kernel, which reads a row
 * twice (norm_kernel); the one that keeps it in registers (norm_kernel_reg);
 * the one-row decode kernel (norm_kernel_row); the rows summed again in
 * double; and run_norm, which fills struct fld__gpu_api's norm entry.
 */
#ifndef FLD_PLUGINS_GPU_NORM_CUH
#define FLD_PLUGINS_GPU_NORM_CUH

#include "gpu_access.cuh"
#include "gpu_api.h"
#include "gpu_launch.h"

namespace fld_gpu
{

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

/* Whether a row normalises in float32, from its float32 sum of squares'
   mean plus eps, ms: finite (an inf or NaN sum makes it inf or NaN, and so
   does an eps near FLT_MAX beside a large finite mean) and not so small
   that eps cannot hide the squares' underflow (ms then in float32's normal
   range, where fld__gpu_rsqrt_approx holds). Block-uniform: every thread
   has the same sum. */
FLD_GPU_DEV bool norm_sum_ok(float ms)
{
    return ms <= FLD_GPU_FLT_MAX && ms >= 0x1p-100f;
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
 * NaN, or so small that eps cannot hide the squares' underflow, or whose
 * mean plus an eps near FLT_MAX overflows, sends the block (the decision
 * is block-uniform: every thread has the same sum) to a third pass that
 * sums the row again in double and writes out = float(v * inv) * scale
 * with inv in double, as the reference does.
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
        if (!norm_sum_ok(ms)) {
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
        if (!norm_sum_ok(ms)) {
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

/* A 16-byte group's words as loaded where keep holds, else zeros: a group
   past the row's end adds +0 to the sum of squares (selected word by word,
   before the 16-bit values are widened). */
template <class G> FLD_GPU_DEV void keep_words(typename G::raw &r, bool keep)
{
    uint32_t w[4];
    G::words(r, w);
    for (int j = 0; j < 4; j++)
        w[j] = keep ? w[j] : 0u;
    G::from_words(w, r);
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
       use of the others). The residual's last group is the one its owner
       stores the sum to before the reduction: that load of it races with
       the store, harmlessly. */
    typename G::raw xs[K], rs[K], ws[K];
    FLD_GPU_UNROLL
    for (int i = 0; i < K; i++) {
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        const uint32_t at = k < groups ? k : groups - 1;
        G::fetch(xr, at, xs[i]);
        if (RESIDUAL)
            G::fetch_maybe_dropped(rr, at, rs[i], k < groups);
        G::fetch(a.weight, at, ws[i]);
    }
    /* In bfloat16, whether every weight of the thread is finite: then no
       product below is a NaN (the rows that get there are finite, since
       their sum of squares is, their scale 1 / sqrt of a normal mean square
       is finite, and a product of finite floats is finite or an inf), and
       the outputs are packed without the NaN test, which is then off the
       path after the reduction: the weight's bits arrive with the row's. */
    bool weights_finite = false;
    if constexpr (DT == FLD_GPU_BF16) {
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
        if (!RESIDUAL)
            keep_words<G>(xs[i], k < groups);
        G::unpack(xs[i], v[i]);
        if (RESIDUAL) {
            /* the sum rounded once, to the bits stored, and read back (on
               CUDA, 16-bit: one packed add a pair, fld__gpu_add2, the
               same bits) */
            typename G::raw sum;
#if defined(FLD_GPU_TARGET_CUDA)
            if constexpr (DT != FLD_GPU_F32) {
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
            keep_words<G>(sum, k < groups);
            G::unpack(sum, v[i]);
        }
        squares.add<G::N>(v[i]);
    }
    /* 16 slots for one 16-bit group a thread; two groups or float32 ones
       keep more registers live across the sum, and take 8 (block_sum_once) */
    constexpr int SLOTS = K == 1 && DT != FLD_GPU_F32 ? 16 : 8;
    const float ss = block_sum_once<SLOTS>(squares.total());
    const float ms = (per_width != 0.0f ? ss * per_width : ss / (float)a.width) + a.eps;
    if (!norm_sum_ok(ms)) {
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
    const int64_t size = (int64_t)fld__gpu_elem_size(a->dtype), limit = (int64_t)1 << 31;
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

/* A 16-bit x's weight and residual: its own dtype (DT) or float32 (FLD_GPU_F32). */
template <int DT, bool VEC>
static int launch_norm_mixed(const struct fld__gpu_norm_args *a, const struct fld__gpu_shape &s,
                             void *stream)
{
    const bool w32 = a->weight && a->weight_dtype == FLD_GPU_F32,
               r32 = a->residual && a->residual_dtype == FLD_GPU_F32;
    if (w32 && r32)
        return launch_norm<DT, FLD_GPU_F32, FLD_GPU_F32, VEC>(a, s, stream);
    if (w32)
        return launch_norm<DT, FLD_GPU_F32, DT, VEC>(a, s, stream);
    if (r32)
        return launch_norm<DT, DT, FLD_GPU_F32, VEC>(a, s, stream);
    return launch_norm<DT, DT, DT, VEC>(a, s, stream);
}

/* Groups per row of x: 16-byte groups (VEC) or elements. */
static inline int64_t norm_groups(const struct fld__gpu_norm_args *a, bool vec)
{
    return a->width / (vec ? fld__gpu_group_size(a->dtype) : 1);
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
    case FLD_GPU_F32:
        return launch_norm<FLD_GPU_F32, FLD_GPU_F32, FLD_GPU_F32, VEC>(a, s, stream);
    case FLD_GPU_F16:
        return launch_norm_mixed<FLD_GPU_F16, VEC>(a, s, stream);
    case FLD_GPU_BF16:
        return launch_norm_mixed<FLD_GPU_BF16, VEC>(a, s, stream);
    default:
        return FLD_GPU_EINVAL;
    }
}

/* weight_dtype / residual_dtype: the dtype's own, or float32 with a 16-bit dtype. */
static inline bool norm_operand_dtype_ok(int dtype, const void *p, int operand_dtype)
{
    return !p || operand_dtype == dtype || (operand_dtype == FLD_GPU_F32 && dtype != FLD_GPU_F32);
}

/*
 * The norm of a; shape: the launch to use (bench/gpu_sweep.cu times the
 * alternatives), or NULL for gpu_launch.h's choice for this device.
 */
static inline int run_norm_shaped(const struct fld__gpu_norm_args *a, int variant, void *stream,
                                  const struct fld__gpu_shape *shape)
{
    if (!a || a->dtype < 0 || a->dtype >= FLD_GPU_DTYPES || a->rows < 0 || a->width < 0 ||
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

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_NORM_CUH */
