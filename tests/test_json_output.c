/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tool's --json output: the writer (tools/json.c, compiled into this
 * test) and every command's documents checked against the published
 * schemas (docs/schemas/) by a real validator, with file names, search
 * paths and plugin strings that are not valid UTF-8.
 *
 * tests/util/validate_json.py runs under /usr/bin/python3 with Debian's
 * python3-jsonschema (tests/util/schema.h).
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../tools/json.c"
#include "util/files.h"
#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

/* ---- the writer ---------------------------------------------------------------- */

/* json_write_escaped(s) as a string, in a static buffer. */
static const char *escaped(const char *s)
{
    static char out[1024];
    FILE *f = fmemopen(out, sizeof out, "w");
    ck_assert_ptr_nonnull(f);
    json_write_escaped(f, s);
    fclose(f);
    return out;
}

START_TEST(writer_keeps_valid_utf8)
{
    ck_assert_str_eq(escaped("plain"), "\"plain\"");
    ck_assert_str_eq(escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
                     "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* The largest code point, and the edges of the ranges with special second bytes. */
    ck_assert_str_eq(escaped("\xf4\x8f\xbf\xbf"), "\"\xf4\x8f\xbf\xbf\"");
    ck_assert_str_eq(escaped("\xe0\xa0\x80\xed\x9f\xbf\xf0\x90\x80\x80"),
                     "\"\xe0\xa0\x80\xed\x9f\xbf\xf0\x90\x80\x80\"");
    ck_assert_str_eq(escaped("q\"b\\n\nt\tc\x01 del\x7f"),
                     "\"q\\\"b\\\\n\\nt\\tc\\u0001 del\x7f\"");
}
END_TEST

START_TEST(writer_replaces_invalid_bytes)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\xff"
         "b",
         "\"a\\ufffdb\""},
        {"\xfe\xff", "\"\\ufffd\\ufffd\""},
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                       /* overlong '/' */
        {"\xe0\x80\xaf", "\"\\ufffd\\ufffd\\ufffd\""},            /* overlong, three bytes */
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},            /* a UTF-16 surrogate */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* past U+10FFFF */
        {"\xf5\x80\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""},
        {"\x80x", "\"\\ufffdx\""},            /* a lone continuation byte */
        {"\xe2\x82", "\"\\ufffd\\ufffd\""},   /* cut short at the end */
        {"\xe2\x82x", "\"\\ufffd\\ufffdx\""}, /* cut short before ASCII */
        {"\xc3", "\"\\ufffd\""},
        {"ok\xc3\xa9\xff\xc3\xa9", "\"ok\xc3\xa9\\ufffd\xc3\xa9\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(strcmp(escaped(cases[i].in), cases[i].out) == 0, "case %zu: %s, expected %s",
                      i, escaped(cases[i].in), cases[i].out);
}
END_TEST

START_TEST(writer_documents)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ck_assert_ptr_nonnull(f);
    struct json_writer w;
    json_begin_document(&w, f);
    json_key(&w, "path");
    json_split(&w, " /a : /b::/c\xff ", ":");
    json_key(&w, "none");
    json_split(&w, "", ",");
    json_key(&w, "absent");
    json_split(&w, NULL, ",");
    json_key(&w, "empty");
    json_text_or_null(&w, "");
    json_key(&w, "nan");
    json_double(&w, 0.0 / 0.0, 2);
    json_end_object(&w);
    json_finish(&w);
    fclose(f);
    ck_assert_str_eq(text, "{\n"
                           "  \"schema\": 1,\n"
                           "  \"path\": [\n"
                           "    \"/a\",\n"
                           "    \"/b\",\n"
                           "    \"/c\\ufffd\"\n"
                           "  ],\n"
                           "  \"none\": [],\n"
                           "  \"absent\": null,\n"
                           "  \"empty\": null,\n"
                           "  \"nan\": null\n"
                           "}\n");
    ck_assert(tt_json_valid(text));
    free(text);
}
END_TEST

/* ---- the validator checks itself ------------------------------------------------ */

START_TEST(validator_rejects_bad_documents)
{
    static const struct {
        const char *text, *finding;
    } cases[] = {
        {"{\"schema\": 1, \"plugin_path\": [\"\xff\"], \"plugins\": [], \"impls\": []}",
         "not valid UTF-8: byte 0xff"},
        {"{\"schema\": 1,}", "not valid JSON"},
        {"{\"schema\": 1, \"schema\": 1}", "duplicate key 'schema'"},
        {"{\"schema\": NaN}", "NaN is not JSON"},
        {"{\"schema\": 1, \"plugin_path\": \"/a:/b\", \"plugins\": [], \"impls\": []}",
         "$.plugin_path: '/a:/b' is not of type 'array'"},
        {"{\"schema\": 2, \"plugin_path\": [], \"plugins\": [], \"impls\": []}",
         "$.schema: 1 was expected"},
        {"{\"schema\": 1, \"plugin_path\": [], \"plugins\": [], \"impls\": [], \"extra\": 1}",
         "'extra' was unexpected"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *report = NULL;
        int rc = tt_validate_json(cases[i].text, "list", NULL, &report);
        ck_assert_msg(rc == 1 && strstr(report, cases[i].finding),
                      "case %zu: status %d, expected 1 and '%s':\n%s", i, rc, cases[i].finding,
                      report);
        free(report);
    }
    char *report = NULL;
    ck_assert_int_eq(tt_validate_json("{\"schema\": 1, \"plugin_path\": [\"/p\"], \"plugins\": [], "
                                      "\"impls\": []}",
                                      "list", NULL, &report),
                     0);
    free(report);
}
END_TEST

/* Without the jsonschema module the check fails and names the Debian package. */
START_TEST(validator_names_the_missing_package)
{
    char wrapper[PATH_MAX];
    snprintf(wrapper, sizeof wrapper, "%s/python-without-site", tt_make_tmpdir("json-py"));
    FILE *f = fopen(wrapper, "w");
    ck_assert_ptr_nonnull(f);
    /* -S: no site module, so none of the system's dist-packages. */
    fputs("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(wrapper, 0700), 0);
    char *report = NULL;
    int rc = tt_validate_json("{}", "list", wrapper, &report);
    ck_assert_msg(rc == 2 && strstr(report, "python3-jsonschema"), "status %d:\n%s", rc, report);
    free(report);
}
END_TEST

/* ---- every command, with bytes that are not UTF-8 ---------------------------------- */

/* The fixture plugins good, unavailable and bad_magic in <tmp>/plug\xffins. */
static const char *plugin_dir_not_utf8(void)
{
    static char dir[PATH_MAX];
    tt_make_subdir(dir, tt_make_tmpdir("json"), "plug\xffins", 0755);
    tt_install_fixture(NULL, dir, "plugins", "good");
    tt_install_fixture(NULL, dir, "plugins", "unavailable");
    tt_install_fixture(NULL, dir, "plugins", "bad_magic");
    return dir;
}

/* out has no byte of invalid UTF-8 left and replaced some; it validates against schema. */
static void assert_replaced_and_valid(const struct tt_tool_run *r, const char *schema)
{
    ck_assert_msg(!strchr(r->out, 0xff), "a raw 0xff byte in:\n" CLIP, r->out);
    ck_assert_msg(strstr(r->out, "\\ufffd"), "nothing replaced in:\n" CLIP, r->out);
    tt_assert_schema(r->out, schema);
}

START_TEST(list_with_invalid_utf8)
{
    char dir_env[PATH_MAX + 32];
    snprintf(dir_env, sizeof dir_env, "VLLM_FL_PLUGIN_DIR=%s", plugin_dir_not_utf8());
    struct tt_tool_run r;
    /* Plugin paths and a rejection reason that name the directory, a module name in a reason. */
    tt_tool_run(&r, ENV(dir_env, "VLLM_FL_PLUGIN_MODULES=no\xffsuch", "VLLM_FL_LOG_LEVEL=ERROR"),
                ARGS("list", "--json"));
    assert_status(r, 0);
    assert_replaced_and_valid(&r, "list");
    ck_assert_msg(strstr(r.out, "plug\\ufffdins/fld-bad_magic.so"), CLIP, r.out);
    /* The library escapes the bytes it echoes in a reason itself (core/base/escape.c: \xff as text). */
    ck_assert_msg(strstr(r.out, "\"reason\": \"VLLM_FL_PLUGIN_MODULES: plugin 'no\\\\xffsuch' not "
                                "found"),
                  CLIP, r.out);
    ck_assert(strstr(r.out, "\"status\": \"rejected\""));
    ck_assert(strstr(r.out, "\"status\": \"unavailable\""));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(doctor_with_invalid_utf8)
{
    const char *dir = plugin_dir_not_utf8();
    char dir_env[PATH_MAX + 32], one[PATH_MAX];
    snprintf(dir_env, sizeof dir_env, "VLLM_FL_PLUGIN_DIR=%s", dir);
    snprintf(one, sizeof one, "%s/fld-good.so", dir);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(dir_env), ARGS("doctor", "--json"));
    assert_status(r, 1); /* bad_magic is rejected */
    assert_replaced_and_valid(&r, "doctor");
    ck_assert(strstr(r.out, "\"plugin_path\": [\n    \""));
    tt_tool_run_free(&r);

    tt_tool_run(&r, NO_ENV, ARGS("doctor", "--json", "--", one));
    assert_status(r, 0);
    assert_replaced_and_valid(&r, "doctor");
    ck_assert(strstr(r.out, "\"plugin_path\": null"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(config_with_invalid_utf8)
{
    const char *dir = plugin_dir_not_utf8();
    char path[PATH_MAX], config_env[PATH_MAX + 32], dir_env[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/policy\xfe.yaml", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("prefer: vendor\nstrict: true\ndeny_vendors: [good]\n", f);
    fclose(f);
    snprintf(config_env, sizeof config_env, "VLLM_FL_CONFIG=%s", path);
    snprintf(dir_env, sizeof dir_env, "VLLM_FL_PLUGIN_DIR=%s", dir);
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(config_env, dir_env, "VLLM_FL_LOG_LEVEL=ERROR"), ARGS("config", "--json"));
    assert_status(r, 0);
    assert_replaced_and_valid(&r, "config");
    ck_assert_msg(strstr(r.out, "policy\\ufffd.yaml:2"), CLIP, r.out);
    ck_assert_msg(strstr(r.out, "\"value\": true,\n      \"source\": \""), CLIP, r.out);
    ck_assert(strstr(r.out, "\"config_file\": null"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(resolve_with_invalid_utf8)
{
    char dir_env[PATH_MAX + 32];
    snprintf(dir_env, sizeof dir_env, "VLLM_FL_PLUGIN_DIR=%s", plugin_dir_not_utf8());
    struct tt_tool_run r;
    /* The good fixture's op; the policy summary and reasons stay valid. */
    tt_tool_run(&r, ENV(dir_env, "VLLM_FL_LOG_LEVEL=ERROR"), ARGS("resolve", "rms_norm", "--json"));
    assert_status(r, 0);
    ck_assert(!strchr(r.out, 0xff));
    tt_assert_schema(r.out, "resolve");
    tt_tool_run_free(&r);
}
END_TEST

/*
 * The bench documents other than the kernel bench's (tests/test_bench.c) and
 * bench --overhead's (tests/test_cli.c): bench --registration --json.
 */
START_TEST(bench_registration_document)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV,
                ARGS("bench", "--registration", "--ops", "10,20", "--reps", "1", "--json"));
    assert_status(r, 0);
    tt_assert_schema(r.out, "bench");
    ck_assert_msg(strncmp(r.out, "{\n  \"schema\": 1,\n  \"benchmark\": \"registration\",", 47) ==
                      0,
                  CLIP, r.out);
    ck_assert_int_eq(tt_count_of(r.out, "\"register_ms\": "), 2);
    ck_assert(!strstr(r.out, "target"));
    tt_tool_run_free(&r);
}
END_TEST

/* The same things have the same names in every command's document. */
START_TEST(same_names_across_commands)
{
    struct tt_tool_run list, config, doctor;
    tt_tool_run(&list, NO_ENV, ARGS("list", "--json"));
    tt_tool_run(&config, NO_ENV, ARGS("config", "--json"));
    tt_tool_run(&doctor, NO_ENV, ARGS("doctor", "--json"));
    assert_status(list, 0);
    assert_status(config, 0);
    assert_status(doctor, 0);
    /* The plugin search path: one key, one array, the same value. */
    const char *a = strstr(list.out, "\"plugin_path\": ["),
               *b = strstr(config.out, "\"plugin_path\": ["),
               *c = strstr(doctor.out, "\"plugin_path\": [");
    ck_assert(a && b && c);
    size_t len = strcspn(a, "]");
    ck_assert_msg(strncmp(a, c, len + 1) == 0, "list and doctor differ:\n%.*s\n%.*s", (int)len, a,
                  (int)len, c);
    /* b is indented the same (top level), so the text compares too. */
    ck_assert(strncmp(a, b, len + 1) == 0);
    /* A plugin's status, an implementation's reason, its impl_id. */
    ck_assert(strstr(list.out, "\"status\": \"loaded\"") &&
              strstr(doctor.out, "\"status\": \"ok\""));
    ck_assert(!strstr(list.out, "unavailable_reason") && !strstr(doctor.out, "\"state\""));
    ck_assert(strstr(list.out, "\"impl_id\": ") && strstr(doctor.out, "\"impl_id\": "));
    for (const struct tt_tool_run *r = &list; r; r = r == &list     ? &config
                                                  : r == &config ? &doctor
                                                                 : NULL)
        ck_assert_msg(strncmp(r->out, "{\n  \"schema\": 1,\n", 16) == 0, CLIP, r->out);
    tt_tool_run_free(&list);
    tt_tool_run_free(&config);
    tt_tool_run_free(&doctor);
}
END_TEST

static Suite *json_suite(void)
{
    Suite *s = suite_create("json_output");
    TCase *writer = tcase_create("writer");
    tcase_add_test(writer, writer_keeps_valid_utf8);
    tcase_add_test(writer, writer_replaces_invalid_bytes);
    tcase_add_test(writer, writer_documents);
    suite_add_tcase(s, writer);

    TCase *validator = tcase_create("validator");
    tcase_set_timeout(validator, 60);
    tcase_add_test(validator, validator_rejects_bad_documents);
    tcase_add_test(validator, validator_names_the_missing_package);
    suite_add_tcase(s, validator);

    TCase *commands = tcase_create("commands");
    tcase_set_timeout(commands, 120);
    tcase_add_test(commands, list_with_invalid_utf8);
    tcase_add_test(commands, doctor_with_invalid_utf8);
    tcase_add_test(commands, config_with_invalid_utf8);
    tcase_add_test(commands, resolve_with_invalid_utf8);
    tcase_add_test(commands, same_names_across_commands);
    tcase_add_test(commands, bench_registration_document);
    suite_add_tcase(s, commands);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_json_output", json_suite());
}
