/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging: the level from VLLM_FL_LOG_LEVEL and fld_log_set_level(), the
 * callback sink and the stderr sink, and the dispatch lines vllm-plugin-FL
 * users rely on ("using", "switched from", "fallback to", "[DISPATCH]").
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/harness.h"
#include <fldispatch/plugin.h>

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Log capture                                                              */
/* ------------------------------------------------------------------------ */

#define MAX_LINES 256

struct log_line {
    int level;
    char text[512];
    void *user;
};
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static struct log_line log_lines[MAX_LINES];
static int n_log_lines;

static void capture_log(int level, const char *message, void *user)
{
    pthread_mutex_lock(&log_mu);
    if (n_log_lines < MAX_LINES) {
        log_lines[n_log_lines].level = level;
        log_lines[n_log_lines].user = user;
        snprintf(log_lines[n_log_lines].text, sizeof log_lines[0].text, "%s", message);
        n_log_lines++;
    }
    pthread_mutex_unlock(&log_mu);
}

/* Lines at level containing needle; level 0 matches every level. */
static int count_logs(int level, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_log_lines; i++)
        if ((level == 0 || log_lines[i].level == level) && strstr(log_lines[i].text, needle))
            n++;
    pthread_mutex_unlock(&log_mu);
    return n;
}

static void dump_logs(void)
{
    for (int i = 0; i < n_log_lines; i++)
        fprintf(stderr, "  log %d: %s\n", log_lines[i].level, log_lines[i].text);
}

#define ck_assert_logged(level, needle, times)                                                     \
    do {                                                                                           \
        int got_ = count_logs((level), (needle));                                                  \
        if (got_ != (times))                                                                       \
            dump_logs();                                                                           \
        ck_assert_msg(got_ == (times), "'%s' logged %d times, expected %d", (needle), got_,        \
                      (times));                                                                    \
    } while (0)

/* stderr redirected into a pipe. */
static int saved_stderr = -1;
static int stderr_pipe = -1;

static void stderr_begin(void)
{
    int fds[2];
    fflush(stderr);
    ck_assert_int_eq(pipe(fds), 0);
    saved_stderr = dup(STDERR_FILENO);
    ck_assert_int_ge(saved_stderr, 0);
    ck_assert_int_ge(dup2(fds[1], STDERR_FILENO), 0);
    close(fds[1]);
    stderr_pipe = fds[0];
}

/* Restores stderr and returns what was written meanwhile. */
static const char *stderr_end(void)
{
    static char buf[16384];
    size_t len = 0;
    fflush(stderr);
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    for (;;) {
        ssize_t n = read(stderr_pipe, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(stderr_pipe);
    buf[len] = '\0';
    return buf;
}

/* ------------------------------------------------------------------------ */
/* A plugin with one impl of each kind for op "t_op"                        */
/* ------------------------------------------------------------------------ */

static int slot_status[3];
static bool slot_silent; /* a failing slot sets no message */

struct targs {
    int who;
};

static int run_slot(int slot, const void *args)
{
    ((struct targs *)args)->who = slot;
    if (slot_status[slot] != FLD_OK && !slot_silent)
        fld_set_error("slot %d broke on purpose", slot);
    return slot_status[slot];
}

static int fn_flagos(const void *args)
{
    return run_slot(0, args);
}

static int fn_vendor(const void *args)
{
    return run_slot(1, args);
}

static int fn_reference(const void *args)
{
    return run_slot(2, args);
}

static int register_three(fld_registry *reg)
{
    const fld_impl impls[] = {
        {.op = "t_op",
         .impl_id = "default.f",
         .kind = FLD_KIND_DEFAULT,
         .priority = 150,
         .devices = FLD_DEVICE_MASK_ALL,
         .dtypes = FLD_DTYPE_MASK_ALL,
         .fn = fn_flagos},
        {.op = "t_op",
         .impl_id = "vendor.v",
         .kind = FLD_KIND_VENDOR,
         .vendor = "acme",
         .priority = 100,
         .devices = FLD_DEVICE_MASK_ALL,
         .dtypes = FLD_DTYPE_MASK_ALL,
         .fn = fn_vendor},
        {.op = "t_op",
         .impl_id = "reference.r",
         .kind = FLD_KIND_REFERENCE,
         .priority = 50,
         .devices = FLD_DEVICE_MASK_ALL,
         .dtypes = FLD_DTYPE_MASK_ALL,
         .fn = fn_reference},
    };
    for (size_t i = 0; i < 3; i++) {
        int rc = fld_registry_register(reg, &impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor three_desc = {FLD_PLUGIN_MAGIC,
                                                 FLD_PLUGIN_ABI_MAJOR,
                                                 FLD_PLUGIN_ABI_MINOR,
                                                 sizeof(fld_plugin_descriptor),
                                                 0,
                                                 "sela",
                                                 "1.0",
                                                 FLD_VERSION_STRING,
                                                 register_three};

static void add_three(void)
{
    int rc = fld_register_plugin(&three_desc);
    ck_assert_msg(rc == FLD_OK, "register: %d %s", rc, fld_last_error());
}

static int call_on(DLDataType dtype)
{
    struct targs a = {-1};
    int rc = fld_call_on(fld_op_lookup("t_op"), FLD_DEVICE_CPU, dtype, &a);
    ck_assert_msg(rc == FLD_OK, "call: %d %s", rc, fld_last_error());
    return a.who;
}

static int call_t(void)
{
    return call_on(FLD_DTYPE_F32);
}

/* ------------------------------------------------------------------------ */
/* Levels                                                                   */
/* ------------------------------------------------------------------------ */

START_TEST(default_level_is_warning)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_WARNING);
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_DEBUG, "quiet debug");
    fld_log(FLD_LOG_INFO, "quiet info");
    fld_log(FLD_LOG_WARNING, "loud warning");
    fld_log(FLD_LOG_ERROR, "loud error");
    ck_assert_int_eq(n_log_lines, 2);
    ck_assert_logged(FLD_LOG_WARNING, "loud warning", 1);
    ck_assert_logged(FLD_LOG_ERROR, "loud error", 1);
}
END_TEST

START_TEST(env_debug_shows_debug_lines)
{
    setenv("VLLM_FL_LOG_LEVEL", "DEBUG", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_DEBUG);
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_DEBUG, "debug line %d", 42);
    ck_assert_logged(FLD_LOG_DEBUG, "debug line 42", 1);
}
END_TEST

static const struct {
    const char *value;
    int level;
} env_levels[] = {
    {"DEBUG", FLD_LOG_DEBUG}, {"debug", FLD_LOG_DEBUG},     {"Info", FLD_LOG_INFO},
    {"INFO", FLD_LOG_INFO},   {"warning", FLD_LOG_WARNING}, {"WARNING", FLD_LOG_WARNING},
    {"error", FLD_LOG_ERROR}, {"ERROR", FLD_LOG_ERROR},
};

START_TEST(env_level_names)
{
    setenv("VLLM_FL_LOG_LEVEL", env_levels[_i].value, 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s: %s", env_levels[_i].value, fld_last_error());
    ck_assert_int_eq(fld_log_get_level(), env_levels[_i].level);
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_DEBUG, "d");
    fld_log(FLD_LOG_INFO, "i");
    fld_log(FLD_LOG_WARNING, "w");
    fld_log(FLD_LOG_ERROR, "e");
    int expected = env_levels[_i].level == FLD_LOG_DEBUG     ? 4
                   : env_levels[_i].level == FLD_LOG_INFO    ? 3
                   : env_levels[_i].level == FLD_LOG_WARNING ? 2
                                                             : 1;
    ck_assert_int_eq(n_log_lines, expected);
}
END_TEST

static const char *const bad_levels[] = {"LOUD", "TRACE", "5", "warn ing"};

START_TEST(env_level_invalid)
{
    setenv("VLLM_FL_LOG_LEVEL", bad_levels[_i], 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    const char *msg = fld_last_error();
    ck_assert_contains(msg, "VLLM_FL_LOG_LEVEL");
    ck_assert_contains(msg, bad_levels[_i]);
    ck_assert_contains(msg, "DEBUG");
    ck_assert_contains(msg, "INFO");
    ck_assert_contains(msg, "WARNING");
    ck_assert_contains(msg, "ERROR");

    /* remembered until the environment is fixed and reloaded */
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_ECONFIG);
    ck_assert_int_eq(fld_call_by_name(FLD_OP_RMS_NORM, NULL), FLD_ECONFIG);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);

    setenv("VLLM_FL_LOG_LEVEL", "info", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_INFO);
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
}
END_TEST

START_TEST(set_level_before_init_wins_over_env)
{
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
    fld_log_set_level(FLD_LOG_DEBUG);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_DEBUG);
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_DEBUG, "still shown");
    ck_assert_logged(FLD_LOG_DEBUG, "still shown", 1);
}
END_TEST

START_TEST(set_level_until_reload)
{
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_ERROR);
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_WARNING, "hidden");
    fld_log_set_level(FLD_LOG_INFO);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_INFO);
    fld_log(FLD_LOG_INFO, "shown");
    fld_log(FLD_LOG_DEBUG, "hidden too");
    ck_assert_int_eq(n_log_lines, 1);
    ck_assert_logged(FLD_LOG_INFO, "shown", 1);

    /* a reload puts the environment back in force */
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_ERROR);

    fld_log_set_level(FLD_LOG_OFF);
    fld_log(FLD_LOG_ERROR, "off means off");
    ck_assert_logged(0, "off means off", 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Sinks                                                                    */
/* ------------------------------------------------------------------------ */

START_TEST(callback_gets_level_message_and_user)
{
    int token = 0;
    fld_log_set_callback(capture_log, &token);
    fld_log_set_level(FLD_LOG_DEBUG);
    fld_log(FLD_LOG_WARNING, "custom %d-%s", 7, "seven");
    fld_log(FLD_LOG_INFO, "second");
    ck_assert_int_eq(n_log_lines, 2);
    ck_assert_int_eq(log_lines[0].level, FLD_LOG_WARNING);
    ck_assert_str_eq(log_lines[0].text, "custom 7-seven");
    ck_assert_ptr_eq(log_lines[0].user, &token);
    ck_assert_int_eq(log_lines[1].level, FLD_LOG_INFO);
    ck_assert_str_eq(log_lines[1].text, "second");
}
END_TEST

START_TEST(callback_null_restores_stderr)
{
    fld_log_set_callback(capture_log, NULL);
    fld_log(FLD_LOG_WARNING, "to the callback");
    ck_assert_int_eq(n_log_lines, 1);
    fld_log_set_callback(NULL, NULL);

    stderr_begin();
    fld_log(FLD_LOG_WARNING, "to stderr %d", 123);
    fld_log(FLD_LOG_INFO, "below the level");
    fld_log(FLD_LOG_ERROR, "an error line");
    const char *out = stderr_end();

    ck_assert_int_eq(n_log_lines, 1);
    ck_assert_contains(out, "to stderr 123");
    ck_assert_contains(out, "an error line");
    ck_assert_msg(strstr(out, "below the level") == NULL, "INFO line written: %s", out);
    /* one line per message, carrying its level name */
    const char *line = strstr(out, "to stderr 123");
    const char *start = line;
    while (start > out && start[-1] != '\n')
        start--;
    const char *end = strchr(line, '\n');
    ck_assert_ptr_nonnull(end);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)(end - start), start);
    ck_assert_contains(first, "WARNING");
    ck_assert_msg(strstr(first, "ERROR") == NULL, "two messages on one line: %s", first);
    const char *err = strstr(out, "an error line");
    start = err;
    while (start > out && start[-1] != '\n')
        start--;
    ck_assert_contains(start, "ERROR");
    ck_assert_int_eq(out[strlen(out) - 1], '\n');
}
END_TEST

static int count_op(const fld_catalog_op_info *op, void *ctx)
{
    (void)op;
    ++*(size_t *)ctx;
    return 0;
}

START_TEST(init_line_on_stderr)
{
    setenv("VLLM_FL_LOG_LEVEL", "INFO", 1);
    stderr_begin();
    int rc = fld_init();
    const char *out = stderr_end();
    ck_assert_int_eq(rc, FLD_OK);
    /* every catalog op, each served by the built-in reference plugin alone */
    size_t ops = 0;
    fld_foreach_catalog_op(count_op, &ops);
    char line[160];
    snprintf(line, sizeof line,
             "fldispatch initialized on platform 'cpu' (VLLM_FL_PLATFORM): %zu ops with %zu "
             "implementations from 1 plugin",
             ops, ops);
    ck_assert_contains(out, line);
    ck_assert_contains(out, "INFO");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Dispatch lines                                                           */
/* ------------------------------------------------------------------------ */

START_TEST(using_line_on_first_use)
{
    setenv("VLLM_FL_PREFER", "vendor", 1);
    fld_log_set_callback(capture_log, NULL);
    fld_log_set_level(FLD_LOG_INFO);
    add_three();
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(call_t(), 1);
    ck_assert_logged(FLD_LOG_INFO,
                     "Op 't_op' (cpu, f32) using 'vendor.v' (kind=vendor, vendor=acme)", 1);
    ck_assert_logged(0, "(cpu, f32) using", 1);
    /* another dtype is another first use */
    ck_assert_int_eq(call_on(FLD_DTYPE_BF16), 1);
    ck_assert_logged(FLD_LOG_INFO, "Op 't_op' (cpu, bf16) using 'vendor.v'", 1);
}
END_TEST

START_TEST(no_using_line_at_warning)
{
    fld_log_set_callback(capture_log, NULL);
    add_three();
    ck_assert_int_eq(call_t(), 0);
    ck_assert_int_eq(n_log_lines, 0);
}
END_TEST

START_TEST(switched_line_when_winner_changes)
{
    fld_log_set_callback(capture_log, NULL);
    fld_log_set_level(FLD_LOG_INFO);
    add_three();
    ck_assert_int_eq(call_t(), 0);
    ck_assert_logged(FLD_LOG_INFO, "Op 't_op' (cpu, f32) using 'default.f'", 1);

    /* a policy change that keeps the winner says nothing */
    ck_assert_int_eq(fld_policy_set("deny_vendors", "nobody"), FLD_OK);
    ck_assert_int_eq(call_t(), 0);
    ck_assert_logged(0, "switched", 0);

    ck_assert_int_eq(fld_policy_set("prefer", "vendor"), FLD_OK);
    ck_assert_int_eq(call_t(), 1);
    ck_assert_int_eq(call_t(), 1);
    ck_assert_logged(FLD_LOG_INFO,
                     "Op 't_op' (cpu, f32) switched from 'default.f' to 'vendor.v' "
                     "(kind=vendor, vendor=acme)",
                     1);
    ck_assert_logged(0, "(cpu, f32) using", 1);
}
END_TEST

START_TEST(fallback_lines)
{
    fld_log_set_callback(capture_log, NULL);
    fld_log_set_level(FLD_LOG_INFO);
    add_three();
    slot_status[0] = FLD_EIMPL;
    ck_assert_int_eq(call_t(), 1);
    ck_assert_int_eq(call_t(), 1);
    ck_assert_logged(FLD_LOG_WARNING, "Implementation 'default.f' failed for op 't_op' (cpu, f32)",
                     1);
    ck_assert_logged(FLD_LOG_INFO,
                     "Op 't_op' (cpu, f32) fallback to 'vendor.v' (kind=vendor, vendor=acme)", 1);
}
END_TEST

/* A failure without a message of its own ends with the status text, not a dangling ": ". */
START_TEST(fallback_line_without_message)
{
    fld_log_set_callback(capture_log, NULL);
    add_three();
    slot_status[0] = FLD_EIMPL;
    slot_silent = true;
    ck_assert_int_eq(call_t(), 1);
    char want[256];
    snprintf(want, sizeof want, "Implementation 'default.f' failed for op 't_op' (cpu, f32): %s",
             fld_strerror(FLD_EIMPL));
    int found = 0;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_log_lines; i++)
        found += strcmp(log_lines[i].text, want) == 0;
    pthread_mutex_unlock(&log_mu);
    if (found != 1)
        dump_logs();
    ck_assert_msg(found == 1, "no line that is exactly: %s", want);
}
END_TEST

START_TEST(fallback_warning_at_default_level)
{
    /* the failure is a WARNING, visible without raising the level */
    fld_log_set_callback(capture_log, NULL);
    add_three();
    slot_status[0] = FLD_EIMPL;
    ck_assert_int_eq(call_t(), 1);
    ck_assert_logged(FLD_LOG_WARNING, "Implementation 'default.f' failed", 1);
    ck_assert_logged(0, "fallback to", 0);
}
END_TEST

START_TEST(dispatch_lines_with_debug_env)
{
    setenv("VLLM_FL_DISPATCH_DEBUG", "1", 1);
    setenv("VLLM_FL_LOG_LEVEL", "DEBUG", 1);
    fld_log_set_callback(capture_log, NULL);
    add_three();
    ck_assert_int_eq(call_t(), 0);
    ck_assert_int_ge(count_logs(FLD_LOG_DEBUG, "[DISPATCH] Op 't_op' (cpu, f32) -> 'default.f'"),
                     1);
    ck_assert_int_eq(fld_policy_set("prefer", "reference"), FLD_OK);
    ck_assert_int_eq(call_t(), 2);
    ck_assert_int_ge(count_logs(FLD_LOG_DEBUG, "[DISPATCH] Op 't_op' (cpu, f32) -> 'reference.r'"),
                     1);
    /* only at DEBUG */
    ck_assert_int_eq(count_logs(FLD_LOG_INFO, "[DISPATCH]"), 0);
}
END_TEST

START_TEST(no_dispatch_lines_without_env)
{
    setenv("VLLM_FL_LOG_LEVEL", "DEBUG", 1);
    fld_log_set_callback(capture_log, NULL);
    add_three();
    ck_assert_int_eq(call_t(), 0);
    ck_assert_int_eq(fld_policy_set("prefer", "reference"), FLD_OK);
    ck_assert_int_eq(call_t(), 2);
    ck_assert_logged(0, "[DISPATCH]", 0);
    /* the ordinary first-use line is there, so logging did work */
    ck_assert_logged(FLD_LOG_INFO, "Op 't_op' (cpu, f32) using 'default.f'", 1);
}
END_TEST

START_TEST(dispatch_debug_zero_is_off)
{
    setenv("VLLM_FL_DISPATCH_DEBUG", "0", 1);
    setenv("VLLM_FL_LOG_LEVEL", "DEBUG", 1);
    fld_log_set_callback(capture_log, NULL);
    add_three();
    ck_assert_int_eq(call_t(), 0);
    ck_assert_logged(0, "[DISPATCH]", 0);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("levels");
    tcase_add_test(tc, default_level_is_warning);
    tcase_add_test(tc, env_debug_shows_debug_lines);
    tcase_add_loop_test(tc, env_level_names, 0, (int)(sizeof env_levels / sizeof env_levels[0]));
    tcase_add_loop_test(tc, env_level_invalid, 0, (int)(sizeof bad_levels / sizeof bad_levels[0]));
    tcase_add_test(tc, set_level_before_init_wins_over_env);
    tcase_add_test(tc, set_level_until_reload);
    suite_add_tcase(s, tc);

    tc = tcase_create("sinks");
    tcase_add_test(tc, callback_gets_level_message_and_user);
    tcase_add_test(tc, callback_null_restores_stderr);
    tcase_add_test(tc, init_line_on_stderr);
    suite_add_tcase(s, tc);

    tc = tcase_create("dispatch");
    tcase_add_test(tc, using_line_on_first_use);
    tcase_add_test(tc, no_using_line_at_warning);
    tcase_add_test(tc, switched_line_when_winner_changes);
    tcase_add_test(tc, fallback_lines);
    tcase_add_test(tc, fallback_line_without_message);
    tcase_add_test(tc, fallback_warning_at_default_level);
    tcase_add_test(tc, dispatch_lines_with_debug_env);
    tcase_add_test(tc, no_dispatch_lines_without_env);
    tcase_add_test(tc, dispatch_debug_zero_is_off);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_log", log_suite());
}
