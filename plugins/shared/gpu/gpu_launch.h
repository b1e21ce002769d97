/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The launch shapes of the GPU kernels: for each kernel family, the block
 * size, the grid and how much of a row each thread keeps in registers,
 * chosen from the call's size and the device's SM count. This file is the
 * one place those numbers live; the launchers in gpu_kernels.cuh only carry
 * them out, and bench/gpu_sweep.cu times the alternatives on a real GPU
 * (docs/device-plugins.md, "Launch shapes", has the measurements behind each
 * row).
 *
 * Two regimes matter to a serving engine, and they want different shapes:
 *
 *   latency   decode steps: a few rows, replayed in a CUDA graph, where the
 *             kernel's time is one trip to memory plus its own critical
 *             path. Each thread carries little (one 16-byte group of a norm's
 *             row), every independent load is issued before the first
 *             dependent step (rotary loads q and k while the position is
 *             still in flight), and work is spread over more SMs.
 *   streaming prefill: enough rows to fill every SM several times, where the
 *             kernel must keep enough bytes in flight per SM to saturate
 *             HBM. Blocks are sized for occupancy and each thread carries a
 *             few 16-byte accesses.
 *
 * Plain C++ (host side): nvcc, hipcc and the emulator's g++ compile it alike.
 */
#ifndef FLD_PLUGINS_GPU_LAUNCH_H
#define FLD_PLUGINS_GPU_LAUNCH_H

#include <stdbool.h>
#include <stdint.h>

/*
 * A launch: threads per block, blocks (grid.x; the launcher clamps it to the
 * runtime's limit and the kernels grid-stride beyond it), and for the norms
 * per_thread, the row's 16-byte groups each thread keeps in registers
 * (1, 2 or 4: the one-pass kernel) or 0 (the two-pass kernel, which re-reads
 * the row). blocks_y: the second grid dimension where a family splits a row
 * or a token across blocks (activations: rows; rotary: chunks of a token's
 * heads). early_weight (norms, per_thread 1 or 2): the weight's loads are
 * issued with the row's, before the reduction, rather than after it.
 * access_bytes (activations): the bytes each thread loads per operand and
 * step, 16, 8 or 4 (0: 16); fewer spread a row over more threads. lean:
 * the latency kernels, with what a decode call does not need taken out
 * (no loops, 32-bit offsets), where the call's operands allow them: norms
 * (with early_weight, blocks = rows) norm_kernel_row, one row per block;
 * activations (blocks x threads cover a row, blocks_y = rows)
 * act_kernel_lean, one group per thread.
 */
struct fld__gpu_shape {
    unsigned threads;
    int64_t blocks;
    int64_t blocks_y;
    int per_thread;
    bool early_weight;
    int access_bytes;
    bool lean;
};

/* ---- the table --------------------------------------------------------- */
/*
 * Each row was chosen by bench/gpu_sweep.cu on an H100 (132 SMs; figures in
 * docs/device-plugins.md, "Launch shapes"): the rule below came within 1%
 * of the fastest candidate on average over 98 norm, 18 activation and 54
 * rotary cases (decode 1-128 rows, prefill 512-16,384; hidden 2048-8192;
 * f32, f16, bf16), and within 7% (norms), 1% (activations) and 17%
 * (rotary at 512 tokens) on the worst case.
 */

/* Norms. A row of at most NORM_ROW_MAX_GROUPS 16-byte groups (hidden 4096
   and below in 16 bits, 2048 in float32) runs the lean one-row kernel at
   every row count (lean: one row per block, one barrier, 32-bit offsets,
   the weight loaded with the row): NORM_ROW_THREADS threads of one or two
   groups each, or with a residual, whose extra registers per group make
   one group per thread the faster, NORM_ROW_RESIDUAL_THREADS of one. In an
   H100 sweep (bf16, 1-4096 rows) it was the fastest candidate or within
   1% of it at every row count of hidden 2048 and 4096: 4096 rows of
   rms_norm in 13.28 us against the four-group kernel's 14.84 (hidden
   2048) and 24.44 against 25.10 (4096), fused add + rms_norm 24.84
   against 25.33 and 47.24 against 47.99; at 1-128 rows of rms_norm,
   hidden 4096, two groups in 256 threads took 1.79-2.23 us against one
   group in 512's 1.86-2.29, while the fused op was fastest with one group
   in 512 (1.93-2.47 against 1.97-2.56). Where the one-row kernel cannot
   take a call (mixed dtypes, offsets past 2^31) the general kernel runs
   the same shape.
   Wider rows, three regimes by rows per SM:
     latency    rows <= NORM_LATENCY_ROWS_PER_SM x SMs: one 16-byte group
                per thread (threads = the row's groups, up to
                NORM_LATENCY_MAX_THREADS; beyond, two groups per thread in up
                to NORM_MAX_THREADS), so each row is one short trip to memory
                and, up to 2 x NORM_LATENCY_MAX_THREADS groups, a block
                reduction of at most 16 warps (a 1024-thread block was up to
                11% slower at decode on an H100, hidden 8192);
     between    NORM_STREAM_THREADS threads, the fewest groups per thread
                that hold the row;
     streaming  rows >= NORM_STREAM_ROWS_PER_SM x SMs: NORM_MAX_GROUPS
                groups per thread (threads = groups / 4, at least 64), so
                more, smaller blocks share an SM and each thread keeps four
                16-byte loads in flight.
   The weight is read after the reduction, except in the latency regime
   with NORM_LATENCY_EARLY_WEIGHT, where it is loaded with the row
   (early_weight): a decode row then waits for one trip to memory, not
   two, for four or eight registers per group (3-7% faster at decode on an
   H100). With NORM_LATENCY_LEAN the latency regime runs the lean kernel:
   the fastest candidate in every decode case of two H100 sweeps (bf16 and
   f16, hidden 2048-8192, 1-128 rows), rms_norm 1.14-1.23x and fused add +
   rms_norm 1.19-1.47x (bf16; the residual rounded once) over the general
   kernel's best shape. At hidden 8192 the sweep kept the four-group kernel
   from 512 rows on (5.15 us against the one-row kernel's 5.45 at 512 rows,
   47.76 against 49.41 at 4096). Rows too wide for 4 groups per thread run
   the two-pass kernel with NORM_TWO_PASS_THREADS. */
#define FLD_GPU_NORM_ROW_MAX_GROUPS       512
#define FLD_GPU_NORM_ROW_THREADS          256
#define FLD_GPU_NORM_ROW_RESIDUAL_THREADS 512
#define FLD_GPU_NORM_LATENCY_ROWS_PER_SM  1
#define FLD_GPU_NORM_LATENCY_MAX_THREADS  512
#define FLD_GPU_NORM_LATENCY_EARLY_WEIGHT true
#define FLD_GPU_NORM_LATENCY_LEAN         true
#define FLD_GPU_NORM_STREAM_ROWS_PER_SM   8
#define FLD_GPU_NORM_STREAM_THREADS       256
#define FLD_GPU_NORM_MAX_GROUPS           4
#define FLD_GPU_NORM_MAX_THREADS          1024
#define FLD_GPU_NORM_TWO_PASS_THREADS     1024

/* Activations: one ACT_ACCESS_BYTES group per operand, thread and step,
   grid.x over a row's groups and grid.y over rows; ACT_LATENCY_THREADS-
   thread blocks while there are at most as many rows as SMs (a decode row
   of 14,336 bf16 spread over 14 SMs rather than 7: 1.05x), ACT_THREADS
   beyond. Up to ACT_NARROW_ROWS rows, groups of ACT_NARROW_BYTES
   (access_bytes) in ACT_NARROW_THREADS-thread blocks: a row spread over
   four times the threads, each with a short chain of divisions and
   exponentials. With ACT_LATENCY_LEAN, up to SMs rows run the lean kernel
   (lean: no loops, 32-bit row offsets), 1.02-1.09x over the looping one
   in an H100 sweep of bf16 silu_and_mul at 1-128 rows; with it, 4-byte
   groups were the fastest at 1, 8 and 32 rows (32: 2.09 us against 2.25
   with 16-byte groups) and 16-byte groups at 128 (4-byte 16% slower
   there, without the lean kernel). */
#define FLD_GPU_ACT_THREADS         256
#define FLD_GPU_ACT_LATENCY_THREADS 128
#define FLD_GPU_ACT_ACCESS_BYTES    16
#define FLD_GPU_ACT_NARROW_ROWS     32
#define FLD_GPU_ACT_NARROW_THREADS  256
#define FLD_GPU_ACT_NARROW_BYTES    4
#define FLD_GPU_ACT_LATENCY_LEAN    true

/* Rotary, three regimes by tokens per SM:
     latency    fewer tokens than SMs: a token's (head, group) units split
                over blocks of ROTARY_SPLIT_THREADS, so more SMs share them;
     between    one block per token of up to ROTARY_MID_THREADS;
     streaming  tokens >= ROTARY_STREAM_TOKENS_PER_SM x SMs: one block of
                ROTARY_SPLIT_THREADS per token, its threads looping over the
                units: many small blocks per SM (1.18-1.54x over one thread
                per unit at 4096 tokens). */
#define FLD_GPU_ROTARY_SPLIT_THREADS        64
#define FLD_GPU_ROTARY_MID_THREADS          512
#define FLD_GPU_ROTARY_STREAM_TOKENS_PER_SM 8

/* Threads rounded up to a whole number of 64-lane waves (a whole number of
   warps on every target), within [64, cap]. */
static inline unsigned fld__gpu_waves(int64_t threads, unsigned cap)
{
    int64_t t = (threads + 63) / 64 * 64;
    return (unsigned)(t < 64 ? 64 : t > (int64_t)cap ? cap : t);
}

static inline int64_t fld__gpu_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* The fewest groups per thread of the one-pass kernel (1, 2 or 4) that hold
   groups with threads; 0 where 4 do not. */
static inline int fld__gpu_norm_groups_per_thread(int64_t groups, unsigned threads)
{
    const int64_t per = fld__gpu_ceil_div(groups, threads);
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= FLD_GPU_NORM_MAX_GROUPS ? 4 : 0;
}

/* rows x groups (16-byte groups, or elements for the scalar family) on sms
   SMs; residual: the fused op. */
static inline struct fld__gpu_shape fld__gpu_norm_shape(int64_t rows, int64_t groups, int sms,
                                                        bool residual)
{
    struct fld__gpu_shape s = {0, rows, 1, 0, false, 0, false};
    if (groups <= FLD_GPU_NORM_ROW_MAX_GROUPS) {
        s.threads = fld__gpu_waves(groups, residual ? FLD_GPU_NORM_ROW_RESIDUAL_THREADS
                                                    : FLD_GPU_NORM_ROW_THREADS);
        s.per_thread = fld__gpu_norm_groups_per_thread(groups, s.threads);
        s.early_weight = s.lean = true;
        return s;
    }
    const bool latency = rows <= (int64_t)sms * FLD_GPU_NORM_LATENCY_ROWS_PER_SM;
    const bool between = !latency && rows < (int64_t)sms * FLD_GPU_NORM_STREAM_ROWS_PER_SM;
    if (latency) {
        s.threads = fld__gpu_waves(groups, FLD_GPU_NORM_LATENCY_MAX_THREADS);
        if (groups > (int64_t)s.threads)
            s.threads = fld__gpu_waves(fld__gpu_ceil_div(groups, 2), FLD_GPU_NORM_MAX_THREADS);
    } else if (between) {
        s.threads = fld__gpu_waves(groups, FLD_GPU_NORM_STREAM_THREADS);
    } else {
        s.threads = fld__gpu_waves(fld__gpu_ceil_div(groups, FLD_GPU_NORM_MAX_GROUPS), 512);
    }
    s.per_thread = fld__gpu_norm_groups_per_thread(groups, s.threads);
    if (s.per_thread == 4 && s.threads > 512) /* the 4-group kernel's launch bound */
        s.per_thread = 0;
    if (s.per_thread == 0)
        s.threads = fld__gpu_waves(groups, FLD_GPU_NORM_TWO_PASS_THREADS);
    s.early_weight =
        latency && FLD_GPU_NORM_LATENCY_EARLY_WEIGHT && (s.per_thread == 1 || s.per_thread == 2);
    s.lean = s.early_weight && FLD_GPU_NORM_LATENCY_LEAN;
    return s;
}

/* rows x groups per row (16-byte groups, or elements for the scalar family,
   which ignores access_bytes). */
static inline struct fld__gpu_shape fld__gpu_act_shape(int64_t rows, int64_t groups, int sms)
{
    struct fld__gpu_shape s = {FLD_GPU_ACT_THREADS,      1,    rows, 0, false,
                               FLD_GPU_ACT_ACCESS_BYTES, false};
    if (rows <= FLD_GPU_ACT_NARROW_ROWS) {
        s.threads = FLD_GPU_ACT_NARROW_THREADS;
        s.access_bytes = FLD_GPU_ACT_NARROW_BYTES;
    } else if (rows <= (int64_t)sms) {
        s.threads = FLD_GPU_ACT_LATENCY_THREADS;
    }
    s.blocks = fld__gpu_ceil_div(groups * (16 / s.access_bytes), s.threads);
    s.lean = rows <= (int64_t)sms && FLD_GPU_ACT_LATENCY_LEAN;
    return s;
}

/* tokens x units per token (the (head, group) units of query and key). */
static inline struct fld__gpu_shape fld__gpu_rotary_shape(int64_t tokens, int64_t units, int sms)
{
    struct fld__gpu_shape s = {FLD_GPU_ROTARY_SPLIT_THREADS, tokens, 1, 0, false, 0, false};
    if (tokens < sms)
        s.blocks_y = fld__gpu_ceil_div(units, FLD_GPU_ROTARY_SPLIT_THREADS);
    else if (tokens < (int64_t)sms * FLD_GPU_ROTARY_STREAM_TOKENS_PER_SM)
        s.threads = fld__gpu_waves(units, FLD_GPU_ROTARY_MID_THREADS);
    return s;
}

#endif /* FLD_PLUGINS_GPU_LAUNCH_H */
