/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fork(): a child of an initialised, warmed-up process works on its own —
 * correct results, no duplicate registrations, no inherited lock even when
 * other threads were inside the library at the moment of the fork, and
 * fresh memory of failed implementations. With the fixtures of tests/stress/:
 * children forked while a thread is inside a long-running kernel, inside a
 * slow register_builtins (the host lock held) and inside a slow
 * is_available() call every op (served by the policy's winner, checked by the
 * fixtures' output marks), reload, load plugins once, and see policy changes
 * at once.
 *
 * Children never use Check's assertions: they report on stderr and exit
 * non-zero, and the parent asserts a normal exit with status 0. Each child
 * arms alarm() so a deadlock shows up as SIGALRM instead of a hung test.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "stress/stress_fixture.h"
#include "util/catalog_args.h"
#include "util/files.h"
#include "util/harness.h"

/* Layout of the "good_echo" op's arguments (tests/plugins/good.c). */
typedef struct good_echo_args {
    int value;
} good_echo_args;

enum { CHILD_ALARM_S = 10 };

/* ------------------------------------------------------------------------ */
/* Environment and files                                                    */
/* ------------------------------------------------------------------------ */

static void set_plugin_dirs(const char *dirs)
{
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", dirs, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
}

/* ------------------------------------------------------------------------ */
/* Log capture (fork-safe enough: children are single-threaded)             */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static int failing_warnings;
static int warnings;

static void capture_log(int level, const char *message, void *user)
{
    (void)user;
    if (level == FLD_LOG_WARNING) {
        pthread_mutex_lock(&log_mutex);
        warnings++;
        if (strstr(message, "Implementation 'vendor.failing' failed") != NULL)
            failing_warnings++;
        pthread_mutex_unlock(&log_mutex);
    }
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "[%d log %d] %s\n", (int)getpid(), level, message);
}

static int failing_warning_count(void)
{
    pthread_mutex_lock(&log_mutex);
    int n = failing_warnings;
    pthread_mutex_unlock(&log_mutex);
    return n;
}

static void init_ok(void)
{
    fld_log_set_callback(capture_log, NULL);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
}

/* ------------------------------------------------------------------------ */
/* Checks usable in parent and child: they return a message, or NULL        */
/* ------------------------------------------------------------------------ */

static char problem[1024];

static const char *fail_with(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *fail_with(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    return problem;
}

enum { ROWS = 3, D = 24, H = 40 };

static const char *silu_ok(void)
{
    float x[ROWS][2 * D], out[ROWS][D];
    int64_t xs[2] = {ROWS, 2 * D}, os[2] = {ROWS, D};
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < 2 * D; i++)
            x[r][i] = (float)((r * 2 * D + i) % 13 - 6) * 0.41f;
    memset(out, 0, sizeof out);
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xs};
    DLTensor to = {
        .data = out, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = os};
    int rc = fld_silu_and_mul(&to, &tx);
    if (rc != FLD_OK)
        return fail_with("fld_silu_and_mul: %s: %s", fld_strerror(rc), fld_last_error());
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < D; i++) {
            double g = x[r][i], want = g / (1.0 + exp(-g)) * x[r][D + i];
            if (fabs(out[r][i] - want) > 1e-5 + 1e-5 * fabs(want))
                return fail_with("silu_and_mul[%d][%d] = %.9g, expected %.9g", r, i,
                                 (double)out[r][i], want);
        }
    return NULL;
}

static const char *rms_norm_ok(void)
{
    float x[ROWS][H], w[H], out[ROWS][H];
    int64_t xs[2] = {ROWS, H}, ws[1] = {H};
    for (int i = 0; i < H; i++)
        w[i] = 0.25f + (float)i / H;
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < H; i++)
            x[r][i] = (float)((r * H + i) % 17 - 8) * 0.3f;
    memset(out, 0, sizeof out);
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xs};
    DLTensor tw = {
        .data = w, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = ws};
    DLTensor to = {
        .data = out, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xs};
    int rc = fld_rms_norm(&to, &tx, &tw, NULL, 1e-6f);
    if (rc != FLD_OK)
        return fail_with("fld_rms_norm: %s: %s", fld_strerror(rc), fld_last_error());
    for (int r = 0; r < ROWS; r++) {
        double ss = 0;
        for (int i = 0; i < H; i++)
            ss += (double)x[r][i] * x[r][i];
        double inv = 1.0 / sqrt(ss / H + 1e-6);
        for (int i = 0; i < H; i++) {
            double want = x[r][i] * inv * w[i];
            if (fabs(out[r][i] - want) > 2e-5 + 2e-5 * fabs(want))
                return fail_with("rms_norm[%d][%d] = %.9g, expected %.9g", r, i, (double)out[r][i],
                                 want);
        }
    }
    return NULL;
}

static const char *resolves_to(const char *op, const char *want)
{
    const char *id = NULL;
    int rc = fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
    if (rc != FLD_OK)
        return fail_with("fld_resolve(%s): %s: %s", op, fld_strerror(rc), fld_last_error());
    if (want != NULL && strcmp(id, want) != 0)
        return fail_with("fld_resolve(%s) = %s, expected %s", op, id, want);
    return NULL;
}

struct registry_census {
    int plugins, duplicates, rejected;
    int good, failing, reference;
    int good_impls, reference_impls;
    char first_bad[512];
};

static int census_plugin(const fld_plugin_info *info, void *user)
{
    struct registry_census *c = user;
    c->plugins++;
    if (strstr(info->reason, "duplicate") != NULL) {
        c->duplicates++;
        if (c->first_bad[0] == '\0')
            snprintf(c->first_bad, sizeof c->first_bad, "%s: %s", info->path, info->reason);
    }
    if (info->status == FLD_PLUGIN_REJECTED) {
        c->rejected++;
        if (c->first_bad[0] == '\0')
            snprintf(c->first_bad, sizeof c->first_bad, "%s: %s", info->path, info->reason);
    }
    c->good += strcmp(info->name, "good") == 0;
    c->failing += strcmp(info->name, "failing") == 0;
    c->reference += strcmp(info->name, "reference") == 0;
    return 0;
}

static int census_impl(const fld_impl_info *info, void *user)
{
    struct registry_census *c = user;
    c->good_impls += strcmp(info->impl_id, "vendor.good") == 0;
    c->reference_impls += strcmp(info->impl_id, "reference.c") == 0;
    return 0;
}

static struct registry_census take_census(void)
{
    struct registry_census c;
    memset(&c, 0, sizeof c);
    fld_foreach_plugin(census_plugin, &c);
    fld_foreach_impl(census_impl, &c);
    return c;
}

static long fixture_counter(const char *so_path, const char *symbol)
{
    void *h = dlopen(so_path, RTLD_NOW | RTLD_NOLOAD);
    if (h == NULL)
        return -1;
    long (*fn)(void) = (long (*)(void))dlsym(h, symbol);
    long v = fn ? fn() : -1;
    dlclose(h);
    return v;
}

/* In a child: report and leave. */
#define CHILD_CHECK(msg)                                                                           \
    do {                                                                                           \
        const char *m_ = (msg);                                                                    \
        if (m_ != NULL) {                                                                          \
            fprintf(stderr, "child %d, line %d: %s\n", (int)getpid(), __LINE__, m_);               \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)
#define CHILD_EXPECT(cond, ...) CHILD_CHECK((cond) ? NULL : fail_with(__VA_ARGS__))

/* In the test process. */
#define ASSERT_OK(msg)                                                                             \
    do {                                                                                           \
        const char *m_ = (msg);                                                                    \
        ck_assert_msg(m_ == NULL, "%s", m_);                                                       \
    } while (0)

/* Forks; the child runs fn and exits 0 if it returns. */
static pid_t fork_child(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* Check's runner handles SIGALRM by killing the whole process group;
         * the child must simply die of it instead. */
        signal(SIGALRM, SIG_DFL);
        alarm(CHILD_ALARM_S);
        fn(arg);
        _exit(0);
    }
    return pid;
}

/* Waits for a child and describes how it ended; NULL when it exited 0. */
static const char *child_outcome(pid_t pid)
{
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
        ;
    if (r != pid)
        return fail_with("waitpid(%d): %s", (int)pid, strerror(errno));
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        return fail_with("child %d hung for %d s (deadlock after fork?)", (int)pid, CHILD_ALARM_S);
    if (WIFSIGNALED(st))
        return fail_with("child %d killed by signal %d", (int)pid, WTERMSIG(st));
    if (WEXITSTATUS(st) != 0)
        return fail_with("child %d exited with status %d (its message is on stderr)", (int)pid,
                         WEXITSTATUS(st));
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* A warmed-up parent, a working child                                      */
/* ------------------------------------------------------------------------ */

static char good_path[PATH_MAX], failing_path[PATH_MAX];
static struct registry_census parent_census;

static void child_after_warmup(void *arg)
{
    (void)arg;
    CHILD_CHECK(silu_ok());
    CHILD_CHECK(resolves_to("silu_and_mul", "vendor.good"));
    CHILD_CHECK(rms_norm_ok());
    CHILD_EXPECT(fixture_counter(good_path, "fld_fixture_good_calls") == 2,
                 "vendor.good served %ld calls, expected 2 (one inherited, one here)",
                 fixture_counter(good_path, "fld_fixture_good_calls"));
    good_echo_args echo = {.value = 5};
    CHILD_EXPECT(fld_call_by_name("good_echo", &echo) == FLD_OK && echo.value == 6,
                 "good_echo in the child: value %d, %s", echo.value, fld_last_error());

    /* The registry came across the fork as it was: no re-registration. */
    struct registry_census c = take_census();
    CHILD_EXPECT(c.plugins == parent_census.plugins && c.good == 1 && c.reference == 1,
                 "child sees %d plugins (good %d, reference %d), parent had %d", c.plugins, c.good,
                 c.reference, parent_census.plugins);
    CHILD_EXPECT(c.good_impls == 2 && c.reference_impls == parent_census.reference_impls,
                 "child sees %d vendor.good and %d reference.c impls", c.good_impls,
                 c.reference_impls);
    CHILD_EXPECT(c.duplicates == 0 && c.rejected == 0, "child: %s", c.first_bad);

    /* Loading another plugin works in the child and brings no duplicates. */
    int rc = fld_load_plugin(failing_path);
    CHILD_EXPECT(rc == FLD_OK, "fld_load_plugin(%s) in the child: %s: %s", failing_path,
                 fld_strerror(rc), fld_last_error());
    c = take_census();
    CHILD_EXPECT(c.failing == 1 && c.good == 1 && c.duplicates == 0 && c.rejected == 0,
                 "after loading failing: failing %d, good %d, duplicates %d (%s)", c.failing,
                 c.good, c.duplicates, c.first_bad);
    CHILD_CHECK(resolves_to("silu_and_mul", "vendor.failing"));
    CHILD_CHECK(silu_ok()); /* vendor.failing fails, vendor.good takes over */
    CHILD_EXPECT(fixture_counter(failing_path, "fld_fixture_failing_calls") == 1,
                 "vendor.failing tried %ld times",
                 fixture_counter(failing_path, "fld_fixture_failing_calls"));
    CHILD_EXPECT(fld_policy_set("prefer", "reference") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    CHILD_CHECK(resolves_to("silu_and_mul", "reference.c"));
    CHILD_CHECK(silu_ok());
}

START_TEST(test_child_after_warmup)
{
    const char *tmp = tt_make_tmpdir("fork");
    char plugins[PATH_MAX], later[PATH_MAX];
    tt_make_subdir(plugins, tmp, "plugins", 0755);
    tt_make_subdir(later, tmp, "later", 0755);
    tt_install_fixture(good_path, plugins, "plugins", "good");
    tt_install_fixture(failing_path, later, "plugins", "failing");
    set_plugin_dirs(plugins);
    init_ok();

    ASSERT_OK(resolves_to("silu_and_mul", "vendor.good"));
    ASSERT_OK(silu_ok());
    ASSERT_OK(rms_norm_ok());
    ck_assert_int_eq(fixture_counter(good_path, "fld_fixture_good_calls"), 1);
    parent_census = take_census();
    ck_assert_int_eq(parent_census.good, 1);
    ck_assert_int_eq(parent_census.reference, 1);

    pid_t pid = fork_child(child_after_warmup, NULL);
    ASSERT_OK(child_outcome(pid));

    /* The child's load and policy change stay in the child. */
    struct registry_census c = take_census();
    ck_assert_int_eq(c.failing, 0);
    ck_assert_int_eq(c.plugins, parent_census.plugins);
    ASSERT_OK(resolves_to("silu_and_mul", "vendor.good"));
    ASSERT_OK(silu_ok());
    ck_assert_int_eq(fixture_counter(good_path, "fld_fixture_good_calls"), 2);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Fork while other threads are inside the library                          */
/* ------------------------------------------------------------------------ */

static atomic_bool stop_threads;
static atomic_long caller_calls, locker_rounds;
static char thread_error[512];

static void *caller_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_threads)) {
        const char *m = silu_ok();
        if (m == NULL)
            m = rms_norm_ok();
        if (m != NULL) {
            snprintf(thread_error, sizeof thread_error, "caller thread: %s", m);
            break;
        }
        atomic_fetch_add(&caller_calls, 2);
    }
    return NULL;
}

static void *locker_main(void *arg)
{
    (void)arg;
    static const char *const prefs[] = {"vendor", "reference", "flagos"};
    for (unsigned i = 0; !atomic_load(&stop_threads); i++) {
        int rc = fld_policy_set("prefer", prefs[i % 3]);
        if (rc == FLD_OK)
            rc = fld_load_plugin(good_path);
        if (rc == FLD_OK)
            rc = fld_policy_set("deny_vendors", i % 2 ? "cpu" : "");
        if (rc != FLD_OK) {
            snprintf(thread_error, sizeof thread_error, "locker thread: %s: %s", fld_strerror(rc),
                     fld_last_error());
            break;
        }
        atomic_fetch_add(&locker_rounds, 1);
    }
    return NULL;
}

static void child_amid_threads(void *arg)
{
    (void)arg;
    CHILD_CHECK(silu_ok());
    CHILD_CHECK(rms_norm_ok());
    CHILD_EXPECT(fld_init() == FLD_OK, "fld_init: %s", fld_last_error());
    CHILD_EXPECT(fld_policy_set("prefer", "vendor") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    CHILD_EXPECT(fld_policy_set("deny_vendors", "") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    int rc = fld_load_plugin(failing_path);
    CHILD_EXPECT(rc == FLD_OK, "fld_load_plugin(%s): %s: %s", failing_path, fld_strerror(rc),
                 fld_last_error());
    CHILD_CHECK(resolves_to("silu_and_mul", NULL));
    CHILD_CHECK(silu_ok());
    CHILD_CHECK(rms_norm_ok());
    struct registry_census c = take_census();
    CHILD_EXPECT(c.duplicates == 0 && c.rejected == 0 && c.good == 1 && c.failing == 1,
                 "child registry: good %d, failing %d, duplicates %d, rejected %d (%s)", c.good,
                 c.failing, c.duplicates, c.rejected, c.first_bad);
}

START_TEST(test_fork_amid_threads)
{
    const char *tmp = tt_make_tmpdir("fork");
    char plugins[PATH_MAX], later[PATH_MAX], dirs[2 * PATH_MAX + 2];
    tt_make_subdir(plugins, tmp, "plugins", 0755);
    tt_make_subdir(later, tmp, "later", 0755);
    tt_install_fixture(good_path, plugins, "plugins", "good");
    tt_install_fixture(failing_path, later, "plugins", "failing");
    /* The in-tree plugins too, so vendor.cpu (and any pool of threads it
     * keeps) is part of the picture. */
    snprintf(dirs, sizeof dirs, "%s/lib/fldispatch/plugins:%s", tt_build_dir(), plugins);
    set_plugin_dirs(dirs);
    init_ok();
    ASSERT_OK(silu_ok());

    pthread_t caller, locker;
    ck_assert_int_eq(pthread_create(&caller, NULL, caller_main, NULL), 0);
    ck_assert_int_eq(pthread_create(&locker, NULL, locker_main, NULL), 0);
    /* Let both get going before the first fork. */
    while (atomic_load(&caller_calls) < 4 || atomic_load(&locker_rounds) < 2)
        sched_yield();

    const char *preload = getenv("LD_PRELOAD");
    const int n_forks = preload && strstr(preload, "vgpreload") ? 3 : 24; /* valgrind: slow */
    char failure[1024] = "";
    for (int i = 0; i < n_forks && failure[0] == '\0'; i++) {
        pid_t pid = fork_child(child_amid_threads, NULL);
        const char *m = child_outcome(pid);
        if (m != NULL)
            snprintf(failure, sizeof failure, "fork %d: %s", i, m);
        const struct timespec pause = {0, 500 * 1000};
        nanosleep(&pause, NULL);
    }
    atomic_store(&stop_threads, true);
    pthread_join(caller, NULL);
    pthread_join(locker, NULL);
    ck_assert_msg(failure[0] == '\0', "%s", failure);
    ck_assert_msg(thread_error[0] == '\0', "%s", thread_error);
    ck_assert_int_gt(atomic_load(&caller_calls), 4);
    ck_assert_int_gt(atomic_load(&locker_rounds), 2);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Failure memory is the parent's, not the child's                         */
/* ------------------------------------------------------------------------ */

static void child_failure_memory(void *arg)
{
    (void)arg;
    long attempts_before = fixture_counter(failing_path, "fld_fixture_failing_calls");
    int warned_before = failing_warning_count();
    CHILD_CHECK(silu_ok());
    CHILD_EXPECT(fixture_counter(failing_path, "fld_fixture_failing_calls") == attempts_before + 1,
                 "the child did not try vendor.failing again (%ld attempts, %ld before)",
                 fixture_counter(failing_path, "fld_fixture_failing_calls"), attempts_before);
    CHILD_EXPECT(failing_warning_count() == warned_before + 1,
                 "the child logged %d WARNING(s) about vendor.failing, expected 1",
                 failing_warning_count() - warned_before);
    /* ... and then remembers it in turn. */
    CHILD_CHECK(silu_ok());
    CHILD_EXPECT(fixture_counter(failing_path, "fld_fixture_failing_calls") == attempts_before + 1,
                 "the child did not remember vendor.failing's failure");
    CHILD_EXPECT(failing_warning_count() == warned_before + 1,
                 "the child warned about vendor.failing twice");
}

START_TEST(test_child_failure_memory_fresh)
{
    const char *tmp = tt_make_tmpdir("fork");
    char plugins[PATH_MAX];
    tt_make_subdir(plugins, tmp, "plugins", 0755);
    tt_install_fixture(good_path, plugins, "plugins", "good");
    tt_install_fixture(failing_path, plugins, "plugins", "failing");
    set_plugin_dirs(plugins);
    init_ok();
    ASSERT_OK(resolves_to("silu_and_mul", "vendor.failing"));

    /* The parent fails once and remembers it. */
    ASSERT_OK(silu_ok());
    ck_assert_int_eq(failing_warning_count(), 1);
    ck_assert_int_eq(fixture_counter(failing_path, "fld_fixture_failing_calls"), 1);
    ASSERT_OK(silu_ok());
    ck_assert_int_eq(failing_warning_count(), 1);
    ck_assert_int_eq(fixture_counter(failing_path, "fld_fixture_failing_calls"), 1);
    ck_assert_int_eq(fixture_counter(good_path, "fld_fixture_good_calls"), 2);

    pid_t pid = fork_child(child_failure_memory, NULL);
    ASSERT_OK(child_outcome(pid));

    /* The parent's memory is untouched by the child. */
    ASSERT_OK(silu_ok());
    ck_assert_int_eq(failing_warning_count(), 1);
    ck_assert_int_eq(fixture_counter(failing_path, "fld_fixture_failing_calls"), 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Fork while a kernel runs, while a plugin registers, while is_available   */
/* runs (fixtures of tests/stress/)                                          */
/* ------------------------------------------------------------------------ */

static char stressa_path[PATH_MAX], slow_path[PATH_MAX];

/* stressa in the plugin directory (with good), slow aside in later/. */
static void setup_stress_fixtures(void)
{
    const char *tmp = tt_make_tmpdir("fork");
    char plugins[PATH_MAX], later[PATH_MAX];
    tt_make_subdir(plugins, tmp, "plugins", 0755);
    tt_make_subdir(later, tmp, "later", 0755);
    tt_install_fixture(good_path, plugins, "plugins", "good");
    tt_install_fixture(stressa_path, plugins, "stress", "stressa");
    tt_install_fixture(slow_path, later, "stress", "slow");
    set_plugin_dirs(plugins);
    unsetenv("VLLM_FL_PREFER");
    unsetenv("VLLM_FL_DENY_VENDORS");
    unsetenv("VLLM_FL_PER_OP");
    ck_assert_int_eq(setenv("VLLM_FL_PLATFORM", "cpu", 1), 0);
}

/* STRESS_OP_* are the catalog order of util/catalog_args.h. */
_Static_assert((int)STRESS_N_OPS == (int)TT_CAT_N_OPS &&
                   (int)STRESS_OP_RMS_NORM == (int)TT_CAT_RMS_NORM &&
                   (int)STRESS_OP_ROTARY_EMBEDDING == (int)TT_CAT_ROTARY_EMBEDDING &&
                   (int)STRESS_OP_ATTENTION_BACKEND == (int)TT_CAT_ATTENTION_BACKEND,
               "STRESS_OP_* follow the catalog order");
static const char *const stress_impl_ids[STRESS_N_IMPLS] = {
    "reference.c", "vendor.alpha", "vendor.beta", "default.stress", "vendor.gamma",
};

static bool all_equal(const float *v, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] != value)
            return false;
    return true;
}

/*
 * Calls every catalog op (typed entry points, CPU float32) and checks that
 * each returned FLD_OK, resolves to impl, and was served by it: the stress
 * fixtures mark their outputs; reference.c must leave no mark.
 */
static const char *ops_served_by(int impl, bool resolve);
static const char *every_op_served_by(int impl)
{
    return ops_served_by(impl, true);
}

/* With resolve false, the calls only: no allocation, so that a child forked
 * while a thread runs this inherits no memory held by that thread alone
 * (valgrind would call it lost). */
static const char *ops_served_by(int impl, bool resolve)
{
    struct tt_catalog_args a; /* on the stack: nothing allocated */
    tt_catalog_args_init(&a, 3);
    const float mark = (float)(STRESS_MARK_BASE + impl);
    for (int op = 0; op < STRESS_N_OPS; op++) {
        const char *id = stress_impl_ids[impl];
        int rc = resolve ? fld_resolve(tt_catalog_op_names[op], FLD_DEVICE_CPU, FLD_DTYPE_F32, &id)
                         : FLD_OK;
        if (rc != FLD_OK)
            return fail_with("fld_resolve(%s): %s: %s", tt_catalog_op_names[op], fld_strerror(rc),
                             fld_last_error());
        if (strcmp(id, stress_impl_ids[impl]) != 0)
            return fail_with("%s resolves to %s, expected %s", tt_catalog_op_names[op], id,
                             stress_impl_ids[impl]);
        tt_catalog_args_reset(&a);
        rc = tt_catalog_call(&a, op, TT_CALL_TYPED, NULL);
        const char *attn = a.attn;
        bool marked;
        if (rc != FLD_OK)
            return fail_with("%s: %s: %s", tt_catalog_op_names[op], fld_strerror(rc),
                             fld_last_error());
        const enum tt_catalog_writes writes = tt_catalog_writes(op);
        if (writes == TT_WRITES_AOUT)
            marked = all_equal(&a.aout[0][0], sizeof a.aout / sizeof(float), mark);
        else if (writes == TT_WRITES_NOUT)
            marked = all_equal(&a.nout[0][0], sizeof a.nout / sizeof(float), mark);
        else if (writes == TT_WRITES_QK)
            marked = all_equal(&a.q[0][0], sizeof a.q / sizeof(float), mark) &&
                     all_equal(&a.k[0][0], sizeof a.k / sizeof(float), mark);
        else if (writes == TT_WRITES_QK_OUT)
            marked = all_equal(&a.qout[0][0], sizeof a.qout / sizeof(float), mark) &&
                     all_equal(&a.kout[0][0], sizeof a.kout / sizeof(float), mark);
        else
            marked = attn != NULL && strncmp(attn, "STRESS_", 7) == 0 && attn[7] - '0' == impl &&
                     attn[8] == '\0';
        if (impl == STRESS_IMPL_REF) {
            float first = writes == TT_WRITES_AOUT     ? a.aout[0][0]
                          : writes == TT_WRITES_NOUT   ? a.nout[0][0]
                          : writes == TT_WRITES_QK_OUT ? a.qout[0][0]
                                                       : a.q[0][0];
            bool any_mark =
                writes == TT_WRITES_ATTN
                    ? attn == NULL || strncmp(attn, "STRESS_", 7) == 0
                    : first > STRESS_MARK_BASE + 0.5f && first < STRESS_MARK_BASE + 9.5f;
            if (any_mark)
                return fail_with("%s was not served by reference.c", tt_catalog_op_names[op]);
        } else if (!marked) {
            return fail_with("%s was not served by %s", tt_catalog_op_names[op],
                             stress_impl_ids[impl]);
        }
    }
    return NULL;
}

struct plugin_census {
    int stressa, slow, good, duplicates, rejected;
    char first_bad[512];
};

static int census_stress_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_census *c = user;
    c->stressa += strcmp(info->name, "stressa") == 0 && info->status == FLD_PLUGIN_LOADED;
    c->slow += strcmp(info->name, "slow") == 0 && info->status == FLD_PLUGIN_LOADED;
    c->good += strcmp(info->name, "good") == 0 && info->status == FLD_PLUGIN_LOADED;
    if (strstr(info->reason, "duplicate") != NULL || info->status == FLD_PLUGIN_REJECTED) {
        c->duplicates += strstr(info->reason, "duplicate") != NULL;
        c->rejected += info->status == FLD_PLUGIN_REJECTED;
        if (c->first_bad[0] == '\0')
            snprintf(c->first_bad, sizeof c->first_bad, "%s: %s", info->path, info->reason);
    }
    return 0;
}

/*
 * What every child of these tests checks: the registry as the parent had it
 * (each plugin once, slow as expected), every op working and served by the
 * policy's winner, policy changes and fld_reload() taking effect at once (no
 * stale cached chain), the slow fixture's ops callable.
 */
static void child_works(int slow_loaded)
{
    struct plugin_census c = {0};
    fld_foreach_plugin(census_stress_plugin, &c);
    CHILD_EXPECT(c.stressa == 1 && c.good == 1 && c.slow == slow_loaded && c.duplicates == 0 &&
                     c.rejected == 0,
                 "child registry: stressa %d, good %d, slow %d (expected %d), duplicates %d, "
                 "rejected %d %s",
                 c.stressa, c.good, c.slow, slow_loaded, c.duplicates, c.rejected, c.first_bad);
    /* Defaults: prefer flagos, so default.stress serves every op. */
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_FLAGOS));
    CHILD_EXPECT(fld_policy_set("prefer", "vendor") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    CHILD_EXPECT(fld_policy_set("deny_vendors", "good") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_ALPHA));
    CHILD_EXPECT(fld_policy_push_denied_vendors("alpha") == FLD_OK, "push: %s", fld_last_error());
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_BETA));
    CHILD_EXPECT(fld_policy_pop() == FLD_OK, "pop: %s", fld_last_error());
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_ALPHA));
    int rc = fld_reload();
    CHILD_EXPECT(rc == FLD_OK, "fld_reload in the child: %s: %s", fld_strerror(rc),
                 fld_last_error());
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_FLAGOS));
    CHILD_EXPECT(fld_policy_set("enabled", "false") == FLD_OK, "fld_policy_set: %s",
                 fld_last_error());
    CHILD_CHECK(every_op_served_by(STRESS_IMPL_REF));
    CHILD_EXPECT(fld_policy_reset() == FLD_OK, "fld_policy_reset: %s", fld_last_error());
    memset(&c, 0, sizeof c);
    fld_foreach_plugin(census_stress_plugin, &c);
    CHILD_EXPECT(c.stressa == 1 && c.good == 1 && c.duplicates == 0 && c.rejected == 0,
                 "after fld_reload the child has stressa %d, good %d, duplicates %d (%s)",
                 c.stressa, c.good, c.duplicates, c.first_bad);
    if (slow_loaded) {
        slow_args a = {.spin_ms = 0};
        rc = fld_call_by_name("slow_op", &a);
        CHILD_EXPECT(rc == FLD_OK && a.served == 1, "slow_op in the child: %s: %s",
                     fld_strerror(rc), fld_last_error());
        rc = fld_load_plugin(slow_path);
        CHILD_EXPECT(rc == FLD_OK, "loading fld-slow.so again in the child: %s: %s",
                     fld_strerror(rc), fld_last_error());
        memset(&c, 0, sizeof c);
        fld_foreach_plugin(census_stress_plugin, &c);
        CHILD_EXPECT(c.slow == 1 && c.duplicates == 0, "slow loaded %d times, duplicates %d (%s)",
                     c.slow, c.duplicates, c.first_bad);
    }
}

/* Callers on the cached path for the whole test. */
static void *stress_caller_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_threads)) {
        const char *m = ops_served_by(STRESS_IMPL_FLAGOS, false);
        if (m != NULL) {
            snprintf(thread_error, sizeof thread_error, "caller thread: %s", m);
            break;
        }
        atomic_fetch_add(&caller_calls, STRESS_N_OPS);
    }
    return NULL;
}

struct slow_call {
    pthread_t thread;
    const char *op;
    slow_args args;
    _Atomic int release, entered;
    int rc;
};

static void *slow_call_main(void *arg)
{
    struct slow_call *s = arg;
    s->rc = fld_call_by_name(s->op, &s->args);
    return NULL;
}

static void *load_slow_main(void *arg)
{
    struct slow_call *s = arg;
    s->rc = fld_load_plugin(slow_path);
    atomic_store(&s->entered, 1); /* done */
    return NULL;
}

static void wait_until(_Atomic int *flag, const char *what)
{
    for (int i = 0; i < 20000 && !atomic_load(flag); i++) {
        const struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    ck_assert_msg(atomic_load(flag), "%s did not happen within 20 s", what);
}

static void child_mid_kernel(void *arg)
{
    (void)arg;
    child_works(1);
}

START_TEST(test_fork_mid_kernel)
{
    setup_stress_fixtures();
    init_ok();
    ck_assert_int_eq(fld_load_plugin(slow_path), FLD_OK);
    ASSERT_OK(every_op_served_by(STRESS_IMPL_FLAGOS));

    pthread_t caller;
    ck_assert_int_eq(pthread_create(&caller, NULL, stress_caller_main, NULL), 0);
    static struct slow_call s;
    memset(&s, 0, sizeof s);
    s.op = "slow_op";
    s.args.release = &s.release;
    s.args.entered = &s.entered;
    ck_assert_int_eq(pthread_create(&s.thread, NULL, slow_call_main, &s), 0);
    wait_until(&s.entered, "the slow kernel's start");
    while (atomic_load(&caller_calls) < 4 * STRESS_N_OPS)
        sched_yield();

    /* Several children, each forked while the kernel runs and callers call. */
    const char *preload = getenv("LD_PRELOAD");
    const int n_forks = preload && strstr(preload, "vgpreload") ? 2 : 8; /* valgrind: slow */
    char failure[1024] = "";
    for (int i = 0; i < n_forks && failure[0] == '\0'; i++) {
        pid_t pid = fork_child(child_mid_kernel, NULL);
        const char *m = child_outcome(pid);
        if (m != NULL)
            snprintf(failure, sizeof failure, "fork %d: %s", i, m);
    }
    atomic_store(&s.release, 1);
    atomic_store(&stop_threads, true);
    pthread_join(s.thread, NULL);
    pthread_join(caller, NULL);
    ck_assert_msg(failure[0] == '\0', "%s", failure);
    ck_assert_msg(thread_error[0] == '\0', "%s", thread_error);
    ck_assert_msg(s.rc == FLD_OK && s.args.served == 1, "the slow call in the parent: %s (%s)",
                  fld_strerror(s.rc), fld_last_error());
    /* The parent's own state is untouched by the children's changes. */
    ASSERT_OK(every_op_served_by(STRESS_IMPL_FLAGOS));
}
END_TEST

static void child_after_register(void *arg)
{
    (void)arg;
    /* The fork waited for the registration: the plugin is whole, not half there. */
    child_works(1);
}

START_TEST(test_fork_while_plugin_registers)
{
    setup_stress_fixtures();
    ck_assert_int_eq(setenv("FLD_SLOW_REGISTER_MS", "300", 1), 0);
    init_ok();
    static struct slow_call s;
    memset(&s, 0, sizeof s);
    pthread_t caller, loader;
    ck_assert_int_eq(pthread_create(&caller, NULL, stress_caller_main, NULL), 0);
    ck_assert_int_eq(pthread_create(&loader, NULL, load_slow_main, &s), 0);

    /* Wait until register_builtins runs (the host lock held), then fork. */
    int (*phase)(void) = NULL;
    for (int i = 0; i < 20000 && phase == NULL; i++) {
        void *h = dlopen(slow_path, RTLD_NOW | RTLD_NOLOAD);
        if (h != NULL) {
            phase = (int (*)(void))dlsym(h, "fld_slow_phase");
            dlclose(h); /* the library keeps its own reference */
        } else {
            const struct timespec ms = {0, 1000 * 1000};
            nanosleep(&ms, NULL);
        }
    }
    ck_assert_msg(phase != NULL, "fld-slow.so was not loaded within 20 s");
    while (phase() != 1 && !atomic_load(&s.entered))
        sched_yield();
    ck_assert_msg(phase() == 1, "register_builtins of fld-slow.so was not seen running");
    pid_t pid = fork_child(child_after_register, NULL);
    const char *m = child_outcome(pid);
    atomic_store(&stop_threads, true);
    pthread_join(loader, NULL);
    pthread_join(caller, NULL);
    ASSERT_OK(m);
    ck_assert_msg(thread_error[0] == '\0', "%s", thread_error);
    ck_assert_msg(s.rc == FLD_OK, "fld_load_plugin(slow) in the parent: %s", fld_strerror(s.rc));
}
END_TEST

static void child_after_available(void *arg)
{
    long before = *(long *)arg;
    void *h = dlopen(slow_path, RTLD_NOW | RTLD_NOLOAD);
    CHILD_EXPECT(h != NULL, "fld-slow.so is not mapped in the child");
    void (*set_delays)(int, int) = (void (*)(int, int))dlsym(h, "fld_slow_set_delays");
    long (*calls)(void) = (long (*)(void))dlsym(h, "fld_slow_available_calls");
    CHILD_EXPECT(set_delays != NULL && calls != NULL, "fixture symbols missing");
    set_delays(0, 0);
    /* Availability is evaluated again in the child, once. */
    slow_args a = {.spin_ms = 0};
    int rc = fld_call_by_name("slow_avail_op", &a);
    CHILD_EXPECT(rc == FLD_OK && a.served == 1, "slow_avail_op in the child: %s: %s",
                 fld_strerror(rc), fld_last_error());
    rc = fld_call_by_name("slow_avail_op", &a);
    CHILD_EXPECT(rc == FLD_OK && a.served == 2, "slow_avail_op again: %s", fld_last_error());
    CHILD_EXPECT(calls() == before + 1,
                 "is_available ran %ld times in the child (expected once; %ld before the fork)",
                 calls() - before, before);
    dlclose(h);
    child_works(1);
}

START_TEST(test_fork_while_is_available_runs)
{
    setup_stress_fixtures();
    init_ok();
    ck_assert_int_eq(fld_load_plugin(slow_path), FLD_OK);
    void *h = dlopen(slow_path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    void (*set_delays)(int, int) = (void (*)(int, int))dlsym(h, "fld_slow_set_delays");
    int (*phase)(void) = (int (*)(void))dlsym(h, "fld_slow_phase");
    long (*calls)(void) = (long (*)(void))dlsym(h, "fld_slow_available_calls");
    ck_assert(set_delays && phase && calls);
    set_delays(0, 300);

    pthread_t caller;
    ck_assert_int_eq(pthread_create(&caller, NULL, stress_caller_main, NULL), 0);
    static struct slow_call s;
    memset(&s, 0, sizeof s);
    s.op = "slow_avail_op";
    ck_assert_int_eq(pthread_create(&s.thread, NULL, slow_call_main, &s), 0);
    for (int i = 0; i < 20000 && phase() != 2; i++) {
        const struct timespec ms = {0, 1000 * 1000};
        nanosleep(&ms, NULL);
    }
    ck_assert_msg(phase() == 2, "is_available() of vendor.slow did not start within 20 s");
    /* The availability check in flight finishes before the fork (host lock),
     * so the parent counted one evaluation, and the child makes its own. */
    long before = 1;
    pid_t pid = fork_child(child_after_available, &before);
    const char *m = child_outcome(pid);
    atomic_store(&stop_threads, true);
    pthread_join(s.thread, NULL);
    pthread_join(caller, NULL);
    ASSERT_OK(m);
    ck_assert_msg(thread_error[0] == '\0', "%s", thread_error);
    ck_assert_msg(s.rc == FLD_OK && s.args.served == 1, "slow_avail_op in the parent: %s",
                  fld_strerror(s.rc));
    ck_assert_int_eq(calls(), 1);
    dlclose(h);
}
END_TEST

static Suite *fork_suite(void)
{
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_child_after_warmup);
    tcase_add_test(tc, test_fork_amid_threads);
    tcase_add_test(tc, test_child_failure_memory_fresh);
    tcase_add_test(tc, test_fork_mid_kernel);
    tcase_add_test(tc, test_fork_while_plugin_registers);
    tcase_add_test(tc, test_fork_while_is_available_runs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_fork", fork_suite());
}
