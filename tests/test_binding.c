/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/registry/binding_registration.c and binding_call.c: implementations
 * a language binding registers with a context pointer (binding.h). They
 * are listed, selected under the policy, run through the chain with
 * fallback and failure memory as plugin kernels are; registration is
 * all-or-nothing per call; a binding's own argument record reaches binding
 * implementations only; the binding's direct path (fld_binding_direct)
 * follows registry changes and failures.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "util/harness.h"

/* The binding's argument record of the tests: what each implementation saw. */
struct record {
    int calls[4];
    int fail_with[4]; /* status impl i returns */
};

static int kernel(void *ctx, const void *args)
{
    int i = (int)(intptr_t)ctx;
    struct record *r = (struct record *)args;
    r->calls[i]++;
    if (r->fail_with[i]) {
        fld_set_error("impl %d failed on purpose", i);
        return r->fail_with[i];
    }
    return FLD_OK;
}

static fld_binding_impl impl(const char *op, const char *id, fld_kind kind, const char *vendor,
                             int i)
{
    return (fld_binding_impl){
        .op = op,
        .impl_id = id,
        .kind = kind,
        .vendor = vendor,
        .priority = kind == FLD_KIND_VENDOR ? 100 : 50,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = kernel,
        .ctx = (void *)(intptr_t)i,
    };
}

struct find_plugin {
    const char *name;
    fld_plugin_status st;
    char reason[512];
    int found;
};

static int find_plugin_cb(const fld_plugin_info *info, void *user)
{
    struct find_plugin *f = user;
    if (strcmp(info->name, f->name) == 0) {
        f->st = info->status;
        snprintf(f->reason, sizeof f->reason, "%s", info->reason);
        f->found = 1;
    }
    return 0;
}

/* The listed status and reason of plugin `name`; 0 when it is not listed. */
static int plugin_status(const char *name, fld_plugin_status *st, char *reason, size_t size)
{
    struct find_plugin f = {.name = name};
    ck_assert_int_eq(fld_foreach_plugin(find_plugin_cb, &f), FLD_OK);
    *st = f.st;
    snprintf(reason, size, "%s", f.reason);
    return f.found;
}

START_TEST(registered_and_selected_with_fallback)
{
    const fld_binding_impl impls[] = {
        impl("host_op", "vendor.py", FLD_KIND_VENDOR, "py", 0),
        impl("host_op", "reference.py", FLD_KIND_REFERENCE, NULL, 1),
    };
    ck_assert_int_eq(fld_binding_register("binding", "1.0", "test:binding", impls, 2), FLD_OK);
    const char *id;
    ck_assert_int_eq(fld_resolve("host_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.py");
    fld_op op = fld_op_lookup("host_op");
    ck_assert_ptr_nonnull(op);

    struct record r;
    memset(&r, 0, sizeof r);
    fld_binding_direct direct;
    ck_assert_int_eq(fld_binding_call(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, &direct), FLD_OK);
    ck_assert_int_eq(r.calls[0], 1);
    /* served once: the binding may now call it directly */
    ck_assert_ptr_eq(direct.fn, kernel);
    ck_assert_ptr_eq(direct.ctx, (void *)0);
    ck_assert_uint_eq(direct.stamp, fld_binding_stamp());
    uint64_t stamp;
    ck_assert_int_eq(fld_binding_op_keyed(op, &stamp), 0);
    ck_assert_uint_eq(stamp, direct.stamp);
    void *ctx = direct.ctx;

    /* a failure falls back and is remembered */
    r.fail_with[0] = FLD_EIMPL;
    ck_assert_int_eq(
        fld_binding_first_failed(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, ctx, FLD_EIMPL), FLD_OK);
    ck_assert_int_eq(r.calls[1], 1);
    ck_assert_int_eq(fld_binding_call(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, &direct), FLD_OK);
    ck_assert_int_eq(r.calls[0], 1); /* not tried again */
    ck_assert_int_eq(r.calls[1], 2);
    /* the first has failed: no direct call */
    ck_assert_ptr_null(direct.fn);
    ck_assert_ptr_null(direct.ctx);
    ck_assert_uint_eq(direct.stamp, 0);

    /* a registration changes the stamp */
    uint64_t before = fld_binding_stamp();
    const fld_binding_impl more = impl("host_op", "default.py", FLD_KIND_DEFAULT, NULL, 2);
    ck_assert_int_eq(fld_binding_register("binding", "1.0", "test:binding", &more, 1), FLD_OK);
    ck_assert_uint_ne(fld_binding_stamp(), before);
    ck_assert_int_eq(fld_binding_call(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, NULL), FLD_OK);
    ck_assert_int_eq(r.calls[2], 1);
}
END_TEST

START_TEST(all_or_nothing_and_rejected_record)
{
    const fld_binding_impl impls[] = {
        impl("host_a", "vendor.ok", FLD_KIND_VENDOR, "x", 0),
        impl("host_b", "vendor.novendor", FLD_KIND_VENDOR, NULL, 1),
    };
    ck_assert_int_eq(fld_binding_register("halfway", "", "test:halfway", impls, 2), FLD_EINVAL);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "vendor.novendor"));
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "host_b"));
    ck_assert_ptr_null(fld_op_lookup("host_a")); /* nothing of it stays */
    fld_plugin_status st;
    char reason[512];
    ck_assert(plugin_status("halfway", &st, reason, sizeof reason));
    ck_assert_int_eq(st, FLD_PLUGIN_REJECTED);
    ck_assert_ptr_nonnull(strstr(reason, "vendor.novendor"));
    /* a null fn names op and impl */
    fld_binding_impl nofn = impl("host_c", "reference.nofn", FLD_KIND_REFERENCE, NULL, 0);
    nofn.fn = NULL;
    ck_assert_int_eq(fld_binding_register("nofn", "", "test:nofn", &nofn, 1), FLD_EINVAL);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "'reference.nofn' for op 'host_c'"));
    /* a plugin file's name cannot be taken */
    const fld_binding_impl ok = impl("host_d", "reference.d", FLD_KIND_REFERENCE, NULL, 0);
    ck_assert_int_eq(fld_binding_register("reference", "", "test:x", &ok, 1), FLD_ESTATE);
    /* a failed import is recorded */
    ck_assert_int_eq(fld_binding_reject("broken_pkg", "", "test:broken", "import failed: X"),
                     FLD_OK);
    ck_assert(plugin_status("broken_pkg", &st, reason, sizeof reason));
    ck_assert_int_eq(st, FLD_PLUGIN_REJECTED);
    ck_assert_str_eq(reason, "import failed: X");
}
END_TEST

/* A plugin kernel for an op a binding also serves: it must never see the binding's record. */
static int plugin_kernel_calls;
static int plugin_kernel(const void *args)
{
    (void)args;
    plugin_kernel_calls++;
    return FLD_OK;
}

static int register_mixed(fld_registry *reg)
{
    const fld_impl c = {.op = "mixed_op",
                        .impl_id = "vendor.c",
                        .kind = FLD_KIND_VENDOR,
                        .vendor = "c",
                        .priority = 200,
                        .devices = FLD_DEVICE_MASK_ALL,
                        .dtypes = FLD_DTYPE_MASK_ALL,
                        .fn = plugin_kernel};
    return fld_registry_register(reg, &c);
}

static const fld_plugin_descriptor mixed_desc = {FLD_PLUGIN_MAGIC,
                                                 FLD_PLUGIN_ABI_MAJOR,
                                                 FLD_PLUGIN_ABI_MINOR,
                                                 sizeof(fld_plugin_descriptor),
                                                 0,
                                                 "mixed",
                                                 "1",
                                                 FLD_VERSION_STRING,
                                                 register_mixed};

START_TEST(plugin_kernels_decline_a_binding_record)
{
    ck_assert_int_eq(fld_register_plugin(&mixed_desc), FLD_OK);
    const fld_binding_impl h = impl("mixed_op", "reference.py", FLD_KIND_REFERENCE, NULL, 0);
    ck_assert_int_eq(fld_binding_register("mixedpy", "", "test:mixedpy", &h, 1), FLD_OK);
    fld_op op = fld_op_lookup("mixed_op");
    struct record r;
    memset(&r, 0, sizeof r);
    fld_binding_direct direct;
    ck_assert_int_eq(fld_binding_call(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, &direct), FLD_OK);
    ck_assert_int_eq(plugin_kernel_calls, 0);
    ck_assert_int_eq(r.calls[0], 1);
    /* the plugin kernel comes first: nothing for the binding to call directly */
    ck_assert_ptr_null(direct.fn);
    /* through fld_call the plugin kernel (first by priority) serves, as before */
    int dummy = 0;
    ck_assert_int_eq(fld_call(op, &dummy), FLD_OK);
    ck_assert_int_eq(plugin_kernel_calls, 1);
    /* with only the plugin kernel left, a binding call names the cause */
    ck_assert_int_eq(fld_policy_push_per_op("mixed_op=vendor"), FLD_OK);
    direct.stamp = 1;
    ck_assert_int_eq(fld_binding_call(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, &direct),
                     FLD_EUNAVAILABLE);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "C implementation"));
    ck_assert_uint_eq(direct.stamp, 0); /* a failed call says nothing to call directly */
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(plugin_kernel_calls, 1);
    /* a catalog op takes no binding record */
    ck_assert_int_eq(
        fld_binding_call(fld_op_lookup("rms_norm"), FLD_DEVICE_CPU, FLD_DTYPE_F32, &r, NULL),
        FLD_EINVAL);
}
END_TEST

START_TEST(unavailable_reason_is_listed)
{
    fld_binding_impl h = impl("unav_op", "vendor.gpu", FLD_KIND_VENDOR, "gpu", 0);
    h.unavailable_reason = "no GPU here";
    ck_assert_int_eq(fld_binding_register("unav", "", "test:unav", &h, 1), FLD_OK);
    fld_resolution *res;
    ck_assert_int_eq(fld_explain("unav_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    ck_assert_ptr_null(res->selected);
    ck_assert_uint_eq(res->n_rejected, 1);
    ck_assert_ptr_nonnull(strstr(res->rejected[0].reason, "no GPU here"));
    fld_resolution_free(res);
    fld_plugin_status st;
    char reason[512];
    ck_assert(plugin_status("unav", &st, reason, sizeof reason));
    ck_assert_int_eq(st, FLD_PLUGIN_UNAVAILABLE);
}
END_TEST

static Suite *binding_suite(void)
{
    Suite *s = suite_create("binding");
    TCase *tc = tcase_create("binding implementations");
    tcase_add_test(tc, registered_and_selected_with_fallback);
    tcase_add_test(tc, all_or_nothing_and_rejected_record);
    tcase_add_test(tc, plugin_kernels_decline_a_binding_record);
    tcase_add_test(tc, unavailable_reason_is_listed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_binding", binding_suite());
}
