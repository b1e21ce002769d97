/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ggml_ops: times ggml's CPU kernels for the shapes `fldispatch bench` uses,
 * so that docs/BENCHMARKS.md can put the two side by side. Not built by the
 * repository's Makefile (make check does not depend on ggml); see
 * bench/ggml/README.md and run.sh for how to fetch, build and run it.
 *
 * Ops (T = --tokens, H = --hidden, both 4096 by default):
 *   swiglu    ggml_swiglu on x [T, 2H] -> [T, H]; ggml's non-swapped form is
 *             silu(x[:, :H]) * x[:, H:], vLLM's silu_and_mul (checked below);
 *             f32 and f16.
 *   rms_norm  ggml_rms_norm(x, 1e-6) then ggml_mul by a weight [H], f32 only
 *             (ggml's CPU rms_norm has no f16 kernel); the CPU backend fuses
 *             the two nodes into one pass (GGML_CPU_DISABLE_FUSION=1 turns
 *             that off).
 *   rope      ggml_rope_ext_inplace, GGML_ROPE_TYPE_NEOX, n_dims = 128, base
 *             10000, on one tensor [T, 2 * H/128 heads, 128]: the query's and
 *             the key's heads in one tensor (our bench rotates a query and a
 *             key of H/128 heads each, in place); positions 0..T-1 (int32);
 *             ggml computes cos/sin itself where ours reads vLLM's cache;
 *             f32 and f16.
 *
 * Method, as tools/bench/kernels.c: the graph is built once per case and
 * planned once per thread count on a ggml threadpool made once; a line is
 * calibrated (calls doubled until a batch lasts 1/8 of 20 ms), then --reps
 * batches of calls lasting >= 20 ms are timed and the median per-call time
 * is reported. Bytes are the compulsory traffic counted as our bench counts
 * it (every tensor read once and written once): swiglu e*(2TH + TH);
 * rms_norm e*(2TH + H); rope e*(2*T*2H) + e*T*128 + 8T (the last two are
 * our cos/sin cache rows and int64 positions, which ggml does not read; kept
 * so that the ratio of GB/s is the ratio of times).
 *
 * Before timing, each case is checked once against a scalar reference on a
 * few rows (--no-check skips it).
 */
#define _POSIX_C_SOURCE 200809L
#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HEAD     128
#define BASE     10000.0f
#define EPS      1e-6f
#define BATCH_NS 20e6

enum op { OP_SWIGLU, OP_RMS_NORM, OP_ROPE };
static const char *op_name[] = {"swiglu", "rms_norm", "rope"};
static const char *op_ours[] = {"silu_and_mul", "rms_norm", "rotary_embedding"};

struct bench_case {
    enum op op;
    enum ggml_type type;
    struct ggml_context *ctx;
    struct ggml_cgraph *gf;
    struct ggml_tensor *x, *w, *pos, *out;
    double bytes;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t rng = 0x5eedull;
static float frand(float lo, float hi)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

static float get(const struct ggml_tensor *t, int64_t i)
{
    return t->type == GGML_TYPE_F16 ? ggml_fp16_to_fp32(((ggml_fp16_t *)t->data)[i])
                                    : ((float *)t->data)[i];
}

static void set(struct ggml_tensor *t, int64_t i, float v)
{
    if (t->type == GGML_TYPE_F16)
        ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(v);
    else
        ((float *)t->data)[i] = v;
}

static void fill(struct ggml_tensor *t, float lo, float hi)
{
    int64_t n = ggml_nelements(t);
    for (int64_t i = 0; i < n; i++)
        set(t, i, frand(lo, hi));
}

static bool case_init(struct bench_case *c, enum op op, enum ggml_type type, int64_t T, int64_t H)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->type = type;
    double e = ggml_type_size(type), t = (double)T, h = (double)H;
    size_t data = (size_t)(e * T * H * 3 + 4 * H + 8 * T) + (64u << 20);
    struct ggml_init_params ip = {.mem_size = data, .mem_buffer = NULL, .no_alloc = false};
    c->ctx = ggml_init(ip);
    if (!c->ctx)
        return false;
    c->gf = ggml_new_graph(c->ctx);
    switch (op) {
    case OP_SWIGLU:
        c->x = ggml_new_tensor_2d(c->ctx, type, 2 * H, T);
        fill(c->x, -4.0f, 4.0f);
        c->out = ggml_swiglu(c->ctx, c->x);
        c->bytes = e * (t * 2 * h + t * h);
        break;
    case OP_RMS_NORM:
        c->x = ggml_new_tensor_2d(c->ctx, type, H, T);
        c->w = ggml_new_tensor_1d(c->ctx, type, H);
        fill(c->x, -2.0f, 2.0f);
        fill(c->w, 0.5f, 1.5f);
        c->out = ggml_mul(c->ctx, ggml_rms_norm(c->ctx, c->x, EPS), c->w);
        c->bytes = e * (2 * t * h + h);
        break;
    case OP_ROPE: {
        int64_t heads = 2 * (H / HEAD);
        c->x = ggml_new_tensor_3d(c->ctx, type, HEAD, heads, T);
        c->pos = ggml_new_tensor_1d(c->ctx, GGML_TYPE_I32, T);
        fill(c->x, -1.0f, 1.0f);
        for (int64_t i = 0; i < T; i++)
            ((int32_t *)c->pos->data)[i] = (int32_t)i;
        c->out = ggml_rope_ext_inplace(c->ctx, c->x, c->pos, NULL, HEAD, GGML_ROPE_TYPE_NEOX, 0,
                                       BASE, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
        double width = (double)(H / HEAD) * HEAD;
        c->bytes = e * (2 * t * 2 * width) + e * t * HEAD + 8 * t;
        break;
    }
    }
    ggml_build_forward_expand(c->gf, c->out);
    return true;
}

static int compute(struct bench_case *c, struct ggml_cplan *plan)
{
    return ggml_graph_compute(c->gf, plan) == GGML_STATUS_SUCCESS ? 0 : -1;
}

/* One call checked against a scalar reference on a few rows; 0 when it agrees. */
static int check(struct bench_case *c, struct ggml_cplan *plan, int64_t T, int64_t H)
{
    const int64_t rows[] = {0, 1, T / 2, T - 1};
    const int nrows = 4;
    int64_t width = c->op == OP_ROPE ? 2 * H : (c->op == OP_SWIGLU ? 2 * H : H);
    float *before = malloc(sizeof(float) * nrows * width);
    for (int r = 0; r < nrows; r++)
        for (int64_t j = 0; j < width; j++)
            before[r * width + j] = get(c->x, rows[r] * width + j);
    if (compute(c, plan) != 0) {
        free(before);
        return -1;
    }
    /* ggml's rope builds the angle of pair i as pos * base^(-2i/128) by repeated float products,
     * so at position 4095 it is off by ~5e-4 against double precision: a looser bound for rope.
     * The check is there to catch a wrong split or rotation style, which errs by O(1). */
    double tol = c->type == GGML_TYPE_F16 ? 2e-2 : (c->op == OP_ROPE ? 5e-3 : 1e-4), worst = 0;
    for (int r = 0; r < nrows; r++) {
        const float *x = before + r * width;
        int64_t row = rows[r];
        if (c->op == OP_SWIGLU) {
            for (int64_t j = 0; j < H; j++) {
                double a = x[j], b = x[H + j];
                double ref = a / (1 + exp(-a)) * b;
                double d = fabs(get(c->out, row * H + j) - ref) / (1 + fabs(ref));
                worst = d > worst ? d : worst;
            }
        } else if (c->op == OP_RMS_NORM) {
            double ss = 0;
            for (int64_t j = 0; j < H; j++)
                ss += (double)x[j] * x[j];
            double inv = 1 / sqrt(ss / H + EPS);
            for (int64_t j = 0; j < H; j++) {
                double ref = x[j] * inv * get(c->w, j);
                double d = fabs(get(c->out, row * H + j) - ref) / (1 + fabs(ref));
                worst = d > worst ? d : worst;
            }
        } else {
            for (int64_t hd = 0; hd < 2 * H / HEAD; hd++) {
                for (int i = 0; i < HEAD / 2; i++) {
                    double ang = (double)row * pow(BASE, -2.0 * i / HEAD);
                    double a = x[hd * HEAD + i], b = x[hd * HEAD + HEAD / 2 + i];
                    double r0 = a * cos(ang) - b * sin(ang), r1 = b * cos(ang) + a * sin(ang);
                    int64_t o = row * width + hd * HEAD;
                    double d0 = fabs(get(c->out, o + i) - r0) / (1 + fabs(r0));
                    double d1 = fabs(get(c->out, o + HEAD / 2 + i) - r1) / (1 + fabs(r1));
                    worst = d0 > worst ? d0 : worst;
                    worst = d1 > worst ? d1 : worst;
                }
            }
        }
    }
    free(before);
    if (worst > tol) {
        fprintf(stderr, "ggml_ops: %s %s differs from the reference: %.3g > %.3g\n", op_name[c->op],
                ggml_type_name(c->type), worst, tol);
        return -1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double time_case(struct bench_case *c, struct ggml_cplan *plan, int reps)
{
    long n = 1;
    for (;;) {
        double t0 = now_ns();
        for (long i = 0; i < n; i++)
            compute(c, plan);
        double dt = now_ns() - t0;
        if (dt >= BATCH_NS / 8 || n > (1L << 30))
            break;
        n *= 2;
    }
    double *per = malloc(sizeof(double) * reps);
    for (int r = 0; r < reps; r++) {
        long calls = 0;
        double t0 = now_ns(), dt;
        do {
            for (long i = 0; i < n; i++)
                compute(c, plan);
            calls += n;
            dt = now_ns() - t0;
        } while (dt < BATCH_NS);
        per[r] = dt / calls;
    }
    qsort(per, reps, sizeof *per, cmp_double);
    double med = reps % 2 ? per[reps / 2] : (per[reps / 2 - 1] + per[reps / 2]) / 2;
    free(per);
    return med;
}

static void usage(void)
{
    fprintf(stderr, "usage: ggml_ops [--tokens T] [--hidden H] [--threads 1,2] [--reps N]\n"
                    "                [--ops swiglu,rms_norm,rope] [--dtype f32,f16] [--json]\n"
                    "                [--no-check] [--no-threadpool]\n");
}

static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

int main(int argc, char **argv)
{
    int64_t T = 4096, H = 4096;
    int reps = 7;
    const char *threads = "1,2", *ops = "swiglu,rms_norm,rope", *dtypes = "f32,f16";
    bool json = false, do_check = true, pool = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json"))
            json = true;
        else if (!strcmp(a, "--no-check"))
            do_check = false;
        else if (!strcmp(a, "--no-threadpool"))
            pool = false;
        else if (v && !strcmp(a, "--tokens"))
            T = atoll(argv[++i]);
        else if (v && !strcmp(a, "--hidden"))
            H = atoll(argv[++i]);
        else if (v && !strcmp(a, "--reps"))
            reps = atoi(argv[++i]);
        else if (v && !strcmp(a, "--threads"))
            threads = argv[++i];
        else if (v && !strcmp(a, "--ops"))
            ops = argv[++i];
        else if (v && !strcmp(a, "--dtype"))
            dtypes = argv[++i];
        else {
            usage();
            return 2;
        }
    }
    if (T < 2 || H < HEAD || H % HEAD || reps < 1) {
        usage();
        return 2;
    }
    int nthreads[16], nt = 0;
    for (const char *p = threads; p && *p && nt < 16;) {
        nthreads[nt++] = atoi(p);
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }

    if (json)
        printf("{\"tool\": \"ggml_ops\", \"ggml_version\": \"%s\", \"ggml_commit\": \"%s\", "
               "\"tokens\": %lld, \"hidden\": %lld, \"reps\": %d, \"results\": [",
               ggml_version(), ggml_commit(), (long long)T, (long long)H, reps);
    else
        printf("ggml %s (%s), T = %lld, H = %lld, median of %d batches\n"
               "%-9s %-5s %7s %12s %9s\n",
               ggml_version(), ggml_commit(), (long long)T, (long long)H, reps, "op", "dtype",
               "threads", "us/call", "GB/s");
    bool first = true;
    int status = 0;
    for (int o = 0; o < 3; o++) {
        if (!listed(ops, op_name[o]))
            continue;
        for (int d = 0; d < 2; d++) {
            const char *dn = d ? "f16" : "f32";
            if (!listed(dtypes, dn))
                continue;
            if (o == OP_RMS_NORM && d == 1) {
                if (!json)
                    printf("%-9s %-5s  (ggml's CPU rms_norm has no f16 kernel)\n", op_name[o], dn);
                continue;
            }
            struct bench_case c;
            if (!case_init(&c, (enum op)o, d ? GGML_TYPE_F16 : GGML_TYPE_F32, T, H)) {
                fprintf(stderr, "ggml_ops: out of memory\n");
                return 1;
            }
            for (int k = 0; k < nt; k++) {
                struct ggml_threadpool_params tpp = ggml_threadpool_params_default(nthreads[k]);
                struct ggml_threadpool *tp = pool ? ggml_threadpool_new(&tpp) : NULL;
                struct ggml_cplan plan = ggml_graph_plan(c.gf, nthreads[k], tp);
                void *work = plan.work_size ? malloc(plan.work_size) : NULL;
                plan.work_data = work;
                if (do_check && k == 0 && check(&c, &plan, T, H) != 0)
                    status = 1;
                double ns = time_case(&c, &plan, reps);
                free(work);
                if (tp)
                    ggml_threadpool_free(tp);
                double gbs = c.bytes / ns;
                if (json)
                    printf("%s\n  {\"op\": \"%s\", \"ours\": \"%s\", \"dtype\": \"%s\", "
                           "\"threads\": %d, \"ns_per_call\": %.1f, \"bytes\": %.0f, "
                           "\"gb_per_s\": %.3f}",
                           first ? "" : ",", op_name[o], op_ours[o], dn, nthreads[k], ns, c.bytes,
                           gbs);
                else
                    printf("%-9s %-5s %7d %12.1f %9.2f\n", op_name[o], dn, nthreads[k], ns / 1e3,
                           gbs);
                fflush(stdout);
                first = false;
            }
            ggml_free(c.ctx);
        }
    }
    if (json)
        printf("\n]}\n");
    return status;
}
