/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the cpu plugin (vendor.cpu).
 *
 * Three layers, each replaceable on its own:
 *   - op entry points (activation.c, norm.c, rotary.c) turn the validated
 *     arguments into a job (rows or tokens plus everything a kernel needs)
 *     and hand it to the thread pool (pool.c), which splits [0, n) into
 *     contiguous ranges, one per thread, or runs it inline when it is small;
 *   - a variant (struct fld_cpu_variant) is one instruction set's kernels
 *     for a range of rows or tokens; isa.c picks one at load from what the
 *     CPU and the OS support, capped by VLLM_FL_CPU_ISA;
 *   - each variant is one translation unit isa_<name>.c that includes the
 *     vector layer of its instruction set (simd_<name>.h) and the shared
 *     kernel bodies (body_*.h, written once against that layer).
 *
 * Arithmetic is float32; 16-bit storage is widened on load and rounded
 * (round to nearest even) where the library's reference rounds
 * (core/reference/reference_*.c): on store, and in between where vLLM rounds to the
 * storage type (the activation before its product; rotary's products and
 * sums). The scalar paths that must match the reference to the bit live in
 * exact.c. Nothing keeps state between calls except the pool and the
 * activation tables (built once, read-only after), both MT safe: every
 * kernel is MT safe.
 */
#ifndef FLD_PLUGIN_CPU_H
#define FLD_PLUGIN_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/plugin.h>

/* Storage dtypes, numbered as fld_dtype_index() numbers them. */
enum fld_cpu_dtype { FLD_CPU_F32 = 0, FLD_CPU_F16 = 1, FLD_CPU_BF16 = 2 };

static inline size_t fld__cpu_elem_size(int dt)
{
    return dt == FLD_CPU_F32 ? 4u : 2u;
}

/* The address of element idx of an array of dtype dt. */
static inline void *fld__cpu_at(const void *base, int64_t idx, int dt)
{
    return (char *)(uintptr_t)base + (size_t)idx * fld__cpu_elem_size(dt);
}

/*
 * Prefetch one line of the next row of an activation or a norm (read), as
 * the row before it computes. Float32 rows go to L2 only (prefetcht2): on
 * Zen 4 at 4096 x 4096, one thread, medians of three alternated runs, that
 * gives rms_norm 103% of the triad, silu_and_mul 97%, gelu_tanh_and_mul
 * 75%, against 86%, 71% and 67% with prefetching into L1,
 * which evicts the lines the row itself still reads. 16-bit rows keep L1
 * (prefetcht0): there the fused-residual norms lost 10 points with L2 and
 * the two-thread norms 10-40 (docs/BENCHMARKS.md). dt is a constant of the
 * caller's loop, so the branch folds away.
 */
static inline __attribute__((always_inline)) void fld__cpu_prefetch_row(const void *p, int dt)
{
    if (dt == FLD_CPU_F32)
        __builtin_prefetch(p, 0, 1);
    else
        __builtin_prefetch(p, 0, 3);
}

/* fld__cpu_dtype_of()'s refusal: fld_set_error() naming op and tensor, then -1. */
int fld__cpu_dtype_unknown(const char *op, const char *tensor);

/* The storage dtype of a validated tensor, or -1 after fld_set_error(). Inline: every call runs it.
 */
static inline int fld__cpu_dtype_of(const DLTensor *t, const char *op, const char *tensor)
{
    const int dt = fld_dtype_index(t->dtype);
    return __builtin_expect(dt >= 0, 1) ? dt : fld__cpu_dtype_unknown(op, tensor);
}

/* ---- jobs: one op call, as the kernels see it --------------------------- */

/* The activations (activations.def: the rows, in catalog order). */
enum fld_cpu_act {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN) FLD_CPU_ACT_##ID,
#include "activations.def"
    FLD_CPU_ACTS
};

/* The activation functions themselves (their 16-bit tables: fld__cpu_act_table). */
enum fld_cpu_act_fn {
#define FLD_CPU_ACT_FUNCTION(FN, scalar, vector) FLD_CPU_FN_##FN,
#include "activations.def"
    FLD_CPU_FNS
};

/* The values of activations.def's FAMILY and HALF columns. */
enum { FLD_CPU_ACT_FAMILY_GATED = 1, FLD_CPU_ACT_FAMILY_ELEMENTWISE = 0 };
enum { FLD_CPU_ACT_HALF_FIRST = 0, FLD_CPU_ACT_HALF_SECOND = 1 };

/* FLD_CPU_ACT_IF_<F>_##FAMILY(code): code for the rows of family F, nothing for the others. */
#define FLD_CPU_ACT_IF_GATED_GATED(...) __VA_ARGS__
#define FLD_CPU_ACT_IF_GATED_ELEMENTWISE(...)
#define FLD_CPU_ACT_IF_ELEMENTWISE_GATED(...)
#define FLD_CPU_ACT_IF_ELEMENTWISE_ELEMENTWISE(...) __VA_ARGS__

/*
 * An activation's columns. Inline switches: the kernels call them with
 * compile-time constants, so there they fold away.
 */
static inline bool fld__cpu_act_gated(enum fld_cpu_act act)
{
    switch (act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    case FLD_CPU_ACT_##ID:                                                                         \
        return FLD_CPU_ACT_FAMILY_##FAMILY;
#include "activations.def"
    default:
        return false;
    }
}

/* Whether a gated activation applies its function to the second half (a * f(b)). */
static inline bool fld__cpu_act_second_half(enum fld_cpu_act act)
{
    switch (act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    case FLD_CPU_ACT_##ID:                                                                         \
        return FLD_CPU_ACT_HALF_##HALF;
#include "activations.def"
    default:
        return false;
    }
}

static inline enum fld_cpu_act_fn fld__cpu_act_fn(enum fld_cpu_act act)
{
    switch (act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    case FLD_CPU_ACT_##ID:                                                                         \
        return FLD_CPU_FN_##FN;
#include "activations.def"
    default:
        return FLD_CPU_FNS;
    }
}

/* Whether fn has a PyTorch form of its own (activations.def: FLD_CPU_ACT_TORCH_FORM). */
static inline bool fld__cpu_act_fn_has_torch_form(enum fld_cpu_act_fn fn)
{
    switch (fn) {
#define FLD_CPU_ACT_TORCH_FORM(FN, scalar, vector)                                                 \
    case FLD_CPU_FN_##FN:                                                                          \
        return true;
#include "activations.def"
    default:
        return false;
    }
}

/* Whether fn's 16-bit values may be computed (activations.def: FLD_CPU_ACT_COMPUTED16). */
static inline bool fld__cpu_act_fn_computed16(enum fld_cpu_act_fn fn)
{
    switch (fn) {
#define FLD_CPU_ACT_COMPUTED16(FN, vector, rel, abs_a, a_min)                                      \
    case FLD_CPU_FN_##FN:                                                                          \
        return true;
#include "activations.def"
    default:
        return false;
    }
}

/*
 * Gated activation over rows: a = x[r][0, d), b = x[r][d, 2d),
 * out[r][j] = f(a[j], b[j]), for 16-bit dtypes round(round(act) * other);
 * elementwise: out[r][j] = round(f(x[r][j])). Strides in elements between
 * row starts.
 */
struct fld_cpu_act_job {
    enum fld_cpu_act act;
    int dt;
    void *out;
    int64_t out_stride;
    const void *x;
    int64_t x_stride;
    int64_t d;
    bool stream; /* outputs may use non-temporal stores (output larger than the LLC) */
    bool torch;  /* the activations in PyTorch's CPU forms (fld__cpu_torch_activations) */
};

/*
 * rms_norm / gemma_rms_norm over rows of width h. With residual (non-NULL)
 * a row first becomes residual = round_rdt(x + residual) and the stored
 * values are normalised. weight NULL: no scale; gemma scales by (1 + w).
 * out may equal x. out = round(float(v * inv_rms) * scale), one rounding.
 */
struct fld_cpu_norm_job {
    int dt; /* x and out */
    void *out;
    int64_t out_stride;
    const void *x;
    int64_t x_stride;
    void *residual;
    int64_t residual_stride;
    const void *weight; /* contiguous [h], or NULL */
    /* float32 weight / residual with a 16-bit dt (false: dt, the default of a
       zeroed job) */
    bool weight_f32, residual_f32;
    int64_t h;
    float eps;
    bool gemma;
    bool stream;
    bool prefetch; /* each next row, as the current one is written (fld__cpu_norm_prefetch_bytes) */
};

/*
 * rotary_embedding over tokens: query and key heads read as g says and
 * written as out says (out equals g in place; rotary_embedding_out: the
 * outputs' geometry, and the elements past rot_dim copied up to head_size).
 */
struct fld_cpu_rotary_job {
    fld_rotary_geometry g;
    fld_rotary_geometry out;
    int64_t head_size;
    bool copy_rest; /* out of place with rot_dim < head_size */
    bool is_neox;
    int dt;        /* query and key */
    int cache_dt;  /* cos_sin_cache, may differ from dt */
    bool prefetch; /* prefetch the next token's heads (fld__cpu_rotary_prefetch) */
};

/* ---- variants: one instruction set's kernels (isa_*.c) ------------------ */

struct fld_cpu_variant {
    const char *name; /* "avx512_bf16", "avx512", "avx2", "neon", "portable" */
    void (*act)(const struct fld_cpu_act_job *job, int64_t row_begin, int64_t row_end);
    void (*norm)(const struct fld_cpu_norm_job *job, int64_t row_begin, int64_t row_end);
    void (*rotary)(const struct fld_cpu_rotary_job *job, int64_t token_begin, int64_t token_end);
};

/* Every variant this build has; defined by its isa_<name>.c (absent ones
 * are not compiled for this architecture and must not be referenced). */
extern const struct fld_cpu_variant fld__cpu_variant_portable;
#if defined(__x86_64__)
extern const struct fld_cpu_variant fld__cpu_variant_avx2;
extern const struct fld_cpu_variant fld__cpu_variant_avx512;
extern const struct fld_cpu_variant fld__cpu_variant_avx512_bf16;
#endif
#if defined(__aarch64__)
extern const struct fld_cpu_variant fld__cpu_variant_neon;
#endif

/* The variant chosen at load (isa.c); never NULL after register_builtins. */
extern const struct fld_cpu_variant *fld__cpu_active;

/*
 * Whether rotary prefetches the next token's heads, set at load: not on
 * AMD. Measured at 4096 tokens x 32 + 32 heads x 128: on the Xeon (Cascade
 * Lake) of docs/BENCHMARKS.md it gained 17% (float32) and 30% (bfloat16), one thread;
 * on Zen 4 leaving it out made float32 1.60x faster with one thread (15.6
 * -> 28.2 GB/s) and 1.35x with two, 16-bit (bound by its roundings)
 * 1.00-1.11x (docs/BENCHMARKS.md, "AMD EPYC Zen 4").
 */
extern bool fld__cpu_rotary_prefetch;
/* Norm calls with more data than this (bytes, each buffer once) prefetch each next row; set at
 * load (fld__cpu_default_norm_prefetch_bytes). */
extern size_t fld__cpu_norm_prefetch_bytes;
/*
 * Whether the avx2 variant looks the 16-bit activation tables up with
 * scalar loads instead of vpgatherdd, set at load: on AMD. Measured on Zen 3
 * (docs/BENCHMARKS.md, "AVX2 on AMD EPYC Zen 3").
 */
extern bool fld__cpu_lookup_scalar;
/*
 * Whether the avx2 variant computes the 16-bit activations in float32 and
 * reads the table only for the lanes whose rounding the float32 value
 * cannot settle (body_activation.h), instead of reading the table for every
 * element; set at load (VLLM_FL_CPU_ACT16; default off: on Zen 3, where
 * the table is read with scalar loads, the float32 form took 1.7-5.8x
 * longer at 4096 x 4096; docs/BENCHMARKS.md, "Measured choices in the CPU
 * plugin").
 */
extern bool fld__cpu_act16_compute;
/* VLLM_FL_CPU_ACTIVATIONS=torch: the activations in PyTorch's CPU forms (vmath.h). */
extern bool fld__cpu_torch_activations;

/* ---- threads (pool.c) ---------------------------------------------------- */

typedef void (*fld_cpu_range_fn)(const void *job, int64_t begin, int64_t end);

/*
 * Runs fn(job, begin, end) over [0, n) in contiguous ranges, one per
 * thread, and returns when all are done. bytes is the memory the call
 * touches: below the parallel threshold, or when the pool is busy with
 * another caller, it runs inline on the calling thread.
 */
void fld__cpu_parallel_run(fld_cpu_range_fn fn, const void *job, int64_t n, size_t bytes);

/*
 * The pool's settings the call path reads (pool.c keeps them with its
 * configuration): calls touching fewer bytes than fld__cpu_inline_below run
 * on the calling thread (SIZE_MAX when the pool has fewer than two
 * threads); outputs of at least fld__cpu_stream_bytes are written with
 * non-temporal stores.
 */
extern size_t fld__cpu_inline_below;
extern size_t fld__cpu_stream_bytes;

/* fld__cpu_parallel_run(), with the decision a decode-sized call takes inline. */
static inline void fld__cpu_parallel(fld_cpu_range_fn fn, const void *job, int64_t n, size_t bytes)
{
    if (n < 2 || bytes < fld__cpu_inline_below) {
        fn(job, 0, n);
        return;
    }
    fld__cpu_parallel_run(fn, job, n, bytes);
}

/* Outputs of at least this many bytes are written with non-temporal stores. */
static inline size_t fld__cpu_stream_threshold(void)
{
    return fld__cpu_stream_bytes;
}

/* ---- scalar paths (exact.c) ---------------------------------------------- */

/* The 65536 (+1 padding) activations fn of every 16-bit code of dt (F16 or
 * BF16), rounded to dt: the reference's values, or with torch PyTorch's CPU
 * forms (vmath.h's torch forms, one lane); NULL for F32.
 * Built on first use; MT safe. */
const uint16_t *fld__cpu_act_table(enum fld_cpu_act_fn fn, int dt, bool torch);
/* One row normalised in double (core/reference/reference_norm.c's numerics): for rows
 * whose float32 sum of squares overflowed, underflowed or is NaN. src is the
 * row being normalised (x or the updated residual), of dtype src_dt. */
void fld__cpu_norm_row_exact(const struct fld_cpu_norm_job *job, void *out, const void *src,
                             int src_dt);

/* ---- op entry points (the fld_kernel_fn registered with the host) -------- */

#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN) int fld__cpu_##name(const void *args);
#include "activations.def"
int fld__cpu_rms_norm(const void *args);
int fld__cpu_gemma_rms_norm(const void *args);
int fld__cpu_rotary_embedding(const void *args);
int fld__cpu_rotary_embedding_out(const void *args);

#endif
