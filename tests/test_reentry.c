/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/base/reentry.c: plugin code that calls back into the library while the
 * host loads it. The fixtures of tests/reentry/ call fld_init, fld_reload,
 * fld_resolve, fld_load_plugin (on their own file) or fld_shutdown from
 * register_builtins, fld_init from a static constructor, and fld_resolve
 * from is_available; they note what the nested call returned in
 * $FLD_REENTRY_LOG ("<plugin> <pid> <function> <status> <message>").
 *
 * What must hold: the nested call fails cleanly with FLD_ESTATE naming the
 * function, the plugin and the stage; the plugin is rejected and nothing it
 * registered stays; other plugins load; later calls work; `fldispatch
 * doctor` says what the host says; with VLLM_FL_PLUGIN_PROBE=1 the plugin
 * is probed once (no probe starts a probe of its own) and rejected, not
 * called hung. Before the fix, the first case was a double free (ASan).
 *
 * Each test runs in its own process (CK_FORK) and sets its environment
 * before the first library call.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* The register_builtins fixtures: file stem, the function it calls. */
static const struct {
    const char *name, *function;
} nested[] = {
    {"reentry_init", "fld_init"},         {"reentry_reload", "fld_reload"},
    {"reentry_resolve", "fld_resolve"},   {"reentry_load_plugin", "fld_load_plugin"},
    {"reentry_shutdown", "fld_shutdown"},
    /* the process-wide settings, the application's (FIRST_SETTING on) */
    {"reentry_log_level", "fld_log_set_level"},
    {"reentry_log_callback", "fld_log_set_callback"},
    {"reentry_stats_enable", "fld_stats_enable"},
    {"reentry_stats_write", "fld_stats_write"},
    {"reentry_stats_record", "fld_stats_record"},
    {"reentry_set_stream", "fld_set_stream"},
};
#define FIRST_SETTING 5

static char log_path[PATH_MAX];

/* A private plugin directory with the named fixture and tests/plugins' "good". */
static const char *setup_dir(const char *fixture, char *fixture_path)
{
    static char dir[PATH_MAX];
    const char *base = tt_make_tmpdir("reentry");
    tt_make_subdir(dir, base, "plugins", 0700);
    if (fixture)
        tt_install_fixture(fixture_path, dir, "reentry", fixture);
    tt_install_fixture(NULL, dir, "plugins", "good");
    snprintf(log_path, sizeof log_path, "%s/nested.log", base);
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    setenv("FLD_REENTRY_LOG", log_path, 1);
    return dir;
}

static char *read_log(void)
{
    FILE *f = fopen(log_path, "r");
    return f ? tt_read_all(f) : NULL;
}

/* The lines of the log, counted, and the status of the first. */
static int log_lines(const char *text, int *first_status, char *first_message, size_t size)
{
    int n = 0;
    for (const char *line = text; line && *line; n++) {
        if (n == 0) {
            char plugin[64], fn[64];
            long pid;
            int consumed = 0;
            ck_assert_int_eq(
                sscanf(line, "%63s %ld %63s %d %n", plugin, &pid, fn, first_status, &consumed), 4);
            const char *end = strchr(line, '\n');
            snprintf(first_message, size, "%.*s",
                     (int)((end ? end : line + strlen(line)) - line - consumed), line + consumed);
        }
        const char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

struct seen {
    const char *name;
    bool found;
    fld_plugin_status status;
    char reason[1024];
};

static int find_plugin(const fld_plugin_info *p, void *user)
{
    struct seen *s = user;
    if (strcmp(p->name, s->name) == 0) {
        s->found = true;
        s->status = p->status;
        snprintf(s->reason, sizeof s->reason, "%s", p->reason);
    }
    return 0;
}

static struct seen plugin_state(const char *name)
{
    struct seen s = {.name = name};
    ck_assert_int_eq(fld_foreach_plugin(find_plugin, &s), FLD_OK);
    ck_assert_msg(s.found, "plugin %s is not listed", name);
    return s;
}

static int find_impl(const fld_impl_info *i, void *user)
{
    return strcmp(i->impl_id, (const char *)user) == 0;
}

static bool impl_registered(const char *impl_id)
{
    return fld_foreach_impl(find_impl, (void *)impl_id) == 1;
}

/* What the host must say about fixture k after loading it. */
static void assert_rejected_cleanly(int k)
{
    const char *name = nested[k].name, *fn = nested[k].function;
    struct seen s = plugin_state(name);
    ck_assert_msg(s.status == FLD_PLUGIN_REJECTED, "%s: status %d (%s)", name, s.status, s.reason);
    char want[160];
    snprintf(want, sizeof want, "register_builtins called %s()", fn);
    ck_assert_contains(s.reason, want);
    char impl_id[96];
    snprintf(impl_id, sizeof impl_id, "vendor.%s", name);
    ck_assert_msg(!impl_registered(impl_id), "%s stayed registered", impl_id);
    /* The nested call itself saw FLD_ESTATE naming the function, the plugin and the stage. */
    char *text = read_log();
    ck_assert_ptr_nonnull(text);
    int status = 0;
    char message[1200];
    ck_assert_int_ge(log_lines(text, &status, message, sizeof message), 1);
    ck_assert_int_eq(status, FLD_ESTATE);
    snprintf(want, sizeof want, "%s: called by plugin '%s' from register_builtins", fn, name);
    ck_assert_contains(message, want);
    free(text);
    /* Nothing else disturbed. */
    ck_assert_int_eq(plugin_state("good").status, FLD_PLUGIN_LOADED);
}

START_TEST(nested_call_during_first_init)
{
    char path[PATH_MAX];
    setup_dir(nested[_i].name, path);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    assert_rejected_cleanly(_i);
    /* Later calls are fine: resolve, reload, loading it again, shutdown and init. */
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_load_plugin(path), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "register_builtins called");
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_rejected_cleanly(_i);
}
END_TEST

START_TEST(nested_call_during_a_later_load)
{
    char path[PATH_MAX];
    setup_dir(NULL, NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    tt_install_fixture(path, getenv("VLLM_FL_PLUGIN_DIR"), "reentry", nested[_i].name);
    ck_assert_int_eq(fld_load_plugin(path), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "register_builtins called");
    assert_rejected_cleanly(_i);
    /* fld_reload() rescans the directory and meets the plugin again: same verdict. */
    ck_assert_int_eq(fld_reload(), FLD_OK);
    assert_rejected_cleanly(_i);
}
END_TEST

START_TEST(constructor_calls_init)
{
    setup_dir("reentry_ctor", NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct seen s = plugin_state("fld-reentry_ctor.so");
    ck_assert_int_eq(s.status, FLD_PLUGIN_REJECTED);
    ck_assert_contains(s.reason, "a static constructor (dlopen) called fld_init()");
    char *text = read_log();
    int status = 0;
    char message[1200];
    ck_assert_int_eq(log_lines(text, &status, message, sizeof message), 1);
    ck_assert_int_eq(status, FLD_ESTATE);
    ck_assert_contains(message, "fld_init: called by plugin '");
    free(text);
    ck_assert(!impl_registered("vendor.reentry_ctor"));
    ck_assert_int_eq(plugin_state("good").status, FLD_PLUGIN_LOADED);
}
END_TEST

START_TEST(availability_check_calls_resolve)
{
    setup_dir("reentry_available", NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    /* The nested fld_resolve would evaluate this very check again: refused instead. */
    const char *id = NULL;
    ck_assert_msg(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id) == FLD_OK, "%s",
                  fld_last_error());
    ck_assert_str_ne(id, "vendor.reentry_available");
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    bool found = false;
    for (size_t i = 0; i < res->n_rejected; i++)
        if (strcmp(res->rejected[i].impl_id, "vendor.reentry_available") == 0) {
            found = true;
            ck_assert_contains(res->rejected[i].reason, "called back into the library");
        }
    ck_assert(found);
    fld_resolution_free(res);
    char *text = read_log();
    int status = 0;
    char message[1200];
    ck_assert_int_eq(log_lines(text, &status, message, sizeof message), 1);
    ck_assert_int_eq(status, FLD_ESTATE);
    ck_assert_contains(message,
                       "fld_resolve: called by plugin 'reentry_available' from is_available");
    free(text);
}
END_TEST

START_TEST(doctor_says_what_the_host_says)
{
    char path[PATH_MAX];
    setup_dir(nested[_i].name, path);
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("doctor", path));
    char want[160];
    snprintf(want, sizeof want, "register_builtins called %s()", nested[_i].function);
    ck_assert_msg(line_with(r.out, "rejected", path, want), "doctor output:\n" CLIP "\n" CLIP,
                  r.out, r.err);
    tt_tool_run_free(&r);
}
END_TEST

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(probe_probes_once_and_rejects)
{
    char path[PATH_MAX];
    setup_dir(nested[_i].name, path);
    char cache[PATH_MAX];
    tt_make_subdir(cache, tt_make_tmpdir("reentry-cache"), "cache", 0700);
    setenv("XDG_CACHE_HOME", cache, 1);
    setenv("VLLM_FL_PLUGIN_PROBE", "1", 1);
    setenv("VLLM_FL_PLUGIN_PROBE_TIMEOUT", "20", 1);
    double t0 = now();
    ck_assert_int_eq(fld_init(), FLD_OK);
    double took = now() - t0;
    struct seen s = plugin_state(nested[_i].name);
    ck_assert_int_eq(s.status, FLD_PLUGIN_REJECTED);
    ck_assert_contains(s.reason, "register_builtins called");
    ck_assert_msg(!strstr(s.reason, "hung"), "%s", s.reason);
    ck_assert_msg(took < 15.0 * tt_time_scale(), "fld_init took %.1f s", took);
    /* Loaded twice: once in the probe child, once in this process; each
     * refused its nested call. */
    char *text = read_log();
    ck_assert_ptr_nonnull(text);
    int status = 0, here = 0;
    char message[1200];
    int n = log_lines(text, &status, message, sizeof message);
    char mine[32];
    snprintf(mine, sizeof mine, " %ld ", (long)getpid());
    here = tt_count_of(text, mine);
    ck_assert_msg(n == 2 && here == 1, "loads (all, here) = (%d, %d):\n%s", n, here, text);
    ck_assert_int_eq(tt_count_of(text, " -9 "), 2); /* FLD_ESTATE both times */
    free(text);
}
END_TEST

/* ---- the application's callbacks and the device hooks ----------------------- */

/* What a callback of the application calls back in with, by index. */
static const char *const app_calls[] = {"fld_reload",   "fld_load_plugin", "fld_policy_set",
                                        "fld_shutdown", "fld_init",        "fld_policy_reset"};
#define N_APP_CALLS ((int)(sizeof app_calls / sizeof app_calls[0]))

static struct {
    int which;             /* the index in app_calls */
    char plugin[PATH_MAX]; /* fld_load_plugin's argument */
    int made;              /* nested calls made */
    int first_status;
    char first_message[1200];
} nested_app;

static int call_back_in(void)
{
    switch (nested_app.which) {
    case 0:
        return fld_reload();
    case 1:
        return fld_load_plugin(nested_app.plugin);
    case 2:
        return fld_policy_set("prefer", "reference");
    case 3:
        return fld_shutdown();
    case 4:
        return fld_init();
    default:
        return fld_policy_reset();
    }
}

static void note_app_call(int rc)
{
    if (nested_app.made++ == 0) {
        nested_app.first_status = rc;
        snprintf(nested_app.first_message, sizeof nested_app.first_message, "%s", fld_last_error());
    }
}

/* A log callback that calls back into the library on every line. */
static void reentering_log(int level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
    note_app_call(call_back_in());
}

/* The nested call was refused and blamed on the callback, never on a plugin. */
static void assert_app_call_refused(const char *callback)
{
    const char *fn = app_calls[nested_app.which];
    ck_assert_msg(nested_app.made >= 1, "%s: the callback never ran", fn);
    ck_assert_msg(nested_app.first_status == FLD_ESTATE, "%s from the %s returned %d: %s", fn,
                  callback, nested_app.first_status, nested_app.first_message);
    char want[160];
    snprintf(want, sizeof want, "%s: called from the application's %s", fn, callback);
    ck_assert_contains(nested_app.first_message, want);
    ck_assert_msg(!strstr(nested_app.first_message, "plugin '"), "%s", nested_app.first_message);
}

/* The library is initialised and works: nothing was shut down or re-initialised under it. */
static void assert_library_intact(void)
{
    ck_assert_int_eq(plugin_state("good").status, FLD_PLUGIN_LOADED);
    ck_assert_int_eq(plugin_state("fld-abi_major.so").status, FLD_PLUGIN_REJECTED);
    const char *id = NULL;
    ck_assert_msg(fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id) == FLD_OK,
                  "%s", fld_last_error());
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[4] = {0};
    int64_t xs[2] = {1, 8}, os[2] = {1, 4};
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xs};
    DLTensor to = {
        .data = out, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = os};
    ck_assert_msg(fld_silu_and_mul(&to, &tx) == FLD_OK, "%s", fld_last_error());
    /* A policy set from the callback did not stay. */
    char policy[512];
    fld_policy_describe(policy, sizeof policy);
    ck_assert_msg(!strstr(policy, "prefer=reference"), "%s", policy);
}

START_TEST(log_callback_calls_in_during_init)
{
    const char *dir = setup_dir(NULL, NULL);
    snprintf(nested_app.plugin, sizeof nested_app.plugin, "%s/fld-good.so", dir);
    tt_install_fixture(NULL, dir, "plugins", "abi_major");
    nested_app.which = _i;
    fld_log_set_callback(reentering_log, NULL);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    fld_log_set_callback(NULL, NULL);
    assert_app_call_refused("log callback");
    assert_library_intact();
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
}
END_TEST

START_TEST(log_callback_calls_in_during_reload)
{
    const char *dir = setup_dir(NULL, NULL);
    snprintf(nested_app.plugin, sizeof nested_app.plugin, "%s/fld-good.so", dir);
    nested_app.which = _i;
    ck_assert_int_eq(fld_init(), FLD_OK);
    tt_install_fixture(NULL, dir, "plugins", "abi_major");
    fld_log_set_callback(reentering_log, NULL);
    ck_assert_msg(fld_reload() == FLD_OK, "%s", fld_last_error());
    fld_log_set_callback(NULL, NULL);
    assert_app_call_refused("log callback");
    assert_library_intact();
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
}
END_TEST

START_TEST(log_callback_inside_register_builtins_does_not_reject_the_plugin)
{
    setup_dir("reentry_logs", NULL);
    nested_app.which = _i;
    fld_log_set_callback(reentering_log, NULL);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    fld_log_set_callback(NULL, NULL);
    assert_app_call_refused("log callback");
    struct seen s = plugin_state("reentry_logs");
    ck_assert_msg(s.status == FLD_PLUGIN_LOADED, "status %d (%s)", s.status, s.reason);
    ck_assert(impl_registered("vendor.reentry_logs"));
    ck_assert_int_eq(plugin_state("good").status, FLD_PLUGIN_LOADED);
}
END_TEST

static int reentering_plugin_walk(const fld_plugin_info *p, void *user)
{
    (void)p;
    (void)user;
    note_app_call(call_back_in());
    return 0;
}

static int reentering_impl_walk(const fld_impl_info *i, void *user)
{
    (void)i;
    (void)user;
    note_app_call(call_back_in());
    return 0;
}

START_TEST(foreach_callbacks_call_in)
{
    const char *dir = setup_dir(NULL, NULL);
    snprintf(nested_app.plugin, sizeof nested_app.plugin, "%s/fld-good.so", dir);
    tt_install_fixture(NULL, dir, "plugins", "abi_major");
    ck_assert_int_eq(fld_init(), FLD_OK);
    /* fld_load_plugin: a plugin not loaded yet, whose registration would
     * grow the lists the walk is reading. */
    tt_install_fixture(nested_app.plugin, dir, "plugins", "unavailable");
    nested_app.which = _i;
    ck_assert_int_eq(fld_foreach_plugin(reentering_plugin_walk, NULL), FLD_OK);
    assert_app_call_refused("fld_foreach_plugin() callback");
    nested_app.made = 0;
    ck_assert_int_eq(fld_foreach_impl(reentering_impl_walk, NULL), FLD_OK);
    assert_app_call_refused("fld_foreach_impl() callback");
    assert_library_intact();
}
END_TEST

START_TEST(device_hook_calls_in)
{
    setup_dir("reentry_hook", NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    void *p = NULL;
    DLDevice cuda = {kDLCUDA, 0};
    ck_assert_msg(fld_device_alloc(cuda, 64, &p) == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(fld_device_free(cuda, p), FLD_OK);
    char *text = read_log();
    ck_assert_ptr_nonnull(text);
    int status = 0;
    char message[1200];
    ck_assert_int_eq(log_lines(text, &status, message, sizeof message), 1);
    ck_assert_int_eq(status, FLD_ESTATE);
    ck_assert_contains(message, "fld_reload: called by plugin 'reentry_hook' from its 'alloc' "
                                "device hook");
    free(text);
    ck_assert_int_eq(plugin_state("reentry_hook").status, FLD_PLUGIN_LOADED);
}
END_TEST

static int setting_log_lines;

static void count_setting_log(int level, const char *message, void *user)
{
    (void)level;
    (void)user;
    if (strstr(message, "after the load"))
        setting_log_lines++;
}

/* A refused setting changed nothing: the application's level, callback, counters and stream. */
START_TEST(setting_from_register_builtins_changes_nothing)
{
    setup_dir(nested[_i].name, NULL);
    ck_assert_int_eq(fld_log_set_level(FLD_LOG_INFO), FLD_OK);
    ck_assert_int_eq(fld_log_set_callback(count_setting_log, NULL), FLD_OK);
    ck_assert_int_eq(fld_stats_enable(FLD_STATS_CALLS), FLD_OK);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    assert_rejected_cleanly(_i);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_INFO);
    fld_log(FLD_LOG_WARNING, "a line after the load");
    ck_assert_int_eq(setting_log_lines, 1);
    ck_assert_int_eq(fld_stats_mode(), FLD_STATS_CALLS);
    size_t count = 1;
    ck_assert_int_eq(fld_stats_snapshot(NULL, 0, &count), FLD_OK);
    ck_assert_uint_eq(count, 0);
    char stats_file[PATH_MAX + 16];
    snprintf(stats_file, sizeof stats_file, "%s.stats.json", log_path);
    ck_assert_msg(access(stats_file, F_OK) != 0, "%s was written", stats_file);
    ck_assert_ptr_null(fld_get_stream(FLD_DEVICE_CUDA));
    fld_log_set_callback(NULL, NULL);
}
END_TEST

static Suite *reentry_suite(void)
{
    Suite *s = suite_create("reentry");
    const int n = (int)(sizeof nested / sizeof nested[0]);
    TCase *tc = tcase_create("host");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, nested_call_during_first_init, 0, n);
    tcase_add_loop_test(tc, nested_call_during_a_later_load, 0, n);
    tcase_add_test(tc, constructor_calls_init);
    tcase_add_test(tc, availability_check_calls_resolve);
    tcase_add_loop_test(tc, log_callback_calls_in_during_init, 0, N_APP_CALLS);
    tcase_add_loop_test(tc, log_callback_calls_in_during_reload, 0, N_APP_CALLS);
    tcase_add_loop_test(tc, log_callback_inside_register_builtins_does_not_reject_the_plugin, 0,
                        N_APP_CALLS);
    tcase_add_loop_test(tc, foreach_callbacks_call_in, 0, N_APP_CALLS);
    tcase_add_test(tc, device_hook_calls_in);
    tcase_add_loop_test(tc, setting_from_register_builtins_changes_nothing, FIRST_SETTING, n);
    suite_add_tcase(s, tc);

    tc = tcase_create("probe");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, doctor_says_what_the_host_says, 0, n);
    tcase_add_loop_test(tc, probe_probes_once_and_rejects, 0, n);
    suite_add_tcase(s, tc);
    return s;
}

/*
 * Under LeakSanitizer (GCC 12's runtime), the leak scan at a test's exit
 * crashes in its walk of dynamic TLS ("Tracer caught signal 11", a DTLS range
 * starting near 0) after this program's rounds of plugin loads and refused
 * re-entries. Not scanning thread-local storage only removes roots: it can
 * report more leaks, never hide one.
 */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "use_tls=0";
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_reentry", reentry_suite());
}
