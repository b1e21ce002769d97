/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugin discovery, tested with real shared objects: the fixtures of
 * tests/plugins/ (built into $FLD_BUILDDIR/tests/plugins) are copied into
 * fresh directories and loaded through VLLM_FL_PLUGIN_DIR,
 * VLLM_FL_PLUGIN_MODULES and fld_load_plugin(). Each test runs in its own
 * process (CK_FORK), so each one starts with an uninitialised library and
 * sets its environment first.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/build.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/tool.h"

/* Layout of the "good_echo" op's arguments (tests/plugins/good.c). */
typedef struct good_echo_args {
    int value;
} good_echo_args;

/* Every fixture of tests/plugins/, in reverse name order so that creation
 * order (and likely readdir order) differs from the sorted load order. */
static const char *const all_fixtures[] = {
    "vendor_missing", "unavailable",   "row_pair", "register_silent", "register_fails",
    "null_fn",        "no_descriptor", "good",     "failing",         "dup_impl",
    "bad_name",       "bad_magic",     "abi_old",  "abi_minor",       "abi_major",
};
#define N_FIXTURES (sizeof(all_fixtures) / sizeof(all_fixtures[0]))

/* ------------------------------------------------------------------------ */
/* Environment and files                                                    */
/* ------------------------------------------------------------------------ */

static void use_plugin_dirs(const char *dirs)
{
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", dirs, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
}

static void init_ok(void)
{
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s: %s", fld_strerror(rc), fld_last_error());
}

/* ------------------------------------------------------------------------ */
/* Log capture                                                              */
/* ------------------------------------------------------------------------ */

#define MAX_LOG_LINES 512
static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int level;
    char text[512];
} log_lines[MAX_LOG_LINES];
static int n_log_lines;

static void capture_log(int level, const char *message, void *user)
{
    (void)user;
    pthread_mutex_lock(&log_mutex);
    if (n_log_lines < MAX_LOG_LINES) {
        log_lines[n_log_lines].level = level;
        snprintf(log_lines[n_log_lines].text, sizeof log_lines[0].text, "%s", message);
        n_log_lines++;
    }
    pthread_mutex_unlock(&log_mutex);
    if (getenv("FLD_TEST_VERBOSE") != NULL)
        fprintf(stderr, "[log %d] %s\n", level, message);
}

static int count_log(int level, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&log_mutex);
    for (int i = 0; i < n_log_lines; i++)
        if (log_lines[i].level == level && strstr(log_lines[i].text, needle) != NULL)
            n++;
    pthread_mutex_unlock(&log_mutex);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Snapshots of fld_foreach_plugin / fld_foreach_impl                       */
/* ------------------------------------------------------------------------ */

struct plugin_rec {
    char name[128];
    char path[PATH_MAX];
    char version[64];
    char reason[1024];
    char detail[256];
    unsigned abi_major, abi_minor;
    bool in_tree;
    fld_plugin_status status;
    size_t n_impls;
};

struct plugin_snap {
    size_t n;
    struct plugin_rec r[64];
};

static struct plugin_snap plugins;

static int collect_plugin(const fld_plugin_info *info, void *user)
{
    struct plugin_snap *s = user;
    ck_assert_msg(s->n < sizeof s->r / sizeof s->r[0], "too many plugin records");
    struct plugin_rec *r = &s->r[s->n++];
    ck_assert_ptr_nonnull(info->name);
    ck_assert_ptr_nonnull(info->path);
    ck_assert_ptr_nonnull(info->version);
    ck_assert_ptr_nonnull(info->reason);
    ck_assert_ptr_nonnull(info->detail);
    snprintf(r->detail, sizeof r->detail, "%s", info->detail);
    snprintf(r->name, sizeof r->name, "%s", info->name);
    snprintf(r->path, sizeof r->path, "%s", info->path);
    snprintf(r->version, sizeof r->version, "%s", info->version);
    snprintf(r->reason, sizeof r->reason, "%s", info->reason);
    r->abi_major = info->abi_major;
    r->abi_minor = info->abi_minor;
    r->in_tree = info->in_tree;
    r->status = info->status;
    r->n_impls = info->n_impls;
    return 0;
}

static const struct plugin_snap *snap_plugins(void)
{
    plugins.n = 0;
    ck_assert_int_eq(fld_foreach_plugin(collect_plugin, &plugins), 0);
    return &plugins;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static const char *status_name(fld_plugin_status st)
{
    switch (st) {
    case FLD_PLUGIN_LOADED:
        return "LOADED";
    case FLD_PLUGIN_UNAVAILABLE:
        return "UNAVAILABLE";
    case FLD_PLUGIN_REJECTED:
        return "REJECTED";
    case FLD_PLUGIN_SKIPPED:
        return "SKIPPED";
    }
    return "?";
}

static size_t count_by_path(const struct plugin_snap *s, const char *path)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->r[i].path, path) == 0)
            n++;
    return n;
}

static const struct plugin_rec *find_by_path(const struct plugin_snap *s, const char *path)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->r[i].path, path) == 0)
            return &s->r[i];
    return NULL;
}

/* The record of file fld-<fixture>.so, wherever it was loaded from. */
static const struct plugin_rec *find_by_fixture(const struct plugin_snap *s, const char *fixture)
{
    char file[256];
    snprintf(file, sizeof file, "fld-%s.so", fixture);
    const struct plugin_rec *found = NULL;
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(base_name(s->r[i].path), file) == 0) {
            ck_assert_msg(found == NULL, "two records for %s: %s and %s", file, found->path,
                          s->r[i].path);
            found = &s->r[i];
        }
    }
    return found;
}

static const struct plugin_rec *find_by_name(const struct plugin_snap *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->r[i].name, name) == 0)
            return &s->r[i];
    return NULL;
}

static bool plugin_loaded(const char *name)
{
    const struct plugin_snap *s = snap_plugins();
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->r[i].name, name) == 0 &&
            (s->r[i].status == FLD_PLUGIN_LOADED || s->r[i].status == FLD_PLUGIN_UNAVAILABLE))
            return true;
    return false;
}

static void expect_status(const struct plugin_rec *r, const char *what, fld_plugin_status st,
                          const char *reason_part)
{
    ck_assert_msg(r != NULL, "%s: no plugin record", what);
    ck_assert_msg(r->status == st, "%s (%s): status %s, expected %s (reason: '%s')", what, r->path,
                  status_name(r->status), status_name(st), r->reason);
    if (reason_part == NULL || reason_part[0] == '\0')
        ck_assert_msg(r->reason[0] == '\0', "%s: reason '%s', expected none", what, r->reason);
    else
        ck_assert_msg(strstr(r->reason, reason_part) != NULL,
                      "%s: reason '%s' does not contain '%s'", what, r->reason, reason_part);
}

struct impl_rec {
    char op[64];
    char impl_id[128];
    char plugin[128];
    char kind[16];
    bool in_tree;
    bool available;
    char unavailable_reason[256];
};

struct impl_snap {
    size_t n;
    struct impl_rec r[256];
};

static struct impl_snap impls;

static int collect_impl(const fld_impl_info *info, void *user)
{
    struct impl_snap *s = user;
    ck_assert_msg(s->n < sizeof s->r / sizeof s->r[0], "too many impl records");
    struct impl_rec *r = &s->r[s->n++];
    snprintf(r->op, sizeof r->op, "%s", info->op);
    snprintf(r->impl_id, sizeof r->impl_id, "%s", info->impl_id);
    snprintf(r->plugin, sizeof r->plugin, "%s", info->plugin ? info->plugin : "");
    snprintf(r->kind, sizeof r->kind, "%s", info->kind ? info->kind : "");
    r->in_tree = info->in_tree;
    r->available = info->available;
    snprintf(r->unavailable_reason, sizeof r->unavailable_reason, "%s",
             info->unavailable_reason ? info->unavailable_reason : "");
    return 0;
}

static const struct impl_snap *snap_impls(void)
{
    impls.n = 0;
    ck_assert_int_eq(fld_foreach_impl(collect_impl, &impls), 0);
    return &impls;
}

/* The impl record of (op, impl_id), or NULL; asserts there is at most one. */
static const struct impl_rec *find_impl(const struct impl_snap *s, const char *op,
                                        const char *impl_id)
{
    const struct impl_rec *found = NULL;
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->r[i].op, op) == 0 && strcmp(s->r[i].impl_id, impl_id) == 0) {
            ck_assert_msg(found == NULL, "impl %s registered twice for op %s", impl_id, op);
            found = &s->r[i];
        }
    }
    return found;
}

static size_t count_impl_id(const struct impl_snap *s, const char *impl_id)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->r[i].impl_id, impl_id) == 0)
            n++;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Calls                                                                    */
/* ------------------------------------------------------------------------ */

enum { ROWS = 3, D = 8 };

/* Runs silu_and_mul on a small [3, 16] float32 tensor and checks the numbers. */
static void check_silu_and_mul(void)
{
    float x[ROWS][2 * D], out[ROWS][D];
    int64_t xshape[2] = {ROWS, 2 * D}, oshape[2] = {ROWS, D};
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < 2 * D; i++)
            x[r][i] = (float)((r * 2 * D + i) % 11 - 5) * 0.37f;
    memset(out, 0, sizeof out);
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = xshape};
    DLTensor tout = {
        .data = out, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = oshape};
    int rc = fld_silu_and_mul(&tout, &tx);
    ck_assert_msg(rc == FLD_OK, "fld_silu_and_mul: %s: %s", fld_strerror(rc), fld_last_error());
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < D; i++) {
            double g = x[r][i], u = x[r][D + i];
            double want = g / (1.0 + exp(-g)) * u;
            ck_assert_msg(fabs(out[r][i] - want) <= 1e-5 + 1e-5 * fabs(want),
                          "silu_and_mul[%d][%d] = %.9g, expected %.9g", r, i, (double)out[r][i],
                          want);
        }
    }
}

static void expect_resolve(const char *op, const char *want)
{
    const char *id = NULL;
    int rc = fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
    ck_assert_msg(rc == FLD_OK, "fld_resolve(%s): %s: %s", op, fld_strerror(rc), fld_last_error());
    ck_assert_msg(id != NULL && strcmp(id, want) == 0, "fld_resolve(%s) = %s, expected %s", op,
                  id ? id : "(null)", want);
}

/* A counter a fixture exports, read through the library the host loaded. */
static long fixture_counter(const char *so_path, const char *symbol)
{
    void *h = dlopen(so_path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "%s is not loaded in this process", so_path);
    long (*fn)(void) = (long (*)(void))dlsym(h, symbol);
    ck_assert_msg(fn != NULL, "%s has no %s", so_path, symbol);
    long v = fn();
    dlclose(h);
    return v;
}

static const char *find_rejection(const fld_resolution *res, const char *impl_id)
{
    for (size_t i = 0; i < res->n_rejected; i++)
        if (strcmp(res->rejected[i].impl_id, impl_id) == 0)
            return res->rejected[i].reason;
    return NULL;
}

static bool is_candidate(const fld_resolution *res, const char *impl_id)
{
    for (size_t i = 0; i < res->n_candidates; i++)
        if (strcmp(res->candidates[i], impl_id) == 0)
            return true;
    return false;
}

static fld_resolution *explain_cpu_f32(const char *op)
{
    fld_resolution *res = NULL;
    int rc = fld_explain(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &res);
    ck_assert_msg(rc == FLD_OK && res != NULL, "fld_explain(%s): %s: %s", op, fld_strerror(rc),
                  fld_last_error());
    return res;
}

/* ------------------------------------------------------------------------ */
/* Every fixture at once                                                    */
/* ------------------------------------------------------------------------ */

static const char *const rejected_impl_ids[] = {
    "vendor.register_fails", "vendor.register_silent", "vendor.dup_impl",
    "vendor.vendor_missing", "vendor.null_fn",
};

START_TEST(test_every_fixture)
{
    const char *dir = tt_make_tmpdir("disc");
    for (size_t i = 0; i < N_FIXTURES; i++)
        tt_install_fixture(NULL, dir, "plugins", all_fixtures[i]);
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    char abi_major[128], abi_minor[128];
    snprintf(abi_major, sizeof abi_major, "ABI major %d is not supported",
             FLD_PLUGIN_ABI_MAJOR + 1);
    snprintf(abi_minor, sizeof abi_minor, "built for ABI %d.%d, newer than", FLD_PLUGIN_ABI_MAJOR,
             FLD_PLUGIN_ABI_MINOR + 5);
    const struct {
        const char *fixture;
        fld_plugin_status status;
        const char *reason;
        const char *reason2;
    } want[] = {
        {"good", FLD_PLUGIN_LOADED, "", NULL},
        {"failing", FLD_PLUGIN_LOADED, "", NULL},
        {"row_pair", FLD_PLUGIN_LOADED, "", NULL},
        {"no_descriptor", FLD_PLUGIN_REJECTED, "no plugin descriptor", "fld_plugin_entry"},
        {"abi_major", FLD_PLUGIN_REJECTED, abi_major, NULL},
        {"abi_minor", FLD_PLUGIN_REJECTED, abi_minor, NULL},
        /* ABI 1.0 (before device hooks) still loads on this 1.4 host. */
        {"abi_old", FLD_PLUGIN_LOADED, "", NULL},
        {"bad_magic", FLD_PLUGIN_REJECTED, "bad descriptor magic", NULL},
        {"bad_name", FLD_PLUGIN_REJECTED, "Bad Name!", NULL},
        {"register_fails", FLD_PLUGIN_REJECTED,
         "register_builtins failed: plugin 'register_fails' returned status -1 (invalid "
         "argument): register_fails fixture: giving up",
         NULL},
        {"register_silent", FLD_PLUGIN_REJECTED,
         "register_builtins failed: plugin 'register_silent' returned status -6 (implementation "
         "failed) without an error message",
         NULL},
        {"dup_impl", FLD_PLUGIN_REJECTED, "invalid implementation record",
         "duplicate impl_id 'vendor.dup_impl'"},
        {"vendor_missing", FLD_PLUGIN_REJECTED, "invalid implementation record",
         "requires a vendor name"},
        {"null_fn", FLD_PLUGIN_REJECTED, "fn is NULL", NULL},
        {"unavailable", FLD_PLUGIN_UNAVAILABLE, "unavailable fixture: no such device", NULL},
    };
    ck_assert_uint_eq(sizeof want / sizeof want[0], N_FIXTURES);

    const struct plugin_snap *s = snap_plugins();
    ck_assert_uint_eq(s->n, N_FIXTURES + 1); /* + the built-in reference */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct plugin_rec *r = find_by_fixture(s, want[i].fixture);
        expect_status(r, want[i].fixture, want[i].status, want[i].reason);
        if (want[i].reason2 != NULL)
            ck_assert_msg(strstr(r->reason, want[i].reason2) != NULL,
                          "%s: reason '%s' does not contain '%s'", want[i].fixture, r->reason,
                          want[i].reason2);
        if (want[i].status == FLD_PLUGIN_REJECTED)
            ck_assert_msg(r->n_impls == 0, "%s: rejected but n_impls = %zu", want[i].fixture,
                          r->n_impls);
    }
    const struct plugin_rec *old_abi = find_by_fixture(s, "abi_old");
    ck_assert_uint_eq(old_abi->abi_major, 1);
    ck_assert_uint_eq(old_abi->abi_minor, 0);
    ck_assert_uint_eq(old_abi->n_impls, 1);
    ck_assert_uint_eq(FLD_PLUGIN_ABI_MINOR, 4);
    const struct plugin_rec *good = find_by_fixture(s, "good");
    ck_assert_str_eq(good->name, "good");
    ck_assert_str_eq(good->version, "1.0.0");
    ck_assert_uint_eq(good->abi_major, FLD_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(good->abi_minor, FLD_PLUGIN_ABI_MINOR);
    ck_assert_uint_eq(good->n_impls, 2);
    /* The last fld_registry_set_detail() wins, on one line. */
    ck_assert_str_eq(good->detail, "mode good; two lines");
    ck_assert_str_eq(find_by_fixture(s, "register_fails")->detail, "");
    ck_assert_uint_eq(find_by_fixture(s, "unavailable")->n_impls, 2);

    /* Nothing of a rejected plugin is registered. */
    const struct impl_snap *is = snap_impls();
    for (size_t i = 0; i < sizeof rejected_impl_ids / sizeof rejected_impl_ids[0]; i++)
        ck_assert_msg(count_impl_id(is, rejected_impl_ids[i]) == 0,
                      "%s of a rejected plugin is registered", rejected_impl_ids[i]);
    for (size_t i = 0; i < is->n; i++)
        for (size_t j = 0; j < sizeof want / sizeof want[0]; j++)
            if (want[j].status == FLD_PLUGIN_REJECTED)
                ck_assert_msg(strcmp(is->r[i].plugin, want[j].fixture) != 0,
                              "impl %s of rejected plugin %s is registered", is->r[i].impl_id,
                              want[j].fixture);
    ck_assert_ptr_nonnull(find_impl(is, "silu_and_mul", "vendor.good"));
    ck_assert_ptr_nonnull(find_impl(is, "good_echo", "vendor.good"));
    ck_assert_ptr_nonnull(find_impl(is, "silu_and_mul", "vendor.failing"));
    const struct impl_rec *un = find_impl(is, "rms_norm", "vendor.unavailable");
    ck_assert_ptr_nonnull(un);
    ck_assert(!un->available);
    ck_assert_str_eq(un->unavailable_reason, "unavailable fixture: no such device");

    /* Selection sees the loaded impls, drops the unavailable ones with their
     * reason, and knows nothing of the rejected plugins. */
    fld_resolution *res = explain_cpu_f32("silu_and_mul");
    ck_assert_uint_eq(res->n_candidates, 3);
    ck_assert_str_eq(res->candidates[0], "vendor.failing");
    ck_assert_str_eq(res->candidates[1], "vendor.good");
    ck_assert_str_eq(res->candidates[2], "reference.c");
    const char *why = find_rejection(res, "vendor.unavailable");
    ck_assert_msg(why != NULL, "vendor.unavailable is not listed as rejected");
    ck_assert_msg(strstr(why, "unavailable: unavailable fixture: no such device") != NULL,
                  "vendor.unavailable rejected for '%s'", why);
    for (size_t i = 0; i < sizeof rejected_impl_ids / sizeof rejected_impl_ids[0]; i++) {
        ck_assert(!is_candidate(res, rejected_impl_ids[i]));
        ck_assert(find_rejection(res, rejected_impl_ids[i]) == NULL);
    }
    fld_resolution_free(res);
    res = explain_cpu_f32("rms_norm");
    ck_assert_uint_eq(res->n_candidates, 3); /* row_pair's two, then the reference */
    ck_assert_str_eq(res->candidates[0], "vendor.row_large");
    ck_assert_str_eq(res->candidates[1], "vendor.row_small");
    ck_assert_str_eq(res->candidates[2], "reference.c");
    ck_assert_ptr_nonnull(find_rejection(res, "vendor.unavailable"));
    fld_resolution_free(res);

    /* The host keeps serving: vendor.failing fails, vendor.good takes over. */
    char good_path[PATH_MAX], failing_path[PATH_MAX];
    snprintf(good_path, sizeof good_path, "%s/fld-good.so", dir);
    snprintf(failing_path, sizeof failing_path, "%s/fld-failing.so", dir);
    check_silu_and_mul();
    ck_assert_int_eq(fixture_counter(failing_path, "fld_fixture_failing_calls"), 1);
    ck_assert_int_eq(fixture_counter(good_path, "fld_fixture_good_calls"), 1);
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "'vendor.failing' failed"), 1);
    check_silu_and_mul();
    ck_assert_int_eq(fixture_counter(failing_path, "fld_fixture_failing_calls"), 1);
    ck_assert_int_eq(fixture_counter(good_path, "fld_fixture_good_calls"), 2);

    good_echo_args echo = {.value = 41};
    int rc = fld_call_by_name("good_echo", &echo);
    ck_assert_msg(rc == FLD_OK, "good_echo: %s: %s", fld_strerror(rc), fld_last_error());
    ck_assert_int_eq(echo.value, 42);
    fld_op op = fld_op_lookup("good_echo");
    ck_assert_ptr_nonnull(op);
    ck_assert_str_eq(fld_op_name(op), "good_echo");
    ck_assert_int_eq(fld_call(op, &echo), FLD_OK);
    ck_assert_int_eq(echo.value, 43);
}
END_TEST

START_TEST(test_sorted_load_order)
{
    const char *dir = tt_make_tmpdir("disc");
    for (size_t i = 0; i < N_FIXTURES; i++)
        tt_install_fixture(NULL, dir, "plugins", all_fixtures[i]);
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    ck_assert_uint_ge(s->n, 1);
    ck_assert_str_eq(s->r[0].name, "reference");
    ck_assert_str_eq(s->r[0].path, "(built-in)");
    const char *prev = NULL;
    size_t files = 0;
    for (size_t i = 1; i < s->n; i++) {
        const char *b = base_name(s->r[i].path);
        ck_assert_msg(strncmp(s->r[i].path, dir, strlen(dir)) == 0, "unexpected plugin %s",
                      s->r[i].path);
        if (prev != NULL)
            ck_assert_msg(strcmp(prev, b) < 0, "plugin %s reported after %s", b, prev);
        prev = b;
        files++;
    }
    ck_assert_uint_eq(files, N_FIXTURES);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* File and directory checks                                                */
/* ------------------------------------------------------------------------ */

START_TEST(test_world_writable_file)
{
    const char *dir = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture_mode(path, dir, "plugins", "good", 0666);
    tt_install_fixture(NULL, dir, "plugins", "failing");
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, path), "world-writable fld-good.so", FLD_PLUGIN_REJECTED,
                  "writable by others");
    expect_status(find_by_fixture(s, "failing"), "fld-failing.so", FLD_PLUGIN_LOADED, "");
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 0);
    ck_assert_ptr_null(fld_op_lookup("good_echo"));
}
END_TEST

START_TEST(test_world_writable_dir)
{
    const char *top = tt_make_tmpdir("disc");
    char dir[PATH_MAX], path[PATH_MAX];
    tt_make_subdir(dir, top, "open", 0777);
    tt_install_fixture(path, dir, "plugins", "good");
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    /* Either the file is recorded as rejected or the directory is skipped as
     * a whole; it must never load. */
    const struct plugin_snap *s = snap_plugins();
    const struct plugin_rec *r = find_by_path(s, path);
    if (r != NULL)
        expect_status(r, "fld-good.so in a world-writable directory", FLD_PLUGIN_REJECTED,
                      "writable by others");
    ck_assert(!plugin_loaded("good"));
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 0);
}
END_TEST

START_TEST(test_foreign_owner)
{
    if (geteuid() != 0) {
        fprintf(stderr, "test_foreign_owner: not root, chown impossible; checked nothing\n");
        return;
    }
    const char *dir = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture(path, dir, "plugins", "good");
    ck_assert_msg(chown(path, 65534, 65534) == 0, "chown %s: %s", path, strerror(errno));
    tt_install_fixture(NULL, dir, "plugins", "failing");
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, path), "fld-good.so owned by 65534", FLD_PLUGIN_REJECTED,
                  "owned by uid 65534");
    expect_status(find_by_fixture(s, "failing"), "fld-failing.so", FLD_PLUGIN_LOADED, "");
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 0);

    /* The same file through fld_load_plugin(). */
    ck_assert_int_eq(fld_load_plugin(path), FLD_EPLUGIN);
    ck_assert_msg(strstr(fld_last_error(), "owned by uid 65534") != NULL, "message: %s",
                  fld_last_error());
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The search path                                                          */
/* ------------------------------------------------------------------------ */

START_TEST(test_duplicate_basename)
{
    const char *a = tt_make_tmpdir("disc");
    const char *b = tt_make_tmpdir("disc");
    char pa[PATH_MAX], pb[PATH_MAX], dirs[2 * PATH_MAX + 2];
    tt_install_fixture(pa, a, "plugins", "good");
    tt_install_fixture(pb, b, "plugins", "good");
    tt_install_fixture(NULL, b, "plugins", "failing");
    snprintf(dirs, sizeof dirs, "%s:%s", a, b);
    use_plugin_dirs(dirs);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const char *path = fld_plugin_path();
    ck_assert_msg(path != NULL && strstr(path, a) != NULL && strstr(path, b) != NULL,
                  "fld_plugin_path() = %s", path ? path : "(null)");
    const struct plugin_snap *s = snap_plugins();
    ck_assert_uint_eq(count_by_path(s, pa), 1);
    ck_assert_uint_eq(count_by_path(s, pb), 1);
    expect_status(find_by_path(s, pa), pa, FLD_PLUGIN_LOADED, "");
    expect_status(find_by_path(s, pb), pb, FLD_PLUGIN_SKIPPED, "duplicate");
    ck_assert_msg(strstr(find_by_path(s, pb)->reason, pa) != NULL,
                  "the duplicate's reason '%s' does not name %s", find_by_path(s, pb)->reason, pa);
    /* A later directory holding the same plugins (a build tree or a wheel
     * beside an installation) is normal: no WARNING for it. */
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "duplicate of"), 0);
    ck_assert_int_eq(count_log(FLD_LOG_ERROR, "duplicate of"), 0);
    /* Asked for by path, the same file is refused aloud. */
    ck_assert_int_eq(fld_load_plugin(pb), FLD_EPLUGIN);
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "duplicate of"), 1);
    /* The second directory is still scanned for other names. */
    char pf[PATH_MAX];
    snprintf(pf, sizeof pf, "%s/fld-failing.so", b);
    expect_status(find_by_path(s, pf), pf, FLD_PLUGIN_LOADED, "");
    ck_assert_ptr_nonnull(find_impl(snap_impls(), "silu_and_mul", "vendor.good"));
}
END_TEST

START_TEST(test_relative_dirs_and_cwd_ignored)
{
    const char *top = tt_make_tmpdir("disc");
    const char *empty = tt_make_tmpdir("disc");
    char rel[PATH_MAX], dirs[PATH_MAX + 64];
    tt_make_subdir(rel, top, "relplugins", 0755);
    tt_install_fixture(NULL, rel, "plugins", "good");
    tt_install_fixture(NULL, top, "plugins", "good");
    ck_assert_msg(chdir(top) == 0, "chdir %s: %s", top, strerror(errno));
    snprintf(dirs, sizeof dirs, "relplugins:.:%s", empty);
    use_plugin_dirs(dirs);
    /* Names are looked up in the search path, never in the working directory;
     * an entry with a '/' must be absolute. */
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_MODULES", "good,./fld-good.so", 1), 0);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    ck_assert(!plugin_loaded("good"));
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 0);
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "'relplugins'"), 1);
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "'.'"), 1);
    const char *path = fld_plugin_path();
    ck_assert_msg(path != NULL && strstr(path, "relplugins") == NULL && strstr(path, empty) != NULL,
                  "fld_plugin_path() = '%s'", path ? path : "(null)");
    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, "good"), "VLLM_FL_PLUGIN_MODULES entry 'good'",
                  FLD_PLUGIN_REJECTED, "not found");
    const struct plugin_rec *dot = find_by_path(s, "./fld-good.so");
    ck_assert_msg(dot != NULL, "no record for VLLM_FL_PLUGIN_MODULES entry './fld-good.so'");
    ck_assert_msg(dot->status == FLD_PLUGIN_REJECTED, "'./fld-good.so': status %s",
                  status_name(dot->status));
    for (size_t i = 0; i < s->n; i++)
        ck_assert_msg(s->r[i].status != FLD_PLUGIN_LOADED || strcmp(s->r[i].name, "reference") == 0,
                      "plugin %s (%s) loaded", s->r[i].name, s->r[i].path);
    check_silu_and_mul();
}
END_TEST

START_TEST(test_cwd_never_searched)
{
    const char *top = tt_make_tmpdir("disc");
    const char *empty = tt_make_tmpdir("disc");
    tt_install_fixture(NULL, top, "plugins", "good");
    ck_assert_msg(chdir(top) == 0, "chdir %s: %s", top, strerror(errno));
    use_plugin_dirs(empty);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    ck_assert_uint_eq(s->n, 1);
    ck_assert_str_eq(s->r[0].name, "reference");
    ck_assert_ptr_null(find_by_name(s, "good"));
    ck_assert_ptr_null(fld_op_lookup("good_echo"));
    expect_resolve("silu_and_mul", "reference.c");
}
END_TEST

START_TEST(test_modules_absolute_path)
{
    const char *empty = tt_make_tmpdir("disc");
    const char *elsewhere = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture(path, elsewhere, "plugins", "good");
    use_plugin_dirs(empty);
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_MODULES", path, 1), 0);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, path), path, FLD_PLUGIN_LOADED, "");
    ck_assert_str_eq(find_by_path(s, path)->name, "good");
    ck_assert_ptr_nonnull(find_impl(snap_impls(), "silu_and_mul", "vendor.good"));
    expect_resolve("silu_and_mul", "vendor.good");
    check_silu_and_mul();
    ck_assert_int_eq(fixture_counter(path, "fld_fixture_good_calls"), 1);
}
END_TEST

START_TEST(test_modules_bare_names)
{
    const char *dir = tt_make_tmpdir("disc");
    char good[PATH_MAX], failing[PATH_MAX];
    tt_install_fixture(good, dir, "plugins", "good");
    tt_install_fixture(failing, dir, "plugins", "failing");
    use_plugin_dirs(dir);
    /* Every accepted spelling; the files are also found by the directory
     * scan, and each must still be loaded exactly once. */
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_MODULES", "good,fld-failing,fld-good.so", 1), 0);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    size_t loaded_good = 0, loaded_failing = 0;
    for (size_t i = 0; i < s->n; i++) {
        ck_assert_msg(s->r[i].status != FLD_PLUGIN_REJECTED, "%s rejected: %s", s->r[i].path,
                      s->r[i].reason);
        if (s->r[i].status == FLD_PLUGIN_LOADED && strcmp(s->r[i].name, "good") == 0)
            loaded_good++;
        if (s->r[i].status == FLD_PLUGIN_LOADED && strcmp(s->r[i].name, "failing") == 0)
            loaded_failing++;
    }
    ck_assert_uint_eq(loaded_good, 1);
    ck_assert_uint_eq(loaded_failing, 1);
    const struct impl_snap *is = snap_impls();
    ck_assert_uint_eq(count_impl_id(is, "vendor.good"), 2); /* silu_and_mul and good_echo */
    ck_assert_uint_eq(count_impl_id(is, "vendor.failing"), 1);
}
END_TEST

START_TEST(test_modules_missing)
{
    const char *dir = tt_make_tmpdir("disc");
    tt_install_fixture(NULL, dir, "plugins", "good");
    use_plugin_dirs(dir);
    ck_assert_int_eq(
        setenv("VLLM_FL_PLUGIN_MODULES", "nosuch,/nonexistent-fld-dir/fld-nosuch.so", 1), 0);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, "nosuch"), "VLLM_FL_PLUGIN_MODULES entry 'nosuch'",
                  FLD_PLUGIN_REJECTED, "not found");
    const struct plugin_rec *abs = find_by_path(s, "/nonexistent-fld-dir/fld-nosuch.so");
    ck_assert_msg(abs != NULL, "no record for the missing absolute module");
    ck_assert_msg(abs->status == FLD_PLUGIN_REJECTED, "missing absolute module: status %s",
                  status_name(abs->status));
    ck_assert_int_ge(count_log(FLD_LOG_ERROR, "nosuch"), 1);
    /* The rest still loads and serves. */
    expect_status(find_by_fixture(s, "good"), "fld-good.so", FLD_PLUGIN_LOADED, "");
    check_silu_and_mul();
}
END_TEST

/* A directory of VLLM_FL_PLUGIN_DIR that does not exist: a WARNING naming the variable, a
 * rejected record (so `list --strict` fails), the other directories still searched; the tool's
 * list, list --strict and doctor say so. */
START_TEST(test_plugin_dir_missing)
{
    const char *dir = tt_make_tmpdir("disc");
    tt_install_fixture(NULL, dir, "plugins", "good");
    char dirs[PATH_MAX + 64];
    snprintf(dirs, sizeof dirs, "%s:/nonexistent-fld-dir/plugins", dir);
    use_plugin_dirs(dirs);
    fld_log_set_callback(capture_log, NULL);
    init_ok();
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "VLLM_FL_PLUGIN_DIR: the directory "
                                                "'/nonexistent-fld-dir/plugins' does not exist"),
                     1);
    const struct plugin_snap *s = snap_plugins();
    expect_status(find_by_path(s, "/nonexistent-fld-dir/plugins"), "the missing directory",
                  FLD_PLUGIN_REJECTED, "does not exist");
    expect_status(find_by_fixture(s, "good"), "fld-good.so", FLD_PLUGIN_LOADED, "");
    check_silu_and_mul();

    char env[PATH_MAX + 96];
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s", dirs);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(env), ARGS("list"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.err, "WARNING", "VLLM_FL_PLUGIN_DIR", "/nonexistent-fld-dir/plugins",
                            "does not exist"),
                  "list: no warning:\n" CLIP, r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, ENV(env), ARGS("list", "--strict"));
    assert_status(r, 1);
    tt_tool_run_free(&r);
    tt_tool_run(&r, ENV("VLLM_FL_PLUGIN_DIR=/nonexistent-fld-dir/plugins"), ARGS("doctor"));
    ck_assert_msg(
        line_with(r.err, "VLLM_FL_PLUGIN_DIR", "/nonexistent-fld-dir/plugins", "does not exist"),
        "doctor: no warning:\nstdout:\n" CLIP "\nstderr:\n" CLIP, r.out, r.err);
    tt_tool_run_free(&r);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fld_load_plugin                                                          */
/* ------------------------------------------------------------------------ */

START_TEST(test_load_plugin_at_runtime)
{
    const char *empty = tt_make_tmpdir("disc");
    const char *elsewhere = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture(path, elsewhere, "plugins", "good");
    use_plugin_dirs(empty);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    /* Warm the cached choice first, so the load must invalidate it. */
    expect_resolve("silu_and_mul", "reference.c");
    check_silu_and_mul();
    ck_assert_ptr_null(fld_op_lookup("good_echo"));

    int rc = fld_load_plugin(path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s: %s", path, fld_strerror(rc),
                  fld_last_error());
    expect_resolve("silu_and_mul", "vendor.good");
    check_silu_and_mul();
    ck_assert_int_eq(fixture_counter(path, "fld_fixture_good_calls"), 1);
    ck_assert_ptr_nonnull(fld_op_lookup("good_echo"));
    good_echo_args echo = {.value = 1};
    ck_assert_int_eq(fld_call_by_name("good_echo", &echo), FLD_OK);
    ck_assert_int_eq(echo.value, 2);

    /* Loading the same file again is a no-op. */
    ck_assert_int_eq(fld_load_plugin(path), FLD_OK);
    const struct plugin_snap *s = snap_plugins();
    ck_assert_uint_eq(count_by_path(s, path), 1);
    expect_status(find_by_path(s, path), path, FLD_PLUGIN_LOADED, "");
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 2);
}
END_TEST

START_TEST(test_load_plugin_rejections)
{
    const char *empty = tt_make_tmpdir("disc");
    const char *dir = tt_make_tmpdir("disc");
    use_plugin_dirs(empty);
    fld_log_set_callback(capture_log, NULL);
    init_ok();
    size_t impls_before = snap_impls()->n;

    /* Never relative to the working directory, even when asked explicitly. */
    ck_assert_int_eq(fld_load_plugin("fld-good.so"), FLD_EINVAL);
    ck_assert_msg(strstr(fld_last_error(), "not an absolute path"), "%s", fld_last_error());

    char abi_major[128];
    snprintf(abi_major, sizeof abi_major, "ABI major %d is not supported",
             FLD_PLUGIN_ABI_MAJOR + 1);
    const struct {
        const char *fixture;
        mode_t mode;
        const char *reason;
    } bad[] = {
        {"abi_major", 0755, abi_major},
        {"no_descriptor", 0755, "no plugin descriptor"},
        {"register_fails", 0755, "register_builtins failed"},
        /* after a failed load: the thread's last error must not pass for this plugin's */
        {"register_silent", 0755,
         "register_builtins failed: plugin 'register_silent' returned status -6 (implementation "
         "failed) without an error message"},
        {"dup_impl", 0755, "duplicate impl_id"},
        {"good", 0646, "writable by others"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[PATH_MAX];
        tt_install_fixture_mode(path, dir, "plugins", bad[i].fixture, bad[i].mode);
        int rc = fld_load_plugin(path);
        ck_assert_msg(rc == FLD_EPLUGIN, "fld_load_plugin(%s) = %d (%s), expected FLD_EPLUGIN",
                      path, rc, fld_strerror(rc));
        ck_assert_msg(strstr(fld_last_error(), bad[i].reason) != NULL,
                      "fld_load_plugin(%s): message '%s' does not contain '%s'", path,
                      fld_last_error(), bad[i].reason);
        const struct plugin_rec *r = find_by_path(snap_plugins(), path);
        if (r != NULL)
            expect_status(r, path, FLD_PLUGIN_REJECTED, bad[i].reason);
    }
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/fld-missing.so", dir);
    ck_assert_int_eq(fld_load_plugin(missing), FLD_EPLUGIN);

    ck_assert_uint_eq(snap_impls()->n, impls_before);
    ck_assert_uint_eq(count_impl_id(snap_impls(), "vendor.good"), 0);
    check_silu_and_mul();
}
END_TEST

/* Layout of the "kept_registry_late" op's arguments (tests/plugins/kept_registry.c). */
typedef struct kept_registry_args {
    int which;
    int status;
    char message[1024];
} kept_registry_args;

/* A registry pointer kept past register_builtins, or used on another thread, registers nothing. */
START_TEST(test_registry_kept_past_loading)
{
    const char *empty = tt_make_tmpdir("disc");
    const char *dir = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture(path, dir, "plugins", "kept_registry");
    use_plugin_dirs(empty);
    init_ok();
    int rc = fld_load_plugin(path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s: %s", path, fld_strerror(rc),
                  fld_last_error());

    static const char *const functions[] = {"fld_registry_register", "fld_registry_declare_op",
                                            "fld_registry_set_detail",
                                            "fld_registry_set_device_hooks"};
    for (int which = 0; which < 4; which++) {
        kept_registry_args a = {.which = which, .status = 1};
        ck_assert_int_eq(fld_call_by_name("kept_registry_late", &a), FLD_OK);
        ck_assert_msg(a.status == FLD_ESTATE, "%s through a kept registry: status %d (%s)",
                      functions[which], a.status, a.message);
        char want[PATH_MAX + 128];
        snprintf(want, sizeof want, "%s: called by plugin 'kept_registry' (", functions[which]);
        ck_assert_msg(strstr(a.message, want) && strstr(a.message, "after its register_builtins "
                                                                   "returned"),
                      "message '%s' does not contain '%s'", a.message, want);
    }
    /* Its own thread, while register_builtins waited for it. */
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_ptr_nonnull(h);
    int (*thread_status)(void) =
        (int (*)(void))dlsym(h, "fld_fixture_kept_registry_thread_status");
    ck_assert_ptr_nonnull(thread_status);
    ck_assert_int_eq(thread_status(), FLD_ESTATE);
    dlclose(h);

    /* Nothing of it reached the registry or the plugin record. */
    ck_assert_ptr_null(fld_op_lookup("kept_registry_extra"));
    fld_signature_info sig;
    ck_assert_int_eq(fld_op_signature("kept_registry_extra", &sig), FLD_ENOTFOUND);
    const struct plugin_rec *r = find_by_name(snap_plugins(), "kept_registry");
    expect_status(r, path, FLD_PLUGIN_LOADED, "");
    ck_assert_str_eq(r->detail, "loaded");
    ck_assert_uint_eq(r->n_impls, 1);
    const char *provider = NULL;
    ck_assert_int_ne(fld_device_provider(FLD_DEVICE_CUDA, &provider), FLD_OK);
    /* Still refused after a reload, which keeps the plugin loaded. */
    ck_assert_int_eq(fld_reload(), FLD_OK);
    kept_registry_args a = {.which = 0, .status = 1};
    ck_assert_int_eq(fld_call_by_name("kept_registry_late", &a), FLD_OK);
    ck_assert_int_eq(a.status, FLD_ESTATE);
    ck_assert_ptr_null(fld_op_lookup("kept_registry_extra"));
}
END_TEST

/* Layout of the "recursive_call" op's arguments (tests/plugins/recursive.c). */
typedef struct recursive_args {
    int remaining;
    int calls;
} recursive_args;

/* A kernel that calls its own op without end is stopped by the nesting limit, not the stack. */
START_TEST(test_recursive_kernel_is_stopped)
{
    const char *empty = tt_make_tmpdir("disc");
    const char *dir = tt_make_tmpdir("disc");
    char path[PATH_MAX];
    tt_install_fixture(path, dir, "plugins", "recursive");
    use_plugin_dirs(empty);
    fld_log_set_callback(capture_log, NULL);
    init_ok();
    int rc = fld_load_plugin(path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s", path, fld_last_error());

    /* Nesting well inside the limit works. */
    recursive_args bounded = {.remaining = 20};
    rc = fld_call_by_name("recursive_call", &bounded);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(bounded.calls, 21);

    /* Without end: the call 65 deep is refused; the error comes back up. */
    recursive_args endless = {.remaining = -1};
    rc = fld_call_by_name("recursive_call", &endless);
    ck_assert_int_ne(rc, FLD_OK);
    ck_assert_int_eq(endless.calls, 64);
    ck_assert_msg(count_log(FLD_LOG_WARNING, "nested more than 64 deep") >= 1 ||
                      strstr(fld_last_error(), "nested more than 64 deep"),
                  "the nesting limit is not named: %s", fld_last_error());

    /* The typed entry point, on its cached direct call: the deepest call falls back to the
     * reference, which serves it. */
    float x[2][8], out[2][8];
    for (int i = 0; i < 16; i++)
        x[i / 8][i % 8] = (float)(i % 5) - 2.0f;
    int64_t shape[2] = {2, 8};
    DLTensor tx = {
        .data = x, .device = {kDLCPU, 0}, .ndim = 2, .dtype = {kDLFloat, 32, 1}, .shape = shape};
    DLTensor tout = tx;
    tout.data = out;
    expect_resolve("rms_norm", "vendor.recursive");
    rc = fld_rms_norm(&tout, &tx, NULL, NULL, 1e-6f);
    ck_assert_msg(rc == FLD_OK, "fld_rms_norm: %s", fld_last_error());
    for (int r = 0; r < 2; r++) {
        double ss = 0;
        for (int i = 0; i < 8; i++)
            ss += (double)x[r][i] * x[r][i];
        double scale = 1.0 / sqrt(ss / 8 + 1e-6);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(fabs(out[r][i] - x[r][i] * scale) <= 1e-5,
                          "rms_norm[%d][%d] = %.9g, expected %.9g", r, i, (double)out[r][i],
                          x[r][i] * scale);
    }
    ck_assert_int_ge(count_log(FLD_LOG_WARNING, "nested more than 64 deep"), 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* In-tree and out-of-tree                                                  */
/* ------------------------------------------------------------------------ */

START_TEST(test_in_tree_classification)
{
    const char *dir = tt_make_tmpdir("disc");
    tt_install_fixture(NULL, dir, "plugins", "good");
    use_plugin_dirs(dir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const struct plugin_snap *s = snap_plugins();
    const struct plugin_rec *ref = find_by_name(s, "reference");
    expect_status(ref, "reference", FLD_PLUGIN_LOADED, "");
    ck_assert_str_eq(ref->path, "(built-in)");
    ck_assert_msg(ref->in_tree, "the built-in reference plugin is not in-tree");
    ck_assert_str_eq(ref->version, FLD_VERSION_STRING);
    const struct plugin_rec *good = find_by_name(s, "good");
    expect_status(good, "good", FLD_PLUGIN_LOADED, "");
    /* Built by the Makefile but without FLD_IN_TREE: out-of-tree. */
    ck_assert_msg(!good->in_tree, "fixture 'good' is reported in-tree");

    const struct impl_snap *is = snap_impls();
    const struct impl_rec *rc = find_impl(is, "silu_and_mul", "reference.c");
    ck_assert_ptr_nonnull(rc);
    ck_assert(rc->in_tree);
    ck_assert_str_eq(rc->plugin, "reference");
    ck_assert_str_eq(rc->kind, "reference");
    const struct impl_rec *vg = find_impl(is, "silu_and_mul", "vendor.good");
    ck_assert_ptr_nonnull(vg);
    ck_assert(!vg->in_tree);
    ck_assert_str_eq(vg->plugin, "good");
    ck_assert_str_eq(vg->kind, "vendor");
}
END_TEST

static int noop_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int register_intree_claim(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "intree_claim_op",
        .impl_id = "vendor.intree_claim",
        .kind = FLD_KIND_VENDOR,
        .vendor = "intree_claim",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = noop_kernel,
    };
    return fld_registry_register(reg, &impl);
}

static int register_intree_stale(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "intree_stale_op",
        .impl_id = "vendor.intree_stale",
        .kind = FLD_KIND_VENDOR,
        .vendor = "intree_stale",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = noop_kernel,
    };
    return fld_registry_register(reg, &impl);
}

START_TEST(test_in_tree_needs_flag_and_version)
{
    /* The flag alone does not make a plugin in-tree: it must also have been
     * built with this library's headers (host_version). */
    static const fld_plugin_descriptor claim = {
        .magic = FLD_PLUGIN_MAGIC,
        .abi_major = FLD_PLUGIN_ABI_MAJOR,
        .abi_minor = FLD_PLUGIN_ABI_MINOR,
        .struct_size = sizeof(fld_plugin_descriptor),
        .flags = FLD_PLUGIN_FLAG_IN_TREE,
        .name = "intree_claim",
        .version = "1.0.0",
        .host_version = FLD_VERSION_STRING,
        .register_builtins = register_intree_claim,
    };
    static const fld_plugin_descriptor stale = {
        .magic = FLD_PLUGIN_MAGIC,
        .abi_major = FLD_PLUGIN_ABI_MAJOR,
        .abi_minor = FLD_PLUGIN_ABI_MINOR,
        .struct_size = sizeof(fld_plugin_descriptor),
        .flags = FLD_PLUGIN_FLAG_IN_TREE,
        .name = "intree_stale",
        .version = "1.0.0",
        .host_version = "0.0.0-not-this-library",
        .register_builtins = register_intree_stale,
    };
    use_plugin_dirs(tt_make_tmpdir("disc"));
    fld_log_set_callback(capture_log, NULL);
    init_ok();
    int rc = fld_register_plugin(&claim);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin(intree_claim): %s", fld_last_error());
    rc = fld_register_plugin(&stale);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin(intree_stale): %s", fld_last_error());

    const struct plugin_snap *s = snap_plugins();
    const struct plugin_rec *c = find_by_name(s, "intree_claim");
    expect_status(c, "intree_claim", FLD_PLUGIN_LOADED, "");
    ck_assert_str_eq(c->path, "(built-in)");
    ck_assert_msg(c->in_tree, "flag and matching host_version: should be in-tree");
    const struct plugin_rec *st = find_by_name(s, "intree_stale");
    expect_status(st, "intree_stale", FLD_PLUGIN_LOADED, "");
    ck_assert_msg(!st->in_tree, "host_version of another library: should be out-of-tree");

    /* And the external-plugin switch follows the classification. */
    ck_assert_int_eq(fld_policy_set("external_enabled", "false"), FLD_OK);
    ck_assert_int_eq(fld_call_by_name("intree_claim_op", NULL), FLD_OK);
    ck_assert_int_eq(fld_call_by_name("intree_stale_op", NULL), FLD_EUNAVAILABLE);
}
END_TEST

START_TEST(test_external_disabled)
{
    const char *dir = tt_make_tmpdir("disc");
    tt_install_fixture(NULL, dir, "plugins", "good");
    use_plugin_dirs(dir);
    ck_assert_int_eq(setenv("VLLM_FL_EXTERNAL_ENABLED", "0", 1), 0);
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    /* Loaded, but its impls are filtered out of selection. */
    expect_status(find_by_name(snap_plugins(), "good"), "good", FLD_PLUGIN_LOADED, "");
    fld_resolution *res = explain_cpu_f32("silu_and_mul");
    ck_assert_str_eq(res->selected, "reference.c");
    ck_assert(!is_candidate(res, "vendor.good"));
    const char *why = find_rejection(res, "vendor.good");
    ck_assert_msg(why != NULL, "vendor.good not listed as rejected");
    ck_assert_msg(strstr(why, "external (out-of-tree) plugins disabled by "
                              "VLLM_FL_EXTERNAL_ENABLED") != NULL,
                  "vendor.good rejected for '%s'", why);
    fld_resolution_free(res);
    check_silu_and_mul();
    good_echo_args echo = {.value = 7};
    ck_assert_int_eq(fld_call_by_name("good_echo", &echo), FLD_EUNAVAILABLE);
    ck_assert_int_eq(echo.value, 7);

    /* In-tree impls are untouched, and turning the switch back on restores good. */
    ck_assert_int_eq(fld_policy_set("external_enabled", "1"), FLD_OK);
    expect_resolve("silu_and_mul", "vendor.good");
    ck_assert_int_eq(fld_call_by_name("good_echo", &echo), FLD_OK);
    ck_assert_int_eq(echo.value, 8);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The default search path                                                  */
/* ------------------------------------------------------------------------ */

/* Unset, empty and blank read alike (a blank path variable reads as unset). */
static const char *const unset_plugin_dirs[] = {NULL, "", "  ", " \t\n"};

START_TEST(test_default_search_path)
{
    if (unset_plugin_dirs[_i])
        setenv("VLLM_FL_PLUGIN_DIR", unset_plugin_dirs[_i], 1);
    else
        unsetenv("VLLM_FL_PLUGIN_DIR");
    unsetenv("VLLM_FL_PLUGIN_MODULES");
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s/lib/fldispatch/plugins", tt_build_dir());
    fld_log_set_callback(capture_log, NULL);
    init_ok();

    const char *path = fld_plugin_path();
    ck_assert_ptr_nonnull(path);
    char real[PATH_MAX];
    bool found = strstr(path, want) != NULL;
    if (!found && realpath(want, real) != NULL)
        found = strstr(path, real) != NULL;
    ck_assert_msg(found, "fld_plugin_path() = '%s' does not contain '%s'", path, want);
    /* The build directory comes first. */
    ck_assert_msg(strncmp(path, want, strlen(want)) == 0 ||
                      (realpath(want, real) != NULL && strncmp(path, real, strlen(real)) == 0),
                  "fld_plugin_path() = '%s' does not start with '%s'", path, want);

    const struct plugin_rec *cpu = find_by_name(snap_plugins(), "cpu");
    ck_assert_msg(cpu != NULL, "plugin 'cpu' not found in the default search path %s", path);
    expect_status(cpu, "cpu", FLD_PLUGIN_LOADED, "");
    ck_assert_msg(strstr(cpu->path, "/lib/fldispatch/plugins/fld-cpu.so") != NULL,
                  "cpu loaded from %s", cpu->path);
    ck_assert_msg(cpu->in_tree, "the in-tree cpu plugin is reported out-of-tree");
    ck_assert_ptr_nonnull(find_impl(snap_impls(), "silu_and_mul", "vendor.cpu"));
    check_silu_and_mul();
    ck_assert_int_eq(count_log(FLD_LOG_WARNING, "VLLM_FL_PLUGIN_DIR"), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* make install, pkg-config and an out-of-tree build                        */
/* ------------------------------------------------------------------------ */

static void run_command(const char *cmd, const char *log)
{
    int st = system(cmd);
    if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return;
    char text[4096] = "";
    FILE *f = fopen(log, "r");
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, size > (long)sizeof text - 1 ? size - (long)sizeof text + 1 : 0, SEEK_SET);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    ck_abort_msg("command failed (status %d): %s\n%s", st, cmd, text);
}

static void expect_file(const char *root, const char *rel)
{
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "%s%s", root, rel);
    ck_assert_msg(stat(path, &st) == 0 && S_ISREG(st.st_mode), "installed tree lacks %s", rel);
}

START_TEST(test_install_pkg_config_oot)
{
    const char *src = tt_src_dir();
    const char *tmp = tt_make_tmpdir("disc");

    /* Install with the directories the build was configured with: others
     * would change the compiled-in paths and rebuild the library under the
     * running tests. */
    char libdir[PATH_MAX], datadir[PATH_MAX], bindir[PATH_MAX], extra[4 * PATH_MAX];
    tt_configured_dirs(libdir, datadir, bindir);
    tt_install_dir_args(extra, sizeof extra);

    char cmd[8 * PATH_MAX], log[PATH_MAX];
    snprintf(log, sizeof log, "%s/install.log", tmp);
    snprintf(cmd, sizeof cmd, "%s install DESTDIR='%s' PREFIX=/usr %s >'%s' 2>&1", tt_make(), tmp,
             extra, log);
    run_command(cmd, log);

    char rel[PATH_MAX + 64];
    snprintf(rel, sizeof rel, "%s/libfldispatch.so.0", libdir);
    expect_file(tmp, rel);
    snprintf(rel, sizeof rel, "%s/pkgconfig/fldispatch.pc", libdir);
    expect_file(tmp, rel);
    snprintf(rel, sizeof rel, "%s/fldispatch/plugins/fld-cpu.so", libdir);
    expect_file(tmp, rel);
    expect_file(tmp, "/usr/include/fldispatch/fldispatch.h");
    expect_file(tmp, "/usr/include/fldispatch/plugin.h");
    snprintf(rel, sizeof rel, "%s/fldispatch", bindir);
    expect_file(tmp, rel);
    /* The library's soname is the versioned name the symlink carries. */
    snprintf(log, sizeof log, "%s/readelf.log", tmp);
    snprintf(cmd, sizeof cmd,
             "readelf -d '%s%s/libfldispatch.so.0' >'%s' 2>&1 && "
             "grep -q 'SONAME.*\\[libfldispatch\\.so\\.0\\]' '%s'",
             tmp, libdir, log, log);
    run_command(cmd, log);

    /* Build the out-of-tree plugin the way a third party would. */
    char plugdir[PATH_MAX];
    tt_make_subdir(plugdir, tmp, "plugins", 0755);
    snprintf(log, sizeof log, "%s/cc.log", tmp);
    snprintf(cmd, sizeof cmd,
             "cc -std=c11 -Wall -Wextra -Werror -shared -fPIC -o '%s/fld-oot.so' "
             "'%s/tests/oot/oot_plugin.c' "
             "$(PKG_CONFIG_SYSROOT_DIR='%s' PKG_CONFIG_PATH='%s%s/pkgconfig' "
             "pkg-config --cflags --libs fldispatch) >'%s' 2>&1",
             plugdir, src, tmp, tmp, libdir, log);
    run_command(cmd, log);
    char oot[PATH_MAX];
    snprintf(oot, sizeof oot, "%s/fld-oot.so", plugdir);
    ck_assert_msg(chmod(oot, 0755) == 0, "chmod %s: %s", oot, strerror(errno));

    use_plugin_dirs(plugdir);
    fld_log_set_callback(capture_log, NULL);
    init_ok();
    const struct plugin_rec *r = find_by_name(snap_plugins(), "oot");
    expect_status(r, "oot", FLD_PLUGIN_LOADED, "");
    ck_assert_str_eq(r->path, oot);
    ck_assert_msg(!r->in_tree, "the out-of-tree plugin is reported in-tree");
    ck_assert_str_eq(r->version, "0.0.1");

    /* Pinned strictly to vendor.oot, so only it can have served the call. */
    int rc = fld_policy_set("per_op", "silu_and_mul=impl:vendor.oot");
    ck_assert_msg(rc == FLD_OK, "fld_policy_set: %s", fld_last_error());
    ck_assert_int_eq(fld_policy_set("strict", "1"), FLD_OK);
    expect_resolve("silu_and_mul", "vendor.oot");
    fld_resolution *res = explain_cpu_f32("silu_and_mul");
    ck_assert_uint_eq(res->n_candidates, 1);
    ck_assert_str_eq(res->candidates[0], "vendor.oot");
    fld_resolution_free(res);
    check_silu_and_mul();
}
END_TEST

static Suite *discovery_suite(void)
{
    Suite *s = suite_create("discovery");
    TCase *tc = tcase_create("fixtures");
    tcase_add_test(tc, test_every_fixture);
    tcase_add_test(tc, test_plugin_dir_missing);
    tcase_add_test(tc, test_sorted_load_order);
    tcase_add_test(tc, test_world_writable_file);
    tcase_add_test(tc, test_world_writable_dir);
    tcase_add_test(tc, test_foreign_owner);
    suite_add_tcase(s, tc);

    tc = tcase_create("search_path");
    tcase_add_test(tc, test_duplicate_basename);
    tcase_add_test(tc, test_relative_dirs_and_cwd_ignored);
    tcase_add_test(tc, test_cwd_never_searched);
    tcase_add_test(tc, test_modules_absolute_path);
    tcase_add_test(tc, test_modules_bare_names);
    tcase_add_test(tc, test_modules_missing);
    tcase_add_loop_test(tc, test_default_search_path, 0,
                        (int)(sizeof unset_plugin_dirs / sizeof unset_plugin_dirs[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("load_plugin");
    tcase_add_test(tc, test_load_plugin_at_runtime);
    tcase_add_test(tc, test_load_plugin_rejections);
    tcase_add_test(tc, test_registry_kept_past_loading);
    tcase_add_test(tc, test_recursive_kernel_is_stopped);
    tcase_add_test(tc, test_in_tree_classification);
    tcase_add_test(tc, test_in_tree_needs_flag_and_version);
    tcase_add_test(tc, test_external_disabled);
    suite_add_tcase(s, tc);

    tc = tcase_create("install");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_install_pkg_config_oot);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_src_and_build_dir("test_discovery", discovery_suite());
}
