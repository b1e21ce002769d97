/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Crash isolation: `fldispatch doctor` and VLLM_FL_PLUGIN_PROBE, tested with
 * the fixtures of tests/crash/ (plugins that segfault, abort, hang, exit or
 * crash in a constructor or an availability check, and a good one), built
 * into $FLD_BUILDDIR/tests/crash and copied into fresh private directories.
 *
 * The fixtures append "<plugin> <pid>" to $FLD_CRASH_COUNT_FILE whenever
 * their register_builtins (or constructor) starts, so a test can count how
 * often a plugin was loaded: in a probe child or in the test process.
 *
 * Each test runs in its own process (CK_FORK) and sets its environment
 * before the first library call.
 */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

#define CRASHERS "segv", "abort", "ctorcrash", "availcrash", "exit"

/* ---- files ------------------------------------------------------------------ */

/* A private plugin directory holding the named crash fixtures. */
static const char *plugin_dir(const char *const *names)
{
    static char dir[PATH_MAX];
    tt_make_subdir(dir, tt_make_tmpdir("doctor"), "plugins", 0700);
    for (; *names; names++) {
        char path[PATH_MAX];
        tt_install_fixture(path, dir, "crash", *names);
    }
    return dir;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    return tt_read_all(f);
}

/* How many lines "<plugin> <pid>" the fixtures wrote to the count file. */
static int loads_of(const char *count_file, const char *plugin)
{
    char *text = read_file(count_file);
    if (!text)
        return 0;
    char needle[64];
    snprintf(needle, sizeof needle, "%s ", plugin);
    int n = 0;
    for (char *line = text; line && *line;) {
        if (strncmp(line, needle, strlen(needle)) == 0)
            n++;
        char *nl = strchr(line, '\n');
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    return n;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the library's view ------------------------------------------------------ */

struct plugin_seen {
    const char *file; /* base name to look for, e.g. "fld-segv.so" */
    bool found;
    fld_plugin_status status;
    char reason[1024];
};

static int find_plugin(const fld_plugin_info *p, void *user)
{
    struct plugin_seen *s = user;
    const char *slash = strrchr(p->path, '/');
    if (slash && strcmp(slash + 1, s->file) == 0) {
        s->found = true;
        s->status = p->status;
        snprintf(s->reason, sizeof s->reason, "%s", p->reason ? p->reason : "");
    }
    return 0;
}

static struct plugin_seen plugin_state(const char *name)
{
    struct plugin_seen s = {0};
    static char file[96];
    snprintf(file, sizeof file, "fld-%s.so", name);
    s.file = file;
    ck_assert_int_eq(fld_foreach_plugin(find_plugin, &s), FLD_OK);
    ck_assert_msg(s.found, "plugin %s is not listed", file);
    return s;
}

static void assert_skipped(const char *name, const char *const *needles)
{
    struct plugin_seen s = plugin_state(name);
    ck_assert_msg(s.status == FLD_PLUGIN_REJECTED, "%s: status %d, expected rejected (%s)", name,
                  s.status, s.reason);
    for (; *needles; needles++)
        ck_assert_msg(strstr(s.reason, *needles), "%s: reason lacks '%s': %s", name, *needles,
                      s.reason);
}
#define assert_skipped_with(name, ...)                                                             \
    assert_skipped((name), (const char *const[]){__VA_ARGS__, NULL})

static void assert_loaded(const char *name)
{
    struct plugin_seen s = plugin_state(name);
    ck_assert_msg(s.status == FLD_PLUGIN_LOADED, "%s: status %d, not loaded: %s", name, s.status,
                  s.reason);
}

/* Rejections are logged as errors: expected here, and not worth reading. */
static void quiet(int level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
}

/* The probe environment: plugins of dir, the cache under cache_home, the
 * fixtures counting into count_file. */
static void probe_env(const char *dir, const char *cache_home, const char *count_file)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    setenv("VLLM_FL_PLUGIN_PROBE", "1", 1);
    setenv("VLLM_FL_PLUGIN_PROBE_TIMEOUT", "5", 1);
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
    fld_log_set_callback(quiet, NULL);
    unsetenv("FLD_PROBE_NO_EXEC");
    if (cache_home)
        setenv("XDG_CACHE_HOME", cache_home, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    setenv("FLD_CRASH_COUNT_FILE", count_file, 1);
}

static void cache_file_of(char *out, const char *cache_home)
{
    snprintf(out, PATH_MAX, "%s/fldispatch/plugin-probe.cache", cache_home);
}

/* ---- doctor --------------------------------------------------------------------- */

static void doctor(struct tt_tool_run *r, const char *count_file, const char *const *args)
{
    const char *env[] = {"VLLM_FL_LOG_LEVEL=ERROR", NULL, NULL};
    char count[PATH_MAX + 32];
    if (count_file) {
        snprintf(count, sizeof count, "FLD_CRASH_COUNT_FILE=%s", count_file);
        env[1] = count;
    }
    tt_tool_run(r, env, args);
}

/* The doctor's line for one plugin file: "<state> <path>: <what>". */
static const char *doctor_line(const struct tt_tool_run *r, const char *name, const char *state)
{
    char file[96];
    snprintf(file, sizeof file, "/fld-%s.so: ", name);
    const char *line = line_with(r->out, file);
    ck_assert_msg(line, "no line for %s:\n" CLIP "\nstderr:\n" CLIP, file, r->out, r->err);
    ck_assert_msg(strncmp(line, state, strlen(state)) == 0 && line[strlen(state)] == ' ',
                  "%s: expected state '%s': %s", name, state, line);
    return line;
}

struct crash_case {
    const char *fixture;
    const char *state;
    const char *what; /* in the line */
    const char *stage;
};

static const struct crash_case crash_cases[] = {
    {"segv", "crashed", "crashed with SIGSEGV (signal 11)", "during register_builtins"},
    {"abort", "crashed", "crashed with SIGABRT (signal 6)", "during register_builtins"},
    {"ctorcrash", "crashed", "crashed with SIGBUS (signal 7)", "during dlopen"},
    {"availcrash", "crashed", "crashed with SIGSEGV (signal 11)", "during the availability checks"},
    {"exit", "exited", "exited with status 3", "during register_builtins"},
};
#define N_CRASH_CASES (sizeof crash_cases / sizeof crash_cases[0])

START_TEST(doctor_reports_each_crasher)
{
    const struct crash_case *c = &crash_cases[_i];
    char path[PATH_MAX];
    tt_install_fixture(path, tt_make_tmpdir("doctor"), "crash", c->fixture);
    struct tt_tool_run r;
    doctor(&r, NULL, ARGS("doctor", path));
    assert_status(r, 1);
    const char *line = doctor_line(&r, c->fixture, c->state);
    ck_assert_msg(strstr(line, c->what) && strstr(line, c->stage), "%s: %s", c->fixture, line);
    char summary[64];
    snprintf(summary, sizeof summary, " 1 %s", c->state);
    ck_assert_msg(line_with(r.out, "Summary: 1 plugin file(s)", summary), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(doctor_json_reports_signal_and_stage)
{
    static const struct {
        const char *fixture, *state, *stage, *signal, *exit_status;
    } expect[] = {
        {"segv", "crashed", "register_builtins", "\"signal_name\": \"SIGSEGV\"", "null"},
        {"ctorcrash", "crashed", "dlopen", "\"signal_name\": \"SIGBUS\"", "null"},
        {"availcrash", "crashed", "availability", "\"signal\": 11", "null"},
        {"exit", "exited", "register_builtins", "\"signal\": null", "3"},
    };
    const char *dir = tt_make_tmpdir("doctor");
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        char path[PATH_MAX];
        tt_install_fixture(path, dir, "crash", expect[i].fixture);
        struct tt_tool_run r;
        doctor(&r, NULL, ARGS("doctor", "--json", path));
        assert_status(r, 1);
        ck_assert_msg(tt_json_valid(r.out), "invalid JSON:\n" CLIP, r.out);
        tt_assert_schema(r.out, "doctor");
        char want[256];
        snprintf(want, sizeof want, "\"status\": \"%s\"", expect[i].state);
        ck_assert_msg(strstr(r.out, want), "%s: no %s:\n" CLIP, expect[i].fixture, want, r.out);
        snprintf(want, sizeof want, "\"stage\": \"%s\"", expect[i].stage);
        ck_assert_msg(strstr(r.out, want), "%s: no %s:\n" CLIP, expect[i].fixture, want, r.out);
        ck_assert_msg(strstr(r.out, expect[i].signal), "%s: no %s:\n" CLIP, expect[i].fixture,
                      expect[i].signal, r.out);
        snprintf(want, sizeof want, "\"exit_status\": %s", expect[i].exit_status);
        ck_assert_msg(strstr(r.out, want), "%s: no %s:\n" CLIP, expect[i].fixture, want, r.out);
        ck_assert(strstr(r.out, "\"healthy\": false"));
        tt_tool_run_free(&r);
    }
}
END_TEST

START_TEST(doctor_timeout_kills_the_hung_group)
{
    const char *tmp = tt_make_tmpdir("doctor");
    char path[PATH_MAX], count[PATH_MAX];
    tt_install_fixture(path, tmp, "crash", "hang");
    snprintf(count, sizeof count, "%s/count", tmp);
    struct tt_tool_run r;
    double t0 = now();
    doctor(&r, count, ARGS("doctor", "--timeout", "1", path));
    double took = now() - t0;
    assert_status(r, 1);
    const char *line = doctor_line(&r, "hang", "hung");
    ck_assert_msg(strstr(line, "during register_builtins") && strstr(line, "within 1 s"), "%s",
                  line);
    ck_assert_msg(took >= 0.9 && took < 8 * tt_time_scale(), "doctor took %.2f s with --timeout 1",
                  took);
    tt_tool_run_free(&r);

    /* The grandchild the plugin forked is gone too (or a zombie of init). */
    char *text = read_file(count);
    ck_assert_msg(text, "the hang fixture did not run");
    const char *g = strstr(text, "hang-grandchild ");
    ck_assert_msg(g, "no grandchild line in:\n%s", text);
    long pid = strtol(g + strlen("hang-grandchild "), NULL, 10);
    free(text);
    bool gone = false;
    for (int i = 0; i < 200 && !gone; i++) {
        char stat_path[64], *st;
        snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", pid);
        st = read_file(stat_path);
        const char *close_paren = st ? strrchr(st, ')') : NULL;
        gone = !st || (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z');
        free(st);
        if (!gone)
            usleep(10000);
    }
    ck_assert_msg(gone, "the hang fixture's grandchild %ld still runs", pid);
}
END_TEST

START_TEST(doctor_reports_good_plugin_with_availability)
{
    const char *tmp = tt_make_tmpdir("doctor");
    char path[PATH_MAX], count[PATH_MAX];
    tt_install_fixture(path, tmp, "crash", "probegood");
    snprintf(count, sizeof count, "%s/count", tmp);
    struct tt_tool_run r;
    doctor(&r, count, ARGS("doctor", path));
    assert_status(r, 0);
    const char *line = doctor_line(&r, "probegood", "ok");
    ck_assert_msg(strstr(line, "probegood 1.0.0") &&
                      strstr(line, "2 implementation(s), 1 available"),
                  "%s", line);
    ck_assert(line_with(r.out, "silu_and_mul", "vendor.probegood", "available"));
    ck_assert(line_with(r.out, "rms_norm", "vendor.probegood",
                        "unavailable: probegood fixture: no such device"));
    ck_assert(line_with(r.out, "device cuda", "unavailable: probegood fixture: no such device"));
    ck_assert(line_with(r.out, "detail: probe fixture"));
    tt_tool_run_free(&r);
    /* Loaded once, in the child: the doctor itself never maps a plugin. */
    ck_assert_int_eq(loads_of(count, "probegood"), 1);
}
END_TEST

START_TEST(doctor_rejects_as_the_host_does)
{
    const char *tmp = tt_make_tmpdir("doctor");
    char bad_magic[PATH_MAX], open_file[PATH_MAX], count[PATH_MAX];
    tt_install_fixture(bad_magic, tmp, "plugins", "bad_magic");
    tt_install_fixture(open_file, tmp, "crash", "probegood");
    ck_assert_int_eq(chmod(open_file, 0666), 0);
    snprintf(count, sizeof count, "%s/count", tmp);
    struct tt_tool_run r;
    doctor(&r, count, ARGS("doctor", bad_magic, open_file));
    assert_status(r, 1); /* a plugin the host refuses is a fault of the installation */
    const char *line = doctor_line(&r, "bad_magic", "rejected");
    ck_assert_msg(strstr(line, "bad descriptor magic"), "%s", line);
    line = doctor_line(&r, "probegood", "rejected");
    ck_assert_msg(strstr(line, "writable by others"), "%s", line);
    ck_assert(line_with(r.out, "Summary: 2 plugin file(s)", "2 rejected"));
    tt_tool_run_free(&r);

    doctor(&r, count, ARGS("doctor", "--json", bad_magic));
    assert_status(r, 1);
    tt_assert_schema(r.out, "doctor");
    ck_assert(strstr(r.out, "\"status\": \"rejected\""));
    ck_assert(strstr(r.out, "\"healthy\": false"));
    ck_assert(strstr(r.out, "\"plugin_path\": null")); /* paths were given */
    ck_assert(strstr(r.out, "\"in_tree\": null"));     /* no descriptor was read */
    tt_tool_run_free(&r);
    /* A file the host would refuse is never loaded, not even in a child. */
    ck_assert_int_eq(loads_of(count, "probegood"), 0);
}
END_TEST

START_TEST(doctor_json_is_valid_for_all_fixtures)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", CRASHERS, "hang", NULL});
    char hang[PATH_MAX];
    snprintf(hang, sizeof hang, "%s/fld-hang.so", dir);
    struct tt_tool_run r;
    const char *env[] = {"VLLM_FL_LOG_LEVEL=ERROR", NULL, NULL};
    char plugdir[PATH_MAX + 32];
    snprintf(plugdir, sizeof plugdir, "VLLM_FL_PLUGIN_DIR=%s", dir);
    env[1] = plugdir;
    tt_tool_run(&r, env, ARGS("doctor", "--json", "--timeout=1"));
    assert_status(r, 1);
    ck_assert_msg(tt_json_valid(r.out), "invalid JSON:\n" CLIP, r.out);
    tt_assert_schema(r.out, "doctor");
    ck_assert_int_eq(tt_count_of(r.out, "\"path\": "), 7);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"crashed\""), 4);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"hung\""), 1);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"exited\""), 1);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"ok\""), 1);
    char plugin_path[PATH_MAX + 64];
    snprintf(plugin_path, sizeof plugin_path, "\"plugin_path\": [\n    \"%s\"", dir);
    ck_assert_msg(strstr(r.out, plugin_path), CLIP, r.out);
    ck_assert(strstr(r.out, "\"crashed\": 4"));
    ck_assert(strstr(r.out, hang));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(doctor_checks_the_search_path_and_modules)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", NULL});
    char extra[PATH_MAX];
    tt_install_fixture(extra, tt_make_tmpdir("doctor"), "crash", "segv");
    char plugdir[PATH_MAX + 32], modules[PATH_MAX + 32];
    snprintf(plugdir, sizeof plugdir, "VLLM_FL_PLUGIN_DIR=%s", dir);
    snprintf(modules, sizeof modules, "VLLM_FL_PLUGIN_MODULES=%s", extra);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(plugdir), ARGS("doctor"));
    assert_status(r, 0);
    doctor_line(&r, "probegood", "ok");
    ck_assert(line_with(r.out, "Plugin search path: ", dir));
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV(plugdir, modules), ARGS("doctor"));
    assert_status(r, 1);
    doctor_line(&r, "probegood", "ok");
    doctor_line(&r, "segv", "crashed");
    tt_tool_run_free(&r);
}
END_TEST

/* A directory and a file name with terminal escapes and a newline: escaped
 * on every line, never printed as raw bytes. */
START_TEST(doctor_escapes_names)
{
    char dir[PATH_MAX], good[PATH_MAX], to[PATH_MAX + 32], env[PATH_MAX + 32];
    tt_make_subdir(dir, tt_make_tmpdir("doctor-escape"), "\033]0;pwned\a\033[2J", 0755);
    tt_install_fixture(good, dir, "crash", "probegood");
    snprintf(to, sizeof to, "%s/fld-a\nb.so", dir);
    ck_assert_int_eq(rename(good, to), 0);
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s", dir);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(env), ARGS("doctor"));
    assert_status(r, 0);
    for (const char *p = r.out; *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20 || *p == '\n',
                      "doctor printed the raw byte 0x%02x:\n" CLIP, (unsigned char)*p, r.out);
    ck_assert_msg(line_with(r.out, "Plugin search path: ", "/\\x1b]0;pwned\\x07\\x1b[2J"), CLIP,
                  r.out);
    ck_assert_msg(line_with(r.out, "ok ", "\\x1b[2J/fld-a\\x0ab.so: probegood"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(doctor_passes_the_in_tree_plugins)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("doctor"));
    assert_status(r, 0);
    doctor_line(&r, "cpu", "ok");
    ck_assert(line_with(r.out, "Summary:", "0 rejected", "0 crashed", "0 hung", "0 exited"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("doctor", "--json"));
    assert_status(r, 0);
    tt_assert_schema(r.out, "doctor");
    ck_assert(strstr(r.out, "\"healthy\": true"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(doctor_usage_errors)
{
    static const char *const bad[][3] = {
        {"--timeout", "0", NULL},  {"--timeout", "abc", NULL},
        {"--timeout", "-1", NULL}, {"--timeout", NULL, NULL},
        {"--bogus", NULL, NULL},   {"/nonexistent/fld-x.so", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, ARGS("doctor", bad[i][0], bad[i][1]));
        assert_status(r, 2);
        ck_assert_msg(strstr(r.err, "fldispatch doctor"), "%s: " CLIP, bad[i][0], r.err);
        tt_tool_run_free(&r);
    }
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("doctor", "--help"));
    assert_status(r, 0);
    ck_assert(line_with(r.out, "Usage: fldispatch doctor"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- VLLM_FL_PLUGIN_PROBE ------------------------------------------------------- */

START_TEST(probe_skips_crashers_and_loads_the_good_one)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", CRASHERS, NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX], cache[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    probe_env(dir, cache_home, count);
    ck_assert_int_eq(fld_init(), FLD_OK);

    assert_loaded("probegood");
    assert_skipped_with("segv", "crashed with SIGSEGV", "during register_builtins", "when probed",
                        cache_home);
    assert_skipped_with("abort", "crashed with SIGABRT", "during register_builtins");
    assert_skipped_with("ctorcrash", "crashed with SIGBUS", "during dlopen");
    assert_skipped_with("availcrash", "crashed with SIGSEGV", "availability");
    assert_skipped_with("exit", "exited with status 3", "during register_builtins");
    /* The good plugin serves. */
    const char *impl = NULL;
    ck_assert_int_eq(
        fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, (DLDataType){kDLFloat, 32, 1}, &impl),
        FLD_OK);
    ck_assert_str_eq(impl, "vendor.probegood");

    /* Probed once each, and only the good one loaded in process too. */
    ck_assert_int_eq(loads_of(count, "probegood"), 2);
    ck_assert_int_eq(loads_of(count, "segv"), 1);
    ck_assert_int_eq(loads_of(count, "ctorcrash"), 1);

    /* The cache: private, one line per file with its verdict. */
    cache_file_of(cache, cache_home);
    struct stat st;
    ck_assert_msg(stat(cache, &st) == 0, "no cache file %s", cache);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    char cache_dir[PATH_MAX];
    snprintf(cache_dir, sizeof cache_dir, "%s/fldispatch", cache_home);
    ck_assert_int_eq(stat(cache_dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    char *text = read_file(cache);
    ck_assert(text);
    ck_assert_msg(strncmp(text, "fldispatch-plugin-probe-cache 1\n", 32) == 0, "%s", text);
    ck_assert_msg(line_with(text, "\tcrashed\t", "/fld-segv.so"), "%s", text);
    ck_assert_msg(line_with(text, "\texited\t", "/fld-exit.so"), "%s", text);
    ck_assert_msg(line_with(text, "\tok\t", "/fld-probegood.so"), "%s", text);
    ck_assert_int_eq(tt_count_of(text, "\n"), 7);
    free(text);
    fld_shutdown();
}
END_TEST

START_TEST(probe_skips_a_hung_plugin)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", "hang", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    probe_env(dir, cache_home, count);
    setenv("VLLM_FL_PLUGIN_PROBE_TIMEOUT", "1", 1);
    double t0 = now();
    ck_assert_int_eq(fld_init(), FLD_OK);
    double took = now() - t0;
    ck_assert_msg(took >= 0.9 && took < 8 * tt_time_scale(),
                  "init took %.2f s with a 1 s probe timeout", took);
    assert_skipped_with("hang", "hung during register_builtins", "within 1 s");
    assert_loaded("probegood");
    fld_shutdown();

    /* Remembered: the second start does not probe it again (one load in all). */
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("hang", "hung during register_builtins", "cached in");
    ck_assert_int_eq(loads_of(count, "hang"), 1);
    fld_shutdown();
}
END_TEST

START_TEST(probe_cache_spares_the_second_start)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", "segv", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    probe_env(dir, cache_home, count);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(loads_of(count, "probegood"), 2);
    ck_assert_int_eq(loads_of(count, "segv"), 1);
    fld_shutdown();

    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_loaded("probegood");
    assert_skipped_with("segv", "crashed with SIGSEGV", "during register_builtins",
                        "when probed (cached in", cache_home);
    /* Neither was probed again: the good one was only loaded. */
    ck_assert_int_eq(loads_of(count, "probegood"), 3);
    ck_assert_int_eq(loads_of(count, "segv"), 1);

    /* A reload looks at the rejected file again, from the cache. */
    ck_assert_int_eq(fld_reload(), FLD_OK);
    assert_skipped_with("segv", "cached in");
    ck_assert_int_eq(loads_of(count, "segv"), 1);
    fld_shutdown();
}
END_TEST

START_TEST(probe_again_when_the_file_changes)
{
    const char *dir = plugin_dir((const char *const[]){"segv", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX], segv[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    snprintf(segv, sizeof segv, "%s/fld-segv.so", dir);
    probe_env(dir, cache_home, count);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 1);

    /* A new modification time (same size): probed again. */
    struct timespec times[2] = {{0, UTIME_OMIT}, {1000000000, 123456789}};
    ck_assert_int_eq(utimensat(AT_FDCWD, segv, times, 0), 0);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("segv", "out of process", "remembered in");
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 2);

    /* Only the nanoseconds differ: still a change. */
    times[1].tv_nsec = 123456788;
    ck_assert_int_eq(utimensat(AT_FDCWD, segv, times, 0), 0);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 3);

    /* A new size with the old time: probed again. */
    int fd = open(segv, O_WRONLY | O_APPEND);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "\0", 1), 1);
    close(fd);
    ck_assert_int_eq(utimensat(AT_FDCWD, segv, times, 0), 0);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 4);

    /* Unchanged since: not probed. */
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 4);
}
END_TEST

START_TEST(probe_tolerates_a_corrupt_cache)
{
    static const char *const garbage[] = {
        "not a cache at all\n\x01\x02\xff",
        "fldispatch-plugin-probe-cache 1\n0.1.0\tx\t1.2\t3\tcrashed\twhat\t/p\nshort line\n",
        "",
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        const char *dir = plugin_dir((const char *const[]){"probegood", "segv", NULL});
        const char *tmp = tt_make_tmpdir("doctor");
        char cache_home[PATH_MAX], count[PATH_MAX], cache[PATH_MAX], cdir[PATH_MAX];
        snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
        snprintf(count, sizeof count, "%s/count", tmp);
        mkdir(cache_home, 0700);
        tt_make_subdir(cdir, cache_home, "fldispatch", 0700);
        cache_file_of(cache, cache_home);
        FILE *f = fopen(cache, "w");
        ck_assert(f);
        fputs(garbage[i], f);
        fclose(f);
        chmod(cache, 0600);

        probe_env(dir, cache_home, count);
        ck_assert_int_eq(fld_init(), FLD_OK);
        assert_loaded("probegood");
        assert_skipped_with("segv", "crashed with SIGSEGV", "remembered in");
        fld_shutdown();
        char *text = read_file(cache);
        ck_assert(text);
        ck_assert_msg(strncmp(text, "fldispatch-plugin-probe-cache 1\n", 32) == 0, "%s", text);
        ck_assert_msg(!strstr(text, "short line") && !strstr(text, "not a cache"), "%s", text);
        ck_assert_msg(line_with(text, "\tcrashed\t", "/fld-segv.so"), "%s", text);
        free(text);
        ck_assert_int_eq(loads_of(count, "segv"), 1);
    }
}
END_TEST

START_TEST(probe_refuses_an_unsafe_cache_directory)
{
    const char *dir = plugin_dir((const char *const[]){"segv", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX], cache[PATH_MAX], cdir[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    mkdir(cache_home, 0700);
    tt_make_subdir(cdir, cache_home, "fldispatch", 0777);
    cache_file_of(cache, cache_home);
    probe_env(dir, cache_home, count);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("segv", "crashed with SIGSEGV", "refused");
    fld_shutdown();
    struct stat st;
    ck_assert_msg(stat(cache, &st) != 0, "a cache was written into a world-writable directory");

    /* Owned by another user (only root can arrange it). */
    if (geteuid() == 0) {
        ck_assert_int_eq(chmod(cdir, 0700), 0);
        ck_assert_int_eq(chown(cdir, 65534, 65534), 0);
        ck_assert_int_eq(fld_init(), FLD_OK);
        assert_skipped_with("segv", "crashed with SIGSEGV", "refused", "owned by uid 65534");
        fld_shutdown();
        ck_assert(stat(cache, &st) != 0);
        /* A cache file of another user in our own directory is replaced. */
        ck_assert_int_eq(chown(cdir, 0, 0), 0);
        FILE *f = fopen(cache, "w");
        ck_assert(f);
        fputs("fldispatch-plugin-probe-cache 1\n", f);
        fclose(f);
        ck_assert_int_eq(chown(cache, 65534, 65534), 0);
        ck_assert_int_eq(fld_init(), FLD_OK);
        fld_shutdown();
        ck_assert_int_eq(stat(cache, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
    }
    ck_assert_int_eq(loads_of(count, "segv"), geteuid() == 0 ? 3 : 1);
}
END_TEST

START_TEST(probe_without_home_probes_every_time)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", "segv", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char count[PATH_MAX];
    snprintf(count, sizeof count, "%s/count", tmp);
    probe_env(dir, NULL, count);
    unsetenv("HOME");
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_loaded("probegood");
    assert_skipped_with("segv", "crashed with SIGSEGV", "no probe cache");
    fld_shutdown();
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "segv"), 2);
    ck_assert_int_eq(loads_of(count, "probegood"), 4);

    /* A relative XDG_CACHE_HOME is ignored (XDG rule) like an unset one. */
    setenv("XDG_CACHE_HOME", "relative/cache", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("segv", "no probe cache");
    fld_shutdown();
}
END_TEST

START_TEST(probe_cache_defaults_to_home)
{
    const char *dir = plugin_dir((const char *const[]){"segv", NULL});
    const char *home = tt_make_tmpdir("doctor");
    char count[PATH_MAX], cache[PATH_MAX];
    snprintf(count, sizeof count, "%s/count", home);
    probe_env(dir, NULL, count);
    setenv("HOME", home, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_shutdown();
    snprintf(cache, sizeof cache, "%s/.cache/fldispatch/plugin-probe.cache", home);
    char *text = read_file(cache);
    ck_assert_msg(text && strstr(text, "/fld-segv.so"), "no cache at %s", cache);
    free(text);
}
END_TEST

START_TEST(probe_is_off_by_default)
{
    static const char *const values[] = {NULL, "0", "false"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        const char *dir = plugin_dir((const char *const[]){"probegood", NULL});
        const char *tmp = tt_make_tmpdir("doctor");
        char count[PATH_MAX], cache_home[PATH_MAX];
        snprintf(count, sizeof count, "%s/count", tmp);
        snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
        probe_env(dir, cache_home, count);
        if (values[i])
            setenv("VLLM_FL_PLUGIN_PROBE", values[i], 1);
        else
            unsetenv("VLLM_FL_PLUGIN_PROBE");
        ck_assert_int_eq(fld_init(), FLD_OK);
        assert_loaded("probegood");
        fld_shutdown();
        ck_assert_int_eq(loads_of(count, "probegood"), 1);
        struct stat st;
        ck_assert(stat(cache_home, &st) != 0);
    }
}
END_TEST

START_TEST(probe_invalid_values_fail_safe)
{
    const char *dir = plugin_dir((const char *const[]){"segv", NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char count[PATH_MAX], cache_home[PATH_MAX];
    snprintf(count, sizeof count, "%s/count", tmp);
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    probe_env(dir, cache_home, count);
    /* An unreadable switch probes (the safe side); a bad timeout uses the default. */
    setenv("VLLM_FL_PLUGIN_PROBE", "maybe", 1);
    setenv("VLLM_FL_PLUGIN_PROBE_TIMEOUT", "soon", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("segv", "crashed with SIGSEGV");
    fld_shutdown();
}
END_TEST

START_TEST(probe_guards_fld_load_plugin_and_modules)
{
    const char *dir = plugin_dir((const char *const[]){"probegood", NULL});
    const char *other = tt_make_tmpdir("doctor");
    char segv[PATH_MAX], exit_path[PATH_MAX], count[PATH_MAX], cache_home[PATH_MAX];
    tt_install_fixture(segv, other, "crash", "segv");
    tt_install_fixture(exit_path, other, "crash", "exit");
    snprintf(count, sizeof count, "%s/count", other);
    snprintf(cache_home, sizeof cache_home, "%s/cache", other);
    probe_env(dir, cache_home, count);
    setenv("VLLM_FL_PLUGIN_MODULES", exit_path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_skipped_with("exit", "exited with status 3");
    ck_assert_int_eq(fld_load_plugin(segv), FLD_EPLUGIN);
    ck_assert_msg(strstr(fld_last_error(), "crashed with SIGSEGV"), "%s", fld_last_error());
    assert_skipped_with("segv", "crashed with SIGSEGV", "remembered in");
    fld_shutdown();
    /* fld_load_plugin's verdict went to the cache as well. */
    char cache[PATH_MAX];
    cache_file_of(cache, cache_home);
    char *text = read_file(cache);
    ck_assert_msg(text && line_with(text, "\tcrashed\t", "/fld-segv.so") &&
                      line_with(text, "\texited\t", "/fld-exit.so"),
                  "%s", text ? text : "(no cache)");
    free(text);
}
END_TEST

START_TEST(probe_by_fork_without_the_helper)
{
    /* FLD_PROBE_NO_EXEC: the fallback used when the tool is not installed
     * next to the library. exit() in the child must not run this process's
     * exit handlers (they would remove the test's directories). */
    const char *dir = plugin_dir((const char *const[]){"probegood", CRASHERS, NULL});
    const char *tmp = tt_make_tmpdir("doctor");
    char cache_home[PATH_MAX], count[PATH_MAX];
    snprintf(cache_home, sizeof cache_home, "%s/cache", tmp);
    snprintf(count, sizeof count, "%s/count", tmp);
    probe_env(dir, cache_home, count);
    setenv("FLD_PROBE_NO_EXEC", "1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_loaded("probegood");
    assert_skipped_with("segv", "crashed with SIGSEGV", "during register_builtins");
    assert_skipped_with("ctorcrash", "crashed with SIGBUS", "during dlopen");
    assert_skipped_with("exit", "exited with status 3");
    struct stat st;
    ck_assert_msg(stat(dir, &st) == 0, "the plugin directory was removed by the exit fixture");
    fld_shutdown();
    ck_assert_int_eq(loads_of(count, "probegood"), 2);
}
END_TEST

static _Atomic bool stop_callers;

/* Keeps calling into the library while the main thread probes. */
static void *caller(void *arg)
{
    long *calls = arg;
    const DLDataType f32 = {kDLFloat, 32, 1};
    while (!atomic_load(&stop_callers)) {
        const char *impl = NULL;
        if (fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, f32, &impl) == FLD_OK && impl &&
            strcmp(impl, "vendor.probegood") == 0)
            (*calls)++;
    }
    return NULL;
}

START_TEST(probe_while_other_threads_call)
{
    /* Probing spawns helpers from a process whose other threads are busy in
     * the library (ThreadSanitizer runs check the locking). */
    const char *dir = plugin_dir((const char *const[]){"probegood", NULL});
    const char *other = tt_make_tmpdir("doctor");
    char segv[PATH_MAX], count[PATH_MAX], cache_home[PATH_MAX];
    tt_install_fixture(segv, other, "crash", "segv");
    snprintf(count, sizeof count, "%s/count", other);
    snprintf(cache_home, sizeof cache_home, "%s/cache", other);
    probe_env(dir, cache_home, count);
    ck_assert_int_eq(fld_init(), FLD_OK);
    pthread_t threads[2];
    long calls[2] = {0, 0};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&threads[i], NULL, caller, &calls[i]), 0);
    ck_assert_int_eq(fld_load_plugin(segv), FLD_EPLUGIN);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_load_plugin(segv), FLD_EPLUGIN);
    ck_assert_msg(strstr(fld_last_error(), "cached in"), "%s", fld_last_error());
    atomic_store(&stop_callers, true);
    for (int i = 0; i < 2; i++)
        pthread_join(threads[i], NULL);
    ck_assert_msg(calls[0] > 0 && calls[1] > 0, "callers made %ld and %ld calls", calls[0],
                  calls[1]);
    ck_assert_int_eq(loads_of(count, "segv"), 1);
    ck_assert_int_eq(loads_of(count, "probegood"), 2);
    fld_shutdown();
}
END_TEST

static Suite *doctor_suite(void)
{
    Suite *s = suite_create("doctor");
    TCase *t = tcase_create("doctor");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, doctor_reports_each_crasher, 0, (int)N_CRASH_CASES);
    tcase_add_test(t, doctor_json_reports_signal_and_stage);
    tcase_add_test(t, doctor_timeout_kills_the_hung_group);
    tcase_add_test(t, doctor_reports_good_plugin_with_availability);
    tcase_add_test(t, doctor_rejects_as_the_host_does);
    tcase_add_test(t, doctor_json_is_valid_for_all_fixtures);
    tcase_add_test(t, doctor_checks_the_search_path_and_modules);
    tcase_add_test(t, doctor_escapes_names);
    tcase_add_test(t, doctor_passes_the_in_tree_plugins);
    tcase_add_test(t, doctor_usage_errors);
    suite_add_tcase(s, t);

    TCase *p = tcase_create("probe");
    tcase_set_timeout(p, 60);
    tcase_add_test(p, probe_skips_crashers_and_loads_the_good_one);
    tcase_add_test(p, probe_skips_a_hung_plugin);
    tcase_add_test(p, probe_cache_spares_the_second_start);
    tcase_add_test(p, probe_again_when_the_file_changes);
    tcase_add_test(p, probe_tolerates_a_corrupt_cache);
    tcase_add_test(p, probe_refuses_an_unsafe_cache_directory);
    tcase_add_test(p, probe_without_home_probes_every_time);
    tcase_add_test(p, probe_cache_defaults_to_home);
    tcase_add_test(p, probe_is_off_by_default);
    tcase_add_test(p, probe_invalid_values_fail_safe);
    tcase_add_test(p, probe_guards_fld_load_plugin_and_modules);
    tcase_add_test(p, probe_by_fork_without_the_helper);
    tcase_add_test(p, probe_while_other_threads_call);
    suite_add_tcase(s, p);
    return s;
}

int main(void)
{
    /* probe_by_fork_without_the_helper: a probe child that ran this
     * process's exit handlers would remove the test's directories. */
    tt_tmpdirs_removed_by_children();
    return tt_run_suite(doctor_suite());
}
