/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/policy/names.c: names a configuration mentions that match nothing
 * registered, and VLLM_FL_* variables nothing reads (docs/configuration.md).
 *
 * For every layer (environment, a YAML policy file, VLLM_FL_OP_CONFIG, a
 * manifest, custom_ops): one WARNING naming the name, where it came from
 * (variable, or file:line) and the closest known names ("did you mean");
 * strict mode (VLLM_FL_STRICT=1) makes it an error; vendor names compare
 * without case. Valid names give no warning at all. The registry is the
 * one of tests/stress' fixtures: vendors alpha, beta (plugin stressa) and
 * gamma (plugin stressb), every catalog op.
 *
 * Each test runs in its own process (CK_FORK) and sets its environment
 * before the first library call.
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/plugin.h>
#include <fldispatch/internal/tool_api.h>

#include "../core/policy/variables.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"

/* ---- log capture -------------------------------------------------------------- */

#define MAX_LINES 64
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char lines[MAX_LINES][1100];
static int levels[MAX_LINES];
static int n_lines;
static int n_warnings_total; /* every WARNING, also past MAX_LINES */

static void capture(int level, const char *message, void *user)
{
    (void)user;
    pthread_mutex_lock(&log_mu);
    n_warnings_total += level == FLD_LOG_WARNING;
    if (n_lines < MAX_LINES) {
        levels[n_lines] = level;
        snprintf(lines[n_lines++], sizeof lines[0], "%s", message);
    }
    pthread_mutex_unlock(&log_mu);
}

/* WARNING lines holding every one of the needles. */
static int warnings_with(const char *const *needles)
{
    int n = 0;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_lines; i++) {
        bool all = levels[i] == FLD_LOG_WARNING;
        for (const char *const *p = needles; all && *p; p++)
            all = strstr(lines[i], *p) != NULL;
        n += all;
    }
    pthread_mutex_unlock(&log_mu);
    return n;
}

static int warnings(void)
{
    return warnings_with((const char *const[]){NULL});
}

static const char *all_lines(void)
{
    static char text[MAX_LINES * 300];
    size_t len = 0;
    text[0] = '\0';
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_lines && len < sizeof text; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s\n", lines[i]);
    pthread_mutex_unlock(&log_mu);
    return text;
}

/* Exactly one WARNING holding all the needles. */
#define assert_warned_once(...)                                                                    \
    do {                                                                                           \
        const char *const needles_[] = {__VA_ARGS__, NULL};                                        \
        int n_ = warnings_with(needles_);                                                          \
        ck_assert_msg(n_ == 1, "%d WARNING(s) with '%s'%s%s, expected 1; log:\n%s", n_,            \
                      needles_[0], needles_[1] ? " and '" : "", needles_[1] ? needles_[1] : "",    \
                      all_lines());                                                                \
    } while (0)

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

/* ---- set-up ------------------------------------------------------------------- */

static const char *tmp;

static void setup(void)
{
    char dir[PATH_MAX];
    tmp = tt_make_tmpdir("names");
    tt_make_subdir(dir, tmp, "plugins", 0700);
    tt_install_fixture(NULL, dir, "stress", "stressa");
    tt_install_fixture(NULL, dir, "stress", "stressb");
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    fld_log_set_callback(capture, NULL);
}

/* A file in the test's directory with text; its path in a static buffer. */
static const char *write_file(const char *name, const char *text)
{
    static char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static const char *winner(const char *op)
{
    const char *id = NULL;
    ck_assert_msg(fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id) == FLD_OK, "%s",
                  fld_last_error());
    return id;
}

/* ---- what is checked ----------------------------------------------------------- */

START_TEST(valid_names_give_no_warning)
{
    setup();
    setenv("VLLM_FL_PER_OP", "rms_norm=vendor:gamma|impl:vendor.alpha|reference", 1);
    setenv("VLLM_FL_ALLOW_VENDORS", "alpha,gamma", 1);
    setenv("VLLM_FL_CUSTOM_OPS", "all,-silu_and_mul", 1);
    setenv("VLLM_FL_FLAGOS_BLACKLIST", "some_flaggems_op", 1); /* a FlagGems name: foreign */
    setenv("VLLM_FL_STRESSA_KNOB", "1", 1);                    /* plugin stressa's namespace */
    setenv("VLLM_FL_SHUTDOWN_TIMEOUT", "5", 1);
    setenv("VLLM_FL_OOT_FORCE", "rotary_embedding", 1); /* read by the vLLM plugin */
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(warnings() == 0, "unexpected warnings:\n%s", all_lines());
    ck_assert_str_eq(winner(FLD_OP_RMS_NORM), "vendor.gamma");
}
END_TEST

START_TEST(environment_names)
{
    setup();
    setenv("VLLM_FL_PER_OP",
           "rms_nrom=vendor;silu_and_mul=vendor:alhpa;gelu_and_mul=impl:vendor.alpah", 1);
    setenv("VLLM_FL_DENY_VENDORS", "betta", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_warned_once("VLLM_FL_PER_OP: order of op 'rms_nrom': no op named 'rms_nrom' is "
                       "registered; did you mean 'rms_norm'?");
    assert_warned_once("VLLM_FL_PER_OP: order of op 'silu_and_mul': token 'vendor:alhpa' names no "
                       "registered vendor; did you mean 'alpha'?",
                       "registered vendors: alpha, beta, gamma");
    assert_warned_once("VLLM_FL_PER_OP: order of op 'gelu_and_mul': token 'impl:vendor.alpah' "
                       "names no implementation of op 'gelu_and_mul'; did you mean 'vendor.alpha'");
    assert_warned_once("VLLM_FL_DENY_VENDORS: no vendor named 'betta' is registered; did you mean "
                       "'beta'?");
    ck_assert_int_eq(warnings(), 4);
}
END_TEST

START_TEST(yaml_names_with_file_and_line)
{
    setup();
    const char *path = write_file("policy.yaml", "prefer: vendor\n"
                                                 "op_backends:\n"
                                                 "  rms_nrom: [vendor]\n"
                                                 "  silu_and_mul: \"vendor:gamam|reference\"\n"
                                                 "allow_vendors: [alpha, gamam]\n"
                                                 "custom_ops: [\"-gelu_and_mull\"]\n");
    setenv("VLLM_FL_CONFIG", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char where[PATH_MAX + 16];
    snprintf(where, sizeof where, "%s:3: order of op 'rms_nrom'", path);
    assert_warned_once(where, "did you mean 'rms_norm'?");
    snprintf(where, sizeof where, "%s:4: order of op 'silu_and_mul'", path);
    assert_warned_once(where, "token 'vendor:gamam' names no registered vendor; did you mean "
                              "'gamma'?");
    snprintf(where, sizeof where, "%s:5 (allow_vendors): no vendor named 'gamam'", path);
    assert_warned_once(where, "did you mean 'gamma'?");
    snprintf(where, sizeof where, "%s:6 (custom_ops): '-gelu_and_mull'", path);
    assert_warned_once(where, "did you mean 'gelu_and_mul'");
}
END_TEST

START_TEST(op_config_names_with_file_and_line)
{
    setup();
    const char *path = write_file("ops.json", "{\n"
                                              "  \"rms_norm\": \"impl:vendor.gamme\",\n"
                                              "  \"rotary_embeding\": \"vendor\"\n"
                                              "}\n");
    setenv("VLLM_FL_OP_CONFIG", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where, "VLLM_FL_OP_CONFIG (%s:2): order of op 'rms_norm'", path);
    assert_warned_once(where, "token 'impl:vendor.gamme' names no implementation of op 'rms_norm'; "
                              "did you mean 'vendor.gamma'");
    snprintf(where, sizeof where, "VLLM_FL_OP_CONFIG (%s:3)", path);
    assert_warned_once(where, "no op named 'rotary_embeding' is registered; did you mean "
                              "'rotary_embedding'?");
}
END_TEST

START_TEST(manifest_names_with_file_and_line)
{
    setup();
    const char *path = write_file(
        "frozen.yaml", "version: 1\n"
                       "entries:\n"
                       "  - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.gamam}\n"
                       "  - {op: rms_nrom, device: cpu, dtype: f32, impl: vendor.gamma}\n");
    setenv("VLLM_FL_MANIFEST", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:3:51: impl 'vendor.gamam'", path);
    assert_warned_once(where, "did you mean 'vendor.gamma'");
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:4:", path);
    assert_warned_once(where, "no op named 'rms_nrom'; did you mean 'rms_norm'?");
}
END_TEST

START_TEST(custom_ops_and_op_lists)
{
    setup();
    setenv("VLLM_FL_CUSTOM_OPS", "none,+gelu_and_mull", 1);
    /* FlagGems and vLLM layer lists name foreign ops: only a near miss is reported. */
    setenv("VLLM_FL_FLAGOS_BLACKLIST", "rms_nor,some_flaggems_op", 1);
    setenv("VLLM_FL_EXTERNAL_WHITELIST", "silu_and_mull", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_warned_once("VLLM_FL_CUSTOM_OPS: '+gelu_and_mull': no op named 'gelu_and_mull' is "
                       "registered; did you mean 'gelu_and_mul'");
    assert_warned_once("VLLM_FL_FLAGOS_BLACKLIST: no op named 'rms_nor' is registered; did you "
                       "mean 'rms_norm'?");
    assert_warned_once("VLLM_FL_EXTERNAL_WHITELIST: no op named 'silu_and_mull' is registered");
    ck_assert_int_eq(warnings_with((const char *const[]){"some_flaggems_op", NULL}), 0);
}
END_TEST

START_TEST(unknown_variables)
{
    setup();
    setenv("VLLM_FL_PREFERR", "vendor", 1);
    setenv("VLLM_FL_IO_DUMP_LAYERS", "0-3", 1);
    setenv("VLLM_FL_COMPLETELY_ELSE", "1", 1);
    /* read by the Python package's IO dump: known, no warning */
    setenv("VLLM_FL_IO_DUMP", "/tmp/dump", 1);
    setenv("VLLM_FL_IO_DUMP_WITH_VALUES", "1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    assert_warned_once("unknown variable VLLM_FL_PREFERR", "did you mean 'VLLM_FL_PREFER'?");
    assert_warned_once("VLLM_FL_IO_DUMP_LAYERS is read by vllm-plugin-FL, not by fldispatch");
    ck_assert_int_eq(warnings_with((const char *const[]){"VLLM_FL_IO_DUMP:", NULL}), 0);
    ck_assert_int_eq(warnings_with((const char *const[]){"VLLM_FL_IO_DUMP is", NULL}), 0);
    ck_assert_int_eq(warnings_with((const char *const[]){"VLLM_FL_IO_DUMP_WITH_VALUES", NULL}), 0);
    assert_warned_once("unknown variable VLLM_FL_COMPLETELY_ELSE: neither fldispatch nor a plugin "
                       "found here reads it");
    ck_assert_int_eq(
        warnings_with((const char *const[]){"VLLM_FL_COMPLETELY_ELSE", "did you mean", NULL}), 0);
}
END_TEST

/*
 * The check knows every variable of the variable table (core/policy/variables.h),
 * also where what reads it is not loaded here (no cpu plugin, no Python
 * package), and names each of vllm-plugin-FL's once as such. Set blank,
 * which every reader takes as unset, so that no value has to parse.
 */
static const char *const table_rows[] = {
#define ROW(name, ...) name,
    FLD_VARIABLES(ROW)
#undef ROW
};
static const char *const upstream_rows[] = {
#define ROW(name, note) name,
    FLD_UPSTREAM_VARIABLES(ROW)
#undef ROW
};

START_TEST(every_variable_of_the_table_is_known)
{
    setup();
    for (size_t i = 0; i < sizeof table_rows / sizeof table_rows[0]; i++)
        if (strncmp(table_rows[i], "VLLM_FL_", 8) == 0) /* the names the check reads */
            setenv(table_rows[i], "", 0); /* VLLM_FL_PLATFORM and _PLUGIN_DIR stay as set */
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(warnings() == 0, "a variable of core/policy/variables.h was warned about:\n%s",
                  all_lines());
}
END_TEST

START_TEST(every_upstream_variable_is_named_as_such)
{
    setup();
    setenv(upstream_rows[_i], "1", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char is_read[128];
    snprintf(is_read, sizeof is_read, "%s is read by vllm-plugin-FL", upstream_rows[_i]);
    assert_warned_once(is_read, "not by fldispatch");
    ck_assert_int_eq(warnings(), 1);
}
END_TEST

/*
 * Thousands of unknown names (a generated VLLM_FL_PER_OP) give the first
 * five their lines and one line for the rest, not a line each.
 */
START_TEST(many_unknown_names_are_summarised)
{
    setup();
    enum { UNKNOWN_OPS = 2000, UNKNOWN_VARIABLES = 40 };
    char *per_op = malloc(UNKNOWN_OPS * 32);
    ck_assert_ptr_nonnull(per_op);
    size_t len = 0;
    for (int i = 0; i < UNKNOWN_OPS; i++)
        len += (size_t)sprintf(per_op + len, "%sno_such_op_%04d=vendor", i ? ";" : "", i);
    setenv("VLLM_FL_PER_OP", per_op, 1);
    free(per_op);
    setenv("VLLM_FL_DENY_VENDORS", "no_vendor_a,no_vendor_b", 1);
    for (int i = 0; i < UNKNOWN_VARIABLES; i++) {
        char name[64];
        snprintf(name, sizeof name, "VLLM_FL_NO_SUCH_KNOB_%02d", i);
        setenv(name, "1", 1);
    }
    char manifest[2048] = "version: 1\nentries:\n";
    for (int i = 0; i < 12; i++)
        snprintf(manifest + strlen(manifest), sizeof manifest - strlen(manifest),
                 "  - {op: no_manifest_op_%02d, device: cpu, dtype: f32, impl: vendor.gamma}\n", i);
    setenv("VLLM_FL_MANIFEST", write_file("frozen.yaml", manifest), 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    /* The policy: 5 names listed, then the count of the other 1997. */
    ck_assert_int_eq(warnings_with((const char *const[]){"no op named 'no_such_op_", NULL}), 5);
    assert_warned_once(
        "... and 1997 more unknown names in the policy (only the first 5 are listed)");
    /* The environment: the same, on its own count. */
    ck_assert_int_eq(warnings_with((const char *const[]){"unknown variable VLLM_FL_NO_SUCH", NULL}),
                     5);
    assert_warned_once("... and 35 more unknown VLLM_FL_* variables");
    /* The manifest: the same, on its own count. */
    ck_assert_int_eq(warnings_with((const char *const[]){"no op named 'no_manifest_op_", NULL}), 5);
    assert_warned_once("... and 7 more manifest entries that cannot be used");
    ck_assert_msg(n_warnings_total == 18, "%d WARNING lines; log:\n%s", n_warnings_total,
                  all_lines());
    /* Every unknown name still counts for strict mode: the first is the error. */
    setenv("VLLM_FL_STRICT", "1", 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
}
END_TEST

/* VLLM_FL_STRICT=1: the first unknown name is the error, nothing is applied. */
static const struct {
    const char *variable, *value, *message;
} strict_cases[] = {
    {"VLLM_FL_PER_OP", "rms_nrom=vendor", "VLLM_FL_PER_OP: order of op 'rms_nrom'"},
    {"VLLM_FL_DENY_VENDORS", "betta", "VLLM_FL_DENY_VENDORS: no vendor named 'betta'"},
    {"VLLM_FL_CUSTOM_OPS", "+rms_nrom", "VLLM_FL_CUSTOM_OPS: '+rms_nrom'"},
    {"VLLM_FL_PREFERR", "vendor", "unknown variable VLLM_FL_PREFERR"},
};

START_TEST(strict_mode_makes_them_errors)
{
    setup();
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv(strict_cases[_i].variable, strict_cases[_i].value, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_contains(fld_last_error(), strict_cases[_i].message);
    ck_assert_contains(fld_last_error(), "(strict mode: unknown names are errors)");
    /* Not strict: the same configuration loads, with the WARNING. */
    setenv("VLLM_FL_STRICT", "0", 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    assert_warned_once(strict_cases[_i].message);
}
END_TEST

START_TEST(vendor_names_ignore_case)
{
    setup();
    setenv("VLLM_FL_PER_OP", "rms_norm=vendor;silu_and_mul=vendor:BETA", 1);
    setenv("VLLM_FL_DENY_VENDORS", "GAMMA,Alpha", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(warnings() == 0, "unexpected warnings:\n%s", all_lines());
    /* vendor.gamma (priority 120) and vendor.alpha are denied: beta remains. */
    ck_assert_str_eq(winner(FLD_OP_RMS_NORM), "vendor.beta");
    ck_assert_str_eq(winner(FLD_OP_SILU_AND_MUL), "vendor.beta");
    ck_assert_int_eq(fld_policy_push_allowed_vendors("BeTa"), FLD_OK);
    ck_assert_str_eq(winner(FLD_OP_RMS_NORM), "vendor.beta");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
}
END_TEST

/*
 * "Did you mean" (core/policy/names.c, which the tool's usage errors call too):
 * swaps and case count one edit; a second name only when it is as close as
 * the first; nothing past the limit.
 */
START_TEST(did_you_mean_closeness)
{
    char buf[256];
    const char *const ops[] = {"silu_and_mul", "gelu_and_mul", "rms_norm", "gemma_rms_norm"};
    ck_assert_str_eq(fld__did_you_mean("silu_and_mull", ops, 4, buf, sizeof buf),
                     "; did you mean 'silu_and_mul'?");
    ck_assert_str_eq(fld__did_you_mean("RMS_NROM", ops, 4, buf, sizeof buf),
                     "; did you mean 'rms_norm'?");
    ck_assert_str_eq(fld__did_you_mean("copy", ops, 4, buf, sizeof buf), "");
    const char *const twins[] = {"rms_norm", "rms_nor2", "rms_nxyz"};
    ck_assert_str_eq(fld__did_you_mean("rms_nor", twins, 3, buf, sizeof buf),
                     "; did you mean 'rms_norm' or 'rms_nor2'?");
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("names");
    TCase *tc = tcase_create("check");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, valid_names_give_no_warning);
    tcase_add_test(tc, did_you_mean_closeness);
    tcase_add_test(tc, environment_names);
    tcase_add_test(tc, yaml_names_with_file_and_line);
    tcase_add_test(tc, op_config_names_with_file_and_line);
    tcase_add_test(tc, manifest_names_with_file_and_line);
    tcase_add_test(tc, custom_ops_and_op_lists);
    tcase_add_test(tc, unknown_variables);
    tcase_add_test(tc, every_variable_of_the_table_is_known);
    tcase_add_loop_test(tc, every_upstream_variable_is_named_as_such, 0,
                        (int)(sizeof upstream_rows / sizeof upstream_rows[0]));
    tcase_add_test(tc, many_unknown_names_are_summarised);
    tcase_add_loop_test(tc, strict_mode_makes_them_errors, 0,
                        (int)(sizeof strict_cases / sizeof strict_cases[0]));
    tcase_add_test(tc, vendor_names_ignore_case);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_names", names_suite());
}
