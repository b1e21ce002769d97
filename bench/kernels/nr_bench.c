/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Speed of the norm and rotary bodies, one thread:
 *   - STREAM triad (nr_stream.c), one thread, best of 5, 3 x 256 MiB;
 *   - 4096 x 4096 (rotary: 4096 tokens x 32 q heads + 32 k heads x 128,
 *     rot_dim 128, int64 positions = token index): median of 7 calls, GB/s
 *     = bytes read + written (each tensor once: rms_norm x + out + weight
 *     [+ residual read and written]; rotary q and k read and written + the
 *     cache rows used + positions), and the share of the triad figure;
 *   - decode 1 x 4096 (rotary: 1 token x 32 + 32 heads), hot cache: median
 *     over batches of the time per call, in us.
 * For every dtype and every variant this machine runs (another build's
 * kernels: bench/compare_kernels.py). The 4096 x 4096 norm lines show stream (non-temporal
 * output stores) on and off: the runtime decides it from the output size.
 *
 * Usage: nr_bench [--quick] [--reps N] [--threads N] [--op
 * norm|norm_res|gemma|rot_neox|rot_gptj]...
 * --threads N runs the 4096-token calls on N threads (contiguous row
 * slices; thread start-up included, ~0.1 ms); decode stays on one.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nr_harness.h"

double nr_stream_triad_gbps(int reps);
double nr_now(void);

static const char *const DT_NAME[3] = {"f32", "f16", "bf16"};

static int g_reps = 7;
static int g_threads = 1;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void fill(void *p, int64_t n, int dt, float scale)
{
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float v = ((float)(s >> 8) / 16777216.0f - 0.5f) * scale + (scale == 0.0f ? 1.0f : 0.0f);
        if (dt == FLD_CPU_F32)
            ((float *)p)[i] = v;
        else if (dt == FLD_CPU_F16)
            ((uint16_t *)p)[i] = fld_f32_to_f16(v);
        else
            ((uint16_t *)p)[i] = fld_f32_to_bf16(v);
    }
}

enum op { OP_NORM, OP_NORM_RES, OP_GEMMA, OP_ROT_NEOX, OP_ROT_GPTJ, OP_COUNT };
static const char *const OP_NAME[OP_COUNT] = {"rms_norm", "rms_norm+res", "gemma_rms_norm",
                                              "rotary_neox", "rotary_gptj"};

typedef struct {
    struct fld_cpu_norm_job nj;
    struct fld_cpu_rotary_job rj;
    int is_rot;
    double bytes;
} bjob;

static void run_range(const struct fld_cpu_variant *v, const bjob *j, int64_t a, int64_t b)
{
    if (j->is_rot)
        v->rotary(&j->rj, a, b);
    else
        v->norm(&j->nj, a, b);
}

typedef struct {
    const struct fld_cpu_variant *v;
    const bjob *j;
    int64_t a, b;
} slice;

static void *run_slice(void *arg)
{
    const slice *s = arg;
    run_range(s->v, s->j, s->a, s->b);
    return NULL;
}

/* [0, n) on g_threads threads (the caller is one), contiguous slices. */
static void run(const struct fld_cpu_variant *v, const bjob *j, int64_t n)
{
    if (g_threads == 1 || n < g_threads) {
        run_range(v, j, 0, n);
        return;
    }
    pthread_t th[16];
    slice sl[16];
    for (int i = 0; i < g_threads; i++)
        sl[i] = (slice){v, j, n * i / g_threads, n * (i + 1) / g_threads};
    for (int i = 1; i < g_threads; i++)
        if (pthread_create(&th[i], NULL, run_slice, &sl[i])) {
            fprintf(stderr, "pthread_create failed\n");
            exit(2);
        }
    run_slice(&sl[0]);
    for (int i = 1; i < g_threads; i++)
        pthread_join(th[i], NULL);
}

/* Buffers for one op at T tokens, dtype dt. */
static void setup(bjob *j, enum op op, int64_t T, int dt, int stream, void **bufs)
{
    const int64_t H = 4096;
    const size_t es = fld__cpu_elem_size(dt);
    memset(j, 0, sizeof *j);
    if (op <= OP_GEMMA) {
        bufs[0] = xalloc((size_t)(T * H) * es);
        bufs[1] = xalloc((size_t)(T * H) * es);
        bufs[2] = xalloc((size_t)H * es);
        bufs[3] = op == OP_NORM_RES ? xalloc((size_t)(T * H) * es) : NULL;
        fill(bufs[0], T * H, dt, 2.0f);
        fill(bufs[1], T * H, dt, 0.0f);
        fill(bufs[2], H, dt, 0.2f);
        if (bufs[3])
            fill(bufs[3], T * H, dt, 2.0f);
        j->nj = (struct fld_cpu_norm_job){.dt = dt,
                                          .out = bufs[1],
                                          .out_stride = H,
                                          .x = bufs[0],
                                          .x_stride = H,
                                          .residual = bufs[3],
                                          .residual_stride = H,
                                          .weight = bufs[2],
                                          .h = H,
                                          .eps = 1e-6f,
                                          .gemma = op == OP_GEMMA,
                                          .stream = stream};
        j->bytes = (double)((op == OP_NORM_RES ? 4 : 2) * T * H + H) * (double)es;
    } else {
        const int64_t heads = 32, D = 128, rot = 128, max_pos = T > 8192 ? T : 8192;
        bufs[0] = xalloc((size_t)(T * heads * D) * es);
        bufs[1] = xalloc((size_t)(T * heads * D) * es);
        bufs[2] = xalloc((size_t)(max_pos * rot) * es);
        bufs[3] = xalloc((size_t)T * 8);
        fill(bufs[0], T * heads * D, dt, 2.0f);
        fill(bufs[1], T * heads * D, dt, 2.0f);
        /* A true cos/sin table: rotations keep the norm, so repeated calls
         * on the same q and k never drift into denormals. */
        for (int64_t p = 0; p < max_pos; p++)
            for (int64_t i = 0; i < rot / 2; i++) {
                double a = (double)p * pow(10000.0, -2.0 * (double)i / (double)rot);
                float cs[2] = {(float)cos(a), (float)sin(a)};
                for (int e = 0; e < 2; e++) {
                    void *c = bufs[2];
                    int64_t at = p * rot + e * (rot / 2) + i;
                    if (dt == FLD_CPU_F32)
                        ((float *)c)[at] = cs[e];
                    else if (dt == FLD_CPU_F16)
                        ((uint16_t *)c)[at] = fld_f32_to_f16(cs[e]);
                    else
                        ((uint16_t *)c)[at] = fld_f32_to_bf16(cs[e]);
                }
            }
        for (int64_t t = 0; t < T; t++)
            ((int64_t *)bufs[3])[t] = t;
        j->is_rot = 1;
        j->rj = (struct fld_cpu_rotary_job){.g = {.tokens = T,
                                                  .rot_dim = rot,
                                                  .max_pos = max_pos,
                                                  .positions = bufs[3],
                                                  .query = bufs[0],
                                                  .q_heads = heads,
                                                  .q_token_stride = heads * D,
                                                  .q_head_stride = D,
                                                  .key = bufs[1],
                                                  .k_heads = heads,
                                                  .k_token_stride = heads * D,
                                                  .k_head_stride = D,
                                                  .cache = bufs[2],
                                                  .cache_stride = rot},
                                            .is_neox = op == OP_ROT_NEOX,
                                            .dt = dt,
                                            .cache_dt = dt};
        j->rj.out = j->rj.g; /* in place */
        j->bytes = (double)(2 * 2 * T * heads * rot + T * rot) * (double)es + 8.0 * (double)T;
    }
}

/* j->bytes for T tokens (the decode setup above replaced it). */
static void setup_bytes(bjob *j, enum op op, int64_t T, int dt)
{
    const double es = (double)fld__cpu_elem_size(dt), H = 4096.0, heads = 32.0, rot = 128.0;
    if (op <= OP_GEMMA)
        j->bytes = ((op == OP_NORM_RES ? 4.0 : 2.0) * (double)T * H + H) * es;
    else
        j->bytes = (2.0 * 2.0 * (double)T * heads * rot + (double)T * rot) * es + 8.0 * (double)T;
}

static void teardown(void **bufs)
{
    for (int i = 0; i < 4; i++)
        free(bufs[i]);
}

/* Median and best seconds of one 4096-token call over g_reps calls. */
static double time_big(const struct fld_cpu_variant *v, const bjob *j, int64_t T, double *best)
{
    double t[64];
    run(v, j, T); /* warm-up: page faults, caches */
    for (int r = 0; r < g_reps; r++) {
        double t0 = nr_now();
        run(v, j, T);
        t[r] = nr_now() - t0;
    }
    double m = median(t, g_reps);
    *best = t[0];
    return m;
}

/*
 * Median and best seconds of one 1-token call, hot cache, over 41 batches
 * of ~0.2 ms: short batches so that the best one is free of preemption on
 * a loaded machine.
 */
static double time_small(const struct fld_cpu_variant *v, const bjob *j, double *best)
{
    int64_t calls = 1;
    for (;;) {
        double t0 = nr_now();
        for (int64_t c = 0; c < calls; c++)
            run(v, j, 1);
        if (nr_now() - t0 > 2e-4 || calls > (1 << 24))
            break;
        calls *= 2;
    }
    enum { BATCHES = 41 };
    double t[BATCHES];
    for (int r = 0; r < BATCHES; r++) {
        double t0 = nr_now();
        for (int64_t c = 0; c < calls; c++)
            run(v, j, 1);
        t[r] = (nr_now() - t0) / (double)calls;
    }
    double m = median(t, BATCHES);
    *best = t[0];
    return m;
}

int main(int argc, char **argv)
{
    int want[OP_COUNT] = {0}, any = 0, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            g_reps = atoi(argv[++i]);
            if (g_reps < 1 || g_reps > 31)
                g_reps = 7;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            g_threads = atoi(argv[++i]);
            if (g_threads < 1 || g_threads > 16)
                g_threads = 1;
        } else if (!strcmp(argv[i], "--op") && i + 1 < argc) {
            const char *o = argv[++i];
            int k = !strcmp(o, "norm")       ? OP_NORM
                    : !strcmp(o, "norm_res") ? OP_NORM_RES
                    : !strcmp(o, "gemma")    ? OP_GEMMA
                    : !strcmp(o, "rot_neox") ? OP_ROT_NEOX
                    : !strcmp(o, "rot_gptj") ? OP_ROT_GPTJ
                                             : -1;
            if (k < 0) {
                fprintf(stderr, "unknown op %s\n", o);
                return 2;
            }
            want[k] = 1;
            any = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick] [--reps N] [--threads N] [--op OP]...\n", argv[0]);
            return 2;
        }
    }
    if (!any)
        for (int k = 0; k < OP_COUNT; k++)
            want[k] = 1;
    const struct fld_cpu_variant *vars[8];
    int nv = nr_variants(vars, 8);

    double triad = nr_stream_triad_gbps(5);
    printf("STREAM triad, 1 thread, best of 5, 3 x 256 MiB: %.2f GB/s; kernels on %d thread(s)\n\n",
           triad, g_threads);
    printf("4096: 4096 x 4096 median (best) of %d; nt: the same with non-temporal output stores;\n"
           "1x: one row / token, hot cache, us per call, median (best) of 41 batches\n\n",
           g_reps);
    printf("%-14s %-4s %-9s| %6s %6s %7s %5s | %6s %7s %5s | %6s %6s\n", "op", "dt", "variant",
           "ms", "GB/s", "(best)", "share", "nt GB/s", "(best)", "share", "1x us", "(best)");
    const int64_t T = quick ? 1024 : 4096;
    for (int op = 0; op < OP_COUNT; op++) {
        if (!want[op])
            continue;
        for (int dt = 0; dt < 3; dt++)
            for (int vi = 0; vi < nv; vi++) {
                void *bufs[4];
                bjob j;
                setup(&j, (enum op)op, T, dt, 0, bufs);
                double b_plain, b_nt = 0.0, b1;
                double t_plain = time_big(vars[vi], &j, T, &b_plain);
                double t_nt = 0.0;
                if (op <= OP_GEMMA) {
                    j.nj.stream = 1;
                    t_nt = time_big(vars[vi], &j, T, &b_nt);
                }
                teardown(bufs);
                setup(&j, (enum op)op, 1, dt, 0, bufs); /* decode: ordinary stores */
                double t1 = time_small(vars[vi], &j, &b1);
                setup_bytes(&j, (enum op)op, T, dt);
                double gb = j.bytes / t_plain / 1e9;
                printf("%-14s %-4s %-9s| %6.2f %6.2f (%5.2f) %4.0f%% |", OP_NAME[op], DT_NAME[dt],
                       vars[vi]->name, t_plain * 1e3, gb, j.bytes / b_plain / 1e9,
                       100.0 * gb / triad);
                if (t_nt > 0.0) {
                    double gn = j.bytes / t_nt / 1e9;
                    printf(" %6.2f (%5.2f) %4.0f%% |", gn, j.bytes / b_nt / 1e9,
                           100.0 * gn / triad);
                } else {
                    printf(" %6s %7s %5s |", "-", "", "");
                }
                printf(" %6.3f (%5.3f)\n", t1 * 1e6, b1 * 1e6);
                fflush(stdout);
                teardown(bufs);
            }
    }
    return 0;
}
