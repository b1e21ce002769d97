/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared op signatures: a plugin's fld_registry_declare_op() and a
 * binding's fld_binding_declare() (tests/plugins/sig_*.c), the parser's
 * canonical text and its errors, the catalog's signatures, and calls of a
 * declared op from C with an fld_args (checked by the host before any
 * kernel runs). Each test runs in its own process with a private plugin
 * directory holding the fixtures it names.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "util/env.h"
#include "util/files.h"
#include "util/harness.h"

static char tmp_dir[PATH_MAX];

static void setup(const char *const *fixtures)
{
    char dir[PATH_MAX];
    snprintf(tmp_dir, sizeof tmp_dir, "%s", tt_make_tmpdir("signature"));
    tt_make_subdir(dir, tmp_dir, "plugins", 0700);
    for (; fixtures && *fixtures; fixtures++)
        tt_install_fixture(NULL, dir, "plugins", *fixtures);
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s", fld_last_error());
}

struct find_plugin {
    const char *name;
    fld_plugin_status status;
    char reason[1024];
    size_t n_impls;
    bool found;
};

static int find_plugin_cb(const fld_plugin_info *info, void *user)
{
    struct find_plugin *f = user;
    if (strcmp(info->name, f->name) != 0)
        return 0;
    f->found = true;
    f->status = info->status;
    f->n_impls = info->n_impls;
    snprintf(f->reason, sizeof f->reason, "%s", info->reason);
    return 1;
}

static struct find_plugin plugin_named(const char *name)
{
    struct find_plugin f = {.name = name};
    fld_foreach_plugin(find_plugin_cb, &f);
    ck_assert_msg(f.found, "no plugin record '%s'", name);
    return f;
}

static void expect_error(int rc, int want, const char *const *fragments)
{
    const char *msg = fld_last_error();
    ck_assert_msg(rc == want, "status %s, expected %s (%s)", fld_strerror(rc), fld_strerror(want),
                  msg);
    for (; *fragments; fragments++)
        ck_assert_msg(strstr(msg, *fragments), "'%s' not in the message: %s", *fragments, msg);
}

#define EXPECT_ERROR(rc, want, ...)                                                                \
    expect_error((rc), (want), (const char *const[]){__VA_ARGS__, NULL})

/* A float32 CPU vector of n elements. */
static DLTensor vec(float *data, int64_t *shape)
{
    return (DLTensor){
        .data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLFloat, 32, 1}, .shape = shape};
}

START_TEST(declared_op_called_from_c)
{
    setup((const char *const[]){"sig_ops", NULL});
    fld_signature_info info;
    ck_assert_int_eq(fld_op_signature("sig_axpy", &info), FLD_OK);
    ck_assert_str_eq(info.schema, "(Tensor(a!) out, Tensor x, Tensor y, float alpha=1.0) -> ()");
    ck_assert_ptr_nonnull(strstr(info.declared_by, "plugin 'sig_ops'"));
    ck_assert(!info.catalog);
    ck_assert_uint_eq(info.n_args, 4);
    ck_assert_str_eq(info.args[0].name, "out");
    ck_assert_uint_eq(info.args[0].flags, FLD_ARG_WRITTEN);
    ck_assert_int_eq(info.args[3].kind, FLD_ARG_FLOAT);
    ck_assert(info.args[3].flags & FLD_ARG_HAS_DEFAULT);
    ck_assert(info.args[3].default_value.f == 1.0);
    ck_assert_int_eq(fld_op_signature("sig_fill", &info), FLD_OK);
    ck_assert_str_eq(info.schema,
                     "(Tensor(a!) out, Tensor? base, int value, bool negate=False) -> ()");

    float out[4] = {0}, x[4] = {1, 2, 3, 4}, y[4] = {10, 20, 30, 40};
    int64_t n = 4;
    DLTensor to = vec(out, &n), tx = vec(x, &n), ty = vec(y, &n);
    fld_arg a[4] = {{FLD_ARG_TENSOR, 0, {.tensor = &to}},
                    {FLD_ARG_TENSOR, 0, {.tensor = &tx}},
                    {FLD_ARG_TENSOR, 0, {.tensor = &ty}},
                    {FLD_ARG_FLOAT, 0, {.f = 2.0}}};
    fld_args args = {4, a};
    int rc = fld_call_by_name("sig_axpy", &args);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    for (int i = 0; i < 4; i++)
        ck_assert(out[i] == 2 * x[i] + y[i]);

    fld_arg f[4] = {{FLD_ARG_TENSOR, 0, {.tensor = &to}},
                    {FLD_ARG_TENSOR, 0, {.tensor = NULL}},
                    {FLD_ARG_INT, 0, {.i = 7}},
                    {FLD_ARG_BOOL, 0, {.b = true}}};
    fld_args fargs = {4, f};
    rc = fld_call(fld_op_lookup("sig_fill"), &fargs);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    for (int i = 0; i < 4; i++)
        ck_assert(out[i] == -7.0f);
    const char *impl = NULL;
    ck_assert_int_eq(fld_resolve("sig_fill", FLD_DEVICE_CPU, (DLDataType){kDLFloat, 32, 1}, &impl),
                     FLD_OK);
    ck_assert_str_eq(impl, "vendor.sig_ops");
}
END_TEST

START_TEST(bad_calls_are_refused_before_a_kernel_runs)
{
    setup((const char *const[]){"sig_ops", NULL});
    float out[4] = {5, 5, 5, 5}, x[4] = {1, 2, 3, 4}, y[4] = {1, 1, 1, 1};
    int64_t n = 4;
    DLTensor to = vec(out, &n), tx = vec(x, &n), ty = vec(y, &n);
    fld_arg a[4] = {{FLD_ARG_TENSOR, 0, {.tensor = &to}},
                    {FLD_ARG_TENSOR, 0, {.tensor = &tx}},
                    {FLD_ARG_TENSOR, 0, {.tensor = &ty}},
                    {FLD_ARG_FLOAT, 0, {.f = 1.0}}};
    fld_args args = {3, a};
    EXPECT_ERROR(fld_call_by_name("sig_axpy", &args), FLD_EINVAL, "sig_axpy", "holds 3 arguments",
                 "4");
    args.count = 4;
    a[3].kind = FLD_ARG_INT;
    EXPECT_ERROR(fld_call_by_name("sig_axpy", &args), FLD_EINVAL, "sig_axpy", "argument 3 'alpha'",
                 "float");
    a[3].kind = FLD_ARG_FLOAT;
    a[1].v.tensor = NULL;
    EXPECT_ERROR(fld_call_by_name("sig_axpy", &args), FLD_EINVAL, "sig_axpy", "tensor 'x' is NULL");
    a[1].v.tensor = &tx;
    ty.device.device_id = 1;
    EXPECT_ERROR(fld_call_by_name("sig_axpy", &args), FLD_EINVAL, "sig_axpy", "tensor 'y'", "cpu:1",
                 "tensor 'out' on cpu:0");
    EXPECT_ERROR(fld_call_on(fld_op_lookup("sig_axpy"), FLD_DEVICE_CPU,
                             (DLDataType){kDLFloat, 32, 1}, &args),
                 FLD_EINVAL, "tensor 'y'");
    EXPECT_ERROR(fld_call_by_name("sig_axpy", NULL), FLD_EINVAL, "sig_axpy", "args is NULL");
    for (int i = 0; i < 4; i++)
        ck_assert(out[i] == 5.0f);
}
END_TEST

START_TEST(same_signature_twice_loads_a_different_one_rejects_the_plugin)
{
    setup((const char *const[]){"sig_ops", "sig_same", "sig_redeclare", NULL});
    struct find_plugin same = plugin_named("sig_same");
    ck_assert_msg(same.status == FLD_PLUGIN_LOADED, "sig_same: %s", same.reason);
    ck_assert_uint_eq(same.n_impls, 1);
    struct find_plugin bad = plugin_named("sig_redeclare");
    ck_assert_int_eq(bad.status, FLD_PLUGIN_REJECTED);
    const char *want[] = {"op 'sig_axpy'",
                          "plugin 'sig_redeclare'",
                          "plugin 'sig_ops'",
                          "(Tensor(a!) out, Tensor x, int alpha) -> ()",
                          "(Tensor(a!) out, Tensor x, Tensor y, float alpha=1.0) -> ()",
                          NULL};
    for (const char *const *w = want; *w; w++)
        ck_assert_msg(strstr(bad.reason, *w), "'%s' not in: %s", *w, bad.reason);
    /* nothing of the rejected plugin stays: its own op has no impl, no signature */
    fld_signature_info info;
    ck_assert_int_ne(fld_op_signature("sig_redeclare_own", &info), FLD_OK);
    const char *impl = NULL;
    ck_assert_int_ne(fld_resolve("sig_redeclare_own", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &impl),
                     FLD_OK);
    ck_assert_int_eq(fld_op_signature("sig_axpy", &info), FLD_OK);
    ck_assert_ptr_nonnull(strstr(info.declared_by, "sig_ops"));
}
END_TEST

START_TEST(malformed_signature_rejects_the_whole_plugin)
{
    setup((const char *const[]){"sig_malformed", NULL});
    struct find_plugin bad = plugin_named("sig_malformed");
    ck_assert_int_eq(bad.status, FLD_PLUGIN_REJECTED);
    const char *want[] = {"op 'sig_malformed_bad'", "column 18", "'Tensr'", NULL};
    for (const char *const *w = want; *w; w++)
        ck_assert_msg(strstr(bad.reason, *w), "'%s' not in: %s", *w, bad.reason);
    fld_signature_info info;
    ck_assert_int_ne(fld_op_signature("sig_malformed_ok", &info), FLD_OK);
    ck_assert_int_ne(fld_op_signature("sig_malformed_bad", &info), FLD_OK);
    const char *impl = NULL;
    ck_assert_int_ne(fld_resolve("sig_malformed_ok", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &impl), FLD_OK);
}
END_TEST

/* The parser through a binding's declarations: each bad string names what is wrong. */
START_TEST(parser_errors_and_canonical_text)
{
    setup(NULL);
    static const struct {
        const char *schema, *fragment;
    } bad[] = {
        {"Tensor x) -> ()", "column 1: expected '('"},
        {"(Tensor x -> ()", "expected ',' or ')' after argument 'x'"},
        {"(Tensor x) -> Tensor", "returns '()'"},
        {"(Tensor x)", "expected '->'"},
        {"(Tensor(a) x) -> ()", "must say the tensor is written"},
        {"(int? n) -> ()", "only a tensor may be optional"},
        {"(Tensor x, Tensor x) -> ()", "'x' used twice"},
        {"(int n=1, Tensor x) -> ()", "'x' has no default but follows one"},
        {"(Tensor x=None) -> ()", "only for an optional tensor"},
        {"(int n=1.5) -> ()", "not an int default"},
        {"(bool b=1) -> ()", "True or False"},
        {"(str s=abc) -> ()", "str argument takes no default"},
        {"(Tensor 1x) -> ()", "expected an argument name"},
        {"(Tensor! out, int None) -> ()", "'None' is a Python keyword"},
        {"(Tensor x, float def=1.0) -> ()", "'def' is a Python keyword"},
        {"(Tensor x, bool lambda=True) -> ()", "'lambda' is a Python keyword"},
        {"(Tensor x, float f=-nan) -> ()", "'-nan' is not a finite float default"},
        {"(Tensor x, float f=+inf) -> ()", "'+inf' is not a finite float default"},
        {"(Tensor x, float f=-infinity) -> ()", "'-infinity' is not a finite float default"},
        {"(Tensor x, float f=nan) -> ()", "'nan' is not a float default"},
        {"(Tensor x, float f=5e-324) -> ()", "float default"},
        {"(Tensor x, int none, float Def=1e300) -> ()", NULL},
        {"(Tensor x) -> () extra", "unexpected 'extra'"},
        {"(float x) -> () ", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char op[32];
        snprintf(op, sizeof op, "parse_%zu", i);
        int rc = fld_binding_declare("binding", "1", "test:binding", op, bad[i].schema);
        if (!bad[i].fragment) {
            ck_assert_msg(rc == FLD_OK, "'%s': %s", bad[i].schema, fld_last_error());
            continue;
        }
        ck_assert_msg(rc == FLD_EINVAL, "'%s' accepted", bad[i].schema);
        ck_assert_msg(strstr(fld_last_error(), bad[i].fragment) && strstr(fld_last_error(), op),
                      "'%s' not in: %s", bad[i].fragment, fld_last_error());
        fld_signature_info info;
        ck_assert_int_eq(fld_op_signature(op, &info), FLD_ENOTFOUND);
    }
    ck_assert_int_eq(fld_binding_declare("binding", "1", "test:binding", "canon",
                                         " ( Tensor! a , str s, Tensor(zz!)? b=None, int n=+3, "
                                         "float e=1e-6, bool f=True ) -> ( ) "),
                     FLD_OK);
    fld_signature_info info;
    ck_assert_int_eq(fld_op_signature("canon", &info), FLD_OK);
    ck_assert_str_eq(info.schema, "(Tensor(a!) a, str s, Tensor(b!)? b=None, int n=3, "
                                  "float e=1e-06, bool f=True) -> ()");
    ck_assert_ptr_nonnull(strstr(info.declared_by, "binding"));
    /* the catalog's signature cannot be redeclared otherwise */
    EXPECT_ERROR(fld_binding_declare("binding", "1", "test:binding", FLD_OP_SILU_AND_MUL,
                                     "(Tensor(a!) out, Tensor x, float y) -> ()"),
                 FLD_EINVAL, "op 'silu_and_mul'", "the catalog");
    ck_assert_int_eq(fld_binding_declare("binding", "1", "test:binding", FLD_OP_SILU_AND_MUL,
                                         "(Tensor! out, Tensor x) -> ()"),
                     FLD_OK);
}
END_TEST

static int count_catalog(const fld_catalog_op_info *op, void *user)
{
    (void)op;
    ++*(int *)user;
    return 0;
}

static int n_catalog;

static int count_sig(const fld_signature_info *info, void *user)
{
    int *seen = user;
    if (seen[0] < n_catalog)
        ck_assert_msg(info->catalog, "%s listed before the catalog ends", info->op);
    if (strcmp(info->op, FLD_OP_RMS_NORM) == 0)
        ck_assert_str_eq(info->schema, "(Tensor(a!) out, Tensor x, Tensor? weight=None, "
                                       "Tensor(b!)? residual=None, float eps=1e-06) -> ()");
    if (strcmp(info->op, FLD_OP_ATTENTION_BACKEND) == 0)
        ck_assert_str_eq(info->returns, "str");
    if (strcmp(info->op, "sig_fill") == 0)
        seen[1]++;
    seen[0]++;
    return 0;
}

START_TEST(catalog_and_declared_signatures_are_listed)
{
    setup((const char *const[]){"sig_ops", NULL});
    int seen[2] = {0, 0};
    fld_foreach_catalog_op(count_catalog, &n_catalog);
    int rows = 0; /* the rows of the public catalog table */
#define FLD_CATALOG_OP(id, name, family, doc) rows++;
#include <fldispatch/catalog.def>
    ck_assert_int_eq(n_catalog, rows);
    ck_assert_int_eq(fld_foreach_signature(count_sig, seen), FLD_OK);
    ck_assert_int_eq(seen[0], n_catalog + 2);
    ck_assert_int_eq(seen[1], 1);
}
END_TEST

static Suite *signature_suite(void)
{
    Suite *s = suite_create("signature");
    TCase *tc = tcase_create("declare");
    tcase_add_test(tc, declared_op_called_from_c);
    tcase_add_test(tc, bad_calls_are_refused_before_a_kernel_runs);
    tcase_add_test(tc, same_signature_twice_loads_a_different_one_rejects_the_plugin);
    tcase_add_test(tc, malformed_signature_rejects_the_whole_plugin);
    tcase_add_test(tc, parser_errors_and_canonical_text);
    tcase_add_test(tc, catalog_and_declared_signatures_are_listed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_signature", signature_suite());
}
