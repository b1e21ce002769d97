/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/base/escape.c: values echoed in messages are escaped. The helper is
 * compiled into this program (it is hidden in the library) and checked
 * against an independent UTF-8 checker; then the library's own messages are
 * checked end to end: fld_last_error(), log lines through the callback and
 * on the tool's stderr, plugin reasons, for values from the environment, a
 * YAML file and a plugin file name that carry terminal escape sequences and
 * invalid UTF-8.
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/base/escape.c"

#include <fldispatch/plugin.h>

#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"
#include "util/tool.h"

/* ---- an independent checker ------------------------------------------------- */

/*
 * Whether s is text a terminal shows as it is: well-formed UTF-8 (checked
 * by code point ranges, not by the library's table), no C0 or C1 control,
 * no DEL, no bidirectional override. *why says what was found.
 */
static bool clean_text(const char *s, const char **why)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned long cp;
        int n;
        if (*p < 0x80) {
            cp = *p;
            n = 1;
        } else if ((*p & 0xe0) == 0xc0) {
            cp = *p & 0x1f;
            n = 2;
        } else if ((*p & 0xf0) == 0xe0) {
            cp = *p & 0x0f;
            n = 3;
        } else if ((*p & 0xf8) == 0xf0) {
            cp = *p & 0x07;
            n = 4;
        } else {
            *why = "invalid lead byte";
            return false;
        }
        for (int i = 1; i < n; i++) {
            if ((p[i] & 0xc0) != 0x80) {
                *why = "truncated sequence";
                return false;
            }
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        static const unsigned long min_for[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            *why = "overlong form, surrogate or out of range";
            return false;
        }
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f)) {
            *why = "control character";
            return false;
        }
        if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
            *why = "bidirectional override";
            return false;
        }
        p += n;
    }
    return true;
}

#define ck_assert_clean(text)                                                                      \
    do {                                                                                           \
        const char *why_ = "";                                                                     \
        const char *t_ = (text);                                                                   \
        ck_assert_msg(clean_text(t_, &why_), "%s in '%s'", why_, t_);                              \
    } while (0)

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

/* ---- the helper ---------------------------------------------------------------- */

static const struct {
    const char *in, *out;
} cases[] = {
    {"plain ascii 0-9 'quoted' \\ backslash", "plain ascii 0-9 'quoted' \\ backslash"},
    {"\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"},
    {"title\x1b]0;pwned\x07", "title\\x1b]0;pwned\\x07"},
    {"tab\tnewline\ncr\rdel\x7f", "tab\\x09newline\\x0acr\\x0ddel\\x7f"},
    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
    {"csi\xc2\x9b"
     "2J",
     "csi\\u009b2J"},
    {"rtl\xe2\x80\xae"
     "evil",
     "rtl\\u202eevil"},
    {"isolate\xe2\x81\xa6"
     "x",
     "isolate\\u2066x"},
    {"bad\xff"
     "z",
     "bad\\xffz"},
    {"stray\x80"
     "z",
     "stray\\x80z"},
    {"overlong\xc0\xaf"
     "z",
     "overlong\\xc0\\xafz"},
    {"surrogate\xed\xa0\x80"
     "z",
     "surrogate\\xed\\xa0\\x80z"},
    {"past max\xf4\x90\x80\x80"
     "z",
     "past max\\xf4\\x90\\x80\\x80z"},
    {"cut\xe2\x82", "cut\\xe2\\x82"},
    {"", ""},
};

START_TEST(escapes_what_a_terminal_would_misread)
{
    char out[256];
    fld__escape(out, sizeof out, cases[_i].in);
    ck_assert_str_eq(out, cases[_i].out);
    ck_assert_clean(out);
    ck_assert_int_eq(fld__needs_escape(cases[_i].in), strcmp(cases[_i].in, cases[_i].out) != 0);
}
END_TEST

START_TEST(escaped_text_is_left_as_it_is)
{
    char once[256], twice[256];
    fld__escape(once, sizeof once, cases[_i].in);
    fld__escape(twice, sizeof twice, once);
    ck_assert_str_eq(once, twice);
}
END_TEST

START_TEST(cut_between_characters_never_inside)
{
    char out[8];
    /* "ab" then an escape of 4 bytes that does not fit in the 5 left. */
    fld__escape(out, 7, "abcd\x1b");
    ck_assert_str_eq(out, "abcd");
    fld__escape(out, 6, "ab\xe2\x82\xac\xe2\x82\xac");
    ck_assert_str_eq(out, "ab\xe2\x82\xac");
    fld__escape(out, 1, "abc");
    ck_assert_str_eq(out, "");
    fld__escape(out, sizeof out, NULL);
    ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(in_place_grows_within_the_buffer)
{
    char buf[32] = "a\x1b"
                   "b";
    fld__escape_in_place(buf, sizeof buf);
    ck_assert_str_eq(buf, "a\\x1bb");
    char small[6] = "\x1b\x1b\x1b";
    fld__escape_in_place(small, sizeof small);
    ck_assert_str_eq(small, "\\x1b");
}
END_TEST

/* ---- the library's messages ----------------------------------------------------- */

#define MAX_LINES 64
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[MAX_LINES][1100];
static int n_log;

static void capture(int level, const char *message, void *user)
{
    (void)level;
    (void)user;
    pthread_mutex_lock(&log_mu);
    if (n_log < MAX_LINES)
        snprintf(log_text[n_log++], sizeof log_text[0], "%s", message);
    pthread_mutex_unlock(&log_mu);
}

static void assert_log_clean(void)
{
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_log; i++)
        ck_assert_clean(log_text[i]);
    pthread_mutex_unlock(&log_mu);
}

static bool logged(const char *needle)
{
    bool found = false;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_log && !found; i++)
        found = strstr(log_text[i], needle) != NULL;
    pthread_mutex_unlock(&log_mu);
    return found;
}

static void setup(void)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    char empty[PATH_MAX];
    tt_make_subdir(empty, tt_make_tmpdir("esc"), "plugins", 0700);
    setenv("VLLM_FL_PLUGIN_DIR", empty, 1);
    fld_log_set_callback(capture, NULL);
}

START_TEST(environment_value_in_last_error_and_log)
{
    setup();
    setenv("VLLM_FL_PREFER", "\x1b[2J\x1b]0;owned\x07vendor\xff\xc3", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_clean(fld_last_error());
    ck_assert_contains(fld_last_error(), "VLLM_FL_PREFER");
    ck_assert_contains(fld_last_error(), "'\\x1b[2J\\x1b]0;owned\\x07vendor\\xff\\xc3'");
    assert_log_clean();
}
END_TEST

START_TEST(unknown_variable_name_in_warning)
{
    setup();
    setenv("VLLM_FL_PREFR\x1b[8m", "vendor", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert(logged("VLLM_FL_PREFR\\x1b[8m"));
    assert_log_clean();
}
END_TEST

START_TEST(yaml_value_in_last_error)
{
    setup();
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/policy.yaml", tt_make_tmpdir("escyaml"));
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("prefer: \"vendor\\e[5m\"\nallow_vendors: [\"cu\\u202eda\"]\n", f);
    fclose(f);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_load_file(path), FLD_ECONFIG);
    ck_assert_clean(fld_last_error());
    ck_assert_contains(fld_last_error(), "policy.yaml:1");
    ck_assert_contains(fld_last_error(), "vendor\\x1b[5m");
    assert_log_clean();
}
END_TEST

static int find_reason(const fld_plugin_info *info, void *user)
{
    char *out = user;
    if (strstr(info->path, "fld-evil"))
        snprintf(out, 1024, "%s|%s", info->path, info->reason);
    return 0;
}

START_TEST(plugin_file_name_in_reason_and_log)
{
    setup();
    char dir[PATH_MAX], path[PATH_MAX];
    tt_make_subdir(dir, tt_make_tmpdir("escplug"), "plugins", 0700);
    snprintf(path, sizeof path, "%s/fld-evil\x1b]0;x\x07\xfe.so", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not a shared object\n", f);
    fclose(f);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char reason[1024] = "";
    ck_assert_int_eq(fld_foreach_plugin(find_reason, reason), FLD_OK);
    ck_assert_contains(reason, "dlopen failed");
    /* The path itself is the application's string; the reason the library wrote is escaped. */
    ck_assert_clean(strchr(reason, '|') + 1);
    ck_assert_contains(strchr(reason, '|') + 1, "fld-evil\\x1b]0;x\\x07\\xfe.so");
    ck_assert(logged("fld-evil\\x1b]0;x\\x07\\xfe.so"));
    assert_log_clean();
}
END_TEST

START_TEST(plugin_set_error_and_detail)
{
    setup();
    fld_set_error("kernel said \x1b[31m%s", "\xe2\x80\xae!");
    ck_assert_str_eq(fld_last_error(), "kernel said \\x1b[31m\\u202e!");
}
END_TEST

START_TEST(tool_stderr_has_no_escape_sequence)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_PREFER=\x1b[2Jvendor\xff", "VLLM_FL_UNKNOWN\x1b[1m=1"),
                ARGS("config"));
    ck_assert_int_ne(r.status, 0);
    ck_assert_msg(strchr(r.err, '\x1b') == NULL, "escape byte on stderr:\n" CLIP, r.err);
    for (char *c = r.err; *c; c++)
        if (*c == '\n')
            *c = ' '; /* the tool's own line ends */
    ck_assert_clean(r.err);
    ck_assert_contains(r.err, "\\x1b[2Jvendor\\xff");
    tt_tool_run_free(&r);
}
END_TEST

static Suite *escape_suite(void)
{
    Suite *s = suite_create("escape");
    TCase *tc = tcase_create("helper");
    tcase_add_loop_test(tc, escapes_what_a_terminal_would_misread, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_loop_test(tc, escaped_text_is_left_as_it_is, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, cut_between_characters_never_inside);
    tcase_add_test(tc, in_place_grows_within_the_buffer);
    suite_add_tcase(s, tc);

    tc = tcase_create("messages");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, environment_value_in_last_error_and_log);
    tcase_add_test(tc, unknown_variable_name_in_warning);
    tcase_add_test(tc, yaml_value_in_last_error);
    tcase_add_test(tc, plugin_file_name_in_reason_and_log);
    tcase_add_test(tc, plugin_set_error_and_detail);
    tcase_add_test(tc, tool_stderr_has_no_escape_sequence);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_escape", escape_suite());
}
