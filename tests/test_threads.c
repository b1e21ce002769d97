/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Thread safety: callers on several threads while the global policy flips
 * and each caller pushes and pops its own scoped overrides; concurrent first
 * use (fld_init, fld_op_lookup) and concurrent fld_load_plugin of one file.
 * The in-tree cpu plugin ($FLD_BUILDDIR/lib/fldispatch/plugins) provides
 * vendor.cpu next to the library's reference.c, and the fixture "good"
 * provides vendor.good, whose per-thread call counter shows which impl a
 * call really ran, so the flips are checked on the cached call path too.
 */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <fldispatch/plugin.h>

#include "util/catalog_args.h"
#include "util/files.h"
#include "util/harness.h"

/* Layout of the "good_echo" op's arguments (tests/plugins/good.c). */
typedef struct good_echo_args {
    int value;
} good_echo_args;

/* ------------------------------------------------------------------------ */
/* Environment and files                                                    */
/* ------------------------------------------------------------------------ */

/* The build tree's plugins (cpu and friends) only. */
static void use_build_plugins(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/lib/fldispatch/plugins", tt_build_dir());
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", dir, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
}

static void quiet_log(int level, const char *message, void *user)
{
    (void)user;
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "[log %d] %s\n", level, message);
}

static void init_ok(void)
{
    fld_log_set_callback(quiet_log, NULL);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
}

static bool impl_registered(const char *op, const char *impl_id)
{
    const char *id = NULL;
    char spec[256];
    snprintf(spec, sizeof spec, "%s=impl:%s", op, impl_id);
    /* Pinning the op to the impl on this thread tells whether it exists and
     * qualifies for (cpu, f32). */
    if (fld_policy_push_per_op(spec) != FLD_OK)
        return false;
    int rc = fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    return rc == FLD_OK && id != NULL && strcmp(id, impl_id) == 0;
}

/* ------------------------------------------------------------------------ */
/* Callers under policy flips                                               */
/* ------------------------------------------------------------------------ */

/* Each caller makes at least ITERS rounds, and keeps going until the policy
 * has changed MIN_FLIPS times, so calls and flips overlap however the
 * threads are scheduled. */
enum { N_WORKERS = 4, ITERS = 4000, MIN_FLIPS = 30, ROWS = 4, D = 40, H = 72 };
#define EPS 1e-6f

struct worker {
    int id;
    pthread_t thread;
    long calls;
    long rounds;
    long pushes;
    char error[512]; /* first failure, empty when none */
    float sx[ROWS][2 * D], sout[ROWS][D], swant[ROWS][D];
    float rx[ROWS][H], rw[H], rout[ROWS][H], rwant[ROWS][H];
};

static pthread_barrier_t start_line;
static atomic_int workers_running;
static atomic_long flips_done;
static atomic_bool flipper_stopped;

static void worker_fill(struct worker *w)
{
    unsigned seed = 12345u + (unsigned)w->id * 7919u;
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < 2 * D; i++) {
            seed = seed * 1103515245u + 12345u;
            w->sx[r][i] = (float)((int)(seed >> 16) % 2001 - 1000) / 250.0f;
        }
        for (int i = 0; i < D; i++) {
            double g = w->sx[r][i];
            w->swant[r][i] = (float)(g / (1.0 + exp(-g)) * w->sx[r][D + i]);
        }
        double ss = 0;
        for (int i = 0; i < H; i++) {
            seed = seed * 1103515245u + 12345u;
            w->rx[r][i] = (float)((int)(seed >> 16) % 2001 - 1000) / 400.0f;
            ss += (double)w->rx[r][i] * w->rx[r][i];
        }
        double inv = 1.0 / sqrt(ss / H + EPS);
        for (int i = 0; i < H; i++) {
            w->rw[i] = 0.5f + (float)i / H;
            w->rwant[r][i] = (float)(w->rx[r][i] * inv * w->rw[i]);
        }
    }
}

static bool close_enough(float got, float want)
{
    return fabsf(got - want) <= 2e-5f + 2e-5f * fabsf(want);
}

static bool worker_fail(struct worker *w, const char *what, int rc)
{
    if (w->error[0] == '\0')
        snprintf(w->error, sizeof w->error, "thread %d, call %ld: %s: %s: %s", w->id, w->calls,
                 what, fld_strerror(rc), fld_last_error());
    return false;
}

static bool worker_call(struct worker *w)
{
    int64_t sxs[2] = {ROWS, 2 * D}, sos[2] = {ROWS, D}, rs[2] = {ROWS, H}, ws[1] = {H};
    DLTensor sx = {
        .data = w->sx, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = sxs};
    DLTensor so = {.data = w->sout,
                   .device = {kDLCPU, 0},
                   .ndim = 2,
                   .dtype = {kDLFloat, 32, 1},
                   .shape = sos};
    DLTensor rx = {
        .data = w->rx, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = rs};
    DLTensor rw = {
        .data = w->rw, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = ws};
    DLTensor ro = {
        .data = w->rout, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = rs};

    memset(w->sout, 0xff, sizeof w->sout);
    int rc = fld_silu_and_mul(&so, &sx);
    w->calls++;
    if (rc != FLD_OK)
        return worker_fail(w, "silu_and_mul", rc);
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < D; i++)
            if (!close_enough(w->sout[r][i], w->swant[r][i])) {
                snprintf(w->error, sizeof w->error,
                         "thread %d: silu_and_mul[%d][%d] = %.9g, expected %.9g", w->id, r, i,
                         (double)w->sout[r][i], (double)w->swant[r][i]);
                return false;
            }

    memset(w->rout, 0xff, sizeof w->rout);
    rc = fld_rms_norm(&ro, &rx, &rw, NULL, EPS);
    w->calls++;
    if (rc != FLD_OK)
        return worker_fail(w, "rms_norm", rc);
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < H; i++)
            if (!close_enough(w->rout[r][i], w->rwant[r][i])) {
                snprintf(w->error, sizeof w->error,
                         "thread %d: rms_norm[%d][%d] = %.9g, expected %.9g", w->id, r, i,
                         (double)w->rout[r][i], (double)w->rwant[r][i]);
                return false;
            }
    return true;
}

/* Scoped overrides a caller pushes on itself; each keeps the reference to fall back on. */
static int push_override(int which)
{
    switch (which % 5) {
    case 0:
        return fld_policy_push_preference("reference");
    case 1:
        return fld_policy_push_per_op(
            "silu_and_mul=impl:vendor.cpu|impl:reference.c;rms_norm=vendor|reference");
    case 2:
        return fld_policy_push_denied_vendors("cpu");
    case 3:
        return fld_policy_push_strict(true);
    default:
        return fld_policy_push_allowed_vendors("cpu");
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_barrier_wait(&start_line);
    int depth = 0;
    for (int i = 0; w->error[0] == '\0'; i++) {
        if (i >= ITERS && (atomic_load(&flips_done) >= MIN_FLIPS || atomic_load(&flipper_stopped)))
            break;
        if (i % 40 == 10) {
            int rc = push_override(w->id + i / 40);
            if (rc != FLD_OK) {
                worker_fail(w, "fld_policy_push_*", rc);
                break;
            }
            depth++;
            w->pushes++;
            /* Sometimes nest a second one. */
            if (i % 80 == 10) {
                rc = push_override(w->id + i / 40 + 2);
                if (rc != FLD_OK) {
                    worker_fail(w, "fld_policy_push_* (nested)", rc);
                    break;
                }
                depth++;
                w->pushes++;
            }
        }
        for (; i % 40 == 30 && depth > 0; depth--) {
            int rc = fld_policy_pop();
            if (rc != FLD_OK) {
                worker_fail(w, "fld_policy_pop", rc);
                break;
            }
        }
        if (w->error[0] != '\0' || !worker_call(w))
            break;
        w->rounds++;
    }
    for (; depth > 0; depth--)
        fld_policy_pop();
    if (w->error[0] == '\0' && fld_policy_pop() != FLD_ESTATE)
        snprintf(w->error, sizeof w->error, "thread %d: pushes and pops do not balance", w->id);
    atomic_fetch_sub(&workers_running, 1);
    return NULL;
}

struct flipper {
    pthread_t thread;
    long flips;
    long checked;
    char error[512];
    struct worker self; /* its own tensors, to call through the fresh policy */
};

/* The calling thread's count of calls vendor.good served (tests/plugins/good.c). */
static long (*good_thread_calls)(void);

/* Global policy steps; after each, what silu_and_mul resolves to and runs on
 * a thread without overrides (NULL: not checked). Each applies on top of the
 * previous ones. */
static const struct {
    const char *key, *value;
    const char *silu;
} policy_steps[] = {
    {"per_op", "silu_and_mul=impl:reference.c|impl:vendor.cpu;rms_norm=impl:vendor.cpu|reference",
     "reference.c"},
    {"prefer", "vendor", "reference.c"},
    {"per_op",
     "silu_and_mul=impl:vendor.good|impl:vendor.cpu|impl:reference.c;rms_norm=impl:reference.c",
     "vendor.good"},
    {"deny_vendors", "good", "vendor.cpu"},
    {"deny_vendors", "cpu", "vendor.good"},
    {"deny_vendors", "cpu,good", "reference.c"},
    {"prefer", "reference", "reference.c"},
    {"deny_vendors", "", "vendor.good"},
    {"per_op", "silu_and_mul=impl:vendor.cpu|impl:reference.c", "vendor.cpu"},
    {"prefer", "flagos", "vendor.cpu"},
    {"per_op", "", NULL},
    {NULL, NULL, NULL}, /* fld_policy_reset() */
};
#define N_POLICY_STEPS (sizeof policy_steps / sizeof policy_steps[0])

static void *flipper_main(void *arg)
{
    struct flipper *f = arg;
    pthread_barrier_wait(&start_line);
    const struct timespec pause = {0, 200 * 1000};
    for (size_t step = 0; atomic_load(&workers_running) > 0; step = (step + 1) % N_POLICY_STEPS) {
        int rc = policy_steps[step].key
                     ? fld_policy_set(policy_steps[step].key, policy_steps[step].value)
                     : fld_policy_reset();
        if (rc != FLD_OK) {
            snprintf(f->error, sizeof f->error, "fld_policy_set(%s, %s): %s: %s",
                     policy_steps[step].key ? policy_steps[step].key : "(reset)",
                     policy_steps[step].value ? policy_steps[step].value : "", fld_strerror(rc),
                     fld_last_error());
            break;
        }
        f->flips++;
        atomic_fetch_add(&flips_done, 1);
        const char *id = NULL;
        rc = fld_resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
        if (rc != FLD_OK) {
            snprintf(f->error, sizeof f->error, "fld_resolve after step %zu: %s: %s", step,
                     fld_strerror(rc), fld_last_error());
            break;
        }
        if (policy_steps[step].silu != NULL) {
            if (strcmp(id, policy_steps[step].silu) != 0) {
                snprintf(f->error, sizeof f->error,
                         "after fld_policy_set(%s, '%s') silu_and_mul resolves to %s, expected %s",
                         policy_steps[step].key, policy_steps[step].value, id,
                         policy_steps[step].silu);
                break;
            }
            /* The call path (a cached chain) must follow the change too. */
            long before = good_thread_calls();
            if (!worker_call(&f->self)) {
                snprintf(f->error, sizeof f->error, "policy thread: %s", f->self.error);
                break;
            }
            bool by_good = good_thread_calls() > before;
            if (by_good != (strcmp(policy_steps[step].silu, "vendor.good") == 0)) {
                snprintf(f->error, sizeof f->error,
                         "after fld_policy_set(%s, '%s') silu_and_mul was %sserved by "
                         "vendor.good, expected %s",
                         policy_steps[step].key, policy_steps[step].value, by_good ? "" : "not ",
                         policy_steps[step].silu);
                break;
            }
            f->checked++;
        }
        nanosleep(&pause, NULL);
    }
    atomic_store(&flipper_stopped, true);
    return NULL;
}

START_TEST(test_calls_during_policy_flips)
{
    char dirs[2 * PATH_MAX + 32], good[PATH_MAX];
    const char *fixtures = tt_make_tmpdir("threads");
    tt_install_fixture(good, fixtures, "plugins", "good");
    snprintf(dirs, sizeof dirs, "%s/lib/fldispatch/plugins:%s", tt_build_dir(), fixtures);
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", dirs, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
    unsetenv("VLLM_FL_PER_OP");
    unsetenv("VLLM_FL_DENY_VENDORS");
    init_ok();
    void *handle = dlopen(good, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(handle != NULL, "%s was not loaded", good);
    good_thread_calls = (long (*)(void))dlsym(handle, "fld_fixture_good_thread_calls");
    ck_assert_ptr_nonnull(good_thread_calls);
    ck_assert_msg(impl_registered("silu_and_mul", "vendor.cpu"),
                  "the cpu plugin does not serve silu_and_mul (cpu, f32)");
    ck_assert_msg(impl_registered("rms_norm", "vendor.cpu"),
                  "the cpu plugin does not serve rms_norm (cpu, f32)");

    static struct worker workers[N_WORKERS];
    static struct flipper flipper;
    memset(&flipper, 0, sizeof flipper);
    flipper.self.id = N_WORKERS;
    worker_fill(&flipper.self);
    ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, N_WORKERS + 1), 0);
    atomic_store(&workers_running, N_WORKERS);
    atomic_store(&flips_done, 0);
    atomic_store(&flipper_stopped, false);
    for (int i = 0; i < N_WORKERS; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].id = i;
        worker_fill(&workers[i]);
        ck_assert_int_eq(pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]), 0);
    }
    ck_assert_int_eq(pthread_create(&flipper.thread, NULL, flipper_main, &flipper), 0);
    for (int i = 0; i < N_WORKERS; i++)
        pthread_join(workers[i].thread, NULL);
    pthread_join(flipper.thread, NULL);
    pthread_barrier_destroy(&start_line);

    long total = 0;
    for (int i = 0; i < N_WORKERS; i++) {
        ck_assert_msg(workers[i].error[0] == '\0', "%s", workers[i].error);
        ck_assert_msg(workers[i].rounds >= ITERS && workers[i].calls == 2 * workers[i].rounds,
                      "thread %d made %ld calls in %ld rounds", i, workers[i].calls,
                      workers[i].rounds);
        ck_assert_msg(workers[i].pushes > 0, "thread %d pushed no override", i);
        total += workers[i].calls;
    }
    ck_assert_msg(flipper.error[0] == '\0', "%s", flipper.error);
    ck_assert_msg(flipper.flips >= MIN_FLIPS, "only %ld policy changes happened during the calls",
                  flipper.flips);
    ck_assert_int_gt(flipper.checked, 0);
    ck_assert_int_ge(total, 2L * ITERS * N_WORKERS);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "%ld calls on %d threads during %ld policy changes\n", total, N_WORKERS,
                flipper.flips);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Concurrent first use                                                     */
/* ------------------------------------------------------------------------ */

enum { N_RACERS = 16 };

struct racer {
    pthread_t thread;
    int rc;
    fld_op ops[4];
    char error[256]; /* fld_last_error() of the racer's thread */
};

static const char *const racer_ops[4] = {"silu_and_mul", "rms_norm", "good_echo", "no_such_op"};
static const char *racer_path;

static void *init_racer(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(&start_line);
    r->rc = fld_init();
    snprintf(r->error, sizeof r->error, "%s", r->rc ? fld_last_error() : "");
    return NULL;
}

static void *lookup_racer(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(&start_line);
    for (int i = 0; i < 4; i++) {
        r->ops[i] = fld_op_lookup(racer_ops[i]);
        if (i < 3 && r->ops[i] == NULL && r->error[0] == '\0')
            snprintf(r->error, sizeof r->error, "%s", fld_last_error());
    }
    return NULL;
}

static void *load_racer(void *arg)
{
    struct racer *r = arg;
    pthread_barrier_wait(&start_line);
    r->rc = fld_load_plugin(racer_path);
    snprintf(r->error, sizeof r->error, "%s", r->rc ? fld_last_error() : "");
    return NULL;
}

static void race(struct racer *racers, void *(*fn)(void *))
{
    ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, N_RACERS), 0);
    for (int i = 0; i < N_RACERS; i++)
        ck_assert_int_eq(pthread_create(&racers[i].thread, NULL, fn, &racers[i]), 0);
    for (int i = 0; i < N_RACERS; i++)
        pthread_join(racers[i].thread, NULL);
    pthread_barrier_destroy(&start_line);
}

struct plugin_count {
    const char *name;
    const char *path;
    int by_name;
    int by_path;
    int total;
};

static int count_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_count *c = user;
    c->total++;
    if (c->name && strcmp(info->name, c->name) == 0)
        c->by_name++;
    if (c->path && strcmp(info->path, c->path) == 0)
        c->by_path++;
    return 0;
}

struct impl_count {
    const char *impl_id;
    int n;
};

static int count_impl(const fld_impl_info *info, void *user)
{
    struct impl_count *c = user;
    if (strcmp(info->impl_id, c->impl_id) == 0)
        c->n++;
    return 0;
}

START_TEST(test_concurrent_init)
{
    /* No library call before the race: fld_init() itself must race. */
    use_build_plugins();
    static struct racer racers[N_RACERS];
    memset(racers, 0, sizeof racers);
    race(racers, init_racer);
    for (int i = 0; i < N_RACERS; i++)
        ck_assert_msg(racers[i].rc == FLD_OK, "fld_init on thread %d: %s: %s", i,
                      fld_strerror(racers[i].rc), racers[i].error);

    /* Initialised once: one reference plugin, one cpu plugin, and the impls of
     * each registered once (a second registration would have been rejected
     * as duplicates, or doubled the count). */
    struct plugin_count ref = {.name = "reference"}, cpu = {.name = "cpu"};
    ck_assert_int_eq(fld_foreach_plugin(count_plugin, &ref), 0);
    ck_assert_int_eq(fld_foreach_plugin(count_plugin, &cpu), 0);
    ck_assert_int_eq(ref.by_name, 1);
    ck_assert_int_eq(cpu.by_name, 1);
    struct impl_count rc = {.impl_id = "reference.c"};
    ck_assert_int_eq(fld_foreach_impl(count_impl, &rc), 0);
    ck_assert_int_eq(rc.n, TT_CAT_N_OPS); /* one per catalog op */
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct plugin_count again = {.name = "reference"};
    ck_assert_int_eq(fld_foreach_plugin(count_plugin, &again), 0);
    ck_assert_int_eq(again.total, ref.total);
}
END_TEST

START_TEST(test_concurrent_op_lookup)
{
    const char *dir = tt_make_tmpdir("threads");
    char path[PATH_MAX];
    tt_install_fixture(path, dir, "plugins", "good");
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", dir, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");

    /* The lookups are the first calls into the library. */
    static struct racer racers[N_RACERS];
    memset(racers, 0, sizeof racers);
    race(racers, lookup_racer);
    for (int i = 0; i < N_RACERS; i++) {
        for (int k = 0; k < 3; k++) {
            ck_assert_msg(racers[i].ops[k] != NULL, "thread %d: fld_op_lookup(%s) = NULL: %s", i,
                          racer_ops[k], racers[i].error);
            ck_assert_msg(racers[i].ops[k] == racers[0].ops[k],
                          "threads 0 and %d got different handles for %s", i, racer_ops[k]);
        }
        ck_assert_ptr_null(racers[i].ops[3]);
    }
    ck_assert_str_eq(fld_op_name(racers[0].ops[0]), "silu_and_mul");
    ck_assert_str_eq(fld_op_name(racers[0].ops[2]), "good_echo");
    ck_assert_ptr_eq(fld_op_lookup("rms_norm"), racers[0].ops[1]);
    good_echo_args echo = {.value = 1};
    ck_assert_int_eq(fld_call(racers[5].ops[2], &echo), FLD_OK);
    ck_assert_int_eq(echo.value, 2);
}
END_TEST

START_TEST(test_concurrent_load_plugin)
{
    const char *dir = tt_make_tmpdir("threads");
    char empty[PATH_MAX], store[PATH_MAX];
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    ck_assert_int_eq(mkdir(empty, 0755), 0);
    ck_assert_int_eq(mkdir(store, 0755), 0);
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", empty, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
    init_ok();
    ck_assert_ptr_null(fld_op_lookup("good_echo"));

    /* Several rounds, one file each, to give a race more than one chance. */
    static const struct {
        const char *fixture, *impl_id;
        int n_impls;
    } rounds[] = {{"good", "vendor.good", 2},
                  {"failing", "vendor.failing", 1},
                  {"unavailable", "vendor.unavailable", 2}};
    for (size_t k = 0; k < sizeof rounds / sizeof rounds[0]; k++) {
        char path[PATH_MAX];
        tt_install_fixture(path, store, "plugins", rounds[k].fixture);
        racer_path = path;
        static struct racer racers[N_RACERS];
        memset(racers, 0, sizeof racers);
        race(racers, load_racer);
        for (int i = 0; i < N_RACERS; i++)
            ck_assert_msg(racers[i].rc == FLD_OK, "fld_load_plugin(%s) on thread %d: %s: %s", path,
                          i, fld_strerror(racers[i].rc), racers[i].error);

        struct plugin_count pc = {.name = rounds[k].fixture, .path = path};
        ck_assert_int_eq(fld_foreach_plugin(count_plugin, &pc), 0);
        ck_assert_msg(pc.by_path == 1, "%s has %d plugin records", path, pc.by_path);
        ck_assert_msg(pc.by_name == 1, "plugin '%s' has %d records", rounds[k].fixture, pc.by_name);
        struct impl_count ic = {.impl_id = rounds[k].impl_id};
        ck_assert_int_eq(fld_foreach_impl(count_impl, &ic), 0);
        ck_assert_msg(ic.n == rounds[k].n_impls, "%s registered %d times, expected %d",
                      rounds[k].impl_id, ic.n, rounds[k].n_impls);
    }

    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.failing");
    good_echo_args echo = {.value = 10};
    ck_assert_int_eq(fld_call_by_name("good_echo", &echo), FLD_OK);
    ck_assert_int_eq(echo.value, 11);
}
END_TEST

/* What a reader copies out of the policy (explain's order source, describe,
 * the config fields) stays valid while other threads replace the policy
 * and the replaced ones are reclaimed (under ASan: no use after free). */
static atomic_bool readers_stop;

static int count_field(const fld_config_field *field, void *user)
{
    *(size_t *)user += strlen(field->key) + strlen(field->value) + strlen(field->source);
    return 0;
}

static void *policy_reader_main(void *arg)
{
    char *error = arg;
    long rounds = 0;
    while (!atomic_load(&readers_stop) && !error[0]) {
        fld_resolution *res = NULL;
        int rc = fld_explain("silu_and_mul", FLD_DEVICE_CPU, FLD_DTYPE_F32, &res);
        if (rc != FLD_OK || res->order_source == NULL || res->order == NULL) {
            snprintf(error, 256, "fld_explain: %s: %s", fld_strerror(rc), fld_last_error());
            break;
        }
        size_t n = strlen(res->order_source) + strlen(res->order);
        fld_resolution_free(res);
        char buf[512];
        n += fld_policy_describe(buf, sizeof buf);
        if ((rc = fld_foreach_config_field(count_field, &n)) != FLD_OK) {
            snprintf(error, 256, "fld_foreach_config_field: %s", fld_last_error());
            break;
        }
        rounds += n > 0;
    }
    if (!error[0] && rounds == 0)
        snprintf(error, 256, "no round completed");
    return NULL;
}

START_TEST(test_policy_readers_during_changes)
{
    init_ok();
    enum { READERS = 2, CHANGES = 3000 };
    pthread_t threads[READERS];
    static char errors[READERS][256];
    atomic_store(&readers_stop, false);
    for (int i = 0; i < READERS; i++) {
        errors[i][0] = '\0';
        ck_assert_int_eq(pthread_create(&threads[i], NULL, policy_reader_main, errors[i]), 0);
    }
    int rc = FLD_OK;
    for (int i = 0; i < CHANGES && rc == FLD_OK; i++)
        rc = i % 7 == 6 ? fld_policy_reset()
                        : fld_policy_set("prefer", i % 2 ? "vendor" : "reference");
    atomic_store(&readers_stop, true);
    for (int i = 0; i < READERS; i++)
        pthread_join(threads[i], NULL);
    ck_assert_msg(rc == FLD_OK, "policy change: %s", fld_last_error());
    for (int i = 0; i < READERS; i++)
        ck_assert_msg(errors[i][0] == '\0', "reader %d: %s", i, errors[i]);
}
END_TEST

static Suite *threads_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("calls");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_calls_during_policy_flips);
    tcase_add_test(tc, test_policy_readers_during_changes);
    suite_add_tcase(s, tc);
    tc = tcase_create("first_use");
    tcase_add_test(tc, test_concurrent_init);
    tcase_add_test(tc, test_concurrent_op_lookup);
    tcase_add_test(tc, test_concurrent_load_plugin);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_threads", threads_suite());
}
