/*
 * Internals of the cpu plugin (vendor.cpu).
 *
 * Every op is built in two layers so each can be replaced on its own:
 *   - an op entry point (the fld_kernel_fn registered with the host) turns the
 *     validated arguments into rows (fld_tensor_rows) or tokens
 *     (fld_rotary_geometry_of) and walks them; a threaded walk replaces this
 *     loop only;
 *   - a per-row (per-token for rotary) kernel does the arithmetic on one row
 *     in float32; a SIMD kernel replaces this function only.
 * 16-bit rows are converted to float32 in chunks of FLD_CPU_CHUNK elements
 * on the stack, computed, and rounded once on the way back (half.h).
 *
 * Nothing here keeps state between calls: every kernel is MT safe.
 */
#ifndef FLD_PLUGIN_CPU_H
#define FLD_PLUGIN_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <fldispatch/plugin.h>

/* Elements per float32 scratch chunk; 1 KiB per buffer keeps stack use small. */
#define FLD_CPU_CHUNK 256

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

/* Widens n elements of dtype dt to float32. */
static inline void fld__cpu_load(float *dst, const void *src, int64_t n, int dt)
{
    if (dt == FLD_CPU_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == FLD_CPU_F16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = fld_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = fld_bf16_to_f32(s[i]);
    }
}

/* Rounds n float32 values once to dtype dt. */
static inline void fld__cpu_store(void *dst, const float *src, int64_t n, int dt)
{
    if (dt == FLD_CPU_F32) {
        memmove(dst, src, (size_t)n * sizeof(float));
    } else if (dt == FLD_CPU_F16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = fld_f32_to_f16(src[i]);
    } else {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = fld_f32_to_bf16(src[i]);
    }
}

/* The storage dtype of a validated tensor, or -1 (then the op fails). */
int fld__cpu_dtype_of(const DLTensor *t, const char *op, const char *tensor);

/* ---- activations (activation.c) ---------------------------------------- */

enum fld_cpu_act {
    FLD_CPU_ACT_SILU_AND_MUL,
    FLD_CPU_ACT_MUL_AND_SILU,
    FLD_CPU_ACT_GELU_AND_MUL,
    FLD_CPU_ACT_GELU_TANH_AND_MUL
};

/* One row: out[j] = act(x[j]) * x[d + j] (mul_and_silu: x[j] * silu(x[d + j])). */
void fld__cpu_act_row(enum fld_cpu_act act, void *out, const void *x, int64_t d, int dt);

int fld__cpu_silu_and_mul(const void *args);
int fld__cpu_mul_and_silu(const void *args);
int fld__cpu_gelu_and_mul(const void *args);
int fld__cpu_gelu_tanh_and_mul(const void *args);

/* ---- rms_norm, gemma_rms_norm (norm.c) --------------------------------- */

/*
 * One row of width h. With residual (non-NULL) the row first becomes
 * residual = round(x + residual) and the rounded values are normalised.
 * weight NULL means no scale; gemma scales by (1 + w). out may equal x.
 */
void fld__cpu_rms_norm_row(void *out, const void *x, void *residual, const void *weight, int64_t h,
                           float eps, bool gemma, int dt);

int fld__cpu_rms_norm(const void *args);
int fld__cpu_gemma_rms_norm(const void *args);

/* ---- rotary_embedding (rotary.c) --------------------------------------- */

/* Rotates every query and key head of token t at position pos. */
void fld__cpu_rotary_token(const fld_rotary_geometry *g, int64_t t, int64_t pos, bool is_neox,
                           int dt, int cache_dt);

int fld__cpu_rotary_embedding(const void *args);

#endif
