/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory: a long run of calls does not grow the heap, and neither do cycles
 * of fld_init() / plugin loads / fld_shutdown(), nor thousands of policy
 * changes and reloads made while another thread keeps calling (the replaced
 * policies and chains are reclaimed, core/base/reclaim.c).
 *
 * The run mixes every catalog op through the three entry points (typed,
 * fld_call by handle, fld_call_by_name), an op outside the catalog, calls
 * that fail validation or name no op, scoped overrides pushed and popped,
 * and non-strict fallback: vendor.failing (tests/plugins/failing.c) heads
 * silu_and_mul's order and fails each time its memory of failures is
 * cleared or a new override chain is built, and reference.c takes over.
 *
 * The heap is measured as live bytes: the sanitizer allocator's count under
 * ASan/TSan (their quarantines make RSS meaningless), mallinfo2() otherwise.
 * FLD_MEMORY_CALLS and FLD_MEMORY_CYCLES shorten the runs (e.g. under
 * valgrind); the defaults are 10^6 calls (2*10^5 under ThreadSanitizer,
 * 5*10^4 under valgrind) and 200 cycles (40 under valgrind);
 * FLD_MEMORY_CHANGES the policy changes: 10^4 (10^3 under valgrind).
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "stress/stress_fixture.h"
#include "util/catalog_args.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"

/* ThreadSanitizer makes each call some 20 times slower; the growth check
 * needs no threads, so a shorter run keeps the program fast there. */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_CALLS 200000
#else
#define DEFAULT_CALLS 1000000
#endif

/* Live bytes allowed to appear between the measurements. */
#define GROWTH_LIMIT (256 * 1024L)

/* Provided by the sanitizer runtimes; absent (NULL) otherwise. */
extern size_t __sanitizer_get_current_allocated_bytes(void) __attribute__((weak));

/* -1 when the allocator in use does not say (valgrind's mallinfo2() is all zeros). */
static long live_heap_bytes(void)
{
    if (__sanitizer_get_current_allocated_bytes != NULL)
        return (long)__sanitizer_get_current_allocated_bytes();
    struct mallinfo2 mi = mallinfo2();
    long n = (long)(mi.uordblks + mi.hblkhd);
    return n > 0 ? n : -1;
}

static long rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* valgrind runs a client with its preload libraries (vgpreload_*.so). */
static bool under_valgrind(void)
{
    const char *p = getenv("LD_PRELOAD");
    return p != NULL && strstr(p, "vgpreload") != NULL;
}

static long env_count(const char *name, long dflt)
{
    const char *v = getenv(name);
    long n = v ? atol(v) : dflt;
    return n > 0 ? n : dflt;
}

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/* Made in set-up, once per test process; the policy file goes there. */
static const char *tmpdir;

static _Atomic long warnings;

static void counting_log(int level, const char *message, void *user)
{
    (void)user;
    if (level >= FLD_LOG_WARNING)
        warnings++;
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "[log %d] %s\n", level, message);
}

static char stressa_path[PATH_MAX], stressb_path[PATH_MAX], good_path[PATH_MAX],
    failing_path[PATH_MAX];

/* Plugins stressa, good and failing in the search path; stressb aside. */
static void setup_environment(void)
{
    char plugins[PATH_MAX], later[PATH_MAX];
    tt_clear_fld_environment();
    tmpdir = tt_make_tmpdir("memory");
    tt_make_subdir(plugins, tmpdir, "plugins", 0755);
    tt_make_subdir(later, tmpdir, "later", 0755);
    tt_install_fixture(stressa_path, plugins, "stress", "stressa");
    tt_install_fixture(good_path, plugins, "plugins", "good");
    tt_install_fixture(failing_path, plugins, "plugins", "failing");
    tt_install_fixture(stressb_path, later, "stress", "stressb");
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", plugins, 1), 0);
    ck_assert_int_eq(setenv("VLLM_FL_PLATFORM", "cpu", 1), 0);
    /* vendor.failing first for silu_and_mul: every fresh chain falls back. */
    ck_assert_int_eq(
        setenv("VLLM_FL_PER_OP", "silu_and_mul=impl:vendor.failing|flagos|reference", 1), 0);
    fld_log_set_callback(counting_log, NULL);
}

/* ------------------------------------------------------------------------ */
/* The call mix                                                             */
/* ------------------------------------------------------------------------ */

/* STRESS_OP_* are the catalog order of util/catalog_args.h. */
_Static_assert((int)STRESS_N_OPS == (int)TT_CAT_N_OPS &&
                   (int)STRESS_OP_RMS_NORM == (int)TT_CAT_RMS_NORM &&
                   (int)STRESS_OP_ROTARY_EMBEDDING == (int)TT_CAT_ROTARY_EMBEDDING &&
                   (int)STRESS_OP_ATTENTION_BACKEND == (int)TT_CAT_ATTENTION_BACKEND,
               "STRESS_OP_* follow the catalog order");

typedef struct good_echo_args {
    int value;
} good_echo_args;

struct mix {
    struct tt_catalog_args a; /* the catalog calls (util/catalog_args.h) */
    fld_op handles[STRESS_N_OPS];
    fld_op echo;
    long calls, failures_expected, pushes, clears;
    int depth;
};

static void mix_init(struct mix *m)
{
    memset(m, 0, sizeof *m);
    tt_catalog_args_init(&m->a, 1);
}

static void mix_lookup(struct mix *m)
{
    for (int op = 0; op < STRESS_N_OPS; op++) {
        m->handles[op] = fld_op_lookup(tt_catalog_op_names[op]);
        ck_assert_msg(m->handles[op] != NULL, "fld_op_lookup(%s): %s", tt_catalog_op_names[op],
                      fld_last_error());
    }
    m->echo = fld_op_lookup("good_echo");
    ck_assert_msg(m->echo != NULL, "fld_op_lookup(good_echo): %s", fld_last_error());
}

static int push_one(int which)
{
    switch (which % 4) {
    case 0:
        return fld_policy_push_preference("reference");
    case 1:
        return fld_policy_push_denied_vendors("alpha,beta");
    case 2:
        return fld_policy_push_per_op(
            "silu_and_mul=impl:vendor.failing|reference;rms_norm=vendor|reference");
    default:
        return fld_policy_push_strict(false);
    }
}

/*
 * n calls of the mix, each checked; pushes, pops and clears between them.
 * Returns NULL or a description of the first failure (static buffer).
 */
static const char *run_mix(struct mix *m, long n)
{
    static char problem[512];
    for (long i = 0; i < n; i++) {
        long step = m->calls++;
        int rc, want = FLD_OK;
        const char *what;
        if (step % 1000 == 0 && m->depth < 2) {
            rc = push_one((int)(step / 1000));
            if (rc != FLD_OK) {
                snprintf(problem, sizeof problem, "push: %s: %s", fld_strerror(rc),
                         fld_last_error());
                return problem;
            }
            m->depth++;
            m->pushes++;
        } else if (step % 1000 == 500 && m->depth > 0) {
            if ((rc = fld_policy_pop()) != FLD_OK) {
                snprintf(problem, sizeof problem, "pop: %s", fld_last_error());
                return problem;
            }
            m->depth--;
        }
        if (step % 4999 == 0) {
            /* The next silu_and_mul tries vendor.failing again, then falls back. */
            if ((rc = fld_clear_failures(NULL)) != FLD_OK) {
                snprintf(problem, sizeof problem, "fld_clear_failures: %s", fld_last_error());
                return problem;
            }
            m->clears++;
        }
        int op = (int)(step % STRESS_N_OPS);
        switch ((step / STRESS_N_OPS) % 16) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
            what = "typed";
            rc = tt_catalog_call(&m->a, op, TT_CALL_TYPED, NULL);
            break;
        case 5:
        case 6:
        case 7:
        case 8:
        case 9:
            what = "fld_call";
            rc = tt_catalog_call(&m->a, op, TT_CALL_HANDLE, m->handles[op]);
            break;
        case 10:
        case 11:
        case 12:
            what = "fld_call_by_name";
            rc = tt_catalog_call(&m->a, op, TT_CALL_BY_NAME, NULL);
            break;
        case 13: {
            good_echo_args echo = {(int)step};
            what = "good_echo";
            rc = fld_call(m->echo, &echo);
            if (rc == FLD_OK && echo.value != (int)step + 1)
                rc = FLD_EIMPL;
            break;
        }
        case 14:
            /* Invalid: x missing. Sets a message, touches nothing. */
            what = "invalid silu_and_mul";
            want = FLD_EINVAL;
            rc = fld_silu_and_mul(&m->a.t_aout, NULL);
            break;
        default:
            what = "unknown op";
            want = FLD_ENOTFOUND;
            rc = fld_call_by_name("no_such_op", &m->a.act);
        }
        if (rc != want) {
            snprintf(problem, sizeof problem, "call %ld (%s %s): %s, expected %s: %s", step, what,
                     tt_catalog_op_names[op], fld_strerror(rc), fld_strerror(want),
                     fld_last_error());
            return problem;
        }
    }
    return NULL;
}

static long fixture_count(const char *path, const char *symbol)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return -1;
    long (*fn)(void) = (long (*)(void))dlsym(h, symbol);
    long v = fn ? fn() : -1;
    dlclose(h);
    return v;
}

START_TEST(test_calls_do_not_grow)
{
    setup_environment();
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
    static struct mix m;
    mix_init(&m);
    mix_lookup(&m);

    /* Warm-up: every path taken once or more, caches and thread-locals made. */
    const char *problem = run_mix(&m, 40000);
    ck_assert_msg(problem == NULL, "warm-up: %s", problem);
    long attempts0 = fixture_count(failing_path, "fld_fixture_failing_calls");
    long warnings0 = warnings;
    ck_assert_int_gt(attempts0, 0);
    long heap0 = live_heap_bytes(), rss0 = rss_bytes();

    const long n = env_count("FLD_MEMORY_CALLS", under_valgrind() ? 50000 : DEFAULT_CALLS);
    problem = run_mix(&m, n);
    ck_assert_msg(problem == NULL, "%s", problem);
    long heap1 = live_heap_bytes(), rss1 = rss_bytes();

    /* The run did fall back, over and over, and said so each time. */
    long attempts = fixture_count(failing_path, "fld_fixture_failing_calls") - attempts0;
    ck_assert_msg(attempts >= n / 5000, "vendor.failing ran %ld times in %ld calls", attempts, n);
    ck_assert_msg(warnings - warnings0 >= attempts,
                  "%ld failures of vendor.failing, %ld warnings logged", attempts,
                  warnings - warnings0);
    /* Without a heap count (valgrind), valgrind's own leak check stands in. */
    ck_assert_msg(heap0 < 0 || heap1 - heap0 < GROWTH_LIMIT,
                  "the heap grew by %ld bytes over %ld calls (%ld pushes, %ld clears); RSS %ld -> "
                  "%ld",
                  heap1 - heap0, n, m.pushes, m.clears, rss0, rss1);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr,
                "%ld calls, %ld pushes, %ld fallbacks: heap %ld -> %ld bytes, RSS %ld -> %ld\n", n,
                m.pushes, attempts, heap0, heap1, rss0, rss1);
    while (m.depth-- > 0)
        fld_policy_pop();
    fld_shutdown();
}
END_TEST

/* One life of the library: init, plugins, policy, calls, reload, shutdown. */
static const char *one_cycle(struct mix *m)
{
    static char problem[600];
    int rc = fld_init();
    if (rc != FLD_OK) {
        snprintf(problem, sizeof problem, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
        return problem;
    }
    mix_lookup(m);
    m->depth = 0;
    const char *p = run_mix(m, 64);
    if (p == NULL && (rc = fld_load_plugin(stressb_path)) != FLD_OK)
        p = "fld_load_plugin(stressb)";
    if (p == NULL && (rc = fld_policy_set("prefer", "vendor")) != FLD_OK)
        p = "fld_policy_set";
    if (p == NULL)
        p = run_mix(m, 64);
    if (p == NULL && (rc = fld_reload()) != FLD_OK)
        p = "fld_reload";
    if (p == NULL) {
        mix_lookup(m);
        p = run_mix(m, 64);
    }
    while (m->depth > 0) {
        fld_policy_pop();
        m->depth--;
    }
    fld_shutdown();
    if (p != NULL && p != problem) {
        snprintf(problem, sizeof problem, "%s: %s", p, rc ? fld_last_error() : "");
        return problem;
    }
    return p;
}

START_TEST(test_init_shutdown_cycles_do_not_grow)
{
    setup_environment();
    static struct mix m;
    mix_init(&m);
    const char *problem = NULL;
    for (int i = 0; i < 20 && problem == NULL; i++)
        problem = one_cycle(&m);
    ck_assert_msg(problem == NULL, "warm-up cycle: %s", problem);
    long heap0 = live_heap_bytes(), rss0 = rss_bytes();
    const long cycles = env_count("FLD_MEMORY_CYCLES", under_valgrind() ? 40 : 200);
    for (long i = 0; i < cycles && problem == NULL; i++)
        problem = one_cycle(&m);
    ck_assert_msg(problem == NULL, "%s", problem);
    long heap1 = live_heap_bytes(), rss1 = rss_bytes();
    /* The plugins were unloaded at each shutdown (a fresh load each cycle). */
    ck_assert_msg(dlopen(stressb_path, RTLD_NOW | RTLD_NOLOAD) == NULL,
                  "fld-stressb.so is still mapped after fld_shutdown()");
    ck_assert_msg(heap0 < 0 || heap1 - heap0 < GROWTH_LIMIT,
                  "the heap grew by %ld bytes over %ld init/shutdown cycles; RSS %ld -> %ld",
                  heap1 - heap0, cycles, rss0, rss1);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "%ld cycles: heap %ld -> %ld bytes, RSS %ld -> %ld\n", cycles, heap0, heap1,
                rss0, rss1);
}
END_TEST

struct caller {
    pthread_t thread;
    struct mix m;
    atomic_bool stop;
    const char *problem;
};

static void *caller_main(void *arg)
{
    struct caller *c = arg;
    while (!atomic_load(&c->stop) && c->problem == NULL)
        c->problem = run_mix(&c->m, 200);
    while (c->m.depth > 0) {
        fld_policy_pop();
        c->m.depth--;
    }
    return NULL;
}

/* One global change: a setting, a reset, a policy file or a reload. */
static int change_policy(long i, const char *policy_file)
{
    switch (i % 10) {
    case 3:
        return fld_policy_reset();
    case 6:
        return fld_policy_load_file(policy_file);
    case 9:
        return fld_reload();
    default:
        return fld_policy_set("prefer", i % 2 ? "vendor" : "reference");
    }
}

START_TEST(test_policy_changes_do_not_grow)
{
    setup_environment();
    char policy_file[PATH_MAX];
    snprintf(policy_file, sizeof policy_file, "%s/policy.yaml", tmpdir);
    FILE *f = fopen(policy_file, "w");
    ck_assert_msg(f != NULL, "%s: %s", policy_file, strerror(errno));
    fputs("prefer: flagos\nstrict: false\nop_backends:\n  rms_norm: [vendor, reference]\n", f);
    fclose(f);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());

    /* Another thread calls throughout: it holds chains and reads the global
     * policy while they are replaced. This thread calls too, so each change
     * rebuilds chains here as well. */
    static struct caller caller;
    mix_init(&caller.m);
    mix_lookup(&caller.m);
    static struct mix m;
    mix_init(&m);
    mix_lookup(&m);
    ck_assert_int_eq(pthread_create(&caller.thread, NULL, caller_main, &caller), 0);

    const char *problem = NULL;
    const long warm = 200, n = env_count("FLD_MEMORY_CHANGES", under_valgrind() ? 1000 : 10000);
    long heap0 = 0, rss0 = 0;
    for (long i = 0; i < warm + n && problem == NULL; i++) {
        if (i == warm) {
            heap0 = live_heap_bytes();
            rss0 = rss_bytes();
        }
        if ((rc = change_policy(i, policy_file)) != FLD_OK) {
            static char why[600];
            snprintf(why, sizeof why, "change %ld: %s: %s", i, fld_strerror(rc), fld_last_error());
            problem = why;
            break;
        }
        problem = run_mix(&m, 16);
    }
    atomic_store(&caller.stop, true);
    pthread_join(caller.thread, NULL);
    ck_assert_msg(problem == NULL, "%s", problem);
    ck_assert_msg(caller.problem == NULL, "the calling thread: %s", caller.problem);
    /* One more change with no reader left: it reclaims what the calling
     * thread still held back when it stopped (a preempted reader delays
     * reclamation, by design), so what remains is growth, not a backlog. */
    ck_assert_int_eq(change_policy(0, policy_file), FLD_OK);
    long heap1 = live_heap_bytes(), rss1 = rss_bytes();
    ck_assert_msg(caller.m.calls > 0, "the calling thread made no call");
    ck_assert_msg(heap0 < 0 || heap1 - heap0 < GROWTH_LIMIT,
                  "the heap grew by %ld bytes over %ld policy changes (the other thread made %ld "
                  "calls); RSS %ld -> %ld",
                  heap1 - heap0, n, caller.m.calls, rss0, rss1);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "%ld changes, %ld calls beside: heap %ld -> %ld bytes, RSS %ld -> %ld\n", n,
                caller.m.calls, heap0, heap1, rss0, rss1);
    while (m.depth-- > 0)
        fld_policy_pop();
    fld_shutdown();
}
END_TEST

static Suite *memory_suite(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_calls_do_not_grow);
    tcase_add_test(tc, test_init_shutdown_cycles_do_not_grow);
    tcase_add_test(tc, test_policy_changes_do_not_grow);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_memory", memory_suite());
}
