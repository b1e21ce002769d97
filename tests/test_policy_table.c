/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy-field table (core/policy/policy_table.h) walked row by row through
 * fld__policy_field_row(): every row is complete and its names unique, its
 * exclusive partner names it back, and every field is set by its
 * environment variable, by its key in a YAML policy file and by
 * fld_policy_set(), and is reported by fld_foreach_config_field() and by
 * `fldispatch config --json` with the source that set it. A row whose field
 * one of these paths forgot fails here.
 */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "util/env.h"
#include "util/harness.h"
#include "util/tool.h"

static char tmp_dir[64];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(tmp_dir, "/tmp/fld-test-table-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    setenv("VLLM_FL_PLUGIN_DIR", tmp_dir, 1);
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
}

static void teardown(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/policy.yaml", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);
}

/* A value of each kind, as the environment and fld_policy_set() take it,
 * and as a YAML value. */
struct sample {
    const char *kind, *text, *yaml;
};

static const struct sample samples[] = {
    {"prefer", "vendor", "vendor"},       {"flag", "1", "true"},
    {"switch", "0", "false"},             {"names", "rms_norm", "[rms_norm]"},
    {"vendors", "cpu", "[cpu]"},          {"orders", "rms_norm=reference", "{rms_norm: reference}"},
    {"custom", "-rms_norm", "[-rms_norm]"},
};

static const struct sample *sample_of(const struct fld_tool_policy_field *row)
{
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
        if (strcmp(samples[i].kind, row->kind) == 0)
            return &samples[i];
    ck_abort_msg("policy field '%s': kind '%s' has no sample in this test", row->key, row->kind);
    return NULL;
}

/* The source fld_foreach_config_field() gives the field reported as key
 * (an order: "key.OP"). */
struct lookup {
    const char *key;
    char source[256];
    bool found;
};

static int find_field(const fld_config_field *f, void *user)
{
    struct lookup *l = user;
    size_t n = strlen(l->key);
    if (strncmp(f->key, l->key, n) != 0 || (f->key[n] && f->key[n] != '.'))
        return 0;
    snprintf(l->source, sizeof l->source, "%s", f->source);
    l->found = true;
    return 1;
}

static const char *reported_source(const char *key)
{
    static struct lookup l;
    l = (struct lookup){.key = key};
    ck_assert_int_eq(fld_foreach_config_field(find_field, &l), 1);
    ck_assert_msg(l.found, "field '%s' is not reported", key);
    return l.source;
}

static unsigned row_count(void)
{
    unsigned n = 0;
    while (fld__policy_field_row(n))
        n++;
    return n;
}

START_TEST(test_rows_complete_and_unique)
{
    unsigned n = row_count();
    ck_assert_uint_gt(n, 0);
    for (unsigned i = 0; i < n; i++) {
        const struct fld_tool_policy_field *r = fld__policy_field_row(i);
        ck_assert_msg(r->key && *r->key && r->yaml && *r->yaml && r->word && *r->word,
                      "row %u has an empty name", i);
        ck_assert_msg(r->env && (strncmp(r->env, "VLLM_FL_", 8) == 0 ||
                                 strcmp(r->env, "USE_FLAGGEMS") == 0),
                      "row '%s': environment variable '%s'", r->key, r->env ? r->env : "(null)");
        sample_of(r);
        for (unsigned j = 0; j < i; j++) {
            const struct fld_tool_policy_field *o = fld__policy_field_row(j);
            ck_assert_str_ne(r->key, o->key);
            ck_assert_str_ne(r->env, o->env);
            ck_assert_str_ne(r->yaml, o->yaml);
            ck_assert_str_ne(r->word, o->word);
        }
        if (r->partner >= 0) {
            const struct fld_tool_policy_field *p = fld__policy_field_row((unsigned)r->partner);
            ck_assert_ptr_nonnull(p);
            ck_assert_msg(p->partner == (int)i, "'%s' excludes '%s', not back", r->key, p->key);
            ck_assert_str_eq(p->kind, r->kind);
        }
    }
    ck_assert_ptr_null(fld__policy_field_row(n));
}
END_TEST

START_TEST(test_every_row_from_the_environment)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    const struct fld_tool_policy_field *r;
    for (unsigned i = 0; (r = fld__policy_field_row(i)); i++) {
        setenv(r->env, sample_of(r)->text, 1);
        ck_assert_msg(fld_reload() == FLD_OK, "%s=%s: %s", r->env, sample_of(r)->text,
                      fld_last_error());
        ck_assert_str_eq(reported_source(r->yaml), r->env);
        unsetenv(r->env);
    }
}
END_TEST

START_TEST(test_every_row_from_a_policy_file)
{
    char path[128], expected[160];
    snprintf(path, sizeof path, "%s/policy.yaml", tmp_dir);
    snprintf(expected, sizeof expected, "%s:1", path);
    const struct fld_tool_policy_field *r;
    for (unsigned i = 0; (r = fld__policy_field_row(i)); i++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "%s: %s\n", r->yaml, sample_of(r)->yaml);
        fclose(f);
        ck_assert_msg(fld_policy_load_file(path) == FLD_OK, "%s: %s: %s", r->yaml,
                      sample_of(r)->yaml, fld_last_error());
        ck_assert_str_eq(reported_source(r->yaml), expected);
    }
}
END_TEST

START_TEST(test_every_row_by_key_and_by_variable_name)
{
    const struct fld_tool_policy_field *r;
    for (unsigned i = 0; (r = fld__policy_field_row(i)); i++) {
        ck_assert_msg(fld_policy_set(r->key, sample_of(r)->text) == FLD_OK, "%s: %s", r->key,
                      fld_last_error());
        ck_assert_str_eq(reported_source(r->yaml), "fld_policy_set");
        ck_assert_int_eq(fld_policy_reset(), FLD_OK);
        ck_assert_msg(fld_policy_set(r->env, sample_of(r)->text) == FLD_OK, "%s: %s", r->env,
                      fld_last_error());
        ck_assert_str_eq(reported_source(r->yaml), "fld_policy_set");
        ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    }
}
END_TEST

START_TEST(test_every_row_in_config_json)
{
    const struct fld_tool_policy_field *r;
    for (unsigned i = 0; (r = fld__policy_field_row(i)); i++) {
        char env[256], key[128], source[128];
        struct tt_tool_run run;
        snprintf(env, sizeof env, "%s=%s", r->env, sample_of(r)->text);
        snprintf(key, sizeof key, "\"key\": \"%s", r->yaml);
        snprintf(source, sizeof source, "\"source\": \"%s\"", r->env);
        tt_tool_run(&run, ENV(env), ARGS("config", "--json"));
        assert_status(run, 0);
        const char *at = strstr(run.out, key);
        ck_assert_msg(at, "%s: no %s in:\n" CLIP, env, key, run.out);
        const char *end = strchr(at, '}');
        const char *src = strstr(at, source);
        ck_assert_msg(src && end && src < end, "%s: %s is not the source of %s in:\n" CLIP, env,
                      source, key, run.out);
        tt_tool_run_free(&run);
    }
}
END_TEST

static Suite *table_suite(void)
{
    Suite *s = suite_create("policy_table");
    TCase *tc = tcase_create("rows");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_rows_complete_and_unique);
    tcase_add_test(tc, test_every_row_from_the_environment);
    tcase_add_test(tc, test_every_row_from_a_policy_file);
    tcase_add_test(tc, test_every_row_by_key_and_by_variable_name);
    tcase_add_test(tc, test_every_row_in_config_json);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(table_suite());
}
