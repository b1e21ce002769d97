/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/base/inflight.c and fld_shutdown(): shutting down while other threads are
 * inside calls. fld_shutdown() closes the gates (no new call starts), waits
 * for the calls in flight at most VLLM_FL_SHUTDOWN_TIMEOUT seconds, then
 * releases everything; when calls are still running at the deadline it
 * releases nothing and returns FLD_ESTATE. Real threads throughout, with
 * the slow fixture of tests/stress (a dlopen()ed plugin whose kernel runs
 * until released: unloading it under a running kernel would crash) and the
 * stressa fixture serving every catalog op. Run under ASan and TSan too.
 *
 * Each test runs in its own process (CK_FORK).
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/cpu_tensor.h"
#include "stress/stress_fixture.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A private plugin directory with the named fixtures of tests/stress. */
static void setup(const char *const *fixtures)
{
    char dir[PATH_MAX];
    tt_make_subdir(dir, tt_make_tmpdir("inflight"), "plugins", 0700);
    for (; *fixtures; fixtures++)
        tt_install_fixture(NULL, dir, "stress", *fixtures);
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
}

/* ---- one slow call ----------------------------------------------------------- */

struct slow_call {
    fld_op op;
    slow_args args;
    _Atomic int release, entered, done;
    int rc;
    pthread_t thread;
};

static void *run_slow(void *arg)
{
    struct slow_call *c = arg;
    c->rc = fld_call(c->op, &c->args);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Starts a call of slow_op on its own thread and waits until it is inside the kernel. */
static void start_slow(struct slow_call *c)
{
    memset(c, 0, sizeof *c);
    c->op = fld_op_lookup("slow_op");
    ck_assert_ptr_nonnull(c->op);
    c->args.release = &c->release;
    c->args.entered = &c->entered;
    ck_assert_int_eq(pthread_create(&c->thread, NULL, run_slow, c), 0);
    for (double limit = now() + 10 * tt_time_scale(); !atomic_load(&c->entered) && now() < limit;)
        sleep_ms(1);
    ck_assert(atomic_load(&c->entered));
}

struct releaser {
    struct slow_call *call;
    int after_ms;
};

static void *release_later(void *arg)
{
    struct releaser *r = arg;
    sleep_ms(r->after_ms);
    atomic_store(&r->call->release, 1);
    return NULL;
}

START_TEST(waits_for_a_call_in_flight)
{
    setup((const char *[]){"slow", NULL});
    struct slow_call c;
    start_slow(&c);
    struct releaser r = {&c, 300};
    pthread_t rt;
    ck_assert_int_eq(pthread_create(&rt, NULL, release_later, &r), 0);
    double t0 = now();
    ck_assert_msg(fld_shutdown() == FLD_OK, "%s", fld_last_error());
    double waited = now() - t0;
    /* It returned only after the kernel had finished (the plugin is unloaded now). */
    ck_assert_int_eq(c.args.served, 1);
    ck_assert_msg(waited > 0.2, "fld_shutdown returned after %.3f s", waited);
    pthread_join(rt, NULL);
    pthread_join(c.thread, NULL);
    ck_assert_int_eq(c.rc, FLD_OK);
    /* A later call initialises afresh. */
    slow_args a = {.spin_ms = 0};
    ck_assert_int_eq(fld_call_by_name("slow_op", &a), FLD_OK);
    ck_assert_int_eq(a.served, 1);
}
END_TEST

START_TEST(gives_up_at_the_timeout_and_releases_nothing)
{
    setup((const char *[]){"slow", NULL});
    setenv("VLLM_FL_SHUTDOWN_TIMEOUT", "0.3", 1); /* read by fld_shutdown() */
    struct slow_call c;
    start_slow(&c);
    double t0 = now();
    ck_assert_int_eq(fld_shutdown(), FLD_ESTATE);
    double waited = now() - t0;
    ck_assert_contains(fld_last_error(), "1 thread(s) still inside library calls after 0.3 s");
    ck_assert_contains(fld_last_error(), "nothing was released");
    ck_assert_msg(waited >= 0.25, "gave up after %.3f s", waited);
    /* Still initialised and working, the same handles included. */
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("slow_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.slow");
    slow_args quick = {.spin_ms = 0};
    ck_assert_int_eq(fld_call(c.op, &quick), FLD_OK);
    ck_assert_int_eq(quick.served, 1);
    atomic_store(&c.release, 1);
    pthread_join(c.thread, NULL);
    ck_assert_int_eq(c.rc, FLD_OK);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
}
END_TEST

static void *shut_down(void *arg)
{
    int *rc = arg;
    *rc = fld_shutdown();
    return NULL;
}

START_TEST(calls_during_the_wait_are_refused)
{
    setup((const char *[]){"slow", "stressa", NULL});
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 8});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){2, 8});
    struct slow_call c;
    start_slow(&c);
    int shutdown_rc = -100;
    pthread_t st;
    ck_assert_int_eq(pthread_create(&st, NULL, shut_down, &shutdown_rc), 0);
    /* Wait until the shutdown has closed the gates. */
    const char *id = NULL;
    int rc = FLD_OK;
    for (double limit = now() + 10 * tt_time_scale(); now() < limit; sleep_ms(1))
        if ((rc = fld_resolve("slow_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id)) != FLD_OK)
            break;
    ck_assert_int_eq(rc, FLD_ESTATE);
    ck_assert_contains(fld_last_error(), "fld_resolve: fld_shutdown() is in progress");
    ck_assert_int_eq(fld_rms_norm(&out->t, &x->t, NULL, NULL, 1e-6f), FLD_ESTATE);
    ck_assert_contains(fld_last_error(), "rms_norm: fld_shutdown() is in progress");
    slow_args quick = {.spin_ms = 0};
    ck_assert_int_eq(fld_call(c.op, &quick), FLD_ESTATE);
    ck_assert_int_eq(quick.served, 0);
    ck_assert_int_eq(fld_reload(), FLD_ESTATE);
    ck_assert_int_eq(fld_init(), FLD_ESTATE);
    ck_assert_int_eq(fld_shutdown(), FLD_ESTATE);
    ck_assert_contains(fld_last_error(), "another thread is shutting the library down");
    ck_assert_int_eq(shutdown_rc, -100); /* still waiting for the slow call */
    atomic_store(&c.release, 1);
    pthread_join(st, NULL);
    pthread_join(c.thread, NULL);
    ck_assert_int_eq(shutdown_rc, FLD_OK);
    ck_assert_int_eq(c.rc, FLD_OK);
    /* After it: a fresh initialisation. */
    ck_assert_msg(fld_rms_norm(&out->t, &x->t, NULL, NULL, 1e-6f) == FLD_OK, "%s",
                  fld_last_error());
    tt_free(x);
    tt_free(out);
}
END_TEST

/* ---- many threads, many shutdowns ---------------------------------------------- */

#define WORKERS 4

struct worker {
    pthread_t thread;
    _Atomic int *stop;
    long ok, refused, other;
    int last_other;
};

static void *hammer(void *arg)
{
    struct worker *w = arg;
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *wt = tt_new(FLD_DTYPE_F32, 1, (int64_t[]){64});
    tt_tensor *ax = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 128});
    while (!atomic_load(w->stop)) {
        int rc = fld_rms_norm(&out->t, &x->t, &wt->t, NULL, 1e-6f);
        if (rc == FLD_OK)
            rc = fld_silu_and_mul(&out->t, &ax->t);
        if (rc == FLD_OK) {
            const char *id;
            rc = fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
        }
        if (rc == FLD_OK)
            w->ok++;
        else if (rc == FLD_ESTATE)
            w->refused++; /* a shutdown was waiting */
        else
            w->other++, w->last_other = rc;
    }
    tt_free(x);
    tt_free(out);
    tt_free(wt);
    tt_free(ax);
    return NULL;
}

START_TEST(shutdown_and_init_while_threads_call)
{
    setup((const char *[]){"stressa", NULL});
    _Atomic int stop = 0;
    struct worker w[WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < WORKERS; i++) {
        w[i].stop = &stop;
        ck_assert_int_eq(pthread_create(&w[i].thread, NULL, hammer, &w[i]), 0);
    }
    const int rounds = getenv("FLD_SANITIZE") && *getenv("FLD_SANITIZE") ? 10 : 30;
    for (int i = 0; i < rounds; i++) {
        sleep_ms(3);
        ck_assert_msg(fld_shutdown() == FLD_OK, "round %d: %s", i, fld_last_error());
        ck_assert_msg(fld_init() == FLD_OK, "round %d: %s", i, fld_last_error());
    }
    sleep_ms(3);
    atomic_store(&stop, 1);
    long ok = 0, other = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(w[i].thread, NULL);
        ok += w[i].ok;
        other += w[i].other;
        ck_assert_msg(w[i].other == 0, "worker %d: %ld calls failed otherwise (last %s)", i,
                      w[i].other, fld_strerror(w[i].last_other));
    }
    ck_assert_int_gt(ok, 0);
    ck_assert_int_eq(other, 0);
}
END_TEST

/*
 * Many threads that call in a tight loop are inside a call most of the time
 * (once the gates are closed, each refused call formats its message inside
 * the library): a shutdown must count a thread done once it has left a call
 * after the gates closed, not only when it happens to sample its count at
 * zero. 64 threads, shutdown and init in turn: each shutdown returns in
 * milliseconds; the timeout (5 s on an idle machine, stretched by the
 * run's load) bounds the test when it does not.
 */
#define MANY_WORKERS 64

struct looper {
    pthread_t thread;
    _Atomic int *stop;
    _Atomic long calls;
    long other;
    int last_other;
};

static void *call_in_a_loop(void *arg)
{
    struct looper *w = arg;
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 1, (int64_t[]){8});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 1, (int64_t[]){8});
    while (!atomic_load_explicit(w->stop, memory_order_relaxed)) {
        int rc = fld_rms_norm(&out->t, &x->t, NULL, NULL, 1e-6f);
        if (rc != FLD_OK && rc != FLD_ESTATE)
            w->other++, w->last_other = rc;
        atomic_fetch_add_explicit(&w->calls, 1, memory_order_relaxed);
    }
    tt_free(x);
    tt_free(out);
    return NULL;
}

START_TEST(many_threads_calling_in_a_loop_do_not_stall_shutdown)
{
    setup((const char *[]){NULL});
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%g", 5 * tt_time_scale());
    setenv("VLLM_FL_SHUTDOWN_TIMEOUT", timeout, 1);
    _Atomic int stop = 0;
    static struct looper w[MANY_WORKERS];
    memset(w, 0, sizeof w);
    for (int i = 0; i < MANY_WORKERS; i++) {
        w[i].stop = &stop;
        ck_assert_int_eq(pthread_create(&w[i].thread, NULL, call_in_a_loop, &w[i]), 0);
    }
    /* Every thread is calling before the first shutdown. */
    for (int i = 0; i < MANY_WORKERS; i++)
        for (double limit = now() + 10 * tt_time_scale();
             !atomic_load(&w[i].calls) && now() < limit;)
            sleep_ms(1);
    const int rounds = 4;
    int failed_round = -1;
    char message[512] = "";
    double t0 = now();
    for (int i = 0; i < rounds && failed_round < 0; i++) {
        if (fld_shutdown() != FLD_OK) {
            failed_round = i;
            snprintf(message, sizeof message, "%s", fld_last_error());
        } else if (fld_init() != FLD_OK) {
            failed_round = i;
            snprintf(message, sizeof message, "fld_init: %s", fld_last_error());
        }
        sleep_ms(5);
    }
    double took = now() - t0;
    atomic_store(&stop, 1);
    for (int i = 0; i < MANY_WORKERS; i++) {
        pthread_join(w[i].thread, NULL);
        ck_assert_msg(w[i].other == 0, "worker %d: %ld calls failed otherwise (last %s)", i,
                      w[i].other, fld_strerror(w[i].last_other));
    }
    ck_assert_msg(failed_round < 0, "round %d of %d: %s", failed_round, rounds, message);
    ck_assert_msg(took < 9.0 * tt_time_scale(), "%d shutdowns took %.1f s", rounds, took);
}
END_TEST

/* ---- from inside a call ------------------------------------------------------- */

static _Atomic int inner_rc;
static char inner_message[512];

static int shutdown_kernel(const void *args)
{
    (void)args;
    atomic_store(&inner_rc, fld_shutdown());
    snprintf(inner_message, sizeof inner_message, "%s", fld_last_error());
    return FLD_OK;
}

static int register_inner(fld_registry *reg)
{
    const fld_impl impl = {.op = "shutdown_from_kernel",
                           .impl_id = "vendor.inner",
                           .kind = FLD_KIND_VENDOR,
                           .vendor = "inner",
                           .priority = FLD_PRIORITY_VENDOR,
                           .devices = FLD_DEVICE_MASK_ALL,
                           .dtypes = FLD_DTYPE_MASK_ALL,
                           .fn = shutdown_kernel};
    return fld_registry_register(reg, &impl);
}

static const fld_plugin_descriptor inner_plugin = {FLD_PLUGIN_MAGIC,
                                                   FLD_PLUGIN_ABI_MAJOR,
                                                   FLD_PLUGIN_ABI_MINOR,
                                                   sizeof(fld_plugin_descriptor),
                                                   0,
                                                   "inner",
                                                   "1.0.0",
                                                   FLD_VERSION_STRING,
                                                   register_inner};

START_TEST(refused_from_inside_a_call)
{
    setup((const char *[]){NULL});
    ck_assert_int_eq(fld_register_plugin(&inner_plugin), FLD_OK);
    int v = 0;
    ck_assert_int_eq(fld_call_by_name("shutdown_from_kernel", &v), FLD_OK);
    ck_assert_int_eq(atomic_load(&inner_rc), FLD_ESTATE);
    ck_assert_contains(inner_message, "fld_shutdown: called from inside a library call");
    /* Nothing was released: the library still serves. */
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("shutdown_from_kernel", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id),
                     FLD_OK);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
}
END_TEST

START_TEST(invalid_timeout_is_a_configuration_error)
{
    setup((const char *[]){NULL});
    setenv("VLLM_FL_SHUTDOWN_TIMEOUT", "soon", 1);
    ck_assert_int_eq(fld_shutdown(), FLD_ECONFIG);
    ck_assert_contains(fld_last_error(), "VLLM_FL_SHUTDOWN_TIMEOUT: invalid value 'soon'");
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    setenv("VLLM_FL_SHUTDOWN_TIMEOUT", "0", 1);
    ck_assert_int_eq(fld_shutdown(), FLD_OK); /* 0: do not wait (nothing is running) */
}
END_TEST

static Suite *inflight_suite(void)
{
    Suite *s = suite_create("inflight");
    TCase *tc = tcase_create("shutdown");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, waits_for_a_call_in_flight);
    tcase_add_test(tc, gives_up_at_the_timeout_and_releases_nothing);
    tcase_add_test(tc, calls_during_the_wait_are_refused);
    tcase_add_test(tc, shutdown_and_init_while_threads_call);
    tcase_add_test(tc, many_threads_calling_in_a_loop_do_not_stall_shutdown);
    tcase_add_test(tc, refused_from_inside_a_call);
    tcase_add_test(tc, invalid_timeout_is_a_configuration_error);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_inflight", inflight_suite());
}
