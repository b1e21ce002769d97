/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/observe/stats.c and core/observe/trace.c: the opt-in call counters and the dispatch
 * trace. Off by default; VLLM_FL_STATS=1/calls counts, =time also times;
 * fld_stats_enable() switches at run time (closing the direct call path,
 * so calls already cached are counted too); failures and fallbacks are
 * counted on the implementation that failed (tests/plugins' "failing");
 * at exit the table goes to stderr, or JSON to VLLM_FL_STATS_FILE with %p
 * and %r expanded; VLLM_FL_TRACE writes Chrome trace JSON; a bad value is
 * FLD_ECONFIG naming the variable; the new variables are known to the
 * unknown-VLLM_FL_* check; threads count exactly. The files are never
 * written through a link planted at their path (by us or, as root, by
 * another user), a write that fails leaves the previous file whole, the
 * table escapes control characters in names, a rank that is no rank is
 * refused by "%r", and resets and writes of the trace are safe while other
 * threads record. VLLM_FL_STATS_INTERVAL rewrites the files while the
 * process runs, only when something changed, in forked children too, and
 * fork() never hands a child a half-written file.
 *
 * Each test runs in its own process (CK_FORK); those that look at what
 * happens at exit fork a child of their own and read what it wrote.
 */
#include <check.h>
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/internal/tool_api.h>
#include <fldispatch/plugin.h>

#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/tool.h"

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

static char tmp_dir[PATH_MAX];

/* A private plugin directory holding the named fixtures of tests/plugins. */
static void setup(const char *const *fixtures)
{
    char dir[PATH_MAX];
    snprintf(tmp_dir, sizeof tmp_dir, "%s", tt_make_tmpdir("stats"));
    tt_make_subdir(dir, tmp_dir, "plugins", 0700);
    for (; fixtures && *fixtures; fixtures++)
        tt_install_fixture(NULL, dir, "plugins", *fixtures);
    tt_clear_fld_environment();
    unsetenv("RANK");
    unsetenv("LOCAL_RANK");
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
}

/* silu_and_mul on a [2, 16] float32 tensor. */
static int call_silu(void)
{
    static _Thread_local float x[32], out[16]; /* threads call it at once */
    static int64_t xs[2] = {2, 16}, os[2] = {2, 8};
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xs};
    DLTensor to = {
        .data = out, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = os};
    return fld_silu_and_mul(&to, &tx);
}

/* The entry of (op, impl_id) for cpu/f32; zeroed (calls 0) when absent. */
static fld_stats_entry entry_of(const char *op, const char *impl_id)
{
    fld_stats_entry all[64], none = {0};
    size_t n = 0;
    ck_assert_int_eq(fld_stats_snapshot(all, 64, &n), FLD_OK);
    for (size_t i = 0; i < n && i < 64; i++)
        if (strcmp(all[i].op, op) == 0 && strcmp(all[i].impl_id, impl_id) == 0 &&
            strcmp(all[i].device, "cpu") == 0 && strcmp(all[i].dtype, "f32") == 0)
            return all[i];
    return none;
}

static size_t entries(void)
{
    size_t n = 99;
    ck_assert_int_eq(fld_stats_snapshot(NULL, 0, &n), FLD_OK);
    return n;
}

START_TEST(off_by_default)
{
    setup(NULL);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_OFF);
    ck_assert_uint_eq(entries(), 0);
}
END_TEST

START_TEST(counts_calls)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "1", 1);
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_CALLS);
    fld_stats_entry e = entry_of(FLD_OP_SILU_AND_MUL, "reference.c");
    ck_assert_uint_eq(e.calls, 5);
    ck_assert_uint_eq(e.failures, 0);
    ck_assert_uint_eq(e.fallbacks, 0);
    ck_assert_uint_eq(e.total_ns, 0); /* not timed */
    ck_assert_uint_eq(entries(), 1);
    /* Counts survive a shutdown and go on after the next init. */
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_uint_eq(entry_of(FLD_OP_SILU_AND_MUL, "reference.c").calls, 6);
}
END_TEST

START_TEST(time_mode_times)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", " time ", 1);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_TIME);
    fld_stats_entry e = entry_of(FLD_OP_SILU_AND_MUL, "reference.c");
    ck_assert_uint_eq(e.calls, 3);
    ck_assert_uint_gt(e.total_ns, 0);
}
END_TEST

START_TEST(switched_on_at_run_time_counts_cached_calls)
{
    setup(NULL);
    /* The direct path is open for silu_and_mul after these. */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_int_eq(fld_stats_enable(FLD_STATS_CALLS), FLD_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_uint_eq(entry_of(FLD_OP_SILU_AND_MUL, "reference.c").calls, 4);
    ck_assert_int_eq(fld_stats_enable(FLD_STATS_OFF), FLD_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    ck_assert_uint_eq(entry_of(FLD_OP_SILU_AND_MUL, "reference.c").calls, 4);
    ck_assert_int_eq(fld_stats_enable(7), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "fld_stats_enable: unknown mode 7");
    /* The environment comes back at a reload. */
    setenv("VLLM_FL_STATS", "calls", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_CALLS);
}
END_TEST

START_TEST(failures_and_fallbacks)
{
    setup((const char *[]){"failing", NULL});
    setenv("VLLM_FL_STATS", "1", 1);
    setenv("VLLM_FL_PREFER", "vendor", 1);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(call_silu() == FLD_OK, "%s", fld_last_error());
    /* It failed once and the reference ran; then it is remembered and skipped. */
    fld_stats_entry f = entry_of(FLD_OP_SILU_AND_MUL, "vendor.failing");
    ck_assert_uint_eq(f.calls, 1);
    ck_assert_uint_eq(f.failures, 1);
    ck_assert_uint_eq(f.fallbacks, 1);
    fld_stats_entry r = entry_of(FLD_OP_SILU_AND_MUL, "reference.c");
    ck_assert_uint_eq(r.calls, 3);
    ck_assert_uint_eq(r.failures, 0);
    /* Strict: the failure is returned, nothing falls back. */
    fld_stats_reset();
    ck_assert_uint_eq(entries(), 0);
    setenv("VLLM_FL_STRICT", "1", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(call_silu(), FLD_EIMPL);
    f = entry_of(FLD_OP_SILU_AND_MUL, "vendor.failing");
    ck_assert_uint_eq(f.calls, 1);
    ck_assert_uint_eq(f.failures, 1);
    ck_assert_uint_eq(f.fallbacks, 0);
    ck_assert_uint_eq(entry_of(FLD_OP_SILU_AND_MUL, "reference.c").calls, 0);
}
END_TEST

START_TEST(invalid_value_is_a_configuration_error)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "sometimes", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_contains(fld_last_error(), "VLLM_FL_STATS: invalid value 'sometimes'");
}
END_TEST

static char warnings[4096];
static void capture(int level, const char *message, void *user)
{
    (void)user;
    if (level >= FLD_LOG_WARNING && strlen(warnings) + strlen(message) + 2 < sizeof warnings) {
        strcat(warnings, message);
        strcat(warnings, "\n");
    }
}

START_TEST(variables_are_known)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "0", 1);
    setenv("VLLM_FL_STATS_FILE", "/dev/null", 1);
    setenv("VLLM_FL_TRACE", "/dev/null", 1);
    setenv("VLLM_FL_STATZ", "1", 1); /* a typo, which is reported */
    fld_log_set_callback(capture, NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_log_set_callback(NULL, NULL);
    ck_assert_contains(warnings, "VLLM_FL_STATZ");
    ck_assert_msg(!strstr(warnings, "VLLM_FL_STATS_FILE") && !strstr(warnings, "VLLM_FL_TRACE"),
                  "%s", warnings);
    /* VLLM_FL_STATS=0 wins over the file's "count". */
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_OFF);
}
END_TEST

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    return f ? tt_read_all(f) : NULL;
}

/* Runs calls in a child process that then exits through exit(); its stderr to err_path. */
static void child_calls_and_exits(int calls, const char *err_path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(err_path, "w", stderr))
            _exit(3);
        for (int i = 0; i < calls; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    char expect[PATH_MAX];
    snprintf(expect, sizeof expect, "%d", (int)pid);
    setenv("FLD_TEST_CHILD_PID", expect, 1);
}

START_TEST(table_on_stderr_at_exit)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "1", 1);
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    child_calls_and_exits(7, err);
    char *text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_contains(text, "fldispatch stats (pid ");
    ck_assert_msg(line_with(text, "silu_and_mul", "reference.c", " 7 "), "%s", text);
    free(text);
}
END_TEST

/* A child that calls, flushes, calls again and exits through exit(): its stderr to err_path. */
static void child_flushes_then_exits(int before, int after, const char *err_path)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(err_path, "w", stderr))
            _exit(3);
        for (int i = 0; i < before; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        if (fld_stats_flush() != FLD_OK)
            _exit(4);
        for (int i = 0; i < after; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The exit handler writes nothing that fld_stats_flush() already wrote (a
 * worker that flushes from its own exit hook, then exits, prints one table),
 * and writes again what was counted after the flush. */
START_TEST(flush_then_exit_writes_once)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "1", 1);
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    child_flushes_then_exits(5, 0, err);
    char *text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(count_of(text, "fldispatch stats (pid ") == 1, "%s", text);
    ck_assert_msg(line_with(text, "silu_and_mul", "reference.c", " 5 "), "%s", text);
    free(text);
    child_flushes_then_exits(5, 2, err);
    text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(count_of(text, "fldispatch stats (pid ") == 2, "%s", text);
    ck_assert_msg(line_with(text, "silu_and_mul", "reference.c", " 7 "), "%s", text);
    free(text);
}
END_TEST

/* The exit paths that bypass the exit handler (a multiprocessing worker's
 * os._exit(), vLLM's engine core as its busy loop ends) flush as that
 * handler would: again only when something changed. A child calls, flushes
 * that way twice, calls again, flushes once more and leaves through
 * _exit(): two tables, the second with every call. */
START_TEST(flush_changed_writes_only_what_changed)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "1", 1);
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (!freopen(err, "w", stderr))
            _exit(3);
        for (int i = 0; i < 5; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        if (fld__stats_flush_changed() != FLD_OK || fld__stats_flush_changed() != FLD_OK)
            _exit(4);
        for (int i = 0; i < 2; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        if (fld__stats_flush_changed() != FLD_OK)
            _exit(5);
        fflush(stderr);
        _exit(0);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    char *text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(count_of(text, "fldispatch stats (pid ") == 2, "%s", text);
    ck_assert_msg(line_with(text, "silu_and_mul", "reference.c", " 5 "), "%s", text);
    ck_assert_msg(line_with(text, "silu_and_mul", "reference.c", " 7 "), "%s", text);
    free(text);
}
END_TEST

START_TEST(json_file_with_pid_and_rank)
{
    setup(NULL);
    char pattern[PATH_MAX + 32];
    snprintf(pattern, sizeof pattern, "%s/stats-%%p-r%%r-%%%%.json", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", pattern, 1); /* alone: counts */
    setenv("LOCAL_RANK", "5", 1);
    setenv("RANK", "3", 1); /* wins */
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    child_calls_and_exits(4, err);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/stats-%s-r3-%%.json", tmp_dir, getenv("FLD_TEST_CHILD_PID"));
    char *text = read_file(path);
    ck_assert_msg(text != NULL, "no file %s", path);
    ck_assert_contains(text, "\"rank\": 3");
    ck_assert_contains(text, "\"op\": \"silu_and_mul\", \"impl_id\": \"reference.c\", "
                             "\"device\": \"cpu\", \"dtype\": \"f32\", \"calls\": 4, "
                             "\"fallbacks\": 0, \"failures\": 0");
    free(text);
    /* No table on stderr when the file takes the counts. */
    text = read_file(err);
    ck_assert_msg(!text || !strstr(text, "fldispatch stats"), "%s", text);
    free(text);
}
END_TEST

START_TEST(trace_as_chrome_json)
{
    setup((const char *[]){"failing", NULL});
    char pattern[PATH_MAX + 16];
    snprintf(pattern, sizeof pattern, "%s/trace-%%p.json", tmp_dir);
    setenv("VLLM_FL_TRACE", pattern, 1);
    setenv("VLLM_FL_PREFER", "vendor", 1);
    char err[PATH_MAX];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    child_calls_and_exits(3, err);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/trace-%s.json", tmp_dir, getenv("FLD_TEST_CHILD_PID"));
    char *text = read_file(path);
    ck_assert_msg(text != NULL, "no file %s", path);
    ck_assert_contains(text, "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [");
    ck_assert_contains(text, "\"name\": \"dispatch decision\"");
    ck_assert_contains(text, "\"op\": \"silu_and_mul\", \"device\": \"cpu\", \"dtype\": "
                             "\"f32\", \"selected\": \"vendor.failing\", \"candidates\": "
                             "[\"vendor.failing\", \"reference.c\"]");
    ck_assert_contains(text, "\"impl_id\": \"vendor.failing\", \"device\": \"cpu\", \"dtype\": "
                             "\"f32\", \"status\": -");
    ck_assert_int_eq(tt_count_of(text, "\"impl_id\": \"reference.c\""), 3);
    ck_assert_contains(text, "\"dropped\": 0, \"cap\": 262144");
    free(text);
}
END_TEST

START_TEST(record_from_outside)
{
    setup(NULL);
    DLDataType f16 = {kDLFloat, 16, 1};
    /* Off: nothing counted. */
    ck_assert_int_eq(fld_stats_record("rms_norm", "vendor.py", FLD_DEVICE_CPU, f16, 0, 0, 5),
                     FLD_OK);
    ck_assert_uint_eq(entries(), 0);
    ck_assert_int_eq(fld_stats_enable(FLD_STATS_TIME), FLD_OK);
    ck_assert_int_eq(fld_stats_record("rms_norm", "vendor.py", FLD_DEVICE_CPU, f16, FLD_OK, 0, 5),
                     FLD_OK);
    ck_assert_int_eq(fld_stats_record("rms_norm", "vendor.py", FLD_DEVICE_CPU, f16, FLD_EIMPL,
                                      FLD_STATS_FELL_BACK, 7),
                     FLD_OK);
    fld_stats_entry e[4];
    size_t n = 0;
    ck_assert_int_eq(fld_stats_snapshot(e, 4, &n), FLD_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(e[0].impl_id, "vendor.py");
    ck_assert_str_eq(e[0].dtype, "f16");
    ck_assert_uint_eq(e[0].calls, 2);
    ck_assert_uint_eq(e[0].failures, 1);
    ck_assert_uint_eq(e[0].fallbacks, 1);
    ck_assert_uint_eq(e[0].total_ns, 12);
    ck_assert_int_eq(fld_stats_record(NULL, "x.y", FLD_DEVICE_CPU, f16, 0, 0, 0), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "argument 'op' is NULL");
    ck_assert_int_eq(fld_stats_record("op", "x.y", 12345, f16, 0, 0, 0), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "unknown device type 12345");
    ck_assert_int_eq(fld_stats_snapshot(NULL, 3, &n), FLD_EINVAL);
    ck_assert_int_eq(fld_stats_print(NULL), FLD_EINVAL);
}
END_TEST

#define THREADS 4
#define CALLS   2000

static void *call_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < CALLS; i++)
        if (call_silu() != FLD_OK)
            return (void *)1;
    return NULL;
}

START_TEST(threads_count_exactly)
{
    setup(NULL);
    setenv("VLLM_FL_STATS", "time", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, call_many, NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        ck_assert_ptr_null(rc);
    }
    ck_assert_uint_eq(entry_of(FLD_OP_SILU_AND_MUL, "reference.c").calls, THREADS * CALLS);
}
END_TEST

/* ---- files: never through a planted link, whole or not at all ------------ */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Plants at link (as uid when uid >= 0: a child process drops to it) a symbolic link to target. */
static void plant_link(const char *target, const char *link, int uid)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0))
            _exit(3);
        _exit(symlink(target, link) == 0 ? 0 : 4);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "planting %s: status %d", link,
                  status);
}

/*
 * A process with `variable` naming dir/out.json, where a link to a victim
 * file was planted (by uid, or by us when uid < 0), runs calls and exits:
 * the victim is unchanged, the link is still a link, and stderr names the
 * variable, the path and why.
 */
static void planted_link_is_not_followed(const char *variable, const char *dir, int uid)
{
    char victim[PATH_MAX], link[PATH_MAX], err[PATH_MAX];
    snprintf(victim, sizeof victim, "%s/victim.txt", tmp_dir);
    snprintf(link, sizeof link, "%s/out.json", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    write_text(victim, "precious\n");
    plant_link(victim, link, uid);
    setenv(variable, link, 1);
    child_calls_and_exits(2, err);
    char *text = read_file(victim);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, "precious\n");
    free(text);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert_msg(S_ISLNK(st.st_mode), "%s was replaced", link);
    text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_contains(text, variable);
    ck_assert_contains(text, link);
    ck_assert_contains(text, "symbolic link (not followed");
    free(text);
    unlink(link);
    unsetenv(variable);
}

START_TEST(planted_link_at_stats_file_is_not_followed)
{
    setup(NULL);
    planted_link_is_not_followed("VLLM_FL_STATS_FILE", tmp_dir, -1);
}
END_TEST

START_TEST(planted_link_at_trace_is_not_followed)
{
    setup(NULL);
    planted_link_is_not_followed("VLLM_FL_TRACE", tmp_dir, -1);
}
END_TEST

/*
 * As root (CI): another user (nobody, uid 65534) owns the directory the
 * files go to and plants the links there, aiming at a file of root's.
 */
START_TEST(link_planted_by_another_user_is_not_followed)
{
    setup(NULL);
    if (geteuid() != 0) {
        fprintf(stderr, "test_stats: link_planted_by_another_user_is_not_followed skipped: "
                        "needs root to act as a second user\n");
        return;
    }
    char shared[PATH_MAX];
    tt_make_subdir(shared, tmp_dir, "shared", 0755);
    ck_assert_int_eq(chmod(tmp_dir, 0755), 0);
    ck_assert_int_eq(chown(shared, 65534, 65534), 0);
    planted_link_is_not_followed("VLLM_FL_STATS_FILE", shared, 65534);
    planted_link_is_not_followed("VLLM_FL_TRACE", shared, 65534);
}
END_TEST

/* A file of the variable's that cannot be written whole (the file-size limit)
 * leaves the previous one as it was, and says so. */
static void failed_write_keeps_previous(const char *variable)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/out.json", tmp_dir);
    write_text(path, "{\"previous\": true}\n");
    setenv(variable, path, 1);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* stderr to a pipe: the file-size limit is for the file alone. */
        close(fds[0]);
        if (dup2(fds[1], 2) < 0)
            _exit(3);
        signal(SIGXFSZ, SIG_IGN);
        for (int i = 0; i < 3; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        struct rlimit lim = {.rlim_cur = 16, .rlim_max = 16};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
            _exit(4);
        exit(0);
    }
    close(fds[1]);
    char *text = calloc(1, 65536);
    ck_assert_ptr_nonnull(text);
    for (size_t len = 0; len + 1 < 65536;) {
        ssize_t got = read(fds[0], text + len, 65536 - 1 - len);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    close(fds[0]);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    ck_assert_ptr_nonnull(text);
    ck_assert_contains(text, variable);
    ck_assert_contains(text, "the file there is unchanged");
    free(text);
    text = read_file(path);
    ck_assert_ptr_nonnull(text);
    ck_assert_str_eq(text, "{\"previous\": true}\n");
    free(text);
    /* No temporary file is left beside it. */
    DIR *d = opendir(tmp_dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));)
        ck_assert_msg(strncmp(e->d_name, ".out.json.", 10) != 0, "left behind: %s", e->d_name);
    closedir(d);
    unsetenv(variable);
}

START_TEST(failed_stats_write_keeps_previous_file)
{
    setup(NULL);
    failed_write_keeps_previous("VLLM_FL_STATS_FILE");
}
END_TEST

START_TEST(failed_trace_write_keeps_previous_file)
{
    setup(NULL);
    failed_write_keeps_previous("VLLM_FL_TRACE");
}
END_TEST

/* The table on a terminal: names' control characters are escaped, as the JSON file does. */
START_TEST(table_escapes_control_characters)
{
    setup(NULL);
    ck_assert_int_eq(fld_stats_enable(FLD_STATS_CALLS), FLD_OK);
    DLDataType f32 = {kDLFloat, 32, 1};
    ck_assert_int_eq(fld_stats_record("evil\x1b]0;owned\x07op", "vendor.\x1b[2Jx", FLD_DEVICE_CPU,
                                      f32, FLD_OK, 0, 0),
                     FLD_OK);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/table.txt", tmp_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fld_stats_print(f), FLD_OK);
    fclose(f);
    char *text = read_file(path);
    ck_assert_ptr_nonnull(text);
    ck_assert_contains(text, "evil\\x1b]0;owned\\x07op");
    ck_assert_contains(text, "vendor.\\x1b[2Jx");
    ck_assert_msg(!strchr(text, '\x1b') && !strchr(text, '\x07'), "raw control bytes: %s", text);
    free(text);
}
END_TEST

/* "%r" with a rank that does not fit a long is an error naming RANK, not a saturated rank. */
START_TEST(huge_rank_is_refused)
{
    setup(NULL);
    char pattern[PATH_MAX + 16];
    snprintf(pattern, sizeof pattern, "%s/stats-%%r.json", tmp_dir);
    setenv("RANK", "99999999999999999999", 1);
    setenv("VLLM_FL_STATS_FILE", pattern, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_contains(fld_last_error(), "VLLM_FL_STATS_FILE");
    ck_assert_contains(fld_last_error(), "RANK='99999999999999999999' is not a rank");
    unsetenv("VLLM_FL_STATS_FILE");
    int rc = fld_reload();
    ck_assert_msg(rc == FLD_OK, "%d: %s", rc, fld_last_error());
    ck_assert_int_eq(fld_stats_write(pattern), FLD_EINVAL);
    ck_assert_contains(fld_last_error(), "fld_stats_write");
    ck_assert_contains(fld_last_error(), "is not a rank");
    /* Without "%r" the rank is not needed. */
    char plain[PATH_MAX + 16];
    snprintf(plain, sizeof plain, "%s/stats.json", tmp_dir);
    ck_assert_int_eq(fld_stats_write(plain), FLD_OK);
    char *text = read_file(plain);
    ck_assert_ptr_nonnull(text);
    ck_assert_contains(text, "\"rank\": null");
    free(text);
}
END_TEST

/* ---- the trace under threads: recording, resets and writes together ------- */

#define TRACE_THREADS 3
#define TRACE_ROUNDS  400

static _Atomic int trace_stop;

static void *trace_calls(void *arg)
{
    (void)arg;
    while (!atomic_load(&trace_stop))
        if (call_silu() != FLD_OK)
            return (void *)1;
    return NULL;
}

/*
 * fld_stats_reset() and fld_trace_write() are MT safe while other threads
 * record: no event is freed under a writer, no slot filled twice (run under
 * ThreadSanitizer: `make check SANITIZE=thread TESTS=test_stats`). Every
 * file written is whole JSON.
 */
START_TEST(trace_resets_and_writes_race_with_calls)
{
    setup(NULL);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/trace.json", tmp_dir);
    setenv("VLLM_FL_TRACE", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    atomic_store(&trace_stop, 0);
    pthread_t t[TRACE_THREADS];
    for (int i = 0; i < TRACE_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, trace_calls, NULL), 0);
    for (int round = 0; round < TRACE_ROUNDS; round++) {
        if (round % 4 == 0) {
            ck_assert_int_eq(fld_trace_write(path), FLD_OK);
            char *text = read_file(path);
            ck_assert_ptr_nonnull(text);
            ck_assert_contains(text, "\"otherData\": {\"events\": ");
            free(text);
        }
        fld_stats_reset();
        /* A decision event too: the chain is traced on the next (re)resolution. */
        if (round % 16 == 0)
            ck_assert_int_eq(fld_reload(), FLD_OK);
    }
    atomic_store(&trace_stop, 1);
    for (int i = 0; i < TRACE_THREADS; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        ck_assert_ptr_null(rc);
    }
    unsetenv("VLLM_FL_TRACE");
}
END_TEST

/* ---- the periodic writer (VLLM_FL_STATS_INTERVAL) -------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The text of path once it holds needle, waiting up to 30 s (a loaded machine); NULL after. */
static char *await_text(const char *path, const char *needle)
{
    for (double end = now_s() + 30; now_s() < end; usleep(20 * 1000)) {
        char *text = read_file(path);
        if (text && strstr(text, needle))
            return text;
        free(text);
    }
    return NULL;
}

/* Waits (30 s at most) until path holds needle, else fails with what the file last held. */
static void expect_in_file(const char *path, const char *needle, const char *what)
{
    char *text = await_text(path, needle);
    if (!text) {
        char *last = read_file(path);
        ck_abort_msg("%s: %s never held %s; it holds %s", what, path, needle,
                     last ? last : "(nothing)");
    }
    free(text);
}

#define SILU_CALLS(n)                                                                              \
    "\"op\": \"silu_and_mul\", \"impl_id\": \"reference.c\", \"device\": \"cpu\", \"dtype\": "     \
    "\"f32\", \"calls\": " #n ","

static ino_t inode_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_ino;
}

/* Nothing this process wrote to stderr (redirected to err) is the counters' table. */
static void assert_no_table(const char *err)
{
    fflush(stderr);
    char *text = read_file(err);
    ck_assert_msg(!text || !strstr(text, "fldispatch stats"), "%s", text);
    free(text);
}

START_TEST(interval_with_a_bad_value_is_a_configuration_error)
{
    static const char *const bad[] = {"soon", "-1", "0.05", "86401", "inf", "nan", "1s", "0x"};
    setup(NULL);
    setenv("VLLM_FL_STATS_FILE", "/dev/null", 1);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("VLLM_FL_STATS_INTERVAL", bad[i], 1);
        ck_assert_int_eq(fld_reload(), FLD_ECONFIG); /* a failed init is retried by a reload */
        char expect[64];
        snprintf(expect, sizeof expect, "VLLM_FL_STATS_INTERVAL: invalid value '%s'", bad[i]);
        ck_assert_contains(fld_last_error(), expect);
        ck_assert_contains(fld_last_error(), "from 0.1 to 86400");
    }
    /* Without a file there is nothing to rewrite: an error, not an interval that does nothing. */
    unsetenv("VLLM_FL_STATS_FILE");
    setenv("VLLM_FL_STATS", "1", 1);
    setenv("VLLM_FL_STATS_INTERVAL", " 5 ", 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG); /* a failed init is retried by a reload */
    ck_assert_contains(fld_last_error(), "VLLM_FL_STATS_INTERVAL: ' 5 ' asks to rewrite the files");
    ck_assert_contains(fld_last_error(), "set VLLM_FL_STATS_FILE or VLLM_FL_TRACE");
    /* Nothing applied: the interval in force is still none. */
    ck_assert(fld__stats_interval() == 0.0);
    /* 0 and blank are off, file or not. */
    setenv("VLLM_FL_STATS_INTERVAL", "0", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    setenv("VLLM_FL_STATS_INTERVAL", "  ", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert(fld__stats_interval() == 0.0);
}
END_TEST

/*
 * With an interval the file follows the counts while the process runs, is
 * rewritten only when they changed (the rename gives every write a new
 * inode), and never prints the table. A reload can start it.
 */
START_TEST(interval_rewrites_the_file_while_the_process_runs)
{
    setup(NULL);
    char path[PATH_MAX], err[PATH_MAX];
    snprintf(path, sizeof path, "%s/stats.json", tmp_dir);
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    usleep(300 * 1000);
    ck_assert_msg(access(path, F_OK) != 0, "written with no interval set");
    ck_assert(fld__stats_interval() == 0.0);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert(fld__stats_interval() == 0.1); /* in force for the Python package's collector */
    ck_assert_ptr_nonnull(freopen(err, "w", stderr));
    expect_in_file(path, SILU_CALLS(3), "3 calls");
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    expect_in_file(path, SILU_CALLS(7), "7 calls");
    /* A write whose snapshot came before the last calls writes again once: a
     * flush waits for a write under way and leaves nothing unwritten. */
    ck_assert_int_eq(fld_stats_flush(), FLD_OK);
    ino_t written = inode_of(path);
    usleep(600 * 1000); /* six intervals with nothing counted */
    ck_assert_msg(inode_of(path) == written, "rewritten with nothing new");
    assert_no_table(err);
}
END_TEST

/* Counts for the table on stderr and a trace: the interval rewrites the trace alone, and the
 * table waits for the exit. */
START_TEST(interval_rewrites_the_trace_beside_the_table)
{
    setup(NULL);
    char trace[PATH_MAX], err[PATH_MAX];
    snprintf(trace, sizeof trace, "%s/trace.json", tmp_dir);
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    setenv("VLLM_FL_STATS", "1", 1);
    setenv("VLLM_FL_TRACE", trace, 1);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_ptr_nonnull(freopen(err, "w", stderr));
    ck_assert_int_eq(fld_init(), FLD_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    /* a decision, 3 calls */
    expect_in_file(trace, "\"otherData\": {\"events\": 4,", "a trace of 4 events");
    ck_assert_int_eq(call_silu(), FLD_OK);
    expect_in_file(trace, "\"otherData\": {\"events\": 5,", "a trace of 5 events");
    assert_no_table(err);
}
END_TEST

/*
 * A full trace grows no more: the interval rewrites the counters' file as
 * calls go on, and leaves the trace's (tens of megabytes) as it is.
 */
START_TEST(interval_leaves_a_full_trace_alone)
{
    setup(NULL);
    char stats[PATH_MAX], trace[PATH_MAX];
    snprintf(stats, sizeof stats, "%s/stats.json", tmp_dir);
    snprintf(trace, sizeof trace, "%s/trace.json", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", stats, 1);
    setenv("VLLM_FL_TRACE", trace, 1);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    for (int i = 0; i < FLD_TRACE_CAP + 1000; i++)
        ck_assert_int_eq(call_silu(), FLD_OK);
    char full[64], calls[64];
    snprintf(full, sizeof full, "\"otherData\": {\"events\": %d,", FLD_TRACE_CAP);
    expect_in_file(trace, full, "the full trace");
    /* A write that began before the last calls may still be under way: a flush
     * waits for it and writes the full trace itself. */
    ck_assert_int_eq(fld_stats_flush(), FLD_OK);
    ino_t trace_written = inode_of(trace);
    for (int round = 1; round <= 3; round++) {
        for (int i = 0; i < 100; i++)
            ck_assert_int_eq(call_silu(), FLD_OK);
        snprintf(calls, sizeof calls, "\"calls\": %d,", FLD_TRACE_CAP + 1000 + 100 * round);
        expect_in_file(stats, calls, "the counters' file");
    }
    ck_assert_msg(inode_of(trace) == trace_written, "the full trace was written again");
}
END_TEST

/* A write that fails is reported once, tried again each interval, and done once it can be. */
START_TEST(interval_reports_a_failed_write_once)
{
    setup(NULL);
    char dir[PATH_MAX], path[PATH_MAX + 16], err[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/later", tmp_dir);
    snprintf(path, sizeof path, "%s/stats.json", dir);
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", path, 1);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_ptr_nonnull(freopen(err, "w", stderr));
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(call_silu(), FLD_OK);
    usleep(800 * 1000); /* eight intervals, each a failed write */
    fflush(stderr);
    char *text = read_file(err);
    ck_assert_ptr_nonnull(text);
    ck_assert_msg(tt_count_of(text, "VLLM_FL_STATS_FILE: cannot write '") == 1, "%s", text);
    ck_assert_contains(text, "(VLLM_FL_STATS_INTERVAL: tried again every 0.1 s)");
    free(text);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    expect_in_file(path, SILU_CALLS(1), "the file once its directory exists");
}
END_TEST

/*
 * A forked child of a threaded process starts its own writer thread, which
 * ThreadSanitizer refuses ("starting new threads after multi-threaded fork
 * is not supported"; with die_after_fork=0 it loses track of thread ids):
 * the tests of writers in forked children are left out of its build. The
 * writer's races with the calls are checked there by
 * interval_rewrites_the_file_while_the_process_runs.
 */
#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

#ifndef UNDER_TSAN
/*
 * A process that is killed keeps what its last interval wrote, and a forked
 * child starts a writer of its own for its own counts ("%p" names its file).
 */
START_TEST(interval_survives_a_kill_and_runs_in_forked_children)
{
    setup(NULL);
    char pattern[PATH_MAX + 16];
    snprintf(pattern, sizeof pattern, "%s/stats-%%p.json", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", pattern, 1);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(call_silu(), FLD_OK);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/stats-%d.json", tmp_dir, (int)getpid());
    /* The writer has written once: its thread is past its start (see fork_between_bursts). */
    expect_in_file(path, SILU_CALLS(1), "the parent's file before the fork");
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int i = 0; i < 5; i++)
            if (call_silu() != FLD_OK)
                _exit(2);
        for (;;)
            pause();
    }
    snprintf(path, sizeof path, "%s/stats-%d.json", tmp_dir, (int)pid);
    char *text = await_text(path, SILU_CALLS(5));
    kill(pid, SIGKILL);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(text, "the child's file %s never held its 5 calls", path);
    free(text);
    text = read_file(path);
    ck_assert_msg(text && strstr(text, SILU_CALLS(5)), "%s", text ? text : "(no file)");
    free(text);
    snprintf(path, sizeof path, "%s/stats-%d.json", tmp_dir, (int)getpid());
    expect_in_file(path, SILU_CALLS(1), "the parent's file");
}
END_TEST

static const char *next_line(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl ? nl + 1 : NULL;
}

/* Whether text is one whole trace as fld__trace_write() lays it out: a line per event. */
static bool whole_trace(const char *text, char *why, size_t size)
{
    static const char head[] = "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
    if (strncmp(text, head, sizeof head - 1) != 0 || tt_count_of(text, "displayTimeUnit") != 1) {
        snprintf(why, size, "not one header");
        return false;
    }
    size_t lines = 0;
    const char *line = text + sizeof head - 1;
    for (; line && strncmp(line, "  {\"name\": ", 11) == 0; line = next_line(line))
        lines++;
    size_t events = 0;
    if (!line || sscanf(line, "], \"otherData\": {\"events\": %zu,", &events) != 1) {
        snprintf(why, size, "after %zu event lines: '%.80s'", lines, line ? line : "(end)");
        return false;
    }
    if (lines != events + 1 || next_line(line) == NULL || *next_line(line) != '\0') {
        snprintf(why, size, "%zu event lines for %zu events and the process name", lines, events);
        return false;
    }
    return true;
}

static _Atomic int forking_done, bursts_called;
static pthread_mutex_t burst_lock = PTHREAD_MUTEX_INITIALIZER;

/* Calls in bursts of 100 every 10 ms: the trace keeps growing (so that each interval rewrites
 * it) without filling up for half a minute (a full one is no longer rewritten). */
static void *call_until_done(void *arg)
{
    (void)arg;
    while (!atomic_load(&forking_done)) {
        pthread_mutex_lock(&burst_lock);
        for (int i = 0; i < 100; i++)
            if (call_silu() != FLD_OK) {
                pthread_mutex_unlock(&burst_lock);
                atomic_fetch_add(&bursts_called, 1); /* ends the test's wait */
                return (void *)1;
            }
        pthread_mutex_unlock(&burst_lock);
        atomic_fetch_add(&bursts_called, 1);
        usleep(10 * 1000);
    }
    return NULL;
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/*
 * GCC 12's AddressSanitizer takes none of its allocator's locks around
 * fork() (glibc's malloc does): a child forked while another thread was in
 * malloc() or free() inherits that lock held, and its first allocation
 * (starting its writer thread) waits forever. A thread allocates as it
 * starts, too, so the forks begin once the caller has called, and in that
 * build its bursts pause while the test forks; the writes still overlap the
 * calls.
 */
static pid_t fork_between_bursts(void)
{
#ifdef UNDER_ASAN
    pthread_mutex_lock(&burst_lock);
    pid_t pid = fork();
    if (pid != 0)
        pthread_mutex_unlock(&burst_lock);
    return pid;
#else
    return fork();
#endif
}

/*
 * fork() while the writer is in the middle of a large trace: the child must
 * not inherit the half-written temporary file, whose buffer its exit() would
 * flush into the parent's trace. Children fork for two seconds at least, and
 * until three rewrites of the growing trace were seen, as a server starting
 * workers would, and leave through exit(); each of the parent's writes stays
 * one whole trace, and its counters' file ends with every call.
 */
START_TEST(fork_waits_for_a_periodic_write)
{
    setup(NULL);
    char pattern[PATH_MAX + 16], path[PATH_MAX + 32], stats_pattern[PATH_MAX + 16];
    snprintf(pattern, sizeof pattern, "%s/trace-%%p.json", tmp_dir);
    snprintf(path, sizeof path, "%s/trace-%d.json", tmp_dir, (int)getpid());
    setenv("VLLM_FL_TRACE", pattern, 1);
    snprintf(stats_pattern, sizeof stats_pattern, "%s/stats-%%p.json", tmp_dir);
    setenv("VLLM_FL_STATS_FILE", stats_pattern, 1);
    setenv("VLLM_FL_STATS_INTERVAL", "0.1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    for (int i = 0; i < 40000; i++) /* about 6 MB of trace: each write takes a while */
        ck_assert_int_eq(call_silu(), FLD_OK);
    atomic_store(&forking_done, 0);
    pthread_t caller;
    atomic_store(&bursts_called, 0);
    ck_assert_int_eq(pthread_create(&caller, NULL, call_until_done, NULL), 0);
    while (atomic_load(&bursts_called) == 0)
        usleep(1000);
    int children = 0, checked = 0;
    ino_t seen = 0;
    char why[256] = "";
    bool whole = true;
    double start = now_s();
    for (; whole && now_s() < start + 30 && (now_s() < start + 2 || checked < 3); children++) {
        pid_t pid = fork_between_bursts();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
            exit(0);
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
        /* Each new file the writer renamed into place since the last look. */
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        struct stat st;
        ck_assert_int_eq(fstat(fileno(f), &st), 0);
        if (st.st_ino == seen) {
            fclose(f);
            continue;
        }
        seen = st.st_ino;
        char *text = tt_read_all(f); /* closes f */
        whole = whole_trace(text, why, sizeof why);
        checked++;
        free(text);
    }
    atomic_store(&forking_done, 1);
    void *rc;
    pthread_join(caller, &rc);
    ck_assert_ptr_null(rc);
    ck_assert_msg(whole, "after %d forks, file %d: %s", children, checked, why);
    ck_assert_msg(checked >= 3, "only %d files written in %.0f s", checked, now_s() - start);
    /* Calls went on during every write: once they stop, the counters' file
     * catches up with all of them (a write never takes later calls as written). */
    char calls[64];
    snprintf(calls, sizeof calls, "\"calls\": %llu,",
             (unsigned long long)entry_of("silu_and_mul", "reference.c").calls);
    snprintf(path, sizeof path, "%s/stats-%d.json", tmp_dir, (int)getpid());
    expect_in_file(path, calls, "the parent's file after the forks");
}
END_TEST
#endif /* UNDER_TSAN */

static Suite *stats_suite(void)
{
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("stats");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, off_by_default);
    tcase_add_test(tc, flush_then_exit_writes_once);
    tcase_add_test(tc, flush_changed_writes_only_what_changed);
    tcase_add_test(tc, counts_calls);
    tcase_add_test(tc, time_mode_times);
    tcase_add_test(tc, switched_on_at_run_time_counts_cached_calls);
    tcase_add_test(tc, failures_and_fallbacks);
    tcase_add_test(tc, invalid_value_is_a_configuration_error);
    tcase_add_test(tc, variables_are_known);
    tcase_add_test(tc, table_on_stderr_at_exit);
    tcase_add_test(tc, json_file_with_pid_and_rank);
    tcase_add_test(tc, trace_as_chrome_json);
    tcase_add_test(tc, record_from_outside);
    tcase_add_test(tc, threads_count_exactly);
    tcase_add_test(tc, planted_link_at_stats_file_is_not_followed);
    tcase_add_test(tc, planted_link_at_trace_is_not_followed);
    tcase_add_test(tc, link_planted_by_another_user_is_not_followed);
    tcase_add_test(tc, failed_stats_write_keeps_previous_file);
    tcase_add_test(tc, failed_trace_write_keeps_previous_file);
    tcase_add_test(tc, table_escapes_control_characters);
    tcase_add_test(tc, huge_rank_is_refused);
    tcase_add_test(tc, trace_resets_and_writes_race_with_calls);
    tcase_add_test(tc, interval_with_a_bad_value_is_a_configuration_error);
    tcase_add_test(tc, interval_rewrites_the_file_while_the_process_runs);
    tcase_add_test(tc, interval_reports_a_failed_write_once);
    tcase_add_test(tc, interval_leaves_a_full_trace_alone);
    tcase_add_test(tc, interval_rewrites_the_trace_beside_the_table);
#ifndef UNDER_TSAN
    tcase_add_test(tc, interval_survives_a_kill_and_runs_in_forked_children);
    tcase_add_test(tc, fork_waits_for_a_periodic_write);
#endif
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_stats", stats_suite());
}
