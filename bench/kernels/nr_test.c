/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Correctness harness of the norm and rotary bodies,
 * standalone (no library). Every variant this machine runs (nr_variants)
 * is checked against a double-precision oracle at the shapes of vLLM's
 * kernel tests with vLLM's default tolerances per dtype, on odd
 * widths, strided rows, in place, with and without residual and weight,
 * gemma, rotary neox and gptj with rot_dim < head_size, padded heads, key
 * absent, int32 positions, a cache dtype other than the query's; plus:
 *   - every byte outside the logical outputs keeps its guard value (row
 *     padding, the non-rotated tail of each head, before and after);
 *   - inputs that are not outputs are not written at all;
 *   - the residual equals round(x + residual) bit for bit;
 *   - variants agree with each other within the tolerance (rotary: bit
 *     for bit) and rotary equals a float32 replica of the reference;
 *   - special values (0, -0, +-inf, NaN, large) behave like a float32
 *     replica of core/reference/reference_norm.c / reference_rotary.c.
 * Each call is split into uneven row ranges as the thread pool splits it.
 *
 * Usage: nr_test [--quick] [-v]. Exit 0 when every check passes.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nr_harness.h"

/* ---- small utilities ------------------------------------------------------ */

static int g_verbose, g_quick;
static long g_checks, g_failures;

#define MAXV 8

static const char *const DT_NAME[3] = {"f32", "f16", "bf16"};
static const double ATOL[3] = {1e-5, 1e-3, 1e-3};
static const double RTOL[3] = {1.3e-6, 1e-3, 1.6e-2};

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void)
{
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rnd_unit(void) /* (0, 1) */
{
    return ((double)(rnd_u64() >> 11) + 0.5) / 9007199254740992.0;
}

static double rnd_normal(void)
{
    return sqrt(-2.0 * log(rnd_unit())) * cos(6.283185307179586 * rnd_unit());
}

static size_t esize(int dt)
{
    return dt == FLD_CPU_F32 ? 4 : 2;
}

static float ld(const void *p, int64_t i, int dt)
{
    if (dt == FLD_CPU_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == FLD_CPU_F16 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

static void st(void *p, int64_t i, int dt, float v)
{
    if (dt == FLD_CPU_F32)
        ((float *)p)[i] = v;
    else if (dt == FLD_CPU_F16)
        ((uint16_t *)p)[i] = fld_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = fld_f32_to_bf16(v);
}

static float round_dt(float v, int dt)
{
    float b[1];
    uint16_t h[1];
    if (dt == FLD_CPU_F32)
        return v;
    st(h, 0, dt, v);
    b[0] = ld(h, 0, dt);
    return b[0];
}

#define GUARD 0xA5

/*
 * A buffer with guard bytes: n elements of dtype dt starting `off`
 * elements past a 64-byte boundary, 256 guard bytes before and after.
 * mask[i] marks the elements the kernel may write.
 */
typedef struct {
    unsigned char *alloc;
    void *p;
    size_t bytes, front;
    int64_t n;
    int dt;
    unsigned char *mask;
} buf;

static void buf_init(buf *b, int64_t n, int dt, int64_t off)
{
    b->dt = dt;
    b->n = n;
    b->front = 256 + (size_t)off * esize(dt);
    b->bytes = b->front + (size_t)n * esize(dt) + 256;
    b->alloc = aligned_alloc(64, (b->bytes + 63) / 64 * 64);
    b->mask = calloc((size_t)n + 1, 1);
    if (!b->alloc || !b->mask) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(b->alloc, GUARD, b->bytes);
    b->p = b->alloc + b->front;
}

static void buf_copy(buf *d, const buf *s)
{
    *d = *s;
    d->alloc = aligned_alloc(64, (s->bytes + 63) / 64 * 64);
    d->mask = NULL;
    if (!d->alloc) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memcpy(d->alloc, s->alloc, s->bytes);
    d->p = d->alloc + s->front;
}

static void buf_free(buf *b)
{
    free(b->alloc);
    free(b->mask);
    b->alloc = NULL;
    b->mask = NULL;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    g_failures++;
    if (g_failures > 40)
        return;
    va_start(ap, fmt);
    fputs("FAIL ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
}

/*
 * Bytes of `got` outside the elements in mask must equal `orig` (the
 * buffer before the call). Returns the number of bad bytes.
 */
static long guard_check(const buf *got, const buf *orig, const unsigned char *mask,
                        const char *what, const char *ctx)
{
    const size_t es = esize(got->dt), end = got->front + (size_t)got->n * es;
    long bad = 0;
    ssize_t first = -1;
    if (memcmp(got->alloc, orig->alloc, got->front))
        for (size_t i = 0; i < got->front && first < 0; i++)
            if (got->alloc[i] != orig->alloc[i])
                first = (ssize_t)i, bad++;
    if (memcmp(got->alloc + end, orig->alloc + end, got->bytes - end))
        for (size_t i = end; i < got->bytes; i++)
            if (got->alloc[i] != orig->alloc[i]) {
                if (first < 0)
                    first = (ssize_t)i;
                bad++;
            }
    for (int64_t e = 0; e < got->n; e++) {
        if (mask && mask[e])
            continue;
        size_t i = got->front + (size_t)e * es;
        if (memcmp(got->alloc + i, orig->alloc + i, es)) {
            if (first < 0)
                first = (ssize_t)i;
            bad++;
        }
    }
    if (bad)
        fail("%s: %s: %ld bytes/elements outside the output were written, the first at byte %zd "
             "(element %lld)",
             ctx, what, bad, first - (ssize_t)got->front,
             (long long)((first - (ssize_t)got->front) / (ssize_t)es));
    g_checks++;
    return bad;
}

/* Error statistics of one (op, dtype, variant). */
typedef struct {
    char op[16];
    int dt;
    const char *var;
    double max_abs, max_rel, max_tol; /* max_tol: max |d| / (atol + rtol |e|) */
    double max_xvar;                  /* max |d| / tol against the first variant */
    long n, exact_xvar, n_xvar;
} stats;

static stats g_stats[64];
static int g_nstats;

static stats *stats_for(const char *op, int dt, const char *var)
{
    for (int i = 0; i < g_nstats; i++)
        if (!strcmp(g_stats[i].op, op) && g_stats[i].dt == dt && g_stats[i].var == var)
            return &g_stats[i];
    if (g_nstats == 64) {
        fprintf(stderr, "too many stats\n");
        exit(2);
    }
    stats *s = &g_stats[g_nstats++];
    memset(s, 0, sizeof *s);
    snprintf(s->op, sizeof s->op, "%s", op);
    s->dt = dt;
    s->var = var;
    return s;
}

/* got vs the exact value; returns 1 when within tolerance. */
static int cmp_exact_slack(stats *s, double got, double exp, int dt, double slack)
{
    double d = fabs(got - exp), tol = ATOL[dt] + RTOL[dt] * fabs(exp) + slack;
    if (!(d <= tol) && !(isnan(got) && isnan(exp)))
        return 0;
    if (d > s->max_abs)
        s->max_abs = d;
    if (fabs(exp) > ATOL[dt] && d / fabs(exp) > s->max_rel)
        s->max_rel = d / fabs(exp);
    if (d / tol > s->max_tol)
        s->max_tol = d / tol;
    s->n++;
    return 1;
}

static int cmp_exact(stats *s, double got, double exp, int dt)
{
    return cmp_exact_slack(s, got, exp, dt, 0.0);
}

/* Unit roundoff per dtype (f32, f16, bf16). */
static const double UNIT_ROUNDOFF[3] = {0x1p-24, 0x1p-11, 0x1p-8};

/* got vs another variant's result; returns 1 when within tolerance. */
static int cmp_xvar(stats *s, float got, float other, int dt)
{
    s->n_xvar++;
    if (memcmp(&got, &other, sizeof got) == 0 || (isnan(got) && isnan(other))) {
        s->exact_xvar++;
        return 1;
    }
    double d = fabs((double)got - other), tol = ATOL[dt] + RTOL[dt] * fabs((double)other);
    if (!(d <= tol))
        return 0;
    if (d / tol > s->max_xvar)
        s->max_xvar = d / tol;
    return 1;
}

/* Special values: same class (NaN, inf of a sign, zero of a sign), or finite and close. */
static int same_special(float got, float exp, int dt)
{
    if (isnan(exp))
        return isnan(got);
    if (isinf(exp) || exp == 0.0f)
        return got == exp && signbit(got) == signbit(exp);
    return isfinite(got) && fabs((double)got - exp) <= ATOL[dt] + RTOL[dt] * fabs((double)exp);
}

/* ---- rms_norm ----------------------------------------------------------------- */

typedef struct {
    int64_t t, h;
    int dt;
    int res;      /* residual present */
    int wm;       /* 0 none, 1 weight, 2 gemma */
    int inplace;  /* out == x */
    int64_t xpad; /* x row stride = h + xpad */
    int64_t opad; /* out row stride = h + opad (not in place) */
    int64_t rpad; /* residual row stride = h + rpad */
    int64_t off;  /* elements past a 64-byte boundary */
    int stream;
    float eps;
    double scale; /* x ~ N(0, 1) * scale */
} norm_case;

static void norm_desc(const norm_case *c, char *s, size_t n)
{
    snprintf(s, n, "rms_norm %s %lldx%lld%s%s%s%s xpad %lld opad %lld off %lld%s eps %g",
             DT_NAME[c->dt], (long long)c->t, (long long)c->h, c->res ? " residual" : "",
             c->wm == 0   ? " no-weight"
             : c->wm == 2 ? " gemma"
                          : "",
             c->inplace ? " in-place" : "", c->stream ? " stream" : "", (long long)c->xpad,
             (long long)c->opad, (long long)c->off, c->rpad ? " rpad" : "", (double)c->eps);
}

/* Calls the kernel over [0, t) in uneven ranges, as the pool may split it. */
static void norm_call(const struct fld_cpu_variant *v, const struct fld_cpu_norm_job *job,
                      int64_t t)
{
    int64_t a = t / 3, b = t - t / 5;
    v->norm(job, 0, a);
    v->norm(job, a, b);
    v->norm(job, b, t);
}

/* Replica of core/reference/reference_norm.c for one row (special values): the sum of
 * squares and inv in double, n = v * inv rounded to float32, then the scale. */
static void ref_norm_row(float *out, const float *v, const float *w, int64_t h, float eps,
                         int gemma)
{
    double sum = 0.0;
    for (int64_t j = 0; j < h; j++)
        sum += (double)v[j] * (double)v[j];
    const double inv = 1.0 / sqrt(sum / (double)h + (double)eps);
    for (int64_t j = 0; j < h; j++) {
        float scale = w ? w[j] : 1.0f;
        if (gemma && w)
            scale += 1.0f;
        out[j] = (float)(v[j] * inv) * scale;
    }
}

static void run_norm_case(const norm_case *c, const struct fld_cpu_variant **vars, int nv)
{
    char ctx[256];
    norm_desc(c, ctx, sizeof ctx);
    const int dt = c->dt;
    const int64_t T = c->t, H = c->h;
    const int64_t xs = H + c->xpad, os = c->inplace ? xs : H + c->opad, rs = H + c->rpad;
    buf x, out, res, w;

    buf_init(&x, T * xs, dt, c->off);
    buf_init(&out, c->inplace ? 1 : T * os, dt, c->off);
    buf_init(&res, c->res ? T * rs : 1, dt, c->off);
    buf_init(&w, H, dt, c->off);
    for (int64_t r = 0; r < T; r++)
        for (int64_t j = 0; j < H; j++) {
            st(x.p, r * xs + j, dt, (float)(rnd_normal() * c->scale));
            if (c->inplace)
                x.mask[r * xs + j] = 1;
            else
                out.mask[r * os + j] = 1;
            if (c->res) {
                st(res.p, r * rs + j, dt, (float)(rnd_normal() * c->scale));
                res.mask[r * rs + j] = 1;
            }
        }
    for (int64_t j = 0; j < H; j++)
        st(w.p, j, dt, (float)(c->wm == 2 ? rnd_normal() * 0.1 : 1.0 + rnd_normal() * 0.1));

    /* The oracle: residual bit-exact in float, outputs in double. */
    double *exp = malloc(sizeof(double) * (size_t)(T * H));
    float *rexp = malloc(sizeof(float) * (size_t)(T * H));
    if (!exp || !rexp)
        exit(2);
    for (int64_t r = 0; r < T; r++) {
        double ss = 0.0;
        for (int64_t j = 0; j < H; j++) {
            float v = ld(x.p, r * xs + j, dt);
            if (c->res)
                v = round_dt(v + ld(res.p, r * rs + j, dt), dt);
            rexp[r * H + j] = v;
            ss += (double)v * v;
        }
        double inv = 1.0 / sqrt(ss / (double)H + (double)c->eps);
        for (int64_t j = 0; j < H; j++) {
            double sc = c->wm == 0 ? 1.0 : ld(w.p, j, dt);
            if (c->wm == 2)
                sc += 1.0;
            exp[r * H + j] = rexp[r * H + j] * inv * sc;
        }
    }

    float *first = NULL; /* the first variant's outputs */
    for (int vi = 0; vi < nv; vi++) {
        stats *s = stats_for(c->res ? "rms_norm+res" : "rms_norm", dt, vars[vi]->name);
        buf x2, out2, res2, w2;
        buf_copy(&x2, &x);
        buf_copy(&out2, &out);
        buf_copy(&res2, &res);
        buf_copy(&w2, &w);
        struct fld_cpu_norm_job job = {
            .dt = dt,
            .out = c->inplace ? x2.p : out2.p,
            .out_stride = os,
            .x = x2.p,
            .x_stride = xs,
            .residual = c->res ? res2.p : NULL,
            .residual_stride = rs,
            .weight = c->wm ? w2.p : NULL,
            .h = H,
            .eps = c->eps,
            .gemma = c->wm == 2,
            .stream = c->stream,
        };
        norm_call(vars[vi], &job, T);

        long bad = 0, badx = 0;
        const void *o = c->inplace ? x2.p : out2.p;
        for (int64_t r = 0; r < T && bad < 3; r++)
            for (int64_t j = 0; j < H; j++) {
                float g = ld(o, r * os + j, dt);
                g_checks++;
                if (!cmp_exact(s, g, exp[r * H + j], dt)) {
                    if (!bad++)
                        fail("%s [%s]: out[%lld][%lld] = %.9g, expected %.9g", ctx, vars[vi]->name,
                             (long long)r, (long long)j, (double)g, exp[r * H + j]);
                }
                if (c->res) {
                    float gr = ld(res2.p, r * rs + j, dt);
                    if (memcmp(&gr, &rexp[r * H + j], 4) && !badx++)
                        fail("%s [%s]: residual[%lld][%lld] = %.9g, expected %.9g", ctx,
                             vars[vi]->name, (long long)r, (long long)j, (double)gr,
                             (double)rexp[r * H + j]);
                }
            }
        g_checks++;
        guard_check(&x2, &x, c->inplace ? x.mask : NULL, "x", ctx);
        if (!c->inplace)
            guard_check(&out2, &out, out.mask, "out", ctx);
        guard_check(&res2, &res, c->res ? res.mask : NULL, "residual", ctx);
        guard_check(&w2, &w, NULL, "weight", ctx);

        /* Variants against the first one. */
        if (vi == 0) {
            first = malloc(sizeof(float) * (size_t)(T * H));
            if (!first)
                exit(2);
            for (int64_t r = 0; r < T; r++)
                for (int64_t j = 0; j < H; j++)
                    first[r * H + j] = ld(o, r * os + j, dt);
        } else {
            long badv = 0;
            for (int64_t r = 0; r < T; r++)
                for (int64_t j = 0; j < H; j++) {
                    float g = ld(o, r * os + j, dt);
                    if (!cmp_xvar(s, g, first[r * H + j], dt) && !badv++)
                        fail("%s [%s vs %s]: out[%lld][%lld] = %.9g vs %.9g", ctx, vars[vi]->name,
                             vars[0]->name, (long long)r, (long long)j, (double)g,
                             (double)first[r * H + j]);
                }
        }
        buf_free(&x2);
        buf_free(&out2);
        buf_free(&res2);
        buf_free(&w2);
    }
    if (g_verbose)
        printf("ok   %s\n", ctx);
    free(first);
    free(exp);
    free(rexp);
    buf_free(&x);
    buf_free(&out);
    buf_free(&res);
    buf_free(&w);
}

static void norm_cases(const struct fld_cpu_variant **vars, int nv)
{
    static const int64_t toks[] = {7, 83};
    static const int64_t hs[] = {1, 3, 8, 17, 768, 769, 5120, 5125, 8192};
    norm_case c;
    for (int dt = 0; dt < 3; dt++) {
        /* vLLM test_layernorm shapes x residual x weight mode; strided x every other case. */
        int k = 0;
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++)
            for (size_t hi = 0; hi < sizeof hs / sizeof *hs; hi++)
                for (int res = 0; res < 2; res++)
                    for (int wm = 0; wm < 3; wm++, k++) {
                        if (g_quick && (k % 5))
                            continue;
                        memset(&c, 0, sizeof c);
                        c.t = toks[ti];
                        c.h = hs[hi];
                        c.dt = dt;
                        c.res = res;
                        c.wm = wm;
                        c.xpad = (k % 2) ? c.h : 0; /* randn(T, 2H)[:, :H] */
                        c.opad = (k % 3 == 1) ? 5 : 0;
                        c.rpad = (k % 7 == 3) ? 3 : 0;
                        c.inplace = (k % 4 == 2);
                        c.off = (k % 5 == 4) ? 3 : 0;
                        c.stream = (k % 3 != 0);
                        c.eps = 1e-6f;
                        c.scale = (k % 6 == 5) ? 1.0 / (2.0 * (double)c.h) : 1.0;
                        run_norm_case(&c, vars, nv);
                    }
        /* Many tokens, one width; a large eps; an unaligned streaming row. */
        int64_t big[][2] = {{g_quick ? 256 : 4096, 768}, {64, 4096}};
        for (int i = 0; i < 2; i++)
            for (int res = 0; res < 2; res++) {
                memset(&c, 0, sizeof c);
                c.t = big[i][0];
                c.h = big[i][1];
                c.dt = dt;
                c.res = res;
                c.wm = 1;
                c.stream = 1;
                c.off = i;
                c.inplace = res;
                c.eps = i ? 1e-2f : 1e-6f;
                c.scale = 1.0;
                run_norm_case(&c, vars, nv);
            }
    }
}

/* Special values against the float32 replica of the reference. */
static void norm_specials(const struct fld_cpu_variant **vars, int nv)
{
    const float inf = INFINITY, nan = NAN;
    /* Each row: width, eps, values (cycled). The inf / NaN rows keep the
     * special value off the last element (see the report: the reference's
     * compensated sum gives NaN then, but inf * 0 = NaN only there when it
     * is last). */
    struct {
        int64_t h;
        float eps;
        float vals[6];
        int nvals;
    } rows[] = {
        {37, 1e-6f, {0.0f, -0.0f, 0.0f}, 3},
        {100, 0.0f, {0.0f, -0.0f}, 2},
        {33, 1e-6f, {1.0f, nan, -2.0f}, 3},
        {33, 1e-6f, {inf, 1.0f, -1.0f}, 3},
        {50, 1e-6f, {-inf, 0.5f}, 2},
        {50, 1e-6f, {1e20f, -3.0f, 2.0f}, 3},
        {70, 1e-6f, {100.0f, -1000.0f, 3e5f, -89.0f, 88.5f}, 5},
        {19, 1e-6f, {1e-30f, -1e-30f, 0.0f}, 3},
        {64, 1e-6f, {3e19f, 3e19f, -3e19f}, 3}, /* squares finite, their sum overflows */
    };
    const int nrows = (int)(sizeof rows / sizeof *rows);
    for (int dt = 0; dt < 3; dt++)
        for (int wm = 0; wm < 3; wm++)
            for (int ri = 0; ri < nrows; ri++) {
                const int64_t H = rows[ri].h;
                float *x = malloc(sizeof(float) * (size_t)H * 4);
                if (!x)
                    exit(2);
                float *w = x + H, *e = x + 2 * H, *g = x + 3 * H;
                uint16_t *xs = malloc(2 * (size_t)H * 3);
                float *xf = malloc(4 * (size_t)H * 3);
                if (!xs || !xf)
                    exit(2);
                void *xb = dt == 0 ? (void *)xf : (void *)xs;
                void *wb = dt == 0 ? (void *)(xf + H) : (void *)(xs + H);
                void *ob = dt == 0 ? (void *)(xf + 2 * H) : (void *)(xs + 2 * H);
                for (int64_t j = 0; j < H; j++) {
                    st(xb, j, dt, rows[ri].vals[j % rows[ri].nvals]);
                    x[j] = ld(xb, j, dt);
                    st(wb, j, dt, (j % 3) ? 0.75f : -1.25f);
                    w[j] = ld(wb, j, dt);
                }
                float *ref = malloc(sizeof(float) * (size_t)H);
                if (!ref)
                    exit(2);
                ref_norm_row(ref, x, wm ? w : NULL, H, rows[ri].eps, wm == 2);
                for (int64_t j = 0; j < H; j++)
                    e[j] = round_dt(ref[j], dt);
                for (int vi = 0; vi < nv; vi++) {
                    struct fld_cpu_norm_job job = {.dt = dt,
                                                   .out = ob,
                                                   .out_stride = H,
                                                   .x = xb,
                                                   .x_stride = H,
                                                   .weight = wm ? wb : NULL,
                                                   .h = H,
                                                   .eps = rows[ri].eps,
                                                   .gemma = wm == 2};
                    vars[vi]->norm(&job, 0, 1);
                    int bad = 0;
                    for (int64_t j = 0; j < H; j++) {
                        g[j] = ld(ob, j, dt);
                        g_checks++;
                        if (!same_special(g[j], e[j], dt) && !bad++)
                            fail("rms_norm special row %d %s wm %d [%s]: out[%lld] = %g, "
                                 "reference %g (x %g)",
                                 ri, DT_NAME[dt], wm, vars[vi]->name, (long long)j, (double)g[j],
                                 (double)e[j], (double)x[j]);
                    }
                }
                free(ref);
                free(x);
                free(xs);
                free(xf);
            }
}

/* ---- rotary ----------------------------------------------------------------- */

typedef struct {
    int64_t t, qh, kh, d, rot, hpad, tpad, max_pos;
    int neox, dt, cdt, pos32;
} rot_case;

static void rot_desc(const rot_case *c, char *s, size_t n)
{
    snprintf(s, n,
             "rotary %s %s cache %s T %lld q %lld k %lld D %lld rot %lld hpad %lld tpad %lld%s",
             c->neox ? "neox" : "gptj", DT_NAME[c->dt], DT_NAME[c->cdt], (long long)c->t,
             (long long)c->qh, (long long)c->kh, (long long)c->d, (long long)c->rot,
             (long long)c->hpad, (long long)c->tpad, c->pos32 ? " int32-pos" : "");
}

/*
 * The cache as vLLM builds it: inv_freq = base^(-2i/rot) in float32,
 * cat(cos, sin), rounded to the cache dtype. The float32 table of the last
 * few (max_pos, rot) is kept: building it dominates the run time otherwise.
 */
static void build_cache(void *cache, int64_t max_pos, int64_t rot, int cdt)
{
    static struct {
        int64_t max_pos, rot;
        float *tab;
    } memo[8];
    static int next;
    const int64_t half = rot / 2;
    float *tab = NULL;
    for (int m = 0; m < 8; m++)
        if (memo[m].tab && memo[m].max_pos == max_pos && memo[m].rot == rot)
            tab = memo[m].tab;
    if (!tab) {
        tab = malloc(sizeof(float) * (size_t)(max_pos * rot));
        if (!tab)
            exit(2);
        for (int64_t i = 0; i < half; i++) {
            float inv_freq = (float)(1.0 / pow(10000.0, (double)(2 * i) / (double)rot));
            for (int64_t p = 0; p < max_pos; p++) {
                float a = (float)p * inv_freq;
                tab[p * rot + i] = cosf(a);
                tab[p * rot + half + i] = sinf(a);
            }
        }
        free(memo[next].tab);
        memo[next].tab = tab;
        memo[next].max_pos = max_pos;
        memo[next].rot = rot;
        next = (next + 1) % 8;
    }
    for (int64_t e = 0; e < max_pos * rot; e++)
        st(cache, e, cdt, tab[e]);
}

/* v rounded to dtype dt (the identity for float32), through a one-element store. */
static float round_to(int dt, float v)
{
    float f32 = 0.0f;
    uint16_t f16 = 0;
    void *cell = dt == 0 ? (void *)&f32 : (void *)&f16;
    st(cell, 0, dt, v);
    return ld(cell, 0, dt);
}

/* Replica of core/reference/reference_rotary.c on one head: cos and sin rounded to the
 * head's dtype, then every product and both sums rounded to it. */
static void ref_rot_head(void *head, const void *row, int64_t half, int neox, int dt, int cdt)
{
    for (int64_t i = 0; i < half; i++) {
        const float c = round_to(dt, ld(row, i, cdt)), s = round_to(dt, ld(row, half + i, cdt));
        const int64_t ix = neox ? i : 2 * i, iy = neox ? i + half : 2 * i + 1;
        const float x = ld(head, ix, dt), y = ld(head, iy, dt);
        const float xc = round_to(dt, x * c), ys = round_to(dt, y * s);
        const float yc = round_to(dt, y * c), xs = round_to(dt, x * s);
        st(head, ix, dt, xc - ys);
        st(head, iy, dt, yc + xs);
    }
}

static void rot_call(const struct fld_cpu_variant *v, const struct fld_cpu_rotary_job *job)
{
    int64_t t = job->g.tokens, a = t / 2, b = a + (t - a) / 3;
    v->rotary(job, 0, a);
    v->rotary(job, a, b);
    v->rotary(job, b, t);
}

/*
 * Runs one case on every variant. specials: fill q and k with special
 * values and check against the float32 replica only.
 */
static void run_rot_case(const rot_case *c, const struct fld_cpu_variant **vars, int nv,
                         int specials)
{
    char ctx[256];
    rot_desc(c, ctx, sizeof ctx);
    if (specials)
        strcat(ctx, " specials");
    const int dt = c->dt, cdt = c->cdt;
    const int64_t T = c->t, hs = c->d + c->hpad, half = c->rot / 2;
    const int64_t qts = c->qh * hs + c->tpad, kts = c->kh * hs + c->tpad;
    buf q, k, cache, pos;

    buf_init(&q, T * qts, dt, c->tpad % 3);
    buf_init(&k, c->kh ? T * kts : 1, dt, 0);
    buf_init(&cache, c->max_pos * c->rot, cdt, 0);
    /* Positions: int32 or int64; as a buffer of 4-byte elements (guards only). */
    buf_init(&pos, c->pos32 ? T : 2 * T, FLD_CPU_F32, 0);

    build_cache(cache.p, c->max_pos, c->rot, cdt);
    static const float sv[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -7.5f, 1e-40f};
    for (int64_t t = 0; t < T; t++) {
        int64_t p = specials && t < 3 ? t : (int64_t)(rnd_u64() % (uint64_t)c->max_pos);
        if (c->pos32)
            ((int32_t *)pos.p)[t] = (int32_t)p;
        else
            ((int64_t *)pos.p)[t] = p;
        for (int which = 0; which < 2; which++) {
            buf *b = which ? &k : &q;
            int64_t heads = which ? c->kh : c->qh, ts = which ? kts : qts;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t j = 0; j < c->d; j++) {
                    int64_t idx = t * ts + h * hs + j;
                    float v = (float)rnd_normal();
                    if (specials && (rnd_u64() % 4) == 0)
                        v = sv[rnd_u64() % (sizeof sv / sizeof *sv)];
                    st(b->p, idx, dt, v);
                    if (j < c->rot)
                        b->mask[idx] = 1;
                }
        }
    }

    /* Expected: the float32 replica (bit target) and the double oracle. */
    buf qr, kr;
    buf_copy(&qr, &q);
    buf_copy(&kr, &k);
    for (int64_t t = 0; t < T; t++) {
        int64_t p = c->pos32 ? ((int32_t *)pos.p)[t] : ((int64_t *)pos.p)[t];
        const void *row = fld__cpu_at(cache.p, p * c->rot, cdt);
        for (int64_t h = 0; h < c->qh; h++)
            ref_rot_head(fld__cpu_at(qr.p, t * qts + h * hs, dt), row, half, c->neox, dt, cdt);
        for (int64_t h = 0; h < c->kh; h++)
            ref_rot_head(fld__cpu_at(kr.p, t * kts + h * hs, dt), row, half, c->neox, dt, cdt);
    }

    for (int vi = 0; vi < nv; vi++) {
        stats *s = stats_for(c->neox ? "rotary-neox" : "rotary-gptj", dt, vars[vi]->name);
        buf q2, k2, cache2, pos2;
        buf_copy(&q2, &q);
        buf_copy(&k2, &k);
        buf_copy(&cache2, &cache);
        buf_copy(&pos2, &pos);
        struct fld_cpu_rotary_job job = {
            .g = {.tokens = T,
                  .rot_dim = c->rot,
                  .max_pos = c->max_pos,
                  .positions = pos2.p,
                  .positions_int32 = c->pos32,
                  .query = q2.p,
                  .q_heads = c->qh,
                  .q_token_stride = qts,
                  .q_head_stride = hs,
                  .key = c->kh ? k2.p : NULL,
                  .k_heads = c->kh,
                  .k_token_stride = kts,
                  .k_head_stride = hs,
                  .cache = cache2.p,
                  .cache_stride = c->rot},
            .is_neox = c->neox,
            .dt = dt,
            .cache_dt = cdt,
        };
        job.out = job.g; /* in place */
        rot_call(vars[vi], &job);

        long bad = 0, badr = 0;
        for (int which = 0; which < 2; which++) {
            buf *b = which ? &k2 : &q2, *orig = which ? &k : &q, *rb = which ? &kr : &qr;
            int64_t heads = which ? c->kh : c->qh, ts = which ? kts : qts;
            for (int64_t t = 0; t < T; t++) {
                int64_t p = c->pos32 ? ((int32_t *)pos.p)[t] : ((int64_t *)pos.p)[t];
                const void *row = fld__cpu_at(cache.p, p * c->rot, cdt);
                for (int64_t h = 0; h < heads; h++)
                    for (int64_t i = 0; i < half; i++) {
                        const int64_t ix = c->neox ? i : 2 * i, iy = c->neox ? i + half : 2 * i + 1;
                        const int64_t base = t * ts + h * hs;
                        double cs = ld(row, i, cdt), sn = ld(row, half + i, cdt);
                        double x = ld(orig->p, base + ix, dt), y = ld(orig->p, base + iy, dt);
                        double ex[2] = {x * cs - y * sn, y * cs + x * sn};
                        /* The contract rounds cos, sin and each product to the dtype: where the
                         * two products cancel, the result is off the exact one by those
                         * roundings, more than vLLM's tolerance of the result allows. */
                        const double u = UNIT_ROUNDOFF[dt];
                        double slack[2] = {2 * u * (fabs(x * cs) + fabs(y * sn)),
                                           2 * u * (fabs(y * cs) + fabs(x * sn))};
                        int64_t at[2] = {base + ix, base + iy};
                        for (int e = 0; e < 2; e++) {
                            float g = ld(b->p, at[e], dt), r = ld(rb->p, at[e], dt);
                            g_checks += 2;
                            if (specials) {
                                if (!same_special(g, r, dt) && !badr++)
                                    fail("%s [%s]: %s[%lld] = %g, reference %g", ctx,
                                         vars[vi]->name, which ? "key" : "query", (long long)at[e],
                                         (double)g, (double)r);
                                continue;
                            }
                            if (!cmp_exact_slack(s, g, ex[e], dt, slack[e]) && !bad++)
                                fail("%s [%s]: %s t %lld h %lld i %lld = %.9g, expected %.9g", ctx,
                                     vars[vi]->name, which ? "key" : "query", (long long)t,
                                     (long long)h, (long long)(at[e] - base), (double)g, ex[e]);
                            /* The float32 reference, bit for bit. */
                            if (!cmp_xvar(s, g, r, dt) || memcmp(&g, &r, 4)) {
                                if (!badr++)
                                    fail("%s [%s]: %s[%lld] = %.9g, float32 reference %.9g "
                                         "(not bit-identical)",
                                         ctx, vars[vi]->name, which ? "key" : "query",
                                         (long long)at[e], (double)g, (double)r);
                            }
                        }
                    }
            }
        }
        guard_check(&q2, &q, q.mask, "query", ctx);
        guard_check(&k2, &k, c->kh ? k.mask : NULL, "key", ctx);
        guard_check(&cache2, &cache, NULL, "cos_sin_cache", ctx);
        guard_check(&pos2, &pos, NULL, "positions", ctx);
        buf_free(&q2);
        buf_free(&k2);
        buf_free(&cache2);
        buf_free(&pos2);
    }
    if (g_verbose)
        printf("ok   %s\n", ctx);
    buf_free(&qr);
    buf_free(&kr);
    buf_free(&q);
    buf_free(&k);
    buf_free(&cache);
    buf_free(&pos);
}

static void rot_cases(const struct fld_cpu_variant **vars, int nv)
{
    static const int64_t heads[] = {64, 80, 112, 120, 256};
    rot_case c;
    int k = 0;
    for (int dt = 0; dt < 3; dt++)
        for (int neox = 0; neox < 2; neox++)
            for (size_t hi = 0; hi < sizeof heads / sizeof *heads; hi++)
                for (int ri = 0; ri < 2; ri++)
                    for (int kv = 0; kv < 3; kv++, k++) {
                        if (g_quick && (k % 4))
                            continue;
                        memset(&c, 0, sizeof c);
                        c.t = (k % 5 == 0) ? (g_quick ? 64 : 1024) : 55; /* batch 5 x seq 11 */
                        c.d = heads[hi];
                        c.rot = ri ? 32 : c.d;
                        c.qh = kv == 1 ? 16 : 17;
                        c.kh = kv == 0 ? 17 : kv == 1 ? 4 : 0;
                        c.hpad = (k % 2) ? 64 : 0;
                        c.tpad = (k % 3 == 1) ? 5 : 0;
                        c.max_pos = 8192;
                        c.neox = neox;
                        c.dt = dt;
                        /* the library takes a cache of the query's dtype or float32 */
                        c.cdt = (k % 4 == 3) ? FLD_CPU_F32 : dt;
                        c.pos32 = (k % 3 == 2);
                        run_rot_case(&c, vars, nv, 0);
                    }
    /* Scratch chunking (half > 256), tiny rot_dim, odd pair counts, specials. */
    static const int64_t odd[][3] = {{1024, 1024, 0}, {640, 600, 1}, {16, 2, 0},
                                     {48, 46, 1},     {96, 34, 0},   {8, 6, 1}};
    for (int dt = 0; dt < 3; dt++)
        for (int neox = 0; neox < 2; neox++) {
            for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
                memset(&c, 0, sizeof c);
                c.t = 9;
                c.d = odd[i][0];
                c.rot = odd[i][1];
                c.qh = 3;
                c.kh = odd[i][2] ? 1 : 3;
                c.hpad = 7 * (int64_t)i;
                c.max_pos = 64;
                c.neox = neox;
                c.dt = dt;
                c.cdt = (i % 2) ? FLD_CPU_F32 : dt;
                c.pos32 = (int)(i % 2);
                run_rot_case(&c, vars, nv, 0);
            }
            memset(&c, 0, sizeof c);
            c.t = 12;
            c.d = 80;
            c.rot = 64;
            c.qh = 5;
            c.kh = 5;
            c.max_pos = 32;
            c.neox = neox;
            c.dt = dt;
            c.cdt = dt;
            run_rot_case(&c, vars, nv, 1);
        }
}

/* ---- main --------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (!strcmp(argv[i], "-v"))
            g_verbose = 1;
        else {
            fprintf(stderr, "usage: %s [--quick] [-v]\n", argv[0]);
            return 2;
        }
    }
    const struct fld_cpu_variant *vars[MAXV];
    int nv = nr_variants(vars, MAXV);
    /* The portable variant first: the others are compared with it. */
    for (int i = 0; i < nv; i++)
        if (!strcmp(vars[i]->name, "portable")) {
            const struct fld_cpu_variant *t = vars[0];
            vars[0] = vars[i];
            vars[i] = t;
        }
    printf("variants:");
    for (int i = 0; i < nv; i++)
        printf(" %s", vars[i]->name);
    printf("%s\n", g_quick ? " (quick)" : "");

    norm_cases(vars, nv);
    norm_specials(vars, nv);
    rot_cases(vars, nv);

    printf("\n%-13s %-5s %-12s %10s %10s %8s %10s %8s\n", "op", "dtype", "variant", "max_abs",
           "max_rel", "x_tol", "xvar_exact", "xvar_tol");
    for (int i = 0; i < g_nstats; i++) {
        const stats *s = &g_stats[i];
        printf("%-13s %-5s %-12s %10.3g %10.3g %8.3f %9.1f%% %8.3f\n", s->op, DT_NAME[s->dt],
               s->var, s->max_abs, s->max_rel, s->max_tol,
               s->n_xvar ? 100.0 * (double)s->exact_xvar / (double)s->n_xvar : 100.0, s->max_xvar);
    }
    printf("\n(x_tol: max |err| / (atol + rtol |exact|) against the double oracle; xvar: against "
           "the portable variant, rotary against the float32 reference replica)\n");
    printf("%ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
