/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fldispatch tool, run for real: $FLD_BUILDDIR/bin/fldispatch is
 * executed in a child with a controlled environment (no inherited VLLM_FL_*
 * variables, the build's plugin directory), and its exit status, stdout and
 * stderr are checked.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

#include "util/catalog_args.h"
#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

/* Whether the build made the in-tree plugin fld-<name>.so: cuda and rocm are
   skipped where nvcc or hipcc is missing (a fresh machine has neither). */
static bool plugin_built(const char *name)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/lib/fldispatch/plugins/fld-%s.so", tt_build_dir(), name);
    return access(path, F_OK) == 0;
}

/* What freeze says of a device whose plugin is missing or cannot run. */
static void assert_left_out(const char *err, const char *device, const char *plugin_reason)
{
    char head[64], plugin[64];
    snprintf(head, sizeof head, "fldispatch freeze: left out device %s: ", device);
    snprintf(plugin, sizeof plugin, "plugin '%s'", device);
    if (plugin_built(device))
        ck_assert_msg(line_with(err, head, plugin, plugin_reason ? plugin_reason : ""), "%s", err);
    else
        ck_assert_msg(line_with(err, head, "no plugin provides its memory"), "%s", err);
}

/* The first line of s, in a static buffer. */
static const char *first_line(const char *s)
{
    static char line[256];
    size_t n = strcspn(s, "\n");
    if (n >= sizeof line)
        n = sizeof line - 1;
    memcpy(line, s, n);
    line[n] = '\0';
    return line;
}

#define assert_json_object(text)                                                                   \
    do {                                                                                           \
        ck_assert_msg((text)[0] == '{', "JSON output does not start with '{':\n" CLIP, (text));    \
        ck_assert_msg(tt_json_valid(text), "output is not valid JSON:\n" CLIP, (text));            \
    } while (0)

/* ---- the checker checks itself --------------------------------------------- */

START_TEST(json_checker_rejects_bad_documents)
{
    ck_assert(tt_json_valid("{\"a\": [1, -2.5e3, true, null, \"x\\n\\u00e9\"], \"b\": {}}\n"));
    ck_assert(!tt_json_valid("{\"a\": 1,}"));
    ck_assert(!tt_json_valid("{\"a\" 1}"));
    ck_assert(!tt_json_valid("[1, 2"));
    ck_assert(!tt_json_valid("{\"a\": \"tab\there\"}"));
    ck_assert(!tt_json_valid("{} {}"));
    ck_assert(!tt_json_valid("{\"a\": 01}"));
}
END_TEST

/* ---- top level ------------------------------------------------------------- */

START_TEST(help_lists_commands)
{
    static const char *const flags[] = {"--help", "-h"};
    for (size_t i = 0; i < 2; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, ARGS(flags[i]));
        assert_status(r, 0);
        for (const char *const *c =
                 (const char *const[]){"list", "resolve", "bench", "config", "freeze", "verify",
                                       "doctor", "tune", "stats", NULL};
             *c; c++)
            ck_assert_msg(line_with(r.out, "  ", *c), "--help does not list '%s':\n" CLIP, *c,
                          r.out);
        ck_assert(!line_with(r.out, "doctor", "(coming)"));
        ck_assert(!line_with(r.out, "verify", "(coming)"));
        ck_assert(!line_with(r.out, "config", "(coming)"));
        ck_assert(!line_with(r.out, "freeze", "(coming)"));
        ck_assert_str_eq(r.err, "");
        tt_tool_run_free(&r);
    }
}
END_TEST

static const char *const all_commands[] = {"list",   "resolve", "bench", "config", "freeze",
                                           "verify", "doctor",  "tune",  "stats"};
#define N_COMMANDS (sizeof all_commands / sizeof all_commands[0])

START_TEST(command_help)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        struct tt_tool_run r, h, s;
        tt_tool_run(&r, NO_ENV, ARGS(all_commands[i], "--help"));
        assert_status(r, 0);
        char usage[64];
        snprintf(usage, sizeof usage, "Usage: fldispatch %s", all_commands[i]);
        ck_assert_msg(strncmp(r.out, usage, strlen(usage)) == 0, "%s --help:\n" CLIP,
                      all_commands[i], r.out);
        ck_assert_str_eq(r.err, "");
        /* 'fldispatch help CMD' and '-h' say the same. */
        tt_tool_run(&h, NO_ENV, ARGS("help", all_commands[i]));
        assert_status(h, 0);
        ck_assert_str_eq(h.out, r.out);
        tt_tool_run(&s, NO_ENV, ARGS(all_commands[i], "-h"));
        assert_status(s, 0);
        ck_assert_str_eq(s.out, r.out);
        tt_tool_run_free(&r);
        tt_tool_run_free(&h);
        tt_tool_run_free(&s);
    }

    struct tt_tool_run r, top;
    tt_tool_run(&r, NO_ENV, ARGS("help"));
    tt_tool_run(&top, NO_ENV, ARGS("--help"));
    assert_status(r, 0);
    ck_assert_str_eq(r.out, top.out);
    ck_assert(line_with(r.out, "fldispatch help <command>"));
    tt_tool_run_free(&r);
    tt_tool_run_free(&top);

    /* help of help is the top-level help; "--" ends the top-level options. */
    tt_tool_run(&r, NO_ENV, ARGS("help", "help"));
    tt_tool_run(&top, NO_ENV, ARGS("--help"));
    assert_status(r, 0);
    ck_assert_str_eq(r.out, top.out);
    tt_tool_run_free(&r);
    tt_tool_run_free(&top);
    tt_tool_run(&r, NO_ENV, ARGS("--", "list"));
    tt_tool_run(&top, NO_ENV, ARGS("list"));
    assert_status(r, 0);
    ck_assert_str_eq(r.out, top.out);
    tt_tool_run_free(&r);
    tt_tool_run_free(&top);
    tt_tool_run(&r, NO_ENV, ARGS("--"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "no command after '--'"), CLIP, r.err);
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("help", "lsit"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "unknown command 'lsit'", "did you mean 'list'?"), CLIP, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(version)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("--version"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "fldispatch " FLD_VERSION_STRING));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(no_command_is_usage_error)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, NO_ARGS);
    assert_status(r, 2);
    ck_assert(strstr(r.err, "Usage:"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(unknown_command)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("frobnicate"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "frobnicate"));
    ck_assert(strstr(r.err, "--help"));
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("--frobnicate"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "--frobnicate"));
    tt_tool_run_free(&r);

    /* A near miss names the command meant; a far one names none. */
    static const char *const typos[][2] = {{"lsit", "list"},     {"reslove", "resolve"},
                                           {"doctr", "doctor"},  {"confg", "config"},
                                           {"Verify", "verify"}, {"--verison", "--version"}};
    for (size_t i = 0; i < sizeof typos / sizeof typos[0]; i++) {
        tt_tool_run(&r, NO_ENV, ARGS(typos[i][0]));
        assert_status(r, 2);
        char want[64];
        snprintf(want, sizeof want, "did you mean '%s'?", typos[i][1]);
        ck_assert_msg(line_with(r.err, typos[i][0], want), "%s:\n" CLIP, typos[i][0], r.err);
        tt_tool_run_free(&r);
    }
    tt_tool_run(&r, NO_ENV, ARGS("frobnicate"));
    ck_assert(!strstr(r.err, "did you mean"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(unknown_options)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("list", "--bogus"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "--bogus", "fldispatch list --help"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--devcie", "cpu"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "fldispatch resolve: unknown option '--devcie'",
                            "did you mean '--device'?", "fldispatch resolve --help"),
                  CLIP, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    /* Every command says which option was meant. */
    static const char *const near[][3] = {
        {"list", "--verbsoe", "--verbose"},   {"list", "--sjon", "--json"},
        {"config", "--jsn", "--json"},        {"freeze", "--ouptut", "--output"},
        {"verify", "--seeed", "--seed"},      {"bench", "--thread", "--threads"},
        {"doctor", "--timeuot", "--timeout"},
    };
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        tt_tool_run(&r, NO_ENV, ARGS(near[i][0], near[i][1]));
        assert_status(r, 2);
        char want[64];
        snprintf(want, sizeof want, "did you mean '%s'?", near[i][2]);
        ck_assert_msg(line_with(r.err, near[i][1], want), "%s %s:\n" CLIP, near[i][0], near[i][1],
                      r.err);
        tt_tool_run_free(&r);
    }

    /* A flag takes no value; an option without its value is a usage error. */
    tt_tool_run(&r, NO_ENV, ARGS("list", "--json=yes"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "'--json' takes no value"));
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("doctor", "--timeout"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "'--timeout' needs a value"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("bench", "--overhead", "--fast"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "--fast"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("config", "--verbose"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "--verbose", "fldispatch config --help"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--outptu", "x.yaml"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "--outptu", "fldispatch freeze --help"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- list ------------------------------------------------------------------- */

START_TEST(list_summary)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("list"));
    assert_status(r, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(line_with(r.out, "PLUGIN", "VERSION", "ORIGIN", "STATUS", "IMPLS", "REASON"),
                  "no header:\n" CLIP, r.out);
    /* One line per plugin: name, version, origin, status, available/registered, reason. */
    char every[32]; /* reference.c serves every catalog op */
    snprintf(every, sizeof every, " %d/%d", TT_CAT_N_OPS, TT_CAT_N_OPS);
    ck_assert_msg(line_with(r.out, "reference ", "built-in", "loaded", every), CLIP, r.out);
    char compute[32]; /* vendor.cpu serves every catalog op but attention_backend */
    snprintf(compute, sizeof compute, " %d/%d", TT_CAT_N_OPS - 1, TT_CAT_N_OPS - 1);
    ck_assert_msg(line_with(r.out, "cpu ", "in-tree", "loaded", compute), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "template ", "1.0.0", "unavailable", " 0/1",
                            "set FLD_TEMPLATE_ENABLE=1 to enable the example"),
                  CLIP, r.out);
    /* ascend cpu template, and cuda and rocm where their compilers were found */
    ck_assert_int_eq(tt_count_of(r.out, " in-tree "),
                     3 + plugin_built("cuda") + plugin_built("rocm"));
    /* No implementation table, no file names: those are --verbose. */
    ck_assert_msg(!strstr(r.out, "IMPL_ID") && !strstr(r.out, "fld-cpu.so") &&
                      !line_with(r.out, "rms_norm", "reference.c"),
                  "the summary shows details:\n" CLIP, r.out);
    char n_ops[32];
    snprintf(n_ops, sizeof n_ops, "%d op(s)", TT_CAT_N_OPS);
    ck_assert_msg(line_with(r.out, n_ops, "implementation(s)", "available here"), CLIP, r.out);
    ck_assert(line_with(r.out, "fldispatch list --verbose"));
    tt_tool_run_free(&r);

    /* A long reason is cut, whole characters, with "..." */
    tt_tool_run(&r,
                ENV("ASCEND_HOME_PATH=/nonexistent/ascend/toolkit/with/a/long/path/that/goes/on"),
                ARGS("list"));
    assert_status(r, 0);
    const char *line = line_with(r.out, "ascend ", "unavailable");
    ck_assert_msg(line && strstr(line, "...") && strlen(line) < 150, CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/*
 * In the table of text that starts at the line with header, every line up
 * to the first blank one has the text of column `word` starting where the
 * header's word starts (columns sized from their longest entry).
 */
static void assert_column_aligned(const char *text, const char *header, const char *word)
{
    const char *h = strstr(text, header);
    ck_assert_msg(h != NULL, "no '%s' header:\n" CLIP, header, text);
    const char *line = h;
    while (line > text && line[-1] != '\n')
        line--;
    const char *at = strstr(line, word);
    ck_assert_ptr_nonnull(at);
    size_t col = (size_t)(at - line);
    int rows = 0;
    for (line = strchr(line, '\n'); line && line[1] && line[1] != '\n';
         line = strchr(line + 1, '\n')) {
        const char *row = line + 1;
        const char *end = strchr(row, '\n');
        size_t len = end ? (size_t)(end - row) : strlen(row);
        ck_assert_msg(len > col && row[col - 1] == ' ' && row[col] != ' ',
                      "column %s (at %zu) does not line up in:\n%.*s", word, col, (int)len, row);
        rows++;
    }
    ck_assert_int_gt(rows, 0);
}

START_TEST(list_verbose)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("list", "--verbose"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "  cpu ", "in-tree", "loaded", "fld-cpu.so"),
                  "no loaded cpu plugin:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "rms_norm", "reference.c", "available"),
                  "no reference.c rms_norm:\n" CLIP, r.out);
    ck_assert(line_with(r.out, "silu_and_mul", "reference.c"));
    static const char *const ops[] = {"silu_and_mul",      "mul_and_silu", "gelu_and_mul",
                                      "gelu_tanh_and_mul", "rms_norm",     "gemma_rms_norm",
                                      "rotary_embedding"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        ck_assert_msg(line_with(r.out, ops[i], "vendor.cpu", "cpu", "f32,f16,bf16"),
                      "no vendor.cpu %s:\n" CLIP, ops[i], r.out);
    ck_assert_msg(!line_with(r.out, "attention_backend", "vendor.cpu"),
                  "vendor.cpu registers attention_backend:\n" CLIP, r.out);
    /* The example plugin is loaded but stays off without its variable. */
    ck_assert_msg(line_with(r.out, "vendor.template",
                            "unavailable: ", "set FLD_TEMPLATE_ENABLE=1 to enable the example"),
                  "template plugin not listed as unavailable:\n" CLIP, r.out);
    /* The longest op name (rotary_embedding_out) does not shift the columns. */
    ck_assert(line_with(r.out, "rotary_embedding_out ", "reference.c"));
    assert_column_aligned(r.out, "OP ", "IMPL_ID");
    assert_column_aligned(r.out, "OP ", "KIND");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(list_template_enabled)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("FLD_TEMPLATE_ENABLE=1"), ARGS("list", "--verbose"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "silu_and_mul", "vendor.template", " available"),
                  "template not available with FLD_TEMPLATE_ENABLE=1:\n" CLIP, r.out);
    ck_assert(!line_with(r.out, "vendor.template", "unavailable"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("FLD_TEMPLATE_ENABLE=1"), ARGS("list"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "template ", "loaded", " 1/1"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(list_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("list", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    tt_assert_schema(r.out, "list");
    ck_assert(strncmp(r.out, "{\n  \"schema\": 1,\n", 16) == 0);
    ck_assert(strstr(r.out, "\"plugin_path\": [\n"));
    ck_assert(strstr(r.out, "\"plugins\": ["));
    ck_assert(strstr(r.out, "\"impls\": ["));
    ck_assert(strstr(r.out, "\"name\": \"cpu\""));
    ck_assert(strstr(r.out, "\"impl_id\": \"vendor.cpu\""));
    ck_assert(strstr(r.out, "\"impl_id\": \"reference.c\""));
    ck_assert(strstr(r.out, "\"dtypes\": ["));
    /* The built-in plugin has no file; absent text is null, not "". */
    ck_assert(strstr(r.out, "\"path\": null,\n      \"builtin\": true"));
    ck_assert(strstr(r.out, "\"reason\": null"));
    ck_assert(!strstr(r.out, ": \"\""));
    ck_assert(strstr(r.out, "\"reason\": \"set FLD_TEMPLATE_ENABLE=1 to enable the example\""));

    /* Complete with or without --verbose. */
    struct tt_tool_run v;
    tt_tool_run(&v, NO_ENV, ARGS("list", "--json", "--verbose"));
    assert_status(v, 0);
    ck_assert_str_eq(v.out, r.out);
    tt_tool_run_free(&v);
    tt_tool_run_free(&r);
}
END_TEST

/* A plugin directory holding the good fixture and one the host rejects (bad magic). */
static const char *dir_with_rejected_plugin(void)
{
    static char dir[4096];
    tt_make_subdir(dir, tt_make_tmpdir("cli-strict"), "plugins", 0755);
    tt_install_fixture(NULL, dir, "plugins", "good");
    tt_install_fixture(NULL, dir, "plugins", "bad_magic");
    return dir;
}

START_TEST(list_strict)
{
    char env[4200];
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s", dir_with_rejected_plugin());
    struct tt_tool_run r;
    /* A rejected plugin is listed, and by default is no failure of list. */
    tt_tool_run(&r, ENV(env), ARGS("list"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "fld-bad_magic", "rejected", "magic"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "good", "loaded"), CLIP, r.out);
    tt_tool_run_free(&r);

    static const char *const forms[][3] = {{"list", "--strict", NULL},
                                           {"list", "--strict", "--verbose"},
                                           {"list", "--json", "--strict"}};
    for (size_t i = 0; i < 3; i++) {
        tt_tool_run(&r, ENV(env), ARGS(forms[i][0], forms[i][1], forms[i][2]));
        assert_status(r, 1);
        ck_assert_msg(line_with(r.err, "1 plugin(s) rejected", "--strict"), CLIP, r.err);
        ck_assert(strstr(r.out, "bad_magic")); /* the output is complete all the same */
        if (i == 2)
            tt_assert_schema(r.out, "list");
        tt_tool_run_free(&r);
    }

    /* Nothing rejected: --strict changes nothing. */
    tt_tool_run(&r, NO_ENV, ARGS("list", "--strict"));
    assert_status(r, 0);
    tt_tool_run_free(&r);
}
END_TEST

/*
 * Names from outside (a directory in VLLM_FL_PLUGIN_DIR, plugin file names)
 * holding terminal escape sequences and a newline: printed escaped, as the
 * library's messages are, never as raw control bytes.
 */
static const char *hostile_plugin_dir(void)
{
    static char dir[4096];
    tt_make_subdir(dir, tt_make_tmpdir("cli-escape"), "\033]0;pwned\a\033[2J", 0755);
    char good[4200], to[4300];
    tt_install_fixture(good, dir, "plugins", "good");
    snprintf(to, sizeof to, "%s/fld-a\nb.so", dir);
    ck_assert_int_eq(rename(good, to), 0);
    tt_install_fixture(good, dir, "plugins", "bad_magic");
    snprintf(to, sizeof to, "%s/fld-x\033[31my.so", dir);
    ck_assert_int_eq(rename(good, to), 0);
    return dir;
}

static void assert_no_control_bytes(const char *what, const char *text)
{
    for (const char *p = text; *p; p++)
        ck_assert_msg((unsigned char)*p >= 0x20 || *p == '\n',
                      "%s printed the raw byte 0x%02x:\n" CLIP, what, (unsigned char)*p, text);
}

START_TEST(outside_text_is_escaped)
{
    char env[4200];
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s", hostile_plugin_dir());
    static const char *const commands[][3] = {
        {"list", NULL, NULL}, {"list", "--verbose", NULL}, {"config", NULL, NULL}};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, ENV(env), ARGS(commands[i][0], commands[i][1], commands[i][2]));
        assert_status(r, 0);
        assert_no_control_bytes(commands[i][0], r.out);
        ck_assert_msg(strstr(r.out, "\\x1b]0;pwned\\x07\\x1b[2J"),
                      "the directory is not shown escaped:\n" CLIP, r.out);
        tt_tool_run_free(&r);
    }
    struct tt_tool_run r;
    /* The summary: the rejected file's name (its name column) on one row. */
    tt_tool_run(&r, ENV(env), ARGS("list"));
    ck_assert_msg(line_with(r.out, "fld-x\\x1b[31my.so", "rejected"), CLIP, r.out);
    tt_tool_run_free(&r);
    /* --verbose: each file on its own row, the newline as \x0a. */
    tt_tool_run(&r, ENV(env), ARGS("list", "--verbose"));
    ck_assert_msg(line_with(r.out, "good", "loaded", "/fld-a\\x0ab.so"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "rejected", "/fld-x\\x1b[31my.so"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* A bad VLLM_FL_CPU_* value rejects the cpu plugin: every op falls to
 * reference.c. list says so where its summary ends; under the strict policy
 * it is a configuration error, as a bad core VLLM_FL_* variable is. */
START_TEST(rejected_cpu_plugin_is_reported)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_CPU_THREADS=abc"), ARGS("list"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "1 plugin(s) rejected", "not used"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "Rejected: cpu: ", "VLLM_FL_CPU_THREADS='abc'"), CLIP, r.out);
    tt_tool_run_free(&r);

    static const char *const commands[][2] = {{"list", NULL}, {"resolve", "rms_norm"}};
    for (size_t i = 0; i < 2; i++) {
        tt_tool_run(&r, ENV("VLLM_FL_CPU_THREADS=abc", "VLLM_FL_STRICT=1"),
                    ARGS(commands[i][0], commands[i][1]));
        assert_status(r, 2);
        ck_assert_msg(line_with(r.err, "plugin 'cpu'", "rejected", "VLLM_FL_CPU_THREADS='abc'"),
                      CLIP, r.err);
        ck_assert_msg(line_with(r.err, "strict"), CLIP, r.err);
        tt_tool_run_free(&r);
    }
    /* Nothing rejected: strict changes nothing. */
    tt_tool_run(&r, ENV("VLLM_FL_STRICT=1"), ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    tt_tool_run_free(&r);
}
END_TEST

/* A later directory of the search path holding the same plugins (a build
 * tree beside an installation): no warning, one row per plugin, a count. */
START_TEST(list_duplicates_counted_not_warned)
{
    char first[4096], second[4096], env[8300];
    tt_make_subdir(first, tt_make_tmpdir("cli-dup"), "plugins", 0755);
    tt_make_subdir(second, tt_make_tmpdir("cli-dup"), "plugins", 0755);
    tt_install_fixture(NULL, first, "plugins", "good");
    tt_install_fixture(NULL, second, "plugins", "good");
    snprintf(env, sizeof env, "VLLM_FL_PLUGIN_DIR=%s:%s", first, second);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(env), ARGS("list"));
    assert_status(r, 0);
    ck_assert_msg(!strstr(r.err, "WARNING") && !strstr(r.err, "duplicate"), CLIP, r.err);
    ck_assert_int_eq(tt_count_of(r.out, "\ngood "), 1);
    ck_assert_msg(line_with(r.out, "1 plugin file(s) skipped", "earlier in the search path"), CLIP,
                  r.out);
    tt_tool_run_free(&r);
    tt_tool_run(&r, ENV(env), ARGS("list", "--verbose"));
    ck_assert_msg(line_with(r.out, "skipped", second), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "reason: duplicate of ", first), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(bad_environment_is_config_error)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=bogus"), ARGS("list"));
    assert_status(r, 2);
    ck_assert_msg(strstr(r.err, "VLLM_FL_PREFER"), "stderr does not name the variable:\n" CLIP,
                  r.err);
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_PREFER=bogus"), ARGS("resolve", "rms_norm"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "VLLM_FL_PREFER"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- resolve ---------------------------------------------------------------- */

START_TEST(resolve_default_is_vendor_cpu)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "vendor.cpu");
    ck_assert_msg(line_with(r.out, "1. vendor.cpu") && line_with(r.out, "2. reference.c"),
                  "candidates not in order:\n" CLIP, r.out);
    ck_assert(line_with(r.out, "order:", "vendor", "reference"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    ck_assert(strstr(r.out, "\"op\": \"rms_norm\""));
    ck_assert(strstr(r.out, "\"device\": \"cpu\""));
    ck_assert(strstr(r.out, "\"dtype\": \"f32\""));
    ck_assert(strstr(r.out, "\"selected\": \"vendor.cpu\""));
    ck_assert(strstr(r.out, "\"candidates\": ["));
    ck_assert(strstr(r.out, "\"rejected\": ["));
    ck_assert(
        strstr(r.out, "\"order\": [\n    \"flagos\",\n    \"vendor\",\n    \"reference\"\n  ]"));
    ck_assert(strstr(r.out, "\"order_source\": \"default\""));
    ck_assert(strstr(r.out, "\"policy_summary\": \"prefer=flagos"));
    tt_assert_schema(r.out, "resolve");
    tt_tool_run_free(&r);
}
END_TEST

/* tune: the row_pair fixture's two impls, vendor.cpu and the reference timed on tiny buckets;
 * the manifest it writes loads, and resolve --rows names the bucket's entry. */
START_TEST(tune_writes_a_bucketed_manifest)
{
    char dir[] = "/tmp/fld-cli-tune-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], modules[4400], manifest_env[300];
    snprintf(path, sizeof path, "%s/tuned.yaml", dir);
    snprintf(modules, sizeof modules, "VLLM_FL_PLUGIN_MODULES=%s/tests/plugins/fld-row_pair.so",
             tt_build_dir());
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(modules),
                ARGS("tune", "rms_norm", "--dtype", "f32", "--quick", "--shapes", "1-4=1,4;5-=32",
                     "--hidden", "128", "--out", path));
    assert_status(r, 0);
    for (const char *const *id = (const char *const[]){"vendor.row_small", "vendor.row_large",
                                                       "vendor.cpu", "reference.c", NULL};
         *id; id++) {
        ck_assert_msg(line_with(r.out, "rms_norm", "1-4 ", *id), "no 1-4 line for %s:\n" CLIP, *id,
                      r.out);
        ck_assert_msg(line_with(r.out, "rms_norm", "5- ", *id), "no 5- line for %s:\n" CLIP, *id,
                      r.out);
    }
    ck_assert_int_eq(tt_count_of(r.out, "  <- "), 2); /* one winner per bucket */
    tt_tool_run_free(&r);

    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *file = tt_read_all(f);
    ck_assert_msg(
        strstr(file, "version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32, "), "%s",
        file);
    /* The winner of rows 1-4 is the entry that holds 2 rows: resolve --rows 2 names it. */
    const char *line = strstr(file, "  - {op: rms_norm");
    const char *impl = strstr(line, "impl: ");
    ck_assert_ptr_nonnull(impl);
    char winner[64];
    ck_assert_int_eq(sscanf(impl, "impl: %63[^}]", winner), 1);
    bool bucketed = strstr(line, "rows: 1-4,") != NULL;
    ck_assert_msg(bucketed || !strstr(file, "rows:"), "%s", file);
    free(file);

    snprintf(manifest_env, sizeof manifest_env, "VLLM_FL_MANIFEST=%s", path);
    tt_tool_run(&r, ENV(modules, manifest_env),
                ARGS("resolve", "rms_norm", "--rows", "2", "--json"));
    assert_status(r, 0);
    char want[128];
    snprintf(want, sizeof want, "\"selected\": \"%s\"", winner);
    ck_assert_msg(strstr(r.out, want), "expected %s:\n" CLIP, want, r.out);
    ck_assert(strstr(r.out, "\"rows\": 2"));
    ck_assert_msg(strstr(r.out, bucketed ? ":5 (rows 1-4)" : "tuned.yaml:5\""), CLIP, r.out);
    tt_assert_schema(r.out, "resolve");
    tt_tool_run_free(&r);

    /* JSON: every impl with its time or why not, and the winners. */
    tt_tool_run(&r, ENV(modules),
                ARGS("tune", "rms_norm", "--dtype", "f32", "--quick", "--shapes", "1-4=1",
                     "--hidden", "128", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    tt_assert_schema(r.out, "tune");
    ck_assert(strstr(r.out, "\"impl_id\": \"vendor.row_small\""));
    ck_assert(strstr(r.out, "\"manifest\": null"));
    tt_tool_run_free(&r);

    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(tune_and_resolve_rows_usage_errors)
{
    static const char *const cases[][8] = {
        {"tune", "--shapes", "16-1=4", NULL},
        {"tune", "--shapes", "1-16=32", NULL},
        {"tune", "--shapes", "1-16=4;8-=64", NULL},
        {"tune", "--hidden", "100", NULL},
        {"tune", "rms_nrom", NULL},
        {"resolve", "rms_norm", "--rows", "0", NULL},
        {"resolve", "rms_norm", "--rows", "x", NULL},
        {"resolve", "rms_norm", "--rows", "99999999999999999999999", NULL},
        {"resolve", "rms_norm", "--rows", "9223372036854775808", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, cases[i]);
        ck_assert_msg(r.status == 2, "%s %s %s: status %d\n" CLIP, cases[i][0], cases[i][1],
                      cases[i][2] ? cases[i][2] : "", r.status, r.err);
        ck_assert_msg(strstr(r.err, cases[i][0]), CLIP, r.err);
        if (cases[i][2] && strcmp(cases[i][2], "--rows") == 0)
            ck_assert_msg(strstr(r.err, "invalid --rows"), CLIP, r.err);
        tt_tool_run_free(&r);
    }
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--rows", "9223372036854775807"));
    assert_status(r, 0);
    tt_tool_run_free(&r);
    /* No device here can be timed under graph replay: left out, named; nothing left. */
    tt_tool_run(&r, NO_ENV, ARGS("tune", "--device", "cuda", "--quick"));
    assert_status(r, 3);
    ck_assert_msg(strstr(r.err, "device cuda: left out: fld_device_graph_capture: ") &&
                      strstr(r.err, "no device given can be timed"),
                  CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_prefer_reference)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference"), ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "reference.c");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_denied_vendor)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_DENY_VENDORS=cpu"), ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "reference.c");
    ck_assert_msg(line_with(r.out, "vendor.cpu", "VLLM_FL_DENY_VENDORS"),
                  "rejection does not name VLLM_FL_DENY_VENDORS:\n" CLIP, r.out);
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_DENY_VENDORS=cpu"), ARGS("resolve", "rms_norm", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    ck_assert(strstr(r.out, "\"selected\": \"reference.c\""));
    ck_assert(strstr(r.out, "\"impl_id\": \"vendor.cpu\""));
    tt_assert_schema(r.out, "resolve");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_unknown_op)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "no_such_op"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "no such op", "no_such_op", "fldispatch list"));
    ck_assert(!strstr(r.err, "did you mean"));
    tt_tool_run_free(&r);

    /* A near miss names the op meant, in resolve, verify and bench. */
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_nrom"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "no such op 'rms_nrom'", "did you mean 'rms_norm'?"), CLIP,
                  r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "attention_backnd"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "did you mean 'attention_backend'?"), CLIP, r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick", "silu_and_mull"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "unknown op 'silu_and_mull'", "did you mean 'silu_and_mul'?"),
                  CLIP, r.err);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--quick", "gemma_rmsnorm"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "unknown op 'gemma_rmsnorm'", "did you mean 'gemma_rms_norm'?"),
                  CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(double_dash_ends_options)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "--json", "--", "rms_norm"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "\"selected\": \"vendor.cpu\""));
    tt_tool_run_free(&r);

    /* After "--" an argument is an operand even when it looks like an option. */
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "--", "--json"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "no such op '--json'"), CLIP, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("doctor", "--", "-no-such-plugin.so"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "cannot use '-no-such-plugin.so'"), CLIP, r.err);
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("list", "--", "--json"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "unexpected argument '--json'"), CLIP, r.err);
    tt_tool_run_free(&r);

    /* A second "--" is an operand too. */
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "--", "rms_norm", "--"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "one OP at a time", "'--'"), CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_nothing_available)
{
    static const char *const env[] = {"VLLM_FL_PREFER_ENABLED=0", "VLLM_FL_PER_OP=rms_norm=vendor",
                                      NULL};
    struct tt_tool_run r;
    tt_tool_run(&r, env, ARGS("resolve", "rms_norm"));
    assert_status(r, 3);
    ck_assert_str_eq(first_line(r.out), "none");
    tt_tool_run_free(&r);

    tt_tool_run(&r, env, ARGS("resolve", "rms_norm", "--json"));
    assert_status(r, 3);
    assert_json_object(r.out);
    ck_assert(strstr(r.out, "\"selected\": null"));
    ck_assert(strstr(r.out, "\"candidates\": []"));
    tt_assert_schema(r.out, "resolve");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_device_and_dtype_options)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--dtype", "bf16"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "vendor.cpu");
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV,
                ARGS("resolve", "--dtype=f16", "--device=cpu", "silu_and_mul", "--json"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "\"dtype\": \"f16\""));
    ck_assert(strstr(r.out, "\"selected\": \"vendor.cpu\""));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--device", "tpu"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "tpu"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--dtype", "f64"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "f64"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("resolve", "rms_norm", "--dtype"));
    assert_status(r, 2);
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("resolve"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "OP"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_attention_backend_uses_any_dtype)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("resolve", "attention_backend", "--json"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "\"dtype\": \"any\""));
    ck_assert(!strstr(r.out, "\"selected\": null"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(template_plugin_selection)
{
    struct tt_tool_run r;
    /* Off by default: dropped with its reason. */
    tt_tool_run(&r, ENV("VLLM_FL_PER_OP=silu_and_mul=vendor:template|reference"),
                ARGS("resolve", "silu_and_mul"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "reference.c");
    ck_assert(line_with(r.out, "vendor.template", "FLD_TEMPLATE_ENABLE"));
    tt_tool_run_free(&r);

    /* On, but its low priority keeps it behind vendor.cpu. */
    tt_tool_run(&r, ENV("FLD_TEMPLATE_ENABLE=1"), ARGS("resolve", "silu_and_mul"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "vendor.cpu");
    ck_assert(line_with(r.out, "2. vendor.template"));
    tt_tool_run_free(&r);

    tt_tool_run(
        &r, ENV("FLD_TEMPLATE_ENABLE=1", "VLLM_FL_PER_OP=silu_and_mul=vendor:template|reference"),
        ARGS("resolve", "silu_and_mul"));
    assert_status(r, 0);
    ck_assert_str_eq(first_line(r.out), "vendor.template");
    tt_tool_run_free(&r);

    /* float32 only. */
    tt_tool_run(&r, ENV("FLD_TEMPLATE_ENABLE=1"),
                ARGS("resolve", "silu_and_mul", "--dtype", "bf16"));
    assert_status(r, 0);
    ck_assert(!line_with(r.out, ". vendor.template"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- config ----------------------------------------------------------------- */

/*
 * In JSON output, whether the policy object whose "key" is key has that
 * value (as written: "\"reference\"", "true", "[]") and source (the writer
 * puts "key", "value", "source" in that order).
 */
static bool json_field(const char *text, const char *key, const char *value, const char *source)
{
    char want[256];
    snprintf(want, sizeof want, "\"key\": \"%s\"", key);
    const char *p = strstr(text, want);
    if (!p)
        return false;
    const char *end = strchr(p, '}');
    snprintf(want, sizeof want, "\"value\": %s", value);
    const char *v = strstr(p, want);
    snprintf(want, sizeof want, "\"source\": \"%s\"", source);
    const char *s = strstr(p, want);
    return v && s && end && v < end && s < end;
}

START_TEST(config_text)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference"), ARGS("config"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "platform:", "cpu"), "no platform line:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "detected by:", "VLLM_FL_PLATFORM"), "no detection line:\n" CLIP,
                  r.out);
    ck_assert(line_with(r.out, "platform file:"));
    ck_assert(line_with(r.out, "config path:"));
    ck_assert_msg(line_with(r.out, "plugin path:", "/lib/fldispatch/plugins"),
                  "no plugin path:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "KEY", "VALUE", "SOURCE"), "no table header:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "prefer ", " reference ", " VLLM_FL_PREFER"),
                  "prefer does not show its value and source:\n" CLIP, r.out);
    ck_assert_msg(line_with(r.out, "deny_vendors", "default"),
                  "deny_vendors is not shown as a default:\n" CLIP, r.out);
    ck_assert_str_eq(r.err, "");

    /* The table is aligned: every row's VALUE starts in the header's column. */
    const char *header = strstr(r.out, "KEY");
    ck_assert_ptr_nonnull(header);
    size_t value_col = (size_t)(strstr(header, "VALUE") - header);
    const char *row = strstr(header, "\nprefer ");
    ck_assert_ptr_nonnull(row);
    row++;
    ck_assert_msg(strncmp(row + value_col, "reference", 9) == 0, "prefer row misaligned:\n" CLIP,
                  r.out);
    tt_tool_run_free(&r);

    /* A value from the environment is replaced by a default once the variable goes. */
    tt_tool_run(&r, NO_ENV, ARGS("config"));
    assert_status(r, 0);
    ck_assert(!line_with(r.out, "prefer ", "VLLM_FL_PREFER"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(config_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference", "VLLM_FL_DENY_VENDORS=acme,cuda"),
                ARGS("config", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    ck_assert(strstr(r.out, "\"platform\": {"));
    ck_assert(strstr(r.out, "\"name\": \"cpu\""));
    ck_assert(strstr(r.out, "\"detected_by\": \"VLLM_FL_PLATFORM\""));
    ck_assert(strstr(r.out, "\"config_file\": "));
    ck_assert(strstr(r.out, "\"policy\": ["));
    ck_assert_msg(json_field(r.out, "prefer", "\"reference\"", "VLLM_FL_PREFER"),
                  "prefer does not come from VLLM_FL_PREFER:\n" CLIP, r.out);
    ck_assert_msg(strstr(r.out, "\"source\": \"VLLM_FL_DENY_VENDORS\""),
                  "no field from VLLM_FL_DENY_VENDORS:\n" CLIP, r.out);
    ck_assert_msg(strstr(r.out, "\"source\": \"default\""), "no default field:\n" CLIP, r.out);
    /* Typed values: switches are booleans, lists arrays, paths arrays of directories. */
    ck_assert_msg(json_field(r.out, "strict", "false", "default"), CLIP, r.out);
    ck_assert_msg(json_field(r.out, "enabled", "true", "default"), CLIP, r.out);
    ck_assert_msg(json_field(r.out, "deny_vendors",
                             "[\n        \"acme\",\n        \"cuda\"\n      ]",
                             "VLLM_FL_DENY_VENDORS"),
                  CLIP, r.out);
    ck_assert_msg(json_field(r.out, "allow_vendors", "[]", "default"), CLIP, r.out);
    ck_assert_msg(json_field(r.out, "custom_ops", "[\n        \"all\"\n      ]", "default"), CLIP,
                  r.out);
    ck_assert_msg(json_field(r.out, "op_backends", "[]", "default"), CLIP, r.out);
    ck_assert(strstr(r.out, "\"config_path\": [\n"));
    ck_assert(strstr(r.out, "\"plugin_path\": [\n"));
    ck_assert(strstr(r.out, "\"policy_summary\": \"prefer=reference"));
    ck_assert(!strstr(r.out, "\"value\": \"true\"") && !strstr(r.out, "\"value\": \"\""));
    tt_assert_schema(r.out, "config");
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_STRICT=1", "VLLM_FL_CUSTOM_OPS=-rms_norm,+silu_and_mul"),
                ARGS("config", "--json"));
    assert_status(r, 0);
    ck_assert_msg(json_field(r.out, "strict", "true", "VLLM_FL_STRICT"), CLIP, r.out);
    ck_assert_msg(strstr(r.out, "\"-rms_norm\""), CLIP, r.out);
    tt_assert_schema(r.out, "config");
    tt_tool_run_free(&r);
}
END_TEST

/* Under VLLM_FL_CONFIG the platform file is not read, so config does not name it. */
START_TEST(config_file_replaces_platform_file)
{
    const char *dir = tt_make_tmpdir("cli-config");
    char path[4096], env[4200];
    snprintf(path, sizeof path, "%s/policy.yaml", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("prefer: reference\n", f);
    fclose(f);
    snprintf(env, sizeof env, "VLLM_FL_CONFIG=%s", path);

    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("config"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "platform file:", "cpu.yaml"), CLIP, r.out);
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV(env), ARGS("config"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "platform file:", "(none)"), CLIP, r.out);
    ck_assert_msg(!strstr(r.out, "cpu.yaml"), "the unread platform file is named:\n" CLIP, r.out);
    char source[4200];
    snprintf(source, sizeof source, "%s:1", path);
    ck_assert_msg(line_with(r.out, "prefer ", "reference", source), CLIP, r.out);
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV(env), ARGS("config", "--json"));
    assert_status(r, 0);
    ck_assert_msg(strstr(r.out, "\"config_file\": null"), CLIP, r.out);
    ck_assert(!strstr(r.out, "cpu.yaml"));
    tt_assert_schema(r.out, "config");
    tt_tool_run_free(&r);
}
END_TEST

/*
 * A copy of the tool and its library in a fresh prefix: <prefix>/bin/fldispatch,
 * <prefix>/lib/libfldispatch.so.0, and the platform file directory
 * <prefix>/share/fldispatch/config, empty, into config_dir. The tool's path in tool.
 */
static void relocated_tool(char *tool, char *config_dir)
{
    const char *prefix = tt_make_tmpdir("cli-prefix");
    char bin[4096], lib[4096], share[4096], fld[4096], src[4200], dst[4200];
    tt_make_subdir(bin, prefix, "bin", 0755);
    tt_make_subdir(lib, prefix, "lib", 0755);
    tt_make_subdir(share, prefix, "share", 0755);
    tt_make_subdir(fld, share, "fldispatch", 0755);
    tt_make_subdir(config_dir, fld, "config", 0755);
    snprintf(src, sizeof src, "%s/bin/fldispatch", tt_build_dir());
    snprintf(tool, 4096, "%s/fldispatch", bin);
    tt_copy_file(src, tool, 0755);
    snprintf(src, sizeof src, "%s/lib/libfldispatch.so.0", tt_build_dir());
    snprintf(dst, sizeof dst, "%s/libfldispatch.so.0", lib);
    tt_copy_file(src, dst, 0755);
}

/*
 * The platform file path names a directory: an error naming it, as any path
 * that is not a regular file is (a later directory never silently takes over).
 */
START_TEST(platform_file_that_is_a_directory)
{
    char tool[4096], config_dir[4096], path[4200];
    relocated_tool(tool, config_dir);
    struct tt_tool_run r;
    tt_tool_run_at(&r, tool, NO_ENV, ARGS("config"));
    assert_status(r, 0);
    tt_tool_run_free(&r);

    snprintf(path, sizeof path, "%s/cpu.yaml", config_dir);
    ck_assert_int_eq(mkdir(path, 0755), 0);
    tt_tool_run_at(&r, tool, NO_ENV, ARGS("config"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "platform file of 'cpu'", path, "Is a directory"), CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

/* A platform file others may write is skipped with the warning a plugin file gets. */
START_TEST(platform_file_writable_by_others)
{
    char tool[4096], config_dir[4096], path[4200];
    relocated_tool(tool, config_dir);
    snprintf(path, sizeof path, "%s/cpu.yaml", config_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("prefer: reference\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(path, 0644), 0);
    struct tt_tool_run r;
    tt_tool_run_at(&r, tool, NO_ENV, ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "order:", "reference", path), CLIP "\n" CLIP, r.out, r.err);
    ck_assert_msg(!strstr(r.err, "WARNING"), CLIP, r.err);
    tt_tool_run_free(&r);

    ck_assert_int_eq(chmod(path, 0666), 0);
    tt_tool_run_at(&r, tool, NO_ENV, ARGS("resolve", "rms_norm"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.err, "WARNING", "platform file", path,
                            "file is writable by others (mode 0666)"),
                  CLIP, r.err);
    ck_assert_msg(!strstr(r.out, path), "the skipped file is named as a source:\n" CLIP, r.out);
    tt_tool_run_free(&r);
    tt_tool_run_at(&r, tool, NO_ENV, ARGS("config"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "platform file:", "(none)"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "prefer ", "default"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(config_per_op_order)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PER_OP=rms_norm=reference|vendor"), ARGS("config", "--json"));
    assert_status(r, 0);
    assert_json_object(r.out);
    ck_assert_msg(json_field(r.out, "op_backends.rms_norm",
                             "[\n        \"reference\",\n        \"vendor\"\n      ]",
                             "VLLM_FL_PER_OP"),
                  "the per-op order is not reported:\n" CLIP, r.out);
    tt_assert_schema(r.out, "config");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(config_errors)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PLATFORM=tpu"), ARGS("config"));
    assert_status(r, 2);
    ck_assert_msg(line_with(r.err, "VLLM_FL_PLATFORM", "tpu"),
                  "stderr does not name the variable and value:\n" CLIP, r.err);
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_PLATFORM=tpu"), ARGS("config", "--json"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "VLLM_FL_PLATFORM"));
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_PREFER=fastest"), ARGS("config"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "VLLM_FL_PREFER", "fastest"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_PLATFORM=tpu"), ARGS("list"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "VLLM_FL_PLATFORM"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("config", "extra"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "extra"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- freeze ----------------------------------------------------------------- */

/* The lines of text without those starting with prefix, in a new string. */
static char *without_lines(const char *text, const char *prefix)
{
    char *out = malloc(strlen(text) + 1);
    ck_assert_ptr_nonnull(out);
    size_t used = 0;
    for (const char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        if (line[len] == '\n')
            len++;
        if (strncmp(line, prefix, strlen(prefix)) != 0) {
            memcpy(out + used, line, len);
            used += len;
        }
        line += len;
    }
    out[used] = '\0';
    return out;
}

/* The lines of stderr that say a device was left out. */
#define LEFT_OUT "fldispatch freeze: left out device "

START_TEST(freeze_stdout)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("freeze"));
    assert_status(r, 0);
    ck_assert_msg(strncmp(r.out, "# fldispatch manifest", 21) == 0, "no header:\n" CLIP, r.out);
    ck_assert(line_with(r.out, "# Written by fldispatch freeze " FLD_VERSION_STRING));
    ck_assert(line_with(r.out, "# Platform: cpu", "VLLM_FL_PLATFORM"));
    ck_assert(line_with(r.out, "# Policy: ", "prefer="));
    ck_assert(line_with(r.out, "# Devices: cpu"));
    ck_assert(strstr(r.out, "\nversion: 1\nentries:\n"));
    ck_assert_msg(line_with(r.out, "  - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.cpu}"),
                  "rms_norm is not frozen to vendor.cpu:\n" CLIP, r.out);
    ck_assert(line_with(r.out, "  - {op: rotary_embedding, device: cpu, dtype: bf16, impl: "
                               "vendor.cpu}"));
    ck_assert(line_with(r.out, "  - {op: attention_backend, device: cpu, dtype: any, impl: "
                               "reference.c}"));
    /* The ops with tensors x three dtypes, plus attention_backend, on the cpu only: no GPU here. */
    ck_assert_int_eq(tt_count_of(r.out, "  - {op: "), (TT_CAT_N_OPS - 1) * 3 + 1);
    ck_assert_int_eq(tt_count_of(r.out, "device: cpu, dtype: f32"), TT_CAT_N_OPS - 1);
    ck_assert_msg(!strstr(r.out, "device: cuda") && !strstr(r.out, "device: rocm") &&
                      !strstr(r.out, "device: ascend"),
                  "a device without its runtime is frozen:\n" CLIP, r.out);
    /* ...and what was left out, and why, on stderr and in the header. */
    assert_left_out(r.err, "cuda", "no CUDA driver");
    assert_left_out(r.err, "rocm", NULL);
    assert_left_out(r.err, "ascend", NULL);
    ck_assert_int_eq(tt_count_of(r.err, "\n"), 3);
    ck_assert(line_with(r.out, "# left out device cuda: ",
                        plugin_built("cuda") ? "no CUDA driver" : "no plugin provides"));
    /* The unavailable template plugin is never frozen. */
    ck_assert(!strstr(r.out, "vendor.template"));
    tt_tool_run_free(&r);

    /* The policy of the environment decides. */
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference"), ARGS("freeze", "--device", "cpu"));
    assert_status(r, 0);
    ck_assert(line_with(r.out, "  - {op: rms_norm, device: cpu, dtype: f32, impl: reference.c}"));
    ck_assert(line_with(r.out, "# Policy: ", "prefer=reference"));
    ck_assert(!strstr(r.out, "vendor.cpu"));
    ck_assert_str_eq(r.err, "");
    tt_tool_run_free(&r);

    /* Pairs nothing qualifies for are left out, and said. */
    tt_tool_run(&r, ENV("FLD_TEMPLATE_ENABLE=1", "VLLM_FL_PER_OP=silu_and_mul=vendor:template"),
                ARGS("freeze", "--device", "cpu"));
    assert_status(r, 0);
    ck_assert(
        line_with(r.out, "{op: silu_and_mul, device: cpu, dtype: f32, impl: vendor.template}"));
    /* vendor.template is float32 only and the order has no other token. */
    ck_assert(!strstr(r.out, "{op: silu_and_mul, device: cpu, dtype: bf16"));
    ck_assert_msg(line_with(r.err, "fldispatch freeze: left out on cpu: 2 (op, dtype) pair(s)",
                            "silu_and_mul f16, silu_and_mul bf16", "fldispatch resolve"),
                  CLIP, r.err);
    ck_assert(line_with(r.out, "# left out on cpu: 2 (op, dtype) pair(s)"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(freeze_to_file)
{
    char dir[] = "/tmp/fld-cli-freeze-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/manifest.yaml", dir);

    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--output", path));
    assert_status(r, 0);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(line_with(r.err, "entries written to", path), "no summary:\n" CLIP, r.err);
    tt_tool_run_free(&r);

    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *file = tt_read_all(f);

    /* The same manifest as on standard output, but for the time it was written. */
    tt_tool_run(&r, NO_ENV, ARGS("freeze"));
    assert_status(r, 0);
    char *a = without_lines(file, "# Written by"), *b = without_lines(r.out, "# Written by");
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    free(file);
    tt_tool_run_free(&r);

    /* Written through a temporary file that is gone afterwards; an existing file is replaced. */
    char opt[300];
    snprintf(opt, sizeof opt, "--output=%s", path);
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=reference"), ARGS("freeze", opt));
    assert_status(r, 0);
    tt_tool_run_free(&r);
    f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    file = tt_read_all(f);
    ck_assert(line_with(file, "{op: rms_norm, device: cpu, dtype: f32, impl: reference.c}"));
    free(file);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -v '^manifest.yaml$' | grep -q .", dir);
    ck_assert_msg(system(cmd) != 0, "files left beside the manifest in %s", dir);

    /* An unwritable destination is an error, and leaves nothing behind. */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no-such-dir/manifest.yaml", dir);
    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--output", bad));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "cannot write", "no-such-dir"));
    tt_tool_run_free(&r);

    unlink(path);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* "VLLM_FL_PLUGIN_MODULES=<build>/tests/fakedev/fld-fakedev.so": a "cuda" device on CPU memory. */
static const char *fakedev_env(void)
{
    static char entry[4200];
    snprintf(entry, sizeof entry, "VLLM_FL_PLUGIN_MODULES=%s/tests/fakedev/fld-fakedev.so",
             tt_build_dir());
    return entry;
}

START_TEST(freeze_devices)
{
    struct tt_tool_run r;
    /* Devices asked for but not present: nothing to freeze, no manifest, exit 3. */
    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--device", "rocm", "--device=ascend"));
    assert_status(r, 3);
    ck_assert_str_eq(r.out, "");
    assert_left_out(r.err, "rocm", NULL);
    assert_left_out(r.err, "ascend", NULL);
    ck_assert(!strstr(r.err, "device cuda"));
    ck_assert_msg(line_with(r.err, "nothing to freeze (no device present); no manifest written"),
                  CLIP, r.err);
    tt_tool_run_free(&r);

    /* A device whose plugin provides its memory is frozen, with its own kernels. */
    tt_tool_run(&r, ENV(fakedev_env()), ARGS("freeze", "--device", "cuda"));
    assert_status(r, 0);
    ck_assert(line_with(r.out, "# Devices: cuda"));
    ck_assert_msg(
        line_with(r.out, "{op: rms_norm, device: cuda, dtype: bf16, impl: vendor.fakedev}"), CLIP,
        r.out);
    ck_assert(line_with(r.out, "{op: attention_backend, device: cuda, dtype: any, impl: "
                               "reference.c}"));
    ck_assert(!strstr(r.out, "device: cpu"));
    /* The ops the fake device lacks are said. */
    ck_assert_msg(line_with(r.err, "left out on cuda: ", "gelu_and_mul f32"), CLIP, r.err);
    tt_tool_run_free(&r);

    /* The same plugin, its device switched off: left out with the plugin's reason. */
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_UNAVAILABLE=1"), ARGS("freeze"));
    assert_status(r, 0);
    ck_assert(!strstr(r.out, "device: cuda"));
    ck_assert(line_with(r.out, "# Devices: cpu"));
    ck_assert_msg(line_with(r.err, LEFT_OUT "cuda: ", "unavailable"), CLIP, r.err);
    tt_tool_run_free(&r);

    /* Nothing resolves under the policy: exit 3, no manifest. */
    tt_tool_run(&r,
                ENV(fakedev_env(), "VLLM_FL_DENY_VENDORS=fakedev", "VLLM_FL_PREFER_ENABLED=0",
                    "VLLM_FL_PER_OP=attention_backend=vendor"),
                ARGS("freeze", "--device", "cuda"));
    assert_status(r, 3);
    ck_assert_str_eq(r.out, "");
    ck_assert_msg(line_with(r.err, "nothing to freeze (nothing resolves under the policy)"), CLIP,
                  r.err);
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--device", "tpu"));
    assert_status(r, 2);
    ck_assert(line_with(r.err, "tpu", "cpu, cuda, rocm, ascend"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("freeze", "--device"));
    assert_status(r, 2);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(freeze_config_error)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PLATFORM=tpu"), ARGS("freeze"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "VLLM_FL_PLATFORM"));
    ck_assert_str_eq(r.out, "");
    tt_tool_run_free(&r);

    tt_tool_run(&r, ENV("VLLM_FL_PER_OP=rms_norm"), ARGS("freeze"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "VLLM_FL_PER_OP"));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- bench ------------------------------------------------------------------ */

START_TEST(bench_overhead_text)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--overhead", "--reps", "3", "--calls", "2000"));
    assert_status(r, 0);
    static const char *const variants[] = {"direct", "handle", "name", "typed"};
    for (size_t v = 0; v < 4; v++)
        for (const char *const *k = (const char *const[]){"null", "loop", NULL}; *k; k++)
            for (const char *const *t = (const char *const[]){" 1 ", " 2 ", NULL}; *t; t++)
                ck_assert_msg(line_with(r.out, *k, variants[v], *t),
                              "no %s/%s row for%sthread(s):\n" CLIP, *k, variants[v], *t, r.out);
    ck_assert(line_with(r.out, "two threads vs one"));
    /* Measurements only: the targets are bench/targets.py's (tests/test_bench.c). */
    ck_assert_msg(!strstr(r.out, "<= 5 ns") && !strstr(r.out, "MISS"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(bench_overhead_json)
{
    struct tt_tool_run r;
    /* Policy variables must not stop the bench from pinning its own kernels. */
    tt_tool_run(&r, ENV("VLLM_FL_DENY_VENDORS=bench", "VLLM_FL_PREFER=reference"),
                ARGS("bench", "--overhead", "--json", "--reps=3", "--calls=1000"));
    assert_status(r, 0);
    assert_json_object(r.out);
    tt_assert_schema(r.out, "bench");
    ck_assert(strstr(r.out, "\"benchmark\": \"dispatch_overhead\""));
    ck_assert(strstr(r.out, "\"shape\": \"1x4096\""));
    ck_assert(strstr(r.out, "\"schema\": 2,")); /* 2 since "targets" went */
    ck_assert(!strstr(r.out, "\"targets\"") && !strstr(r.out, "\"target\""));
    ck_assert(strstr(r.out, "\"machine\": {"));
    ck_assert(strstr(r.out, "\"cpu\": \""));
    ck_assert(strstr(r.out, "\"threads\": "));
    ck_assert(strstr(r.out, "\"results\": ["));
    ck_assert(strstr(r.out, "\"scaling_2t\": {"));
    /* (3 kernels x 4 variants + the 2 catalog kernels' prepared call and run) x 2 thread
     * counts */
    ck_assert_int_eq(tt_count_of(r.out, "\"variant\": "), 32);
    ck_assert_int_eq(tt_count_of(r.out, "\"ns_per_call\": "), 32);
    ck_assert_int_eq(tt_count_of(r.out, "\"overhead_ns\": "), 32);
    ck_assert_int_eq(tt_count_of(r.out, "\"variant\": \"prepared\""), 4);
    ck_assert_int_eq(tt_count_of(r.out, "\"variant\": \"run\""), 4);
    ck_assert(strstr(r.out, "\"kernel\": \"opaque\""));
    ck_assert(strstr(r.out, "\"variant\": \"call_on\""));
    ck_assert(!strstr(r.out, ": null")); /* every figure measured */
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(bench_overhead_options)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("bench", "--overhead", "--reps", "0"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "--reps"));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("bench", "--overhead", "--calls", "12x"));
    assert_status(r, 2);
    ck_assert(strstr(r.err, "12x"));
    tt_tool_run_free(&r);
}
END_TEST

/*
 * The clean environment of the library tests and the tool runner's share
 * one list of the variables that steer fldispatch: a plugin's switch and
 * any hwloc variable are cleared like the library's own.
 */
START_TEST(steering_variables_cleared)
{
    const char *names[] = {"VLLM_FL_PREFER",      "VLLM_FL_CPU_ISA",  "USE_FLAGGEMS",
                           "FLD_TEMPLATE_ENABLE", "HWLOC_COMPONENTS", "HWLOC_XMLFILE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ck_assert_msg(tt_steers_fldispatch(names[i]), "%s not a steering variable", names[i]);
        setenv(names[i], "x", 1);
    }
    setenv("FLD_SRCDIR_NOT_STEERING", "kept", 1);
    ck_assert(!tt_steers_fldispatch("FLD_SRCDIR_NOT_STEERING=kept"));
    ck_assert(!tt_steers_fldispatch("VLLM_FL_"));
    tt_clear_fld_environment();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        ck_assert_msg(getenv(names[i]) == NULL, "%s survived the clean environment", names[i]);
    ck_assert_str_eq(getenv("FLD_SRCDIR_NOT_STEERING"), "kept");
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *basics = tcase_create("basics");
    tcase_set_timeout(basics, 60);
    tcase_add_test(basics, json_checker_rejects_bad_documents);
    tcase_add_test(basics, steering_variables_cleared);
    tcase_add_test(basics, help_lists_commands);
    tcase_add_test(basics, command_help);
    tcase_add_test(basics, version);
    tcase_add_test(basics, no_command_is_usage_error);
    tcase_add_test(basics, unknown_command);
    tcase_add_test(basics, unknown_options);
    suite_add_tcase(s, basics);

    TCase *list = tcase_create("list");
    tcase_set_timeout(list, 60);
    tcase_add_test(list, list_summary);
    tcase_add_test(list, list_verbose);
    tcase_add_test(list, list_template_enabled);
    tcase_add_test(list, list_json);
    tcase_add_test(list, list_strict);
    tcase_add_test(list, outside_text_is_escaped);
    tcase_add_test(list, rejected_cpu_plugin_is_reported);
    tcase_add_test(list, list_duplicates_counted_not_warned);
    tcase_add_test(list, bad_environment_is_config_error);
    suite_add_tcase(s, list);

    TCase *resolve = tcase_create("resolve");
    tcase_set_timeout(resolve, 60);
    tcase_add_test(resolve, resolve_default_is_vendor_cpu);
    tcase_add_test(resolve, resolve_json);
    tcase_add_test(resolve, resolve_prefer_reference);
    tcase_add_test(resolve, tune_writes_a_bucketed_manifest);
    tcase_add_test(resolve, tune_and_resolve_rows_usage_errors);
    tcase_add_test(resolve, resolve_denied_vendor);
    tcase_add_test(resolve, resolve_unknown_op);
    tcase_add_test(resolve, double_dash_ends_options);
    tcase_add_test(resolve, resolve_nothing_available);
    tcase_add_test(resolve, resolve_device_and_dtype_options);
    tcase_add_test(resolve, resolve_attention_backend_uses_any_dtype);
    tcase_add_test(resolve, template_plugin_selection);
    suite_add_tcase(s, resolve);

    TCase *config = tcase_create("config");
    tcase_set_timeout(config, 60);
    tcase_add_test(config, config_text);
    tcase_add_test(config, config_json);
    tcase_add_test(config, config_per_op_order);
    tcase_add_test(config, config_file_replaces_platform_file);
    tcase_add_test(config, platform_file_that_is_a_directory);
    tcase_add_test(config, platform_file_writable_by_others);
    tcase_add_test(config, config_errors);
    suite_add_tcase(s, config);

    TCase *freeze = tcase_create("freeze");
    tcase_set_timeout(freeze, 60);
    tcase_add_test(freeze, freeze_stdout);
    tcase_add_test(freeze, freeze_to_file);
    tcase_add_test(freeze, freeze_devices);
    tcase_add_test(freeze, freeze_config_error);
    suite_add_tcase(s, freeze);

    TCase *bench = tcase_create("bench");
    tcase_set_timeout(bench, 120);
    tcase_add_test(bench, bench_overhead_text);
    tcase_add_test(bench, bench_overhead_json);
    tcase_add_test(bench, bench_overhead_options);
    suite_add_tcase(s, bench);
    return s;
}

int main(void)
{
    return tt_run_suite(cli_suite());
}
