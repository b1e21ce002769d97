/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench --overhead: what dispatch costs per call (options are
 * parsed by cmd_bench.c).
 *
 * Four ways to run rms_norm on a [1, 4096] float32 row (x, out, weight, no
 * residual) are timed against each other:
 *   direct  a call through a volatile function pointer (the floor: no
 *           dispatch, and the compiler cannot inline the kernel);
 *   handle  fld_call() with an fld_op handle looked up once;
 *   name    fld_call_by_name();
 *   typed   fld_rms_norm();
 *   prepared fld_prepared_rms_norm() on a call prepared once (fld_prepare()):
 *           the per-call pointer checks and dispatch, no layout validation;
 *   run     fld_prepared_run() of the same prepared call on its bound
 *           pointers: dispatch alone (the cached op, a generation compare).
 * Each runs with a "null" kernel (returns at once, so only the dispatch is
 * measured) and with a "loop" kernel (a plain rms_norm, for scale). Both are
 * registered by an in-process plugin "bench" and pinned with a per-op policy
 * (impl:vendor.bench_null, then impl:vendor.bench_loop).
 *
 * Method: R repetitions; in each, every variant runs one timed batch of N
 * calls on one thread and then on two threads at once (each with its own
 * tensors, released together by a barrier), so slow drift of the machine
 * touches all variants alike. The result per variant is the median over the
 * repetitions of ns per call; overhead = variant - direct. With two threads
 * a batch lasts from the first thread's start to the last one's end, and
 * scaling = 2 * (one-thread ns) / (two-thread ns) is the aggregate
 * throughput ratio.
 *
 * The tool reports these measurements only; the project's targets for them
 * (handle <= 5 ns and name <= 25 ns over direct, two threads >= 1.8x) are
 * checked by bench/targets.py from the --json document.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "../cli.h"
#include "../json.h"

#define BENCH_WIDTH        4096
#define BENCH_EPS          1e-6f
#define LOOP_CALLS_DIVISOR 10
#define NTHREADS_MAX       2

enum variant { V_DIRECT, V_HANDLE, V_NAME, V_TYPED, V_PREPARED, V_RUN, V_COUNT };
static const char *const variant_names[V_COUNT] = {"direct", "handle",   "name",
                                                   "typed",  "prepared", "run"};

/*
 * null and loop are rms_norm kernels, so their dispatched calls include the
 * host's argument validation. opaque is the null kernel registered for an op
 * outside the catalog, whose arguments the host does not look at: its
 * overhead is the dispatch machinery alone. Its "typed" variant is
 * fld_call_on() (there is no typed entry point for a plugin's own op), and it
 * has no prepared or run variant (the host cannot prepare opaque arguments).
 */
enum kernel { K_NULL, K_LOOP, K_OPAQUE, K_COUNT };
static const char *const kernel_names[K_COUNT] = {"null", "loop", "opaque"};
static const char *const kernel_impl_ids[K_COUNT] = {"vendor.bench_null", "vendor.bench_loop",
                                                     "vendor.bench_null"};
static const char *const kernel_ops[K_COUNT] = {FLD_OP_RMS_NORM, FLD_OP_RMS_NORM, "bench_opaque"};

/* ---- the kernels and their plugin ---------------------------------------- */

static int bench_null_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

/*
 * A plain rms_norm over float32 rows. Eight partial sums let the compiler
 * vectorise the sum of squares without -ffast-math.
 */
static int bench_loop_kernel(const void *args)
{
    const fld_rms_norm_args *a = args;
    fld_rows x, out, res = {0}, wr = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    if (a->weight)
        fld_tensor_rows(a->weight, &wr);
    const float *w = a->weight ? wr.data : NULL;
    for (int64_t r = 0; r < x.rows; r++) {
        const float *src = (const float *)x.data + r * x.stride;
        float *outr = (float *)out.data + r * out.stride;
        if (a->residual) {
            float *resr = (float *)res.data + r * res.stride;
            for (int64_t j = 0; j < x.width; j++)
                resr[j] += src[j];
            src = resr;
        }
        float acc[8] = {0};
        int64_t j = 0;
        for (; j + 8 <= x.width; j += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += src[j + l] * src[j + l];
        for (; j < x.width; j++)
            acc[0] += src[j] * src[j];
        float sum = 0.0f;
        for (int l = 0; l < 8; l++)
            sum += acc[l];
        float inv = 1.0f / sqrtf(sum / (float)x.width + a->eps);
        if (w) {
            for (j = 0; j < x.width; j++)
                outr[j] = src[j] * inv * w[j];
        } else {
            for (j = 0; j < x.width; j++)
                outr[j] = src[j] * inv;
        }
    }
    return FLD_OK;
}

static int (*const kernel_fns[K_COUNT])(const void *) = {bench_null_kernel, bench_loop_kernel,
                                                         bench_null_kernel};

/* Whether kernel k has variant v: an op outside the catalog cannot be prepared. */
static bool variant_applies(enum kernel k, enum variant v)
{
    return !(k == K_OPAQUE && (v == V_PREPARED || v == V_RUN));
}

static const char *variant_label(enum kernel k, enum variant v)
{
    return k == K_OPAQUE && v == V_TYPED ? "call_on" : variant_names[v];
}

static int bench_register(fld_registry *reg)
{
    for (int k = 0; k < K_COUNT; k++) {
        const fld_impl impl = {
            .op = kernel_ops[k],
            .impl_id = kernel_impl_ids[k],
            .kind = FLD_KIND_VENDOR,
            .vendor = "bench",
            .priority = 1, /* never wins unless pinned */
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_F32,
            .fn = kernel_fns[k],
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

/* Part of the tool, so in-tree: VLLM_FL_OOT_* must not drop it. */
static const fld_plugin_descriptor bench_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = FLD_PLUGIN_FLAG_IN_TREE,
    .name = "bench",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = bench_register,
};

/* ---- tensors and timed batches -------------------------------------------- */

/* One thread's call arguments; aligned so two threads never share a cache line. */
struct bench_args {
    float *x, *out, *weight;
    int64_t shape[2], weight_shape[1];
    DLTensor x_t, out_t, weight_t;
    fld_rms_norm_args args;
    fld_prepared *prepared; /* args, prepared once */
} __attribute__((aligned(64)));

static DLTensor cpu_f32_tensor(float *data, int ndim, int64_t *shape)
{
    DLTensor t = {0};
    t.data = data;
    t.device = (DLDevice){kDLCPU, 0};
    t.ndim = ndim;
    t.dtype = FLD_DTYPE_F32;
    t.shape = shape;
    return t;
}

static int bench_args_init(struct bench_args *b)
{
    memset(b, 0, sizeof *b);
    size_t bytes = BENCH_WIDTH * sizeof(float);
    b->x = aligned_alloc(64, bytes);
    b->out = aligned_alloc(64, bytes);
    b->weight = aligned_alloc(64, bytes);
    if (!b->x || !b->out || !b->weight)
        return FLD_ENOMEM;
    for (int j = 0; j < BENCH_WIDTH; j++) {
        b->x[j] = (float)((j * 37) % 101 - 50) / 50.0f;
        b->weight[j] = 1.0f + (float)(j % 7) / 100.0f;
        b->out[j] = 0.0f;
    }
    b->shape[0] = 1;
    b->shape[1] = BENCH_WIDTH;
    b->weight_shape[0] = BENCH_WIDTH;
    b->x_t = cpu_f32_tensor(b->x, 2, b->shape);
    b->out_t = cpu_f32_tensor(b->out, 2, b->shape);
    b->weight_t = cpu_f32_tensor(b->weight, 1, b->weight_shape);
    b->args = (fld_rms_norm_args){
        .out = &b->out_t, .x = &b->x_t, .weight = &b->weight_t, .residual = NULL, .eps = BENCH_EPS};
    return fld_prepare(FLD_OP_RMS_NORM, &b->args, &b->prepared);
}

static void bench_args_free(struct bench_args *b)
{
    free(b->x);
    free(b->out);
    free(b->weight);
    fld_prepared_free(b->prepared);
}

/* volatile: every direct call loads the pointer, so the kernel cannot be inlined. */
static fld_kernel_fn volatile direct_kernel;
static fld_op bench_op; /* the op of the kernel being measured */
static const char *bench_op_name;
static bool bench_op_opaque;

/* Runs n calls of one variant; false if any call failed. */
static bool run_calls(enum variant v, struct bench_args *b, long n)
{
    int failed = 0;
    switch (v) {
    case V_DIRECT:
        for (long i = 0; i < n; i++)
            failed |= direct_kernel(&b->args);
        break;
    case V_HANDLE:
        for (long i = 0; i < n; i++)
            failed |= fld_call(bench_op, &b->args);
        break;
    case V_NAME:
        for (long i = 0; i < n; i++)
            failed |= fld_call_by_name(bench_op_name, &b->args);
        break;
    case V_TYPED:
        if (bench_op_opaque)
            for (long i = 0; i < n; i++)
                failed |= fld_call_on(bench_op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &b->args);
        else
            for (long i = 0; i < n; i++)
                failed |= fld_rms_norm(&b->out_t, &b->x_t, &b->weight_t, NULL, BENCH_EPS);
        break;
    case V_PREPARED:
        for (long i = 0; i < n; i++)
            failed |= fld_prepared_rms_norm(b->prepared, b->out, b->x, b->weight, NULL);
        break;
    case V_RUN:
        for (long i = 0; i < n; i++)
            failed |= fld_prepared_run(b->prepared);
        break;
    case V_COUNT:
        break;
    }
    return failed == 0;
}

/* ns per call of a batch on the calling thread, or NAN if a call failed. */
static double timed_batch(enum variant v, struct bench_args *b, long n)
{
    double t0 = bench_now_ns();
    bool ok = run_calls(v, b, n);
    double t1 = bench_now_ns();
    return ok ? (t1 - t0) / (double)n : NAN;
}

/* ---- the two-thread harness ------------------------------------------------ */

struct worker {
    pthread_t thread;
    struct bench_args args;
    /* Written by the worker before the done barrier. */
    double t_start, t_end;
    bool ok;
    struct pool *pool;
};

/*
 * Workers wait at `start`, meet each other at a spinning rendezvous (so
 * neither starts its clock while the other is still being woken), run the
 * posted batch, and meet the main thread at `done`.
 */
struct pool {
    pthread_barrier_t start, done;
    enum variant variant;
    long calls;
    bool quit;
    unsigned batch;           /* batches posted so far */
    _Atomic unsigned arrived; /* workers that reached the rendezvous, over all batches */
    struct worker workers[NTHREADS_MAX];
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct pool *p = w->pool;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->quit)
            break;
        unsigned everyone = p->batch * NTHREADS_MAX;
        atomic_fetch_add(&p->arrived, 1);
        while (atomic_load(&p->arrived) < everyone)
            sched_yield();
        w->t_start = bench_now_ns();
        w->ok = run_calls(p->variant, &w->args, p->calls);
        w->t_end = bench_now_ns();
        pthread_barrier_wait(&p->done);
    }
    return NULL;
}

/*
 * Both workers run the same batch at once. Returns ns per call per thread
 * over the span from the first start to the last end, so threads that end
 * up taking turns on one CPU (a busy or small machine) show up as slow
 * rather than as two fast, separate batches.
 */
static double pool_batch(struct pool *p, enum variant v, long calls)
{
    p->variant = v;
    p->calls = calls;
    p->batch++;
    pthread_barrier_wait(&p->start);
    pthread_barrier_wait(&p->done);
    double first = p->workers[0].t_start, last = p->workers[0].t_end;
    for (int i = 0; i < NTHREADS_MAX; i++) {
        if (!p->workers[i].ok)
            return NAN;
        first = fmin(first, p->workers[i].t_start);
        last = fmax(last, p->workers[i].t_end);
    }
    return (last - first) / (double)calls;
}

/*
 * Puts each worker on its own CPU of the allowed set. Without this, the
 * scheduler tends to wake both workers on the CPU of the thread that woke
 * them, and short batches then run one after the other on one CPU.
 */
static void pin_workers(struct pool *p)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < NTHREADS_MAX)
        return;
    int cpu = 0;
    for (int i = 0; i < NTHREADS_MAX; i++, cpu++) {
        while (!CPU_ISSET(cpu, &allowed))
            cpu++;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        pthread_setaffinity_np(p->workers[i].thread, sizeof one, &one);
    }
}

static int pool_start(struct pool *p)
{
    memset(p, 0, sizeof *p);
    for (int i = 0; i < NTHREADS_MAX; i++) {
        if (bench_args_init(&p->workers[i].args) != FLD_OK)
            goto fail_args;
        p->workers[i].pool = p;
    }
    pthread_barrier_init(&p->start, NULL, NTHREADS_MAX + 1);
    pthread_barrier_init(&p->done, NULL, NTHREADS_MAX + 1);
    int started = 0;
    for (; started < NTHREADS_MAX; started++)
        if (pthread_create(&p->workers[started].thread, NULL, worker_main, &p->workers[started]))
            goto fail_threads;
    pin_workers(p);
    return FLD_OK;

fail_threads:
    /* The barriers count every worker; the missing ones cannot arrive, so stop here. */
    fprintf(stderr, "fldispatch bench: cannot start worker thread %d\n", started);
    exit(CLI_EXIT_CHECK_FAILED);
fail_args:
    for (int i = 0; i < NTHREADS_MAX; i++)
        bench_args_free(&p->workers[i].args);
    return FLD_ENOMEM;
}

static void pool_stop(struct pool *p)
{
    p->quit = true;
    pthread_barrier_wait(&p->start);
    for (int i = 0; i < NTHREADS_MAX; i++) {
        pthread_join(p->workers[i].thread, NULL);
        bench_args_free(&p->workers[i].args);
    }
    pthread_barrier_destroy(&p->start);
    pthread_barrier_destroy(&p->done);
}

/* ---- measurement ----------------------------------------------------------- */

struct measurement {
    long calls;
    double ns[V_COUNT][NTHREADS_MAX]; /* median ns per call, [variant][threads - 1] */
};

/* Pins kernel k and checks that the library really selects it. */
static int pin_kernel(enum kernel k)
{
    bench_op_name = kernel_ops[k];
    bench_op_opaque = k == K_OPAQUE;
    bench_op = fld_op_lookup(bench_op_name);
    if (!bench_op) {
        fprintf(stderr, "fldispatch bench: %s\n", fld_last_error());
        return FLD_ENOTFOUND;
    }
    if (k == K_OPAQUE)
        return FLD_OK; /* its only implementation */
    char spec[128];
    snprintf(spec, sizeof spec, "%s=impl:%s", FLD_OP_RMS_NORM, kernel_impl_ids[k]);
    int rc = fld_policy_set("per_op", spec);
    if (rc != FLD_OK) {
        fprintf(stderr, "fldispatch bench: cannot pin %s: %s\n", kernel_impl_ids[k],
                fld_last_error());
        return rc;
    }
    const char *selected = NULL;
    rc = fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &selected);
    if (rc != FLD_OK || !selected || strcmp(selected, kernel_impl_ids[k]) != 0) {
        fprintf(stderr, "fldispatch bench: %s pinned, but rms_norm resolves to %s (%s)\n",
                kernel_impl_ids[k], selected ? cli_text(selected) : "nothing",
                rc != FLD_OK ? fld_last_error() : "policy ignored");
        return rc != FLD_OK ? rc : FLD_EIMPL;
    }
    return FLD_OK;
}

/*
 * Measures every kernel and variant. Repetitions are the outer loop and
 * kernels and variants interleave inside each, so that a change of CPU
 * speed or of load on a shared machine affects every figure alike.
 */
static int measure_all(const long calls[K_COUNT], int reps, struct bench_args *main_args,
                       struct pool *pool, struct measurement m[K_COUNT])
{
    double *samples = calloc((size_t)reps * K_COUNT * V_COUNT * NTHREADS_MAX, sizeof *samples);
    if (!samples)
        return FLD_ENOMEM;
#define SAMPLE(k, v, t, r)                                                                         \
    samples[((((size_t)(k)*V_COUNT + (v)) * NTHREADS_MAX + (t)) * (size_t)reps) + (r)]

    int rc = FLD_OK;
    for (int r = -1; r < reps && rc == FLD_OK; r++) {
        for (int k = 0; k < K_COUNT && rc == FLD_OK; k++) {
            rc = pin_kernel(k);
            direct_kernel = kernel_fns[k];
            /* Re-resolves and caches the chain after the pin, faults pages in. */
            long warm = calls[k] / 10 > 0 ? calls[k] / 10 : 1;
            for (int v = 0; v < V_COUNT && rc == FLD_OK; v++) {
                if (!variant_applies(k, v)) {
                    if (r >= 0)
                        SAMPLE(k, v, 0, r) = SAMPLE(k, v, 1, r) = 0.0;
                    continue;
                }
                timed_batch(v, main_args, warm);
                if (r < 0) { /* the first round only warms up */
                    pool_batch(pool, v, warm);
                    continue;
                }
                SAMPLE(k, v, 0, r) = timed_batch(v, main_args, calls[k]);
                SAMPLE(k, v, 1, r) = pool_batch(pool, v, calls[k]);
            }
        }
    }
    for (int k = 0; k < K_COUNT && rc == FLD_OK; k++) {
        m[k].calls = calls[k];
        for (int v = 0; v < V_COUNT; v++) {
            for (int t = 0; t < NTHREADS_MAX; t++) {
                m[k].ns[v][t] = bench_median(&SAMPLE(k, v, t, 0), reps);
                if (variant_applies(k, v) && isnan(m[k].ns[v][t]) && rc == FLD_OK) {
                    fprintf(stderr, "fldispatch bench: %s calls with the %s kernel failed: %s\n",
                            variant_label(k, v), kernel_names[k], fld_last_error());
                    rc = FLD_EIMPL;
                }
            }
        }
    }
#undef SAMPLE
    free(samples);
    return rc;
}

/* ---- reporting ------------------------------------------------------------- */

static double overhead(const struct measurement *m, enum variant v, int t)
{
    return m->ns[v][t] - m->ns[V_DIRECT][t];
}

/* Aggregate throughput of two threads over one: 2 calls per ns2 vs 1 per ns1. */
static double scaling(const struct measurement *m, enum variant v)
{
    return 2.0 * m->ns[v][0] / m->ns[v][1];
}

static void report_text(const struct measurement m[K_COUNT], int reps, const char *cpu,
                        long threads)
{
    printf("dispatch overhead: %s [1, %d] float32, x, out, weight, no residual (null, loop: "
           "validated catalog calls; opaque: an op outside the catalog, dispatch alone)\n",
           FLD_OP_RMS_NORM, BENCH_WIDTH);
    printf("machine: %s, %ld online cpus; median of %d repetitions\n\n", cli_text(cpu), threads,
           reps);
    printf("%-6s %-8s %7s %8s %10s %10s\n", "kernel", "variant", "threads", "calls", "ns/call",
           "overhead");
    bool below_zero = false;
    for (int k = 0; k < K_COUNT; k++) {
        for (int t = 0; t < NTHREADS_MAX; t++) {
            for (int v = 0; v < V_COUNT; v++) {
                if (!variant_applies(k, v))
                    continue;
                char over[32] = "-";
                if (v != V_DIRECT) {
                    double o = overhead(&m[k], v, t);
                    snprintf(over, sizeof over, o < 0 ? "%.1f*" : "%.1f", o);
                    below_zero |= o < 0;
                }
                printf("%-6s %-8s %7d %8ld %10.1f %10s\n", kernel_names[k], variant_label(k, v),
                       t + 1, m[k].calls, m[k].ns[v][t], over);
            }
        }
    }
    if (below_zero)
        printf("* below zero: that variant's calls measured faster than the direct calls of the "
               "same kernel,\n  so its dispatch cost is smaller than the run-to-run noise of "
               "that kernel (clock, cache and\n  scheduling effects); read it as no measurable "
               "overhead, not as a gain\n");
    printf("\ntwo threads vs one, aggregate throughput:\n");
    for (int k = 0; k < K_COUNT; k++) {
        printf("  %-6s", kernel_names[k]);
        for (int v = 0; v < V_COUNT; v++)
            if (variant_applies(k, v))
                printf("  %s %.2fx", variant_label(k, v), scaling(&m[k], v));
        printf("\n");
    }
    if (threads < NTHREADS_MAX)
        printf("note: fewer than %d online cpus, two-thread figures are not meaningful\n",
               NTHREADS_MAX);
}

static void report_json(const struct measurement m[K_COUNT], int reps, const char *cpu,
                        long threads)
{
    struct json_writer w;
    json_begin_document_schema(&w, stdout, BENCH_OVERHEAD_SCHEMA);
    json_key(&w, "benchmark");
    json_string(&w, "dispatch_overhead");
    json_key(&w, "op");
    json_string(&w, FLD_OP_RMS_NORM);
    json_key(&w, "shape"); /* TxH, as the kernel bench writes it */
    char shape[32];
    snprintf(shape, sizeof shape, "1x%d", BENCH_WIDTH);
    json_string(&w, shape);
    json_key(&w, "dtype");
    json_string(&w, "f32");
    json_key(&w, "reps");
    json_int(&w, reps);
    json_key(&w, "machine");
    json_begin_object(&w);
    json_key(&w, "cpu");
    json_string(&w, cpu);
    json_key(&w, "threads");
    json_int(&w, threads);
    json_end_object(&w);

    json_key(&w, "results");
    json_begin_array(&w);
    for (int k = 0; k < K_COUNT; k++) {
        for (int t = 0; t < NTHREADS_MAX; t++) {
            for (int v = 0; v < V_COUNT; v++) {
                if (!variant_applies(k, v))
                    continue;
                json_begin_object(&w);
                json_key(&w, "variant");
                json_string(&w, variant_label(k, v));
                json_key(&w, "kernel");
                json_string(&w, kernel_names[k]);
                json_key(&w, "threads");
                json_int(&w, t + 1);
                json_key(&w, "calls");
                json_int(&w, m[k].calls);
                json_key(&w, "ns_per_call");
                json_double(&w, m[k].ns[v][t], 2);
                json_key(&w, "overhead_ns");
                json_double(&w, overhead(&m[k], v, t), 2);
                json_end_object(&w);
            }
        }
    }
    json_end_array(&w);

    json_key(&w, "scaling_2t");
    json_begin_object(&w);
    for (int k = 0; k < K_COUNT; k++) {
        json_key(&w, kernel_names[k]);
        json_begin_object(&w);
        for (int v = 0; v < V_COUNT; v++) {
            if (!variant_applies(k, v))
                continue;
            json_key(&w, variant_label(k, v));
            json_double(&w, scaling(&m[k], v), 3);
        }
        json_end_object(&w);
    }
    json_end_object(&w);

    json_end_object(&w);
    json_finish(&w);
}

/* ---- the command ------------------------------------------------------------ */

/* Makes the environment's policy unable to drop the bench's own kernels. */
static int open_policy(void)
{
    static const char *const fields[][2] = {
        {"enabled", "1"},
        {"allow_vendors", NULL},
        {"deny_vendors", NULL},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (fld_policy_set(fields[i][0], fields[i][1]) != FLD_OK) {
            fprintf(stderr, "fldispatch bench: cannot set policy '%s': %s\n", fields[i][0],
                    fld_last_error());
            return CLI_EXIT_CHECK_FAILED;
        }
    }
    return CLI_EXIT_OK;
}

int bench_overhead_run(long null_calls, int reps, bool json)
{
    int status = cli_init();
    if (status != CLI_EXIT_OK)
        return status;
    if (fld_register_plugin(&bench_plugin) != FLD_OK) {
        fprintf(stderr, "fldispatch bench: cannot register the bench kernels: %s\n",
                fld_last_error());
        return CLI_EXIT_CHECK_FAILED;
    }
    status = open_policy();
    if (status != CLI_EXIT_OK)
        return status;

    struct bench_args main_args;
    struct pool pool;
    if (bench_args_init(&main_args) != FLD_OK) {
        bench_args_free(&main_args);
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }
    if (pool_start(&pool) != FLD_OK) {
        bench_args_free(&main_args);
        fprintf(stderr, "fldispatch bench: out of memory\n");
        return CLI_EXIT_CHECK_FAILED;
    }

    struct measurement m[K_COUNT];
    const long calls[K_COUNT] = {
        null_calls, null_calls / LOOP_CALLS_DIVISOR > 0 ? null_calls / LOOP_CALLS_DIVISOR : 1,
        null_calls};
    status = measure_all(calls, reps, &main_args, &pool, m) == FLD_OK ? CLI_EXIT_OK
                                                                      : CLI_EXIT_CHECK_FAILED;
    pool_stop(&pool);
    bench_args_free(&main_args);
    fld_policy_reset();
    if (status != CLI_EXIT_OK)
        return status;

    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (json)
        report_json(m, reps, cpu, threads);
    else
        report_text(m, reps, cpu, threads);
    return CLI_EXIT_OK;
}
