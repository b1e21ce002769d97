/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cpu plugin's scalar paths for what the vector kernels must not
 * approximate: vLLM's activation formulas (the spec is
 * core/reference/reference_activation.c; the same float32 operations and C library
 * functions, so the same bits) and the rare norm rows whose float32 sum of
 * squares is not usable (core/reference/reference_norm.c's double-precision form).
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
 * The avx2 variant can compute and check instead (VLLM_FL_CPU_ACT16=compute,
 * body_activation.h's act16_block), reading a table only for the vectors
 * whose rounding its float32 value cannot settle; on Zen 3, where the
 * table is read with scalar loads, that too lost to the lookup (1.7-5.8x
 * longer at 4096 x 4096).
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

/* ---- PyTorch's CPU forms (vmath.h's torch forms, one lane) --------------- */

static float exp_torch(float x)
{
    const float q =
        rintf(x * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    float s = fmaf(q, -0.693145751953125f, x);
    s = fmaf(q, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmaf(u, s, 0.00139304355252534151077271f);
    u = fmaf(u, s, 0.00833336077630519866943359f);
    u = fmaf(u, s, 0.0416664853692054748535156f);
    u = fmaf(u, s, 0.166666671633720397949219f);
    u = fmaf(u, s, 0.5f);
    u = 1.0f + fmaf(s * s, u, s);
    if (x < -104.0f)
        return 0.0f;
    if (x > 100.0f)
        return INFINITY;
    if (isnan(x))
        return x;
    /* two factors, each a normal power of two (|q| <= 150 here) */
    const int k = (int)q, k1 = k / 2;
    return ldexpf(ldexpf(u, k1), k - k1);
}

static float silu_torch(float f)
{
    return f / (1.0f + exp_torch(-f));
}

static float gelu_torch(float f)
{
    const float z = f * (float)M_SQRT1_2;
    const float t = 1.0f / fmaf(0.3275911f, fabsf(z), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    const float e = -exp_torch(-(z * z));
    const float y = fmaf(e * t, r, 1.0f);
    const float erf = signbit(z) ? -y : y;
    return f * 0.5f * (1.0f + erf);
}

/* SLEEF's tanhf_u10 in double-float arithmetic (vmath.h vm_tanh_torch). */
struct dfl {
    float hi, lo;
};

static struct dfl dfl_add_f(struct dfl x, float y)
{
    const float s = x.hi + y, v = s - x.hi;
    return (struct dfl){s, ((x.hi - (s - v)) + (y - v)) + x.lo};
}

static struct dfl dfl_add(struct dfl x, struct dfl y)
{
    const float s = x.hi + y.hi, v = s - x.hi;
    return (struct dfl){s, ((x.hi - (s - v)) + (y.hi - v)) + (x.lo + y.lo)};
}

static struct dfl dfl_mul_f(struct dfl x, float y)
{
    const float s = x.hi * y;
    return (struct dfl){s, fmaf(x.lo, y, fmaf(x.hi, y, -s))};
}

static struct dfl dfl_mul(struct dfl x, struct dfl y)
{
    const float s = x.hi * y.hi;
    return (struct dfl){s, fmaf(x.hi, y.lo, fmaf(x.lo, y.hi, fmaf(x.hi, y.hi, -s)))};
}

static float tanh_torch(float x)
{
    const float y = fabsf(x);
    if (isnan(x))
        return x;
    if (y > 8.664339742f)
        return copysignf(1.0f, x);
    const float q =
        rintf(y * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    struct dfl sd = dfl_add_f((struct dfl){y, 0.0f}, q * -0.693145751953125f);
    sd = dfl_add_f(sd, q * -1.428606765330187045e-06f);
    float u = 0.1980960224e-3f;
    u = fmaf(u, sd.hi, 0.1394256484e-2f);
    u = fmaf(u, sd.hi, 0.8333456703e-2f);
    u = fmaf(u, sd.hi, 0.4166637361e-1f);
    struct dfl t = dfl_add_f(dfl_mul_f(sd, u), 0.166666659414234244790680580464e+0f);
    t = dfl_add_f(dfl_mul(sd, t), 0.5f);
    const float sq = sd.hi * sd.hi;
    const struct dfl s2 = {sq, fmaf(sd.hi + sd.hi, sd.lo, fmaf(sd.hi, sd.hi, -sq))};
    t = dfl_add(sd, dfl_mul(s2, t));
    const float th = 1.0f + t.hi;
    t = (struct dfl){th, ((1.0f - th) + t.hi) + t.lo};
    const int k = (int)q;
    const struct dfl e = {ldexpf(t.hi, k), ldexpf(t.lo, k)};
    const float rh = 1.0f / e.hi;
    const struct dfl r = {rh, rh * fmaf(-e.lo, rh, fmaf(-e.hi, rh, 1.0f))};
    const struct dfl n = dfl_add(e, (struct dfl){-r.hi, -r.lo});
    const struct dfl d = dfl_add(e, r);
    const float dr = 1.0f / d.hi, qh = n.hi * dr;
    const float ql = fmaf(dr, n.hi, -qh);
    const float corr = fmaf(-d.lo, dr, fmaf(-d.hi, dr, 1.0f));
    return copysignf(qh + fmaf(qh, corr, fmaf(n.lo, dr, ql)), x);
}

static float gelu_tanh_torch(float f)
{
    const float cube = f * f * f;
    const float inner = (float)(M_SQRT2 * M_2_SQRTPI * 0.5) * fmaf(0.044715f, cube, f);
    return 0.5f * f * (1.0f + tanh_torch(inner));
}

static float widen(int dt, uint16_t h)
{
    return dt == FLD_CPU_F16 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

static uint16_t narrow(int dt, float v)
{
    return dt == FLD_CPU_F16 ? fld_f32_to_f16(v) : fld_f32_to_bf16(v);
}

/*
 * The elementwise activations (core/reference/reference_activation.c's
 * formulas, the same operations; no PyTorch form: activations.def).
 */
static float gelu_quick(float f)
{
    return f / (1.0f + expf(-1.702f * f));
}

static float gelu_new(float f)
{
    const float c = 0.79788456f, cube = f * f * f;
    return 0.5f * f * (1.0f + tanhf(c * (f + 0.044715f * cube)));
}

static float gelu_fast(float f)
{
    const float c = 0.79788456f;
    return 0.5f * f * (1.0f + tanhf(c * f * (1.0f + 0.044715f * f * f)));
}

/* Each function's scalar forms (activations.def), by enum fld_cpu_act_fn; NULL: no PyTorch form. */
static float (*const reference_forms[FLD_CPU_FNS])(float) = {
#define FLD_CPU_ACT_FUNCTION(FN, scalar, vector) [FLD_CPU_FN_##FN] = scalar,
#include "activations.def"
};

static float (*const torch_forms[FLD_CPU_FNS])(float) = {
#define FLD_CPU_ACT_TORCH_FORM(FN, scalar, vector) [FLD_CPU_FN_##FN] = scalar,
#include "activations.def"
};

/* vLLM's activation fn of a in float32 (torch: PyTorch's CPU form), rounded to dt. */
static float act_rounded(enum fld_cpu_act_fn fn, int dt, int torch, float a)
{
    const float v = torch ? torch_forms[fn](a) : reference_forms[fn](a);
    return widen(dt, narrow(dt, v));
}

/* [torch][function: enum fld_cpu_act_fn][dtype: f16, bf16], 65536 entries + padding each. */
static uint16_t tables[2][FLD_CPU_FNS][2][65537];
static pthread_once_t built[2][FLD_CPU_FNS][2];

static void build(int torch, enum fld_cpu_act_fn fn, int d)
{
    const int dt = d ? FLD_CPU_BF16 : FLD_CPU_F16;
    for (uint32_t code = 0; code < 65536; code++)
        tables[torch][fn][d][code] =
            narrow(dt, act_rounded(fn, dt, torch, widen(dt, (uint16_t)code)));
}

/*
 * pthread_once takes no argument: one builder function per table, indexed
 * as the tables are (the torch ones only for functions with a PyTorch form).
 */
#define BUILDER(torch, FN, d)                                                                      \
    static void build_##torch##_##FN##_##d(void)                                                   \
    {                                                                                              \
        build(torch, FLD_CPU_FN_##FN, d);                                                          \
    }
#define FLD_CPU_ACT_FUNCTION(FN, scalar, vector) BUILDER(0, FN, 0) BUILDER(0, FN, 1)
#define FLD_CPU_ACT_TORCH_FORM(FN, scalar, vector) BUILDER(1, FN, 0) BUILDER(1, FN, 1)
#include "activations.def"

static void (*const builders[2][FLD_CPU_FNS][2])(void) = {
    {
#define FLD_CPU_ACT_FUNCTION(FN, scalar, vector)                                                   \
    [FLD_CPU_FN_##FN] = {build_0_##FN##_0, build_0_##FN##_1},
#include "activations.def"
    },
    {
#define FLD_CPU_ACT_TORCH_FORM(FN, scalar, vector)                                                 \
    [FLD_CPU_FN_##FN] = {build_1_##FN##_0, build_1_##FN##_1},
#include "activations.def"
    },
};

static pthread_once_t flags_once = PTHREAD_ONCE_INIT;

/* pthread_once_t has no portable zero value: every flag starts as a copy of PTHREAD_ONCE_INIT. */
static void init_flags(void)
{
    static const pthread_once_t initial = PTHREAD_ONCE_INIT;
    for (int t = 0; t < 2; t++)
        for (int f = 0; f < FLD_CPU_FNS; f++)
            for (int d = 0; d < 2; d++)
                built[t][f][d] = initial;
}

const uint16_t *fld__cpu_act_table(enum fld_cpu_act_fn fn, int dt, bool torch)
{
    if (dt == FLD_CPU_F32 || (unsigned)fn >= FLD_CPU_FNS)
        return NULL;
    /* a function without a PyTorch form has one table per dtype */
    const int d = dt == FLD_CPU_BF16, t = torch && torch_forms[fn] ? 1 : 0;
    pthread_once(&flags_once, init_flags);
    pthread_once(&built[t][fn][d], builders[t][fn][d]);
    return tables[t][fn][d];
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
