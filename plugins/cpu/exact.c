/*
 * The cpu plugin's scalar paths for what the vector kernels must not
 * approximate: vLLM's activation formulas (the spec is
 * core/reference_activation.c; the same float32 operations and C library
 * functions, so the same bits) and the rare norm rows whose float32 sum of
 * squares is not usable (core/reference_norm.c's double-precision form).
 *
 * This file is compiled with the build's baseline flags, like the library:
 * no variant's instruction set may change how these round.
 *
 * Activation tables: for float16 and bfloat16 an activation of one element
 * depends only on its 16 bits, so the 16-bit kernels look it up: 65536
 * entries of the activation rounded to the dtype, per function and dtype
 * (128 KiB each), built on first use (0.5-1.5 ms) with one entry of padding
 * for 4-byte gathers. A vector approximation cannot give the reference's
 * rounding for every input: vLLM's gelu forms cancel (1 + erff, 1 + tanhf)
 * where no other form follows them, and near rounding midpoints any
 * difference in the last float32 bit shows; checking for those lanes cost
 * more than the lookup (measured on Zen 4, avx512: silu +55% against +15%).
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include <fldispatch/half.h>

#include "cpu.h"

/* ---- vLLM's activations (csrc/activation_kernels.cu), float32 ------------ */

static float silu(float f)
{
    return f / (1.0f + expf(-f));
}

static float gelu_erf(float f)
{
    const float alpha = (float)M_SQRT1_2;
    return f * 0.5f * (1.0f + erff(f * alpha));
}

static float gelu_tanh(float f)
{
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5);
    const float kappa = 0.044715f;
    const float cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(beta * (f + kappa * cube)));
}

static float widen(int dt, uint16_t h)
{
    return dt == FLD_CPU_F16 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

static uint16_t narrow(int dt, float v)
{
    return dt == FLD_CPU_F16 ? fld_f32_to_f16(v) : fld_f32_to_bf16(v);
}

/* vLLM's activation fn of a in float32, rounded to dt. */
static float act_rounded(enum fld_cpu_act_fn fn, int dt, float a)
{
    float v = fn == FLD_CPU_FN_SILU ? silu(a) : fn == FLD_CPU_FN_GELU ? gelu_erf(a) : gelu_tanh(a);
    return widen(dt, narrow(dt, v));
}

/* [function: enum fld_cpu_act_fn][dtype: f16, bf16], 65536 entries + padding each. */
static uint16_t tables[3][2][65537];
static pthread_once_t built[3][2] = {{PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
                                     {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT},
                                     {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT}};

static void build(enum fld_cpu_act_fn fn, int d)
{
    const int dt = d ? FLD_CPU_BF16 : FLD_CPU_F16;
    for (uint32_t code = 0; code < 65536; code++)
        tables[fn][d][code] = narrow(dt, act_rounded(fn, dt, widen(dt, (uint16_t)code)));
}

/* pthread_once takes no argument: one builder per table. */
#define BUILDER(fn, d)                                                                             \
    static void build_##fn##_##d(void)                                                             \
    {                                                                                              \
        build(fn, d);                                                                              \
    }
BUILDER(FLD_CPU_FN_SILU, 0)
BUILDER(FLD_CPU_FN_SILU, 1)
BUILDER(FLD_CPU_FN_GELU, 0)
BUILDER(FLD_CPU_FN_GELU, 1)
BUILDER(FLD_CPU_FN_GELU_TANH, 0)
BUILDER(FLD_CPU_FN_GELU_TANH, 1)

const uint16_t *fld__cpu_act_table(enum fld_cpu_act_fn fn, int dt)
{
    static void (*const builders[3][2])(void) = {
        {build_FLD_CPU_FN_SILU_0, build_FLD_CPU_FN_SILU_1},
        {build_FLD_CPU_FN_GELU_0, build_FLD_CPU_FN_GELU_1},
        {build_FLD_CPU_FN_GELU_TANH_0, build_FLD_CPU_FN_GELU_TANH_1},
    };
    if (dt == FLD_CPU_F32 || (unsigned)fn > FLD_CPU_FN_GELU_TANH)
        return NULL;
    const int d = dt == FLD_CPU_BF16;
    pthread_once(&built[fn][d], builders[fn][d]);
    return tables[fn][d];
}

/* ---- rms_norm rows the float32 sum cannot serve -------------------------- */

static float load(const void *p, int64_t i, int dt)
{
    if (dt == FLD_CPU_F32)
        return ((const float *)p)[i];
    return widen(dt, ((const uint16_t *)p)[i]);
}

void fld__cpu_norm_row_exact(const struct fld_cpu_norm_job *job, void *out, const void *src,
                             int src_dt)
{
    const int64_t h = job->h;
    double sum = 0.0;
    for (int64_t j = 0; j < h; j++) {
        double v = load(src, j, src_dt);
        sum += v * v;
    }
    const double inv = 1.0 / sqrt(sum / (double)h + (double)job->eps);
    for (int64_t j = 0; j < h; j++) {
        float scale = 1.0f;
        if (job->weight) {
            scale = load(job->weight, j, job->weight_f32 ? FLD_CPU_F32 : job->dt);
            if (job->gemma)
                scale += 1.0f;
        }
        const float v = (float)(load(src, j, src_dt) * inv) * scale;
        if (job->dt == FLD_CPU_F32)
            ((float *)out)[j] = v;
        else
            ((uint16_t *)out)[j] = narrow(job->dt, v);
    }
}
