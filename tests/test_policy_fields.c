/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy changes of several fields at once and the thread's stack as a
 * whole: fld_policy_set_fields(), fld_policy_push_fields(),
 * fld_policy_push_file(), fld_policy_depth(), fld_policy_pop_to(); the
 * names check of scoped pushes; the failure memory as fld_foreach_failure()
 * lists it; the "did you mean" of an unknown op.
 *
 * Every test forks (CK_FORK), so each starts with a fresh library; an
 * in-process plugin registers "test_op" with one impl of each kind, the
 * flagos one failing when told to.
 */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/env.h"
#include "util/harness.h"
#include <fldispatch/plugin.h>

static char plugin_dir[64];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(plugin_dir, "/tmp/fld-test-fields-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(plugin_dir));
    setenv("VLLM_FL_PLUGIN_DIR", plugin_dir, 1);
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
}

static void teardown(void)
{
    rmdir(plugin_dir);
}

static const char *describe(void)
{
    static char buf[1024];
    fld_policy_describe(buf, sizeof buf);
    return buf;
}

#define assert_error_has(s)                                                                        \
    ck_assert_msg(strstr(fld_last_error(), (s)) != NULL, "'%s' not in last error: %s", (s),        \
                  fld_last_error())

#define assert_describe(s)                                                                         \
    ck_assert_msg(strcmp(describe(), (s)) == 0, "policy is '%s', expected '%s'", describe(), (s))

static atomic_bool flagos_fails;

static int ok_fn(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int flagos_fn(const void *args)
{
    (void)args;
    return atomic_load(&flagos_fails) ? FLD_EIMPL : FLD_OK;
}

static int register_test_impls(fld_registry *reg)
{
    static const fld_impl impls[] = {
        {"test_op", "default.flagos", FLD_KIND_DEFAULT, NULL, FLD_PRIORITY_DEFAULT,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, flagos_fn, NULL, NULL},
        {"test_op", "vendor.amd", FLD_KIND_VENDOR, "amd", FLD_PRIORITY_VENDOR, FLD_DEVICE_MASK_CPU,
         FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
        {"test_op", "reference.test", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        int rc = fld_registry_register(reg, &impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor test_plugin = {FLD_PLUGIN_MAGIC,
                                                  FLD_PLUGIN_ABI_MAJOR,
                                                  FLD_PLUGIN_ABI_MINOR,
                                                  sizeof(fld_plugin_descriptor),
                                                  0,
                                                  "testfields",
                                                  "1.0",
                                                  FLD_VERSION_STRING,
                                                  register_test_impls};

static void register_test_plugin(void)
{
    int rc = fld_register_plugin(&test_plugin);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin: %d %s", rc, fld_last_error());
}

static const char *winner(void)
{
    const char *id = NULL;
    int rc = fld_resolve("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id);
    ck_assert_msg(rc == FLD_OK, "fld_resolve: %d %s", rc, fld_last_error());
    return id;
}

#define assert_winner(expected) ck_assert_str_eq(winner(), (expected))

/* Log lines, to see the names check's warnings. */
static char logged[4096];

static void log_to_buffer(int level, const char *message, void *user)
{
    (void)user;
    if (level >= FLD_LOG_WARNING && strlen(logged) + strlen(message) + 2 < sizeof logged) {
        strcat(logged, message);
        strcat(logged, "\n");
    }
}

/* ---- fld_policy_push_fields --------------------------------------------- */

START_TEST(test_push_fields_is_one_override)
{
    register_test_plugin();
    const char *keys[] = {"prefer", "strict", "deny_vendors", "per_op"};
    const char *values[] = {"vendor", "1", "amd", "silu_and_mul=reference"};
    ck_assert_int_eq(fld_policy_push_per_op("test_op=reference"), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 1);
    ck_assert_int_eq(fld_policy_push_fields(0, 4, keys, values), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 2);
    /* per_op replaces only the orders it names, as fld_policy_push_per_op() */
    assert_describe("prefer=vendor;strict=1;deny=amd;per=silu_and_mul=reference;test_op=reference");
    assert_winner("reference.test");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    assert_describe("prefer=flagos;strict=0;per=test_op=reference");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 0);
}
END_TEST

START_TEST(test_push_fields_deny_adds_set_fields_replaces)
{
    register_test_plugin();
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1); /* 'intel' is no registered vendor: a warning */
    const char *keys[] = {"deny_vendors"};
    const char *values[] = {"intel"};
    ck_assert_int_eq(fld_policy_push_denied_vendors("amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_fields(0, 1, keys, values), FLD_OK);
    assert_describe("prefer=flagos;strict=0;deny=amd,intel");
    ck_assert_int_eq(fld_policy_pop_to(0), FLD_OK);
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_set_fields(0, 1, keys, values), FLD_OK);
    assert_describe("prefer=flagos;strict=0;deny=intel");
}
END_TEST

START_TEST(test_push_fields_whole_policy_starts_from_defaults)
{
    register_test_plugin();
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    const char *keys[] = {"prefer"};
    const char *values[] = {"vendor"};
    ck_assert_int_eq(fld_policy_push_fields(FLD_POLICY_WHOLE, 1, keys, values), FLD_OK);
    assert_describe("prefer=vendor;strict=0"); /* the global deny list is not inherited */
    assert_winner("vendor.amd");
    ck_assert_int_eq(fld_policy_push_fields(FLD_POLICY_WHOLE, 0, NULL, NULL), FLD_OK);
    assert_describe("prefer=flagos;strict=0");
    ck_assert_int_eq(fld_policy_pop_to(1), FLD_OK);
    assert_describe("prefer=reference;strict=0;deny=amd");
}
END_TEST

START_TEST(test_push_fields_all_or_nothing)
{
    register_test_plugin();
    const char *keys[] = {"prefer", "allow_vendors", "nonsense"};
    const char *values[] = {"vendor", "amd", "1"};
    ck_assert_int_eq(fld_policy_push_fields(0, 3, keys, values), FLD_ECONFIG);
    assert_error_has("fld_policy_push_fields: field 2");
    assert_error_has("'nonsense'");
    const char *bad_keys[] = {"prefer", "flagos_whitelist", "flagos_blacklist"};
    const char *bad_values[] = {"vendor", "rms_norm", "silu_and_mul"};
    ck_assert_int_eq(fld_policy_push_fields(0, 3, bad_keys, bad_values), FLD_ECONFIG);
    ck_assert_uint_eq(fld_policy_depth(), 0);
    assert_describe("prefer=flagos;strict=0");
    ck_assert_int_eq(fld_policy_push_fields(4, 0, NULL, NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_policy_push_fields(0, 1, NULL, NULL), FLD_EINVAL);
}
END_TEST

/* ---- the one-field pushes are fld_policy_push_fields() of one field ------ */

/* The thread's policy as fld_foreach_config_field() reports it: every
 * field's value and source, appended to report (which is NUL-terminated). */
static int report_field(const fld_config_field *f, void *user)
{
    char *report = user;
    size_t len = strlen(report);
    snprintf(report + len, 4096 - len, "%s=%s (%s)\n", f->key, f->value, f->source);
    return 0;
}

/* describe() and the report after push, popped again. */
static void pushed_state(int (*push)(const char *), const char *value, char *report)
{
    report[0] = '\0';
    int depth = (int)fld_policy_depth();
    ck_assert_msg(push(value) == FLD_OK, "push '%s': %s", value, fld_last_error());
    ck_assert_int_eq(fld_foreach_config_field(report_field, report), FLD_OK);
    size_t len = strlen(report);
    snprintf(report + len, 4096 - len, "%s\n", describe());
    ck_assert_int_eq(fld_policy_pop_to((size_t)depth), FLD_OK);
}

static const char *field_key;

static int push_as_fields(const char *value)
{
    const char *keys[] = {field_key};
    const char *values[] = {value};
    return fld_policy_push_fields(0, 1, keys, values);
}

static int push_preference(const char *value)
{
    return fld_policy_push_preference(value);
}

static int push_strict(const char *value)
{
    return fld_policy_push_strict(strcmp(value, "1") == 0);
}

/* Each one-field push leaves the thread where fld_policy_push_fields() of
 * that one field does, values and sources alike: also where a merge (the
 * deny list, the orders) adds nothing, on a policy that has none and on
 * one that has. */
START_TEST(test_one_field_pushes_are_push_fields)
{
    static const struct {
        const char *key;
        int (*push)(const char *);
        const char *value;
    } cases[] = {
        {"prefer", push_preference, "vendor"},
        {"strict", push_strict, "1"},
        {"strict", push_strict, "0"},
        {"allow_vendors", fld_policy_push_allowed_vendors, "AMD"},
        {"allow_vendors", fld_policy_push_allowed_vendors, ""},
        {"deny_vendors", fld_policy_push_denied_vendors, "amd"},
        {"deny_vendors", fld_policy_push_denied_vendors, ""},
        {"per_op", fld_policy_push_per_op, "test_op=vendor|reference"},
        {"per_op", fld_policy_push_per_op, ""},
    };
    static char one[4096], fields[4096];
    register_test_plugin();
    for (int base = 0; base < 2; base++) {
        /* base 1: a policy that already has a deny list and orders */
        if (base == 1) {
            ck_assert_int_eq(fld_policy_push_denied_vendors("amd"), FLD_OK);
            ck_assert_int_eq(fld_policy_push_per_op("test_op=reference"), FLD_OK);
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            pushed_state(cases[i].push, cases[i].value, one);
            field_key = cases[i].key;
            pushed_state(push_as_fields, cases[i].value, fields);
            ck_assert_msg(strcmp(one, fields) == 0, "%s='%s' on base %d:\n%s\nvs push_fields:\n%s",
                          cases[i].key, cases[i].value, base, one, fields);
        }
    }
}
END_TEST

/* ---- the names check of scoped pushes ------------------------------------ */

START_TEST(test_push_names_strict_in_the_same_push)
{
    register_test_plugin();
    const char *keys[] = {"per_op", "strict"};
    const char *values[] = {"test_po=vendor", "1"};
    ck_assert_int_eq(fld_policy_push_fields(0, 2, keys, values), FLD_ECONFIG);
    assert_error_has("no op named 'test_po'");
    assert_error_has("did you mean 'test_op'");
    ck_assert_uint_eq(fld_policy_depth(), 0);
    /* the push_* functions, under a strict thread policy */
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_int_eq(fld_policy_push_per_op("test_po=vendor"), FLD_ECONFIG);
    assert_error_has("fld_policy_push_per_op");
    ck_assert_int_eq(fld_policy_push_allowed_vendors("amb"), FLD_ECONFIG);
    assert_error_has("no vendor named 'amb'");
    ck_assert_int_eq(fld_policy_push_denied_vendors("amd,amb"), FLD_ECONFIG);
    ck_assert_uint_eq(fld_policy_depth(), 1);
    ck_assert_int_eq(fld_policy_push_per_op("test_op=vendor:amd"), FLD_OK);
}
END_TEST

START_TEST(test_push_names_warn_when_not_strict)
{
    register_test_plugin();
    fld_log_set_callback(log_to_buffer, NULL);
    logged[0] = '\0';
    ck_assert_int_eq(fld_policy_push_per_op("test_po=vendor"), FLD_OK);
    ck_assert_msg(strstr(logged, "no op named 'test_po'"), "logged: %s", logged);
    ck_assert_msg(strstr(logged, "did you mean 'test_op'"), "logged: %s", logged);
    /* only the names the push brings: the inherited order is not reported again */
    logged[0] = '\0';
    ck_assert_int_eq(fld_policy_push_preference("vendor"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_allowed_vendors("amd"), FLD_OK);
    ck_assert_str_eq(logged, "");
    fld_log_set_callback(NULL, NULL);
}
END_TEST

/* ---- fld_policy_push_file ------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_push_file)
{
    register_test_plugin();
    char path[128];
    snprintf(path, sizeof path, "%s/scope.yaml", plugin_dir);
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    write_file(path, "prefer: reference\nop_backends:\n  test_op: [vendor, reference]\n");
    ck_assert_int_eq(fld_policy_push_file(path), FLD_OK);
    assert_describe("prefer=reference;strict=0;per=test_op=vendor|reference");
    assert_winner("vendor.amd"); /* a whole policy: the global deny list is gone */
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    write_file(path, "prefer: fastest\n");
    ck_assert_int_eq(fld_policy_push_file(path), FLD_ECONFIG);
    assert_error_has("fld_policy_push_file");
    assert_error_has("scope.yaml:1");
    write_file(path, "strict: true\nop_backends:\n  test_pi: [vendor]\n");
    ck_assert_int_eq(fld_policy_push_file(path), FLD_ECONFIG);
    assert_error_has("did you mean 'test_op'");
    ck_assert_uint_eq(fld_policy_depth(), 0);
    unlink(path);
    ck_assert_int_eq(fld_policy_push_file(path), FLD_ECONFIG);
    ck_assert_int_eq(fld_policy_push_file(NULL), FLD_EINVAL);
}
END_TEST

/* ---- depth and pop_to ----------------------------------------------------- */

START_TEST(test_pop_to_clears_the_thread)
{
    register_test_plugin();
    ck_assert_int_eq(fld_policy_pop_to(0), FLD_OK); /* nothing pushed: fine */
    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_denied_vendors("amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 3);
    assert_winner("reference.test");
    ck_assert_int_eq(fld_policy_pop_to(5), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 3);
    ck_assert_int_eq(fld_policy_pop_to(1), FLD_OK);
    assert_describe("prefer=reference;strict=0");
    ck_assert_int_eq(fld_policy_pop_to(0), FLD_OK);
    ck_assert_uint_eq(fld_policy_depth(), 0);
    assert_describe("prefer=flagos;strict=0");
    assert_winner("default.flagos");
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
}
END_TEST

/* ---- fld_policy_set_fields ------------------------------------------------ */

START_TEST(test_set_fields)
{
    register_test_plugin();
    const char *keys[] = {"prefer", "deny_vendors", "per_op"};
    const char *values[] = {"vendor", "cuda", "test_op=reference"};
    ck_assert_int_eq(fld_policy_set_fields(0, 3, keys, values), FLD_OK);
    assert_describe("prefer=vendor;strict=0;deny=cuda;per=test_op=reference");
    /* all or nothing: the second field is refused, the first not applied */
    const char *bad_keys[] = {"prefer", "strict"};
    const char *bad_values[] = {"reference", "maybe"};
    ck_assert_int_eq(fld_policy_set_fields(0, 2, bad_keys, bad_values), FLD_ECONFIG);
    assert_error_has("fld_policy_set_fields: field 1");
    assert_describe("prefer=vendor;strict=0;deny=cuda;per=test_op=reference");
    /* names: strict in the same change makes a typo an error */
    const char *typo_keys[] = {"strict", "allow_vendors"};
    const char *typo_values[] = {"1", "amb"};
    ck_assert_int_eq(fld_policy_set_fields(0, 2, typo_keys, typo_values), FLD_ECONFIG);
    assert_error_has("no vendor named 'amb'");
    assert_describe("prefer=vendor;strict=0;deny=cuda;per=test_op=reference");
    /* a whole policy */
    ck_assert_int_eq(fld_policy_set_fields(FLD_POLICY_WHOLE, 1, keys, values), FLD_OK);
    assert_describe("prefer=vendor;strict=0");
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    assert_describe("prefer=flagos;strict=0");
}
END_TEST

/* ---- fld_foreach_failure --------------------------------------------------- */

struct seen {
    int n;
    char text[512];
};

static int collect(const fld_failure_info *info, void *user)
{
    struct seen *s = user;
    size_t len = strlen(s->text);
    snprintf(s->text + len, sizeof s->text - len, "%s%s@%d/%d:%s", s->n ? ";" : "", info->op,
             info->device_type, info->dtype.bits, info->impl_id);
    s->n++;
    return 0;
}

static int stop_at_first(const fld_failure_info *info, void *user)
{
    (void)info;
    (void)user;
    return 7;
}

START_TEST(test_foreach_failure)
{
    register_test_plugin();
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
    struct seen s = {0};
    ck_assert_int_eq(fld_foreach_failure(collect, &s), 0);
    ck_assert_int_eq(s.n, 0);
    atomic_store(&flagos_fails, true);
    int arg = 0;
    ck_assert_int_eq(fld_call_by_name("test_op", &arg), FLD_OK); /* fell back */
    ck_assert_int_eq(fld_foreach_failure(collect, &s), 0);
    ck_assert_str_eq(s.text, "test_op@0/0:default.flagos");
    ck_assert_int_eq(fld_foreach_failure(stop_at_first, NULL), 7);
    ck_assert_int_eq(fld_foreach_failure(NULL, NULL), FLD_EINVAL);

    /* a scope remembers its own failures; the global ones are listed too */
    ck_assert_int_eq(fld_policy_push_per_op("test_op=flagos|reference"), FLD_OK);
    ck_assert_int_eq(fld_call_by_name("test_op", &arg), FLD_OK);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(fld_foreach_failure(collect, &s), 0);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    ck_assert_int_eq(fld_clear_failures("test_op"), FLD_OK);
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(fld_foreach_failure(collect, &s), 0);
    ck_assert_int_eq(s.n, 0);
}
END_TEST

/* ---- did you mean ------------------------------------------------------------ */

START_TEST(test_unknown_op_suggests)
{
    register_test_plugin();
    const char *id;
    ck_assert_int_eq(fld_resolve("rms_nrom", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_ENOTFOUND);
    assert_error_has("no op named 'rms_nrom'");
    assert_error_has("did you mean 'rms_norm'");
    fld_resolution *res;
    ck_assert_int_eq(fld_explain("test_pp", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_ENOTFOUND);
    assert_error_has("did you mean 'test_op'");
    ck_assert_int_eq(fld_clear_failures("tset_op"), FLD_ENOTFOUND);
    assert_error_has("did you mean 'test_op'");
    ck_assert_int_eq(fld_resolve("zzzzzzzzzz", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_ENOTFOUND);
    ck_assert_ptr_null(strstr(fld_last_error(), "did you mean"));
}
END_TEST

static Suite *fields_suite(void)
{
    Suite *s = suite_create("policy_fields");
    TCase *tc = tcase_create("fields");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_push_fields_is_one_override);
    tcase_add_test(tc, test_push_fields_deny_adds_set_fields_replaces);
    tcase_add_test(tc, test_push_fields_whole_policy_starts_from_defaults);
    tcase_add_test(tc, test_push_fields_all_or_nothing);
    tcase_add_test(tc, test_one_field_pushes_are_push_fields);
    tcase_add_test(tc, test_push_names_strict_in_the_same_push);
    tcase_add_test(tc, test_push_names_warn_when_not_strict);
    tcase_add_test(tc, test_push_file);
    tcase_add_test(tc, test_pop_to_clears_the_thread);
    tcase_add_test(tc, test_set_fields);
    tcase_add_test(tc, test_foreach_failure);
    tcase_add_test(tc, test_unknown_op_suggests);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(fields_suite());
}
