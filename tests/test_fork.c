/*
 * fork(): a child of an initialised, warmed-up process works on its own —
 * correct results, no duplicate registrations, no inherited lock even when
 * other threads were inside the library at the moment of the fork, and
 * fresh memory of failed implementations.
 *
 * Children never use Check's assertions: they report on stderr and exit
 * non-zero, and the parent asserts a normal exit with status 0. Each child
 * arms alarm() so a deadlock shows up as SIGALRM instead of a hung test.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

/* Layout of the "good_echo" op's arguments (tests/plugins/good.c). */
typedef struct good_echo_args {
    int value;
} good_echo_args;

enum { CHILD_ALARM_S = 10 };

/* ------------------------------------------------------------------------ */
/* Environment and files                                                    */
/* ------------------------------------------------------------------------ */

static const char *build_dir(void)
{
    const char *v = getenv("FLD_BUILDDIR");
    ck_assert_msg(v != NULL && v[0] == '/',
                  "FLD_BUILDDIR must name the absolute build directory (make check sets it)");
    return v;
}

static char tmpdir[PATH_MAX];
static pid_t tmpdir_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tmpdir(void)
{
    /* Only the test process removes it, not a child that exits normally. */
    if (tmpdir[0] != '\0' && getpid() == tmpdir_owner)
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *make_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/fld-fork-XXXXXX", base && base[0] == '/' ? base : "/tmp");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp(%s): %s", tmpdir, strerror(errno));
    tmpdir_owner = getpid();
    atexit(remove_tmpdir);
    return tmpdir;
}

static void make_subdir(char *out, const char *name)
{
    snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
    ck_assert_msg(mkdir(out, 0755) == 0 && chmod(out, 0755) == 0, "mkdir %s: %s", out,
                  strerror(errno));
}

/* Copies fixture fld-<name>.so into dir (mode 0755); its path in out. */
static void install_fixture(char *out, const char *dir, const char *name)
{
    char src[PATH_MAX];
    snprintf(src, sizeof src, "%s/tests/plugins/fld-%s.so", build_dir(), name);
    snprintf(out, PATH_MAX, "%s/fld-%s.so", dir, name);
    int in = open(src, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(in >= 0, "cannot open %s: %s (build the fixtures with `make tests`)", src,
                  strerror(errno));
    int fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_msg(fd >= 0, "cannot create %s: %s", out, strerror(errno));
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        ck_assert_msg(write(fd, buf, (size_t)n) == n, "write %s: %s", out, strerror(errno));
    ck_assert_msg(n == 0 && fchmod(fd, 0755) == 0, "copy to %s: %s", out, strerror(errno));
    close(in);
    close(fd);
}

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
    make_tmpdir();
    char plugins[PATH_MAX], later[PATH_MAX];
    make_subdir(plugins, "plugins");
    make_subdir(later, "later");
    install_fixture(good_path, plugins, "good");
    install_fixture(failing_path, later, "failing");
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
    make_tmpdir();
    char plugins[PATH_MAX], later[PATH_MAX], dirs[2 * PATH_MAX + 2];
    make_subdir(plugins, "plugins");
    make_subdir(later, "later");
    install_fixture(good_path, plugins, "good");
    install_fixture(failing_path, later, "failing");
    /* The in-tree plugins too, so vendor.cpu (and any pool of threads it
     * keeps) is part of the picture. */
    snprintf(dirs, sizeof dirs, "%s/lib/fldispatch/plugins:%s", build_dir(), plugins);
    set_plugin_dirs(dirs);
    init_ok();
    ASSERT_OK(silu_ok());

    pthread_t caller, locker;
    ck_assert_int_eq(pthread_create(&caller, NULL, caller_main, NULL), 0);
    ck_assert_int_eq(pthread_create(&locker, NULL, locker_main, NULL), 0);
    /* Let both get going before the first fork. */
    while (atomic_load(&caller_calls) < 4 || atomic_load(&locker_rounds) < 2)
        sched_yield();

    enum { N_FORKS = 24 };
    char failure[1024] = "";
    for (int i = 0; i < N_FORKS && failure[0] == '\0'; i++) {
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
    make_tmpdir();
    char plugins[PATH_MAX];
    make_subdir(plugins, "plugins");
    install_fixture(good_path, plugins, "good");
    install_fixture(failing_path, plugins, "failing");
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

static Suite *fork_suite(void)
{
    Suite *s = suite_create("fork");
    TCase *tc = tcase_create("fork");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_child_after_warmup);
    tcase_add_test(tc, test_fork_amid_threads);
    tcase_add_test(tc, test_child_failure_memory_fresh);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    const char *b = getenv("FLD_BUILDDIR");
    if (b == NULL || b[0] != '/') {
        fprintf(stderr, "test_fork: FLD_BUILDDIR is not set to an absolute path; run `make "
                        "check` or set FLD_SRCDIR and FLD_BUILDDIR\n");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(fork_suite());
    srunner_run_all(sr, CK_ENV);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
