/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tests and speed table of the activation kernels,
 * standalone (no library). Every variant this machine runs is checked
 * against a double-precision oracle at the shapes of vLLM's kernel tests
 * with vLLM's default tolerances per dtype, on odd widths,
 * strided rows, in place, with and without non-temporal stores (aligned
 * and misaligned outputs), each call split into uneven row ranges as the
 * thread pool splits it; plus:
 *   - every byte outside the logical outputs keeps its guard value (before
 *     and after the buffers, row padding), and the input is not written
 *     (in place: only the first half of each row changes);
 *   - the variants agree with the portable one within the tolerance;
 *   - special values (0, -0, +-inf, NaN, |x| > 88, values at the clamps
 *     of exp and erf) behave like a float32 replica of
 *     core/reference/reference_activation.c: the same NaN, the same infinities, the
 *     same signed zeros, the rest within the tolerance;
 *   - an accuracy sweep of the vmath functions over a strided walk of all
 *     floats against double-precision libm (--accuracy for a finer one).
 *
 * Shapes trimmed from vLLM's: 2048 x 13824 is left out (2048 x 512 and
 * 83 x 13824 stay), for time.
 *
 * Usage: act_test [--quick] [--accuracy [STRIDE]] [--bench] [--micro] [-v]
 *   (VLLM_FL_CPU_ACT16=table|compute and VLLM_FL_CPU_LOOKUP=gather|scalar set
 *   the avx2 variant's 16-bit path, as in the plugin; default compute, gather)
 *   (no option)      the tests; exit 0 when every check passes
 *   --quick          smaller shapes (for qemu)
 *   --accuracy [S]   only the accuracy sweep, every S-th float (default 17)
 *   --bench          only the speed table (one thread, pinned to CPU 0):
 *                    4096 x 4096 GB/s against STREAM, one-row decode us
 *   --micro          one hot row of 4096, minimum ns per call (robust on a
 *                    busy machine; for comparing code changes)
 */
#include <float.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fldispatch/half.h>

#include "act_harness.h"

/* Set by the plugin at load (cpu_plugin.c); here the avx2 variant gathers, and computes its
 * 16-bit activations in float32 (looking up the vectors it cannot round for certain: the path
 * the plugin's default does not take, tested here), unless VLLM_FL_CPU_LOOKUP=scalar or
 * VLLM_FL_CPU_ACT16=table say otherwise (read in main). */
bool fld__cpu_lookup_scalar = false;
bool fld__cpu_act16_compute = true;

/* ---- variants ------------------------------------------------------------- */

struct variant {
    const char *name;
    void (*act)(const struct fld_cpu_act_job *job, int64_t row_begin, int64_t row_end);
    act_probe_t probe;
};

#define MAXV 8

/* The variants this machine runs; the portable one first (the others are compared with it). */
static int variants(struct variant *v)
{
    int n = 0;
    v[n++] = (struct variant){"portable", fld__cpu_variant_portable.act, act_probe_portable};
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        v[n++] = (struct variant){"avx2", fld__cpu_variant_avx2.act, act_probe_avx2};
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        v[n++] = (struct variant){"avx512", fld__cpu_variant_avx512.act, act_probe_avx512};
        if (__builtin_cpu_supports("avx512bf16"))
            v[n++] = (struct variant){"avx512_bf16", fld__cpu_variant_avx512_bf16.act,
                                      act_probe_avx512_bf16};
    }
#endif
#if defined(__aarch64__)
    v[n++] = (struct variant){"neon", fld__cpu_variant_neon.act, act_probe_neon};
#endif
    return n;
}

/* ---- small utilities ------------------------------------------------------- */

static int g_verbose, g_quick;
static long g_checks, g_failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
    g_failures++;
    if (g_failures > 40)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(void)
{
    return (double)(rnd() >> 11) * (1.0 / 9007199254740992.0);
}

static double gauss(void)
{
    double u = unif(), v = unif();
    return sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v);
}

static const char *const dt_name[3] = {"f32", "f16", "bf16"};
static const char *const act_name[4] = {"silu_and_mul", "mul_and_silu", "gelu_and_mul",
                                        "gelu_tanh_and_mul"};
/* vLLM's default tolerances per dtype (torch.testing's, as vLLM's kernel tests use them). */
static const double tol_atol[3] = {1e-5, 1e-3, 1e-3};
static const double tol_rtol[3] = {1.3e-6, 1e-3, 1.6e-2};

static float get(const void *p, int64_t i, int dt)
{
    if (dt == FLD_CPU_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == FLD_CPU_F16 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

static void put(void *p, int64_t i, int dt, float v)
{
    if (dt == FLD_CPU_F32)
        ((float *)p)[i] = v;
    else if (dt == FLD_CPU_F16)
        ((uint16_t *)p)[i] = fld_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = fld_f32_to_bf16(v);
}

/* The spacing of dtype dt's values around x (its unit in the last place). */
static double ulp_of(double x, int dt)
{
    int mant = dt == FLD_CPU_F32 ? 24 : dt == FLD_CPU_F16 ? 11 : 8;
    int emin = dt == FLD_CPU_F16 ? -14 : -126;
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    if (x == 0.0 || e - 1 < emin)
        e = emin + 1;
    return ldexp(1.0, e - mant);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the two references ------------------------------------------------------ */

/* The exact result, in double. */
static double oracle(enum fld_cpu_act act, double a, double b)
{
    switch (act) {
    case FLD_CPU_ACT_SILU_AND_MUL:
        return a / (1.0 + exp(-a)) * b;
    case FLD_CPU_ACT_MUL_AND_SILU:
        return a * (b / (1.0 + exp(-b)));
    case FLD_CPU_ACT_GELU_AND_MUL:
        return 0.5 * a * erfc(-a * 0.70710678118654752440) * b;
    default: {
        double u = 0.79788456080286535588 * (a + 0.044715 * a * a * a);
        return a / (1.0 + exp(-2.0 * u)) * b;
    }
    }
}

/* A float32 replica of core/reference/reference_activation.c (special values). */
static float ref32(enum fld_cpu_act act, float a, float b)
{
    switch (act) {
    case FLD_CPU_ACT_SILU_AND_MUL:
        return a / (1.0f + expf(-a)) * b;
    case FLD_CPU_ACT_MUL_AND_SILU:
        return a * (b / (1.0f + expf(-b)));
    case FLD_CPU_ACT_GELU_AND_MUL:
        return 0.5f * a * erfcf(-a * (float)M_SQRT1_2) * b;
    default: {
        float u = 0.7978845608028654f * (a + 0.044715f * a * a * a);
        return a / (1.0f + expf(-2.0f * u)) * b;
    }
    }
}

/* ---- statistics ---------------------------------------------------------------- */

struct stat {
    long cases, failed;
    double max_abs, max_rel, max_ulp, max_xvar; /* xvar: distance to portable / tolerance */
    double max_ratio, at_a, at_b;               /* error / tolerance, where */
};

static struct stat g_stat[4][3][MAXV];

/* ---- shaped cases ----------------------------------------------------------- */

struct acase {
    const char *name;
    int64_t rows, d;
    int64_t xpad, opad; /* row padding in elements (x_stride = 2d + xpad, out_stride = d + opad) */
    int inplace;        /* out = x (out_stride = x_stride) */
    int stream;         /* job->stream */
    int64_t ooff;       /* out base offset in elements from a 64-byte boundary */
};

#define GUARD 64 /* elements before and after every buffer */

static void fill_bytes(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)rnd();
}

/* An input value: mostly N(0, 1) scaled, some tails past +-10, a few exact zeros. */
static float gen_value(int dt)
{
    double u = unif();
    double v;
    if (u < 0.01)
        v = u < 0.005 ? 0.0 : -0.0;
    else if (u < 0.06)
        v = (unif() * 2.0 - 1.0) * 12.0;
    else
        v = gauss() * 2.5;
    float f = (float)v;
    if (dt != FLD_CPU_F32) { /* round to the dtype, as stored */
        unsigned char tmp[4];
        put(tmp, 0, dt, f);
        f = get(tmp, 0, dt);
    }
    return f;
}

/* Splits [0, rows) into uneven ranges, as the pool would for a few threads. */
static void run_split(const struct variant *v, const struct fld_cpu_act_job *job, int64_t rows)
{
    int64_t r = 0, step = 1;
    while (r < rows) {
        int64_t e = r + step < rows ? r + step : rows;
        v->act(job, r, e);
        r = e;
        step = step * 3 + 1;
    }
    v->act(job, rows, rows); /* an empty range does nothing */
}

static void run_case(const struct variant *vars, int nv, enum fld_cpu_act act, int dt,
                     const struct acase *c)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    const int64_t d = c->d, rows = c->rows;
    const int64_t xs = 2 * d + c->xpad;
    const int64_t os = c->inplace ? xs : d + c->opad;
    const int64_t x_elems = (rows - 1) * xs + 2 * d;
    const int64_t o_elems = c->inplace ? 0 : (rows - 1) * os + d;
    const size_t x_bytes = (size_t)((x_elems + 2 * GUARD) * es) + 64;
    const size_t o_bytes = (size_t)((o_elems + 2 * GUARD) * es) + 64 + (size_t)(c->ooff * es);

    unsigned char *x0 = aligned_alloc(64, (x_bytes + 63) / 64 * 64);
    unsigned char *x1 = aligned_alloc(64, (x_bytes + 63) / 64 * 64);
    unsigned char *o0 = aligned_alloc(64, (o_bytes + 63) / 64 * 64);
    unsigned char *o1 = aligned_alloc(64, (o_bytes + 63) / 64 * 64);
    double *want = malloc((size_t)(rows * d) * sizeof *want);
    unsigned char *first = malloc((size_t)(rows * d * 4));
    if (!x0 || !x1 || !o0 || !o1 || !want || !first) {
        fail("out of memory");
        goto done;
    }
    fill_bytes(x0, x_bytes);
    fill_bytes(o0, o_bytes);
    /* In place, out's base is x's: the offset applies to x instead. */
    const int64_t xoff = c->inplace ? c->ooff : 0;
    unsigned char *xb0 = x0 + (GUARD + xoff) * es;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < 2 * d; j++)
            put(xb0, r * xs + j, dt, gen_value(dt));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d; j++)
            want[r * d + j] = oracle(act, get(xb0, r * xs + j, dt), get(xb0, r * xs + d + j, dt));

    const double atol = tol_atol[dt], rtol = tol_rtol[dt];
    for (int vi = 0; vi < nv; vi++) {
        const struct variant *v = &vars[vi];
        struct stat *st = &g_stat[act][dt][vi];
        memcpy(x1, x0, x_bytes);
        memcpy(o1, o0, o_bytes);
        unsigned char *xb = x1 + (GUARD + xoff) * es;
        unsigned char *ob = c->inplace ? xb : o1 + (GUARD + c->ooff) * es;
        struct fld_cpu_act_job job = {act, dt, ob, os, xb, xs, d, c->stream != 0, false};
        run_split(v, &job, rows);

        long bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < d; j++) {
                double w = want[r * d + j];
                double g = get(ob, r * os + j, dt);
                double err = fabs(g - w);
                int ok = err <= atol + rtol * fabs(w);
                if (!ok && bad++ < 3)
                    fail("%s %s %s %s: row %lld col %lld: got %.9g want %.9g (a %.9g b %.9g)",
                         act_name[act], dt_name[dt], v->name, c->name, (long long)r, (long long)j,
                         g, w, get(x0 + (GUARD + xoff) * es, r * xs + j, dt),
                         get(x0 + (GUARD + xoff) * es, r * xs + d + j, dt));
                if (err > st->max_abs)
                    st->max_abs = err;
                if (err / (atol + rtol * fabs(w)) > st->max_ratio) {
                    st->max_ratio = err / (atol + rtol * fabs(w));
                    st->at_a = get(x0 + (GUARD + xoff) * es, r * xs + j, dt);
                    st->at_b = get(x0 + (GUARD + xoff) * es, r * xs + d + j, dt);
                }
                if (fabs(w) > atol && err / fabs(w) > st->max_rel)
                    st->max_rel = err / fabs(w);
                double ue = err / ulp_of(w, dt);
                if (fabs(w) > atol && ue > st->max_ulp)
                    st->max_ulp = ue;
                if (vi == 0) {
                    memcpy(first + (r * d + j) * 4, &(float){(float)g}, 4);
                } else {
                    float p;
                    memcpy(&p, first + (r * d + j) * 4, 4);
                    double x = fabs(g - p) / (atol + rtol * fabs((double)p));
                    if (x > st->max_xvar)
                        st->max_xvar = x;
                    if (x > 1.0 && bad++ < 3)
                        fail("%s %s %s %s: row %lld col %lld: %.9g but portable %.9g",
                             act_name[act], dt_name[dt], v->name, c->name, (long long)r,
                             (long long)j, g, (double)p);
                }
            }

        /* Guards: x unchanged except (in place) each row's first d elements; out's padding
         * unchanged. */
        long touched = 0;
        for (size_t i = 0; i < x_bytes; i++) {
            if (x1[i] == x0[i])
                continue;
            int64_t e = (int64_t)i / es - GUARD - xoff;
            int64_t r = e >= 0 ? e / xs : -1, j = e >= 0 ? e % xs : -1;
            if (c->inplace && (int64_t)i >= (GUARD + xoff) * es && r < rows && j < d)
                continue;
            if (touched++ < 2)
                fail("%s %s %s %s: input byte %zu (row %lld col %lld) written", act_name[act],
                     dt_name[dt], v->name, c->name, i, (long long)r, (long long)j);
        }
        if (!c->inplace)
            for (size_t i = 0; i < o_bytes; i++) {
                if (o1[i] == o0[i])
                    continue;
                int64_t e = (int64_t)i / es - GUARD - c->ooff;
                int64_t r = e >= 0 ? e / os : -1, j = e >= 0 ? e % os : -1;
                if ((int64_t)i >= (GUARD + c->ooff) * es && r < rows && j < d)
                    continue;
                if (touched++ < 2)
                    fail("%s %s %s %s: out byte %zu (row %lld col %lld) outside the rows written",
                         act_name[act], dt_name[dt], v->name, c->name, i, (long long)r,
                         (long long)j);
            }
        g_checks += 2;
        st->cases++;
        if (bad || touched)
            st->failed++;
        if (g_verbose)
            printf("  %-18s %-4s %-12s %-28s %s\n", act_name[act], dt_name[dt], v->name, c->name,
                   bad || touched ? "FAIL" : "ok");
    }
done:
    free(x0);
    free(x1);
    free(o0);
    free(o1);
    free(want);
    free(first);
}

static void shaped_cases(const struct variant *vars, int nv)
{
    static const struct acase full[] = {
        /* vLLM test_activation.py: tokens {7, 83, 2048} x d {512, 13824} (2048 x 13824 trimmed) */
        {"7x512", 7, 512, 0, 0, 0, 0, 0},
        {"83x512", 83, 512, 0, 0, 0, 0, 0},
        {"2048x512", 2048, 512, 0, 0, 0, 0, 0},
        {"7x13824", 7, 13824, 0, 0, 0, 0, 0},
        {"83x13824", 83, 13824, 0, 0, 0, 0, 0},
        /* odd widths */
        {"5x1", 5, 1, 0, 0, 0, 0, 0},
        {"5x3", 5, 3, 0, 0, 0, 0, 0},
        {"5x17", 5, 17, 0, 0, 0, 0, 0},
        {"5x769", 5, 769, 0, 0, 0, 0, 0},
        {"3x5125", 3, 5125, 0, 0, 0, 0, 0},
        /* strided rows: padding after each x row and each out row */
        {"strided 9x769", 9, 769, 37, 13, 0, 0, 0},
        {"strided 4x4096", 4, 4096, 64, 16, 0, 0, 0},
        /* in place: out is x's first half */
        {"inplace 6x512", 6, 512, 0, 0, 1, 0, 0},
        {"inplace 5x17", 5, 17, 0, 0, 1, 0, 0},
        {"inplace strided 5x769", 5, 769, 11, 0, 1, 0, 0},
        /* non-temporal stores: aligned, misaligned (head peeled), tiny rows */
        {"stream 8x4096", 8, 4096, 0, 0, 0, 1, 0},
        {"stream off3 7x1000", 7, 1000, 0, 5, 0, 1, 3},
        {"stream off1 5x3", 5, 3, 0, 0, 0, 1, 1},
        {"stream off5 4x17", 4, 17, 3, 1, 0, 1, 5},
        {"stream inplace 5x769", 5, 769, 0, 0, 1, 1, 1},
        {"stream strided 6x5125", 6, 5125, 7, 9, 0, 1, 0},
    };
    static const struct acase quick[] = {
        {"7x512", 7, 512, 0, 0, 0, 0, 0},
        {"2x13824", 2, 13824, 0, 0, 0, 0, 0},
        {"5x1", 5, 1, 0, 0, 0, 0, 0},
        {"5x3", 5, 3, 0, 0, 0, 0, 0},
        {"5x17", 5, 17, 0, 0, 0, 0, 0},
        {"5x769", 5, 769, 0, 0, 0, 0, 0},
        {"2x5125", 2, 5125, 0, 0, 0, 0, 0},
        {"strided 9x769", 9, 769, 37, 13, 0, 0, 0},
        {"inplace 5x17", 5, 17, 0, 0, 1, 0, 0},
        {"inplace strided 5x769", 5, 769, 11, 0, 1, 0, 0},
        {"stream off3 7x1000", 7, 1000, 0, 5, 0, 1, 3},
        {"stream off1 5x3", 5, 3, 0, 0, 0, 1, 1},
        {"stream inplace 5x769", 5, 769, 0, 0, 1, 1, 1},
    };
    const struct acase *cs = g_quick ? quick : full;
    int n = g_quick ? (int)(sizeof quick / sizeof quick[0]) : (int)(sizeof full / sizeof full[0]);
    for (int act = 0; act < 4; act++)
        for (int dt = 0; dt < 3; dt++)
            for (int i = 0; i < n; i++)
                run_case(vars, nv, (enum fld_cpu_act)act, dt, &cs[i]);
}

/* ---- special values ------------------------------------------------------------ */

static int same_class(float g, float r, int dt)
{
    if (isnan(r) || isnan(g))
        return isnan(r) && isnan(g);
    if (isinf(r) || isinf(g))
        return g == r;
    if (r == 0.0f && g == 0.0f)
        return signbit(r) == signbit(g);
    return fabs((double)g - r) <= tol_atol[dt] + tol_rtol[dt] * fabs((double)r);
}

static long g_exempt;

/*
 * The one accepted difference: where the activation underflows (silu and
 * gelu_tanh of about -88.7 .. -104, gelu of about -13 .. -14.5) one side
 * has -0 and the other a tiny number (the reference divides by an
 * overflowed exp from -88.7 on, the kernels' e^x underflows from -104 on),
 * so a factor of +-inf gives NaN on one side and +-inf on the other.
 */
static int inf_times_tiny(int act, int dt, float a, float b)
{
    if (!isinf(a) && !isinf(b))
        return 0;
    float f = ref32((enum fld_cpu_act)act, isinf(a) ? 1.0f : a, isinf(b) ? 1.0f : b);
    /*
     * 16-bit dtypes round the activation before the product, from vLLM's
     * float32 formulas (exact.c), which cancel in the negative tails
     * (1 + erff, 1 + tanhf: 0 below about -5.6) where ref32's forms do not,
     * and float16 rounds below 2^-14 into subnormals or 0: there a tiny
     * activation is 0 on one side only.
     */
    return fabsf(f) < (dt == FLD_CPU_F32 ? 1e-30f : 0x1p-14f);
}

static void specials(const struct variant *vars, int nv)
{
    static const float av[] = {
        0.0f,   -0.0f,   INFINITY, -INFINITY, NAN,    -NAN,    1.0f,   -1.0f,  5.65f,  -5.65f,
        5.7f,   -5.7f,   6.4f,     -6.4f,     9.0f,   -9.0f,   30.0f,  -30.0f, 86.9f,  -86.9f,
        87.1f,  -87.1f,  88.5f,    -88.5f,    88.73f, -88.73f, 89.0f,  -89.0f, 100.0f, -100.0f,
        103.9f, -103.9f, 104.5f,   -104.5f,   6e4f,   -6e4f,   1e19f,  -1e19f, 3e19f,  -3e19f,
        1e30f,  -1e30f,  FLT_MAX,  -FLT_MAX,  1e-20f, -1e-20f, 1e-40f, -1e-40f};
    static const float bv[] = {1.0f, -1.0f, 0.0f, -0.0f, 2.5f, INFINITY, -INFINITY, NAN, 1e-3f};
    const int na = (int)(sizeof av / sizeof av[0]), nb = (int)(sizeof bv / sizeof bv[0]);
    const int64_t d = (int64_t)na * nb;

    for (int dt = 0; dt < 3; dt++)
        for (int act = 0; act < 4; act++) {
            const int64_t es = (int64_t)fld__cpu_elem_size(dt);
            unsigned char *x = malloc((size_t)(2 * d * es)), *o = malloc((size_t)(d * es));
            if (!x || !o) {
                fail("out of memory");
                free(x);
                free(o);
                return;
            }
            for (int i = 0; i < na; i++)
                for (int k = 0; k < nb; k++) {
                    put(x, i * nb + k, dt, av[i]);
                    put(x, d + i * nb + k, dt, bv[k]);
                }
            for (int vi = 0; vi < nv; vi++) {
                memset(o, 0x5a, (size_t)(d * es));
                struct fld_cpu_act_job job = {
                    (enum fld_cpu_act)act, dt, o, d, x, 2 * d, d, false, false};
                vars[vi].act(&job, 0, 1);
                int bad = 0;
                for (int64_t j = 0; j < d; j++) {
                    float a = get(x, j, dt), b = get(x, d + j, dt);
                    /* the reference's value, rounded to dt as it stores it */
                    unsigned char tmp[4];
                    put(tmp, 0, dt, ref32((enum fld_cpu_act)act, a, b));
                    float r = get(tmp, 0, dt), g = get(o, j, dt);
                    if (!same_class(g, r, dt) && (isnan(g) || isnan(r)) && (isinf(g) || isinf(r)) &&
                        inf_times_tiny(act, dt, a, b)) {
                        g_exempt++;
                        continue;
                    }
                    if (!same_class(g, r, dt) && bad++ < 4)
                        fail("special %s %s %s: a %g b %g: got %g, reference %g", act_name[act],
                             dt_name[dt], vars[vi].name, (double)a, (double)b, (double)g,
                             (double)r);
                }
                g_checks++;
                if (g_verbose)
                    printf("  special %-18s %-4s %-12s %s\n", act_name[act], dt_name[dt],
                           vars[vi].name, bad ? "FAIL" : "ok");
            }
            free(x);
            free(o);
        }
}

/* ---- accuracy of the vmath functions ------------------------------------------ */

static double fn_exact(int fn, double x)
{
    switch (fn) {
    case PROBE_EXP:
        return exp(x);
    case PROBE_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case PROBE_SILU:
        return x / (1.0 + exp(-x));
    case PROBE_GELU_TANH:
        return x / (1.0 + exp(-2.0 * 0.79788456080286535588 * (x + 0.044715 * x * x * x)));
    case PROBE_ERF:
        return erf(x);
    default:
        return 0.5 * x * erfc(-x * 0.70710678118654752440);
    }
}

static const char *const fn_name[PROBE_COUNT] = {"exp",       "sigmoid", "silu",
                                                 "gelu_tanh", "erf",     "gelu"};
/* The range each function is measured on (past it the results are limits: 0, inf, +-1, x). */
static const float fn_lo[PROBE_COUNT] = {-87.3f, -87.0f, -87.0f, -40.0f, -FLT_MAX, -FLT_MAX};
static const float fn_hi[PROBE_COUNT] = {88.7f, 87.0f, 87.0f, 40.0f, FLT_MAX, FLT_MAX};

/*
 * Walks the floats of [lo, hi] with a stride over the bit patterns, and
 * reports per function and variant the largest error in ulp of the exact
 * value where |exact| >= 1e-6 (all but erf: below that the f32 tolerance's
 * atol of 1e-5 is what counts, and the inputs' own rounding dominates, e.g.
 * gelu_tanh(-9) = -3e-30 comes from e^-70, whose argument carries a
 * relative error of 2^-24) and the largest absolute error.
 */
static void accuracy(const struct variant *vars, int nv, uint32_t stride, int table)
{
    enum { CH = 1 << 16 };
    float *in = malloc(CH * sizeof *in), *out = malloc(CH * sizeof *out);
    double *ex = malloc(CH * sizeof *ex);
    if (!in || !out || !ex) {
        fail("out of memory");
        goto done;
    }
    if (table)
        printf("\naccuracy (every %u-th float; ulp where |exact| >= 1e-3):\n%-10s %-12s %12s %12s "
               "%14s %12s\n",
               stride, "function", "variant", "max_ulp", "at", "max_abs", "at");
    for (int fn = 0; fn < PROBE_COUNT; fn++)
        for (int vi = 0; vi < nv; vi++) {
            if (!vars[vi].probe)
                continue;
            double max_ulp = 0, at_ulp = 0, max_abs = 0, at_abs = 0;
            /* negative floats from lo up to -0, then positive ones to hi */
            for (int sign = 0; sign < 2; sign++) {
                float lim = sign ? fn_hi[fn] : -fn_lo[fn];
                uint32_t top;
                memcpy(&top, &lim, 4);
                for (uint64_t u = 0; u <= top;) {
                    int n = 0;
                    for (; n < CH && u <= top; n++, u += stride) {
                        uint32_t bits = (uint32_t)u | (sign ? 0u : 0x80000000u);
                        memcpy(&in[n], &bits, 4);
                    }
                    vars[vi].probe(fn, out, in, n);
                    for (int i = 0; i < n; i++) {
                        double x = in[i], w = fn_exact(fn, x), g = out[i];
                        double err = fabs(g - w);
                        if (isnan(g) || isnan(w)) {
                            if (!(isnan(g) && isnan(w)))
                                fail("accuracy %s %s: x %.9g got %.9g want %.9g", fn_name[fn],
                                     vars[vi].name, x, g, w);
                            continue;
                        }
                        if (err > max_abs) {
                            max_abs = err;
                            at_abs = x;
                        }
                        if (fn != PROBE_ERF && fabs(w) >= 1e-3) {
                            double ue = err / ulp_of(w, FLD_CPU_F32);
                            if (ue > max_ulp) {
                                max_ulp = ue;
                                at_ulp = x;
                            }
                        }
                    }
                }
            }
            if (table)
                printf("%-10s %-12s %12.2f %12.6g %14.3g %12.6g\n", fn_name[fn], vars[vi].name,
                       max_ulp, at_ulp, max_abs, at_abs);
            /* The bounds vmath.h documents, with a margin for the strided walk. */
            static const double ulp_bound[PROBE_COUNT] = {2, 5, 5, 16, 0, 24};
            if (fn != PROBE_ERF && max_ulp > ulp_bound[fn])
                fail("accuracy %s %s: %.2f ulp at %.9g", fn_name[fn], vars[vi].name, max_ulp,
                     at_ulp);
            if (fn == PROBE_ERF && max_abs > 4e-7)
                fail("accuracy %s %s: abs error %.3g at %.9g", fn_name[fn], vars[vi].name, max_abs,
                     at_abs);
            g_checks++;
        }
done:
    free(in);
    free(out);
    free(ex);
}

/* ---- speed --------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Median seconds of one call of rows x d (input 2d), reps times (hot-cache decode). */
static double time_call(const struct variant *v, enum fld_cpu_act act, int dt, void *x, void *o,
                        int64_t rows, int64_t d, int stream, int reps, int inner)
{
    double t[16];
    struct fld_cpu_act_job job = {act, dt, o, d, x, 2 * d, d, stream != 0, false};
    v->act(&job, 0, rows); /* warm up */
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        for (int i = 0; i < inner; i++)
            v->act(&job, 0, rows);
        t[r] = (now_s() - t0) / inner;
    }
    return median(t, reps);
}

/*
 * The machine is shared and its memory bandwidth drifts by 2x within
 * minutes, so every kernel pass is paired with a STREAM triad pass just
 * before it: the share of STREAM is the median of the per-pair ratios,
 * and the GB/s the median of the kernel passes.
 */
struct triad {
    double *a, *b, *c;
    int64_t n;
};

static void paired(const struct variant *v, enum fld_cpu_act act, int dt, void *x, void *o,
                   int64_t rows, int64_t d, int stream, int reps, const struct triad *tr,
                   double *gbps, double *share)
{
    double g[16], s[16];
    struct fld_cpu_act_job job = {act, dt, o, d, x, 2 * d, d, stream != 0, false};
    const double bytes = 3.0 * (double)(rows * d) * (double)fld__cpu_elem_size(dt);
    for (int r = 0; r < reps; r++) {
        double st = act_triad_once(tr->a, tr->b, tr->c, tr->n);
        double t0 = now_s();
        v->act(&job, 0, rows);
        g[r] = bytes / (now_s() - t0) / 1e9;
        s[r] = g[r] / st;
    }
    *gbps = median(g, reps);
    *share = median(s, reps);
}

static void bench(void)
{
    struct variant vars[MAXV];
    int nv = variants(vars);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    sched_setaffinity(0, sizeof one, &one);

    struct triad tr = {NULL, NULL, NULL, (int64_t)256 << 20 >> 3};
    tr.a = malloc((size_t)tr.n * sizeof(double));
    tr.b = malloc((size_t)tr.n * sizeof(double));
    tr.c = malloc((size_t)tr.n * sizeof(double));
    const int64_t R = 4096, D = 4096;
    void *x = aligned_alloc(64, (size_t)(R * 2 * D * 4));
    void *o = aligned_alloc(64, (size_t)(R * D * 4));
    if (!x || !o || !tr.a || !tr.b || !tr.c) {
        fail("out of memory");
        return;
    }
    for (int64_t i = 0; i < tr.n; i++) {
        tr.a[i] = 0.0;
        tr.b[i] = 1.0 + (double)(i & 7);
        tr.c[i] = 2.0;
    }
    double stream = act_stream_triad((int64_t)256 << 20 >> 3, 5);
    printf("STREAM triad, one thread, 3 x 256 MiB, -O3 -mavx512f: %.2f GB/s (best of 5, at the "
           "start)\n",
           stream);

    printf("\n4096 x 4096 (out d = 4096, input 2d), one thread; GB/s = (read 2d + write d) / time, "
           "median of 5 (portable: 3);\n(%%) = median share of a STREAM triad run just "
           "before each pass; * = non-temporal stores (job->stream) were faster\n");
    printf("%-18s %-5s", "op", "dtype");
    for (int vi = 0; vi < nv; vi++)
        printf(" %18s", vars[vi].name);
    printf("\n");
    for (int act = 0; act < 4; act++)
        for (int dt = 0; dt < 3; dt++) {
            for (int64_t i = 0; i < R * 2 * D; i++)
                put(x, i, dt, (float)(gauss() * 2.0));
            memset(o, 0, (size_t)(R * D * 4));
            printf("%-18s %-5s", act_name[act], dt_name[dt]);
            fflush(stdout);
            for (int vi = 0; vi < nv; vi++) {
                int reps = !strcmp(vars[vi].name, "portable") ? 3 : 5;
                double g, sh, g2 = 0, sh2 = 0;
                paired(&vars[vi], (enum fld_cpu_act)act, dt, x, o, R, D, 0, reps, &tr, &g, &sh);
                paired(&vars[vi], (enum fld_cpu_act)act, dt, x, o, R, D, 1, reps, &tr, &g2, &sh2);
                int nt = g2 > g;
                printf(" %7.2f%c (%4.0f%%)", nt ? g2 : g, nt ? '*' : ' ', 100.0 * (nt ? sh2 : sh));
                fflush(stdout);
            }
            printf("\n");
        }
    free(tr.a);
    free(tr.b);
    free(tr.c);

    printf("\ndecode: one row, hot cache, us per call (median of 9 batches of 2000 calls)\n");
    printf("%-18s %-5s %-6s", "op", "dtype", "d");
    for (int vi = 0; vi < nv; vi++)
        printf(" %11s", vars[vi].name);
    printf("\n");
    for (int act = 0; act < 4; act++)
        for (int dt = 0; dt < 3; dt++)
            for (int64_t d = 2048; d <= 4096; d *= 2) {
                for (int64_t i = 0; i < 2 * d; i++)
                    put(x, i, dt, (float)(gauss() * 2.0));
                printf("%-18s %-5s %-6lld", act_name[act], dt_name[dt], (long long)d);
                for (int vi = 0; vi < nv; vi++) {
                    double t =
                        time_call(&vars[vi], (enum fld_cpu_act)act, dt, x, o, 1, d, 0, 9, 2000);
                    printf(" %11.3f", t * 1e6);
                }
                printf("\n");
            }
    free(x);
    free(o);
}

/*
 * Hot-cache cost of one row, robust to a busy machine: the minimum over
 * many single calls (a call that was not interrupted), in ns per call.
 */
static double min_call_ns(const struct variant *v, enum fld_cpu_act act, int dt, void *x, void *o,
                          int64_t d, int calls)
{
    struct fld_cpu_act_job job = {act, dt, o, d, x, 2 * d, d, false, false};
    double best = 1e30;
    for (int i = 0; i < calls; i++) {
        double t0 = now_s();
        v->act(&job, 0, 1);
        double t = now_s() - t0;
        if (t < best)
            best = t;
    }
    return best * 1e9;
}

static void micro(void)
{
    struct variant vars[MAXV];
    int nv = variants(vars);
    const int64_t d = 4096;
    void *x = aligned_alloc(64, (size_t)(2 * d * 4)), *o = aligned_alloc(64, (size_t)(d * 4));
    if (!x || !o) {
        fail("out of memory");
        return;
    }
    printf("one row d = %lld, hot cache, minimum ns per call over 3000 calls\n", (long long)d);
    printf("%-18s %-5s", "op", "dtype");
    for (int vi = 0; vi < nv; vi++)
        printf(" %11s", vars[vi].name);
    printf("\n");
    for (int act = 0; act < 4; act++)
        for (int dt = 0; dt < 3; dt++) {
            for (int64_t i = 0; i < 2 * d; i++)
                put(x, i, dt, (float)(gauss() * 2.0));
            printf("%-18s %-5s", act_name[act], dt_name[dt]);
            for (int vi = 0; vi < nv; vi++)
                printf(" %11.0f", min_call_ns(&vars[vi], (enum fld_cpu_act)act, dt, x, o, d, 3000));
            printf("\n");
        }
    free(x);
    free(o);
}

/* ---- main ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    int do_bench = 0, do_acc = 0;
    uint32_t stride = 17;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (!strcmp(argv[i], "-v"))
            g_verbose = 1;
        else if (!strcmp(argv[i], "--bench"))
            do_bench = 1;
        else if (!strcmp(argv[i], "--micro"))
            do_bench = 2;
        else if (!strcmp(argv[i], "--accuracy")) {
            do_acc = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-')
                stride = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--accuracy [STRIDE]] [--bench] [--micro] [-v]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *lookup = getenv("VLLM_FL_CPU_LOOKUP"), *act16 = getenv("VLLM_FL_CPU_ACT16");
    fld__cpu_lookup_scalar = lookup && !strcmp(lookup, "scalar");
    fld__cpu_act16_compute = !act16 || strcmp(act16, "table") != 0;
    printf("avx2: 16-bit activations %s, tables read with %s\n",
           fld__cpu_act16_compute ? "computed" : "looked up",
           fld__cpu_lookup_scalar ? "scalar loads" : "gathers");
    if (do_bench) {
        if (do_bench == 2)
            micro();
        else
            bench();
        return g_failures != 0;
    }
    struct variant vars[MAXV];
    int nv = variants(vars);
    printf("variants:");
    for (int i = 0; i < nv; i++)
        printf(" %s", vars[i].name);
    printf("%s\n", g_quick ? " (quick)" : "");
    if (do_acc) {
        accuracy(vars, nv, stride ? stride : 1, 1);
        printf("%ld checks, %ld failures\n", g_checks, g_failures);
        return g_failures != 0;
    }

    shaped_cases(vars, nv);
    specials(vars, nv);
    accuracy(vars, nv, g_quick ? 100003 : 4099, 0);

    printf("\n%-18s %-5s %-12s %6s %10s %10s %8s %7s %7s  %s\n", "op", "dtype", "variant", "cases",
           "max_abs", "max_rel", "max_ulp", "err/tol", "vs_port", "worst at (a, b)");
    for (int act = 0; act < 4; act++)
        for (int dt = 0; dt < 3; dt++)
            for (int vi = 0; vi < nv; vi++) {
                const struct stat *s = &g_stat[act][dt][vi];
                printf(
                    "%-18s %-5s %-12s %3ld/%-3ld %10.3g %10.3g %8.2f %7.3f %7.3f  (%.6g, %.6g)\n",
                    act_name[act], dt_name[dt], vars[vi].name, s->cases - s->failed, s->cases,
                    s->max_abs, s->max_rel, s->max_ulp, s->max_ratio, s->max_xvar, s->at_a,
                    s->at_b);
            }
    printf("(max_rel, max_ulp: where |exact| > atol, ulp of the dtype; err/tol: largest error in "
           "units of the tolerance atol + rtol |exact|; vs_port: largest distance to the portable "
           "variant's output, same units)\n");
    printf(
        "special values: %ld inf * tiny products exempted (NaN on one side, +-inf on the other)\n",
        g_exempt);
    printf("%ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures != 0;
}
