/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dispatch: candidate order, filters, fallback and failure memory,
 * strict mode, the cache and its invalidation, scoped overrides, explain.
 *
 * This carries over vllm-plugin-FL's manager and call_op tests and pins
 * down the places where that system misbehaved and ours must not:
 *   - on a priority tie it picked the larger impl_id; we pick the smaller;
 *   - set_global_policy() did not forget remembered failures;
 *   - its cache ignored registry changes (a late plugin was invisible);
 *   - PREFER != flagos unregistered the flagos impls instead of ordering
 *     them later.
 *
 * Every implementation is registered in-process with fld_register_plugin()
 * and records which one ran in the opaque argument struct; the real plugins
 * are kept out by pointing VLLM_FL_PLUGIN_DIR at an empty directory.
 */
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/harness.h"
#include <fldispatch/plugin.h>

/* ------------------------------------------------------------------------ */
/* Recording implementations                                                */
/* ------------------------------------------------------------------------ */

#define NSLOTS 8

/* The opaque argument struct of the test ops: which slots ran, in order. */
struct targs {
    int who;
    int n;
    int trace[16];
};

static atomic_int runs[NSLOTS];
static int slot_status[NSLOTS];  /* what each slot's fn returns */
static bool slot_silent[NSLOTS]; /* a non-OK status without fld_set_error() */
static atomic_bool gate_open;    /* answer of gate_supports() */
static atomic_int avail_calls;   /* calls of the counting is_available */

static int run_slot(int slot, const void *args)
{
    atomic_fetch_add(&runs[slot], 1);
    /* The test owns a mutable struct; the host passes it through as const. */
    struct targs *a = (struct targs *)args;
    if (a) {
        a->who = slot;
        if (a->n < 16)
            a->trace[a->n++] = slot;
    }
    if (slot_status[slot] != FLD_OK && !slot_silent[slot])
        fld_set_error("slot %d broke on purpose", slot);
    return slot_status[slot];
}

#define SLOT_FN(i)                                                                                 \
    static int fn##i(const void *args)                                                             \
    {                                                                                              \
        return run_slot(i, args);                                                                  \
    }
SLOT_FN(0)
SLOT_FN(1)
SLOT_FN(2)
SLOT_FN(3)
SLOT_FN(4)
SLOT_FN(5)
SLOT_FN(6)
SLOT_FN(7)
static const fld_kernel_fn slot_fns[NSLOTS] = {fn0, fn1, fn2, fn3, fn4, fn5, fn6, fn7};

/* For catalog ops: count and return, never touching the op's own argument struct. */
static int count_slot(int slot)
{
    atomic_fetch_add(&runs[slot], 1);
    if (slot_status[slot] != FLD_OK)
        fld_set_error("slot %d broke on purpose", slot);
    return slot_status[slot];
}

static int catalog_fn0(const void *args)
{
    return count_slot(0);
}

static int catalog_fn1(const void *args)
{
    return count_slot(1);
}

static bool gate_supports(const void *args)
{
    return atomic_load(&gate_open);
}

static bool never_available(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    *reason = "no device here";
    return false;
}

static bool counted_available(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    return true;
}

static fld_impl mk(const char *op, const char *impl_id, fld_kind kind, const char *vendor,
                   int priority, int slot)
{
    fld_impl m = {
        .op = op,
        .impl_id = impl_id,
        .kind = kind,
        .vendor = vendor,
        .priority = priority,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = slot_fns[slot],
    };
    return m;
}

static fld_impl mk_catalog(const char *op, const char *impl_id, fld_kind kind, const char *vendor,
                           int priority, int slot)
{
    fld_impl m = mk(op, impl_id, kind, vendor, priority, 0);
    m.fn = slot == 0 ? catalog_fn0 : catalog_fn1;
    return m;
}

/* ------------------------------------------------------------------------ */
/* In-process plugins                                                       */
/* ------------------------------------------------------------------------ */

/* register_builtins has no user pointer: it registers what its caller staged. */
static _Thread_local const fld_impl *pending;
static _Thread_local size_t n_pending;

static int register_pending(fld_registry *reg)
{
    for (size_t i = 0; i < n_pending; i++)
        fld_registry_register(reg, &pending[i]);
    return 0;
}

/* Descriptors must outlive the library: a static pool, fresh in every forked test. */
static fld_plugin_descriptor descriptor_pool[32];
static atomic_int descriptors_used;

static int add_plugin_flags(const char *name, uint32_t flags, const char *host_version,
                            const fld_impl *impls, size_t n)
{
    int slot = atomic_fetch_add(&descriptors_used, 1);
    ck_assert_int_lt(slot, 32);
    fld_plugin_descriptor *d = &descriptor_pool[slot];
    *d = (fld_plugin_descriptor){FLD_PLUGIN_MAGIC,
                                 FLD_PLUGIN_ABI_MAJOR,
                                 FLD_PLUGIN_ABI_MINOR,
                                 sizeof(fld_plugin_descriptor),
                                 flags,
                                 name,
                                 "1.0",
                                 host_version,
                                 register_pending};
    pending = impls;
    n_pending = n;
    int rc = fld_register_plugin(d);
    pending = NULL;
    n_pending = 0;
    return rc;
}

static void add_plugin(const char *name, const fld_impl *impls, size_t n)
{
    int rc = add_plugin_flags(name, 0, FLD_VERSION_STRING, impls, n);
    ck_assert_msg(rc == FLD_OK, "plugin %s: %d %s", name, rc, fld_last_error());
}

/* One impl of each kind for op "t_op": the manager suite's usual cast. */
static void add_three_kinds(void)
{
    const fld_impl impls[] = {
        mk("t_op", "reference.r", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE, 2),
        mk("t_op", "vendor.v", FLD_KIND_VENDOR, "acme", FLD_PRIORITY_VENDOR, 1),
        mk("t_op", "default.f", FLD_KIND_DEFAULT, NULL, FLD_PRIORITY_DEFAULT, 0),
    };
    add_plugin("three", impls, 3);
}

/* ------------------------------------------------------------------------ */
/* Calls and resolutions                                                    */
/* ------------------------------------------------------------------------ */

static int call_op(const char *op, struct targs *a)
{
    fld_op h = fld_op_lookup(op);
    ck_assert_msg(h != NULL, "fld_op_lookup(%s): %s", op, fld_last_error());
    memset(a, 0, sizeof *a);
    a->who = -1;
    return fld_call_on(h, FLD_DEVICE_CPU, FLD_DTYPE_F32, a);
}

/* Calls op on (cpu, f32), expects success, returns the slot that ran. */
static int run_op(const char *op)
{
    struct targs a;
    int rc = call_op(op, &a);
    ck_assert_msg(rc == FLD_OK, "call %s: %d (%s)", op, rc, fld_last_error());
    return a.who;
}

static const char *resolved(const char *op)
{
    const char *id = NULL;
    int rc = fld_resolve(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
    ck_assert_msg(rc == FLD_OK, "resolve %s: %d (%s)", op, rc, fld_last_error());
    ck_assert_ptr_nonnull(id);
    return id;
}

static fld_resolution *explain_on(const char *op, int device, DLDataType dtype)
{
    fld_resolution *r = NULL;
    int rc = fld_explain(op, device, dtype, &r);
    ck_assert_msg(rc == FLD_OK, "explain %s: %d (%s)", op, rc, fld_last_error());
    ck_assert_ptr_nonnull(r);
    return r;
}

static char cand_buf[1024];

/* The ordered candidates of op on (cpu, f32), comma-joined. */
static const char *candidates_on(const char *op, int device, DLDataType dtype)
{
    fld_resolution *r = explain_on(op, device, dtype);
    cand_buf[0] = '\0';
    for (size_t i = 0; i < r->n_candidates; i++) {
        if (i)
            strcat(cand_buf, ",");
        strcat(cand_buf, r->candidates[i]);
    }
    if (r->n_candidates > 0)
        ck_assert_str_eq(r->selected, r->candidates[0]);
    else
        ck_assert_ptr_null(r->selected);
    fld_resolution_free(r);
    return cand_buf;
}

static const char *candidates(const char *op)
{
    return candidates_on(op, FLD_DEVICE_CPU, FLD_DTYPE_F32);
}

static char reason_buf[1024];

/* Why impl_id was dropped for op on (cpu, f32), or "(not rejected)". */
static const char *rejection(const char *op, const char *impl_id)
{
    fld_resolution *r = explain_on(op, FLD_DEVICE_CPU, FLD_DTYPE_F32);
    snprintf(reason_buf, sizeof reason_buf, "(not rejected)");
    for (size_t i = 0; i < r->n_rejected; i++)
        if (strcmp(r->rejected[i].impl_id, impl_id) == 0)
            snprintf(reason_buf, sizeof reason_buf, "%s", r->rejected[i].reason);
    fld_resolution_free(r);
    return reason_buf;
}

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Log capture                                                              */
/* ------------------------------------------------------------------------ */

struct log_line {
    int level;
    char text[512];
};
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static struct log_line log_lines[256];
static int n_log_lines;

static void capture_log(int level, const char *message, void *user)
{
    pthread_mutex_lock(&log_mu);
    if (n_log_lines < 256) {
        log_lines[n_log_lines].level = level;
        snprintf(log_lines[n_log_lines].text, sizeof log_lines[0].text, "%s", message);
        n_log_lines++;
    }
    pthread_mutex_unlock(&log_mu);
}

static void capture_logs(void)
{
    fld_log_set_callback(capture_log, NULL);
    fld_log_set_level(FLD_LOG_DEBUG);
}

static int count_logs(int level, const char *needle)
{
    int n = 0;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < n_log_lines; i++)
        if (log_lines[i].level == level && strstr(log_lines[i].text, needle))
            n++;
    pthread_mutex_unlock(&log_mu);
    return n;
}

static void dump_logs(void)
{
    for (int i = 0; i < n_log_lines; i++)
        fprintf(stderr, "  log %d: %s\n", log_lines[i].level, log_lines[i].text);
}

/* ------------------------------------------------------------------------ */
/* Default orders, ties, priorities                                         */
/* ------------------------------------------------------------------------ */

START_TEST(default_order_prefer_flagos)
{
    add_three_kinds();
    ck_assert_str_eq(candidates("t_op"), "default.f,vendor.v,reference.r");
    ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(run_op("t_op"), 0);

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->op, "t_op");
    ck_assert_int_eq(r->device_type, FLD_DEVICE_CPU);
    ck_assert_int_eq(r->dtype.code, kDLFloat);
    ck_assert_int_eq(r->dtype.bits, 32);
    ck_assert_str_eq(r->selected, "default.f");
    ck_assert_str_eq(r->order, "flagos|vendor|reference");
    ck_assert_ptr_nonnull(r->order_source);
    ck_assert_contains(r->order_source, "default");
    ck_assert_uint_eq(r->n_rejected, 0);
    fld_resolution_free(r);
}
END_TEST

START_TEST(default_order_prefer_vendor)
{
    /* Python unregistered flagos impls when PREFER != flagos; ours only orders them later. */
    setenv("VLLM_FL_PREFER", "vendor", 1);
    add_three_kinds();
    ck_assert_str_eq(candidates("t_op"), "vendor.v,default.f,reference.r");
    ck_assert_int_eq(run_op("t_op"), 1);

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->order, "vendor|flagos|reference");
    fld_resolution_free(r);

    /* the flagos impl really is still a working candidate */
    slot_status[1] = FLD_EIMPL;
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(default_order_prefer_reference)
{
    setenv("VLLM_FL_PREFER", "reference", 1);
    add_three_kinds();
    ck_assert_str_eq(candidates("t_op"), "reference.r,default.f,vendor.v");
    ck_assert_int_eq(run_op("t_op"), 2);

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->order, "reference|flagos|vendor");
    fld_resolution_free(r);
}
END_TEST

START_TEST(priority_does_not_cross_tokens)
{
    /* A huge-priority reference impl still comes after flagos and vendor. */
    const fld_impl impls[] = {
        mk("t_op", "reference.big", FLD_KIND_REFERENCE, NULL, 100000, 2),
        mk("t_op", "vendor.v", FLD_KIND_VENDOR, "acme", 2, 1),
        mk("t_op", "default.f", FLD_KIND_DEFAULT, NULL, 1, 0),
    };
    add_plugin("prio", impls, 3);
    ck_assert_str_eq(candidates("t_op"), "default.f,vendor.v,reference.big");
}
END_TEST

START_TEST(ties_by_ascending_impl_id)
{
    /* vllm-plugin-FL sorted (priority, impl_id) descending and picked vendor.b here. */
    const fld_impl first[] = {
        mk("t_op", "vendor.b", FLD_KIND_VENDOR, "acme", 100, 1),
        mk("t_op", "vendor.c", FLD_KIND_VENDOR, "acme", 100, 2),
    };
    const fld_impl second[] = {
        mk("t_op", "vendor.a", FLD_KIND_VENDOR, "zeta", 100, 0),
    };
    add_plugin("tie1", first, 2);
    add_plugin("tie2", second, 1);
    ck_assert_str_eq(candidates("t_op"), "vendor.a,vendor.b,vendor.c");
    ck_assert_str_eq(resolved("t_op"), "vendor.a");
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(priority_descending_within_token)
{
    const fld_impl impls[] = {
        mk("t_op", "vendor.low", FLD_KIND_VENDOR, "acme", 10, 0),
        mk("t_op", "vendor.high", FLD_KIND_VENDOR, "acme", 200, 1),
        mk("t_op", "vendor.mid", FLD_KIND_VENDOR, "zeta", 100, 2),
        mk("t_op", "default.hi", FLD_KIND_DEFAULT, NULL, 300, 3),
        mk("t_op", "default.lo", FLD_KIND_DEFAULT, NULL, 150, 4),
    };
    add_plugin("prio", impls, 5);
    ck_assert_str_eq(candidates("t_op"), "default.hi,default.lo,vendor.high,vendor.mid,vendor.low");
    ck_assert_int_eq(run_op("t_op"), 3);
}
END_TEST

START_TEST(registration_order_is_irrelevant)
{
    /* Same impls as ties_by_ascending_impl_id, registered in the other order. */
    const fld_impl first[] = {
        mk("t_op", "vendor.a", FLD_KIND_VENDOR, "zeta", 100, 0),
    };
    const fld_impl second[] = {
        mk("t_op", "vendor.c", FLD_KIND_VENDOR, "acme", 100, 2),
        mk("t_op", "vendor.b", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    add_plugin("tie2", first, 1);
    add_plugin("tie1", second, 2);
    ck_assert_str_eq(candidates("t_op"), "vendor.a,vendor.b,vendor.c");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Vendor filters and tokens                                                */
/* ------------------------------------------------------------------------ */

static void add_vendors(void)
{
    const fld_impl impls[] = {
        mk("t_op", "vendor.acme", FLD_KIND_VENDOR, "acme", 200, 0),
        mk("t_op", "vendor.zeta", FLD_KIND_VENDOR, "zeta", 100, 1),
        mk("t_op", "vendor.big", FLD_KIND_VENDOR, "ACME", 50, 3),
        mk("t_op", "reference.r", FLD_KIND_REFERENCE, NULL, 50, 2),
    };
    add_plugin("vendors", impls, 4);
}

/* Vendor names compare without case: "acme" denies the vendor registered as "ACME" too. */
START_TEST(deny_vendor)
{
    setenv("VLLM_FL_DENY_VENDORS", "acme", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "vendor.zeta,reference.r");
    ck_assert_contains(rejection("t_op", "vendor.acme"), "vendor 'acme' denied");
    ck_assert_contains(rejection("t_op", "vendor.acme"), "VLLM_FL_DENY_VENDORS");
    ck_assert_contains(rejection("t_op", "vendor.big"), "vendor 'ACME' denied");
    ck_assert_int_eq(run_op("t_op"), 1);
}
END_TEST

START_TEST(deny_several_vendors)
{
    setenv("VLLM_FL_DENY_VENDORS", "Zeta", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "vendor.acme,vendor.big,reference.r");
    ck_assert_int_eq(fld_policy_set("deny_vendors", "ACME,zeta"), FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "reference.r");
}
END_TEST

START_TEST(allow_vendor)
{
    setenv("VLLM_FL_ALLOW_VENDORS", "zeta", 1);
    add_vendors();
    /* allow lists filter VENDOR impls only: the reference impl stays */
    ck_assert_str_eq(candidates("t_op"), "vendor.zeta,reference.r");
    const char *why = rejection("t_op", "vendor.acme");
    ck_assert_contains(why, "vendor 'acme' not in allow list");
    ck_assert_contains(why, "VLLM_FL_ALLOW_VENDORS");
    ck_assert_contains(rejection("t_op", "vendor.big"), "vendor 'ACME' not in allow list");
}
END_TEST

START_TEST(deny_wins_over_allow)
{
    setenv("VLLM_FL_ALLOW_VENDORS", "acme,zeta", 1);
    setenv("VLLM_FL_DENY_VENDORS", "acme", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "vendor.zeta,reference.r");
    ck_assert_contains(rejection("t_op", "vendor.acme"), "denied");
}
END_TEST

START_TEST(vendor_name_token_ignores_case)
{
    setenv("VLLM_FL_PER_OP", "t_op=vendor:acme", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "vendor.acme,vendor.big");
    ck_assert_contains(rejection("t_op", "vendor.zeta"), "matches no token");

    ck_assert_int_eq(fld_policy_set("per_op", "t_op=vendor:Acme|reference"), FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "vendor.acme,vendor.big,reference.r");
    ck_assert_contains(rejection("t_op", "vendor.zeta"), "matches no token");
}
END_TEST

START_TEST(vendor_name_token_matching_nothing)
{
    setenv("VLLM_FL_PER_OP", "t_op=vendor:Zetta", 1);
    add_vendors();
    const char *id = "untouched";
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_EUNAVAILABLE);
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EUNAVAILABLE);
    ck_assert_int_eq(a.n, 0);
    ck_assert_str_eq(candidates("t_op"), "");
    ck_assert_contains(rejection("t_op", "vendor.zeta"),
                       "matches no token of the order 'vendor:zetta'");
}
END_TEST

START_TEST(impl_token)
{
    setenv("VLLM_FL_PER_OP", "t_op=impl:vendor.zeta|reference", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "vendor.zeta,reference.r");
    ck_assert_contains(rejection("t_op", "vendor.acme"),
                       "matches no token of the order 'impl:vendor.zeta|reference'");
    ck_assert_int_eq(run_op("t_op"), 1);
}
END_TEST

START_TEST(impl_token_does_not_bypass_filters)
{
    /* deny still applies to an impl named by impl:ID */
    setenv("VLLM_FL_PER_OP", "t_op=impl:vendor.zeta|reference", 1);
    setenv("VLLM_FL_DENY_VENDORS", "zeta", 1);
    add_vendors();
    ck_assert_str_eq(candidates("t_op"), "reference.r");
}
END_TEST

START_TEST(per_op_order_replaces_default)
{
    setenv("VLLM_FL_PER_OP", "t_op=reference|vendor", 1);
    add_three_kinds();
    const fld_impl other[] = {
        mk("t_other", "default.o", FLD_KIND_DEFAULT, NULL, 150, 3),
        mk("t_other", "reference.o", FLD_KIND_REFERENCE, NULL, 50, 4),
    };
    add_plugin("other", other, 2);

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->order, "reference|vendor");
    ck_assert_str_eq(r->order_source, "VLLM_FL_PER_OP");
    ck_assert_str_eq(r->selected, "reference.r");
    ck_assert_uint_eq(r->n_candidates, 2);
    ck_assert_str_eq(r->candidates[0], "reference.r");
    ck_assert_str_eq(r->candidates[1], "vendor.v");
    ck_assert_uint_eq(r->n_rejected, 1);
    ck_assert_str_eq(r->rejected[0].impl_id, "default.f");
    ck_assert_contains(r->rejected[0].reason, "matches no token of the order 'reference|vendor'");
    fld_resolution_free(r);
    ck_assert_int_eq(run_op("t_op"), 2);

    /* an op without a per-op order keeps the default order */
    ck_assert_str_eq(candidates("t_other"), "default.o,reference.o");
    r = explain_on("t_other", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->order, "flagos|vendor|reference");
    fld_resolution_free(r);
}
END_TEST

START_TEST(per_op_order_only_failing_is_exhausted)
{
    /* Impls outside the per-op order are not used as fallbacks either. */
    setenv("VLLM_FL_PER_OP", "t_op=vendor", 1);
    add_three_kinds();
    slot_status[1] = FLD_EIMPL;
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
    ck_assert_int_eq(atomic_load(&runs[2]), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Availability and supports()                                              */
/* ------------------------------------------------------------------------ */

START_TEST(unavailable_impl_skipped)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.fast", FLD_KIND_VENDOR, "acme", 300, 0),
        mk("t_op", "vendor.slow", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    impls[0].is_available = never_available;
    add_plugin("avail", impls, 2);
    ck_assert_str_eq(resolved("t_op"), "vendor.slow");
    ck_assert_str_eq(candidates("t_op"), "vendor.slow");
    ck_assert_str_eq(rejection("t_op", "vendor.fast"), "unavailable: no device here");
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
}
END_TEST

START_TEST(only_unavailable_impls)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.fast", FLD_KIND_VENDOR, "acme", 300, 0),
    };
    impls[0].is_available = never_available;
    add_plugin("avail", impls, 1);
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_EUNAVAILABLE);
    ck_assert_contains(fld_last_error(), "vendor.fast");
    ck_assert_contains(fld_last_error(), "no device here");
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EUNAVAILABLE);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
}
END_TEST

START_TEST(supports_declines_to_next)
{
    fld_impl gated[] = {
        mk("t_gate", "default.f", FLD_KIND_DEFAULT, NULL, 150, 3),
        mk("t_gate", "vendor.v", FLD_KIND_VENDOR, "acme", 100, 4),
    };
    gated[0].supports = gate_supports;
    add_plugin("gated", gated, 2);

    atomic_store(&gate_open, false);
    /* resolve ignores per-call predicates */
    ck_assert_str_eq(resolved("t_gate"), "default.f");
    ck_assert_int_eq(run_op("t_gate"), 4);
    ck_assert_int_eq(atomic_load(&runs[3]), 0);
    /* a declined call is not a failure: the impl serves as soon as it accepts */
    atomic_store(&gate_open, true);
    ck_assert_int_eq(run_op("t_gate"), 3);
    atomic_store(&gate_open, false);
    ck_assert_int_eq(run_op("t_gate"), 4);
    ck_assert_int_eq(atomic_load(&runs[3]), 1);
}
END_TEST

START_TEST(supports_declines_in_strict_mode)
{
    /* strict forbids fallback after a failure, not choosing the first accepting impl */
    setenv("VLLM_FL_STRICT", "1", 1);
    fld_impl gated[] = {
        mk("t_gate", "default.f", FLD_KIND_DEFAULT, NULL, 150, 3),
        mk("t_gate", "vendor.v", FLD_KIND_VENDOR, "acme", 100, 4),
    };
    gated[0].supports = gate_supports;
    add_plugin("gated", gated, 2);
    atomic_store(&gate_open, false);
    ck_assert_int_eq(run_op("t_gate"), 4);
}
END_TEST

START_TEST(unsupported_status_passes_without_memory)
{
    add_three_kinds();
    capture_logs();
    slot_status[0] = FLD_EUNSUPPORTED;
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(count_logs(FLD_LOG_WARNING, "failed"), 0);
    /* not remembered: default.f is asked again and serves once it accepts */
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
}
END_TEST

/* The direct (cached) path declines: the message still gives the decliner's
 * reason when the others decline silently, and never a stale message. */
START_TEST(direct_path_decline_keeps_the_reason)
{
    add_three_kinds();
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(run_op("t_op"), 0); /* default.f is now called directly */
    slot_status[0] = slot_status[1] = slot_status[2] = FLD_EUNSUPPORTED;
    slot_silent[1] = slot_silent[2] = true;
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EUNAVAILABLE);
    ck_assert_contains(fld_last_error(), "'default.f' said: slot 0 broke on purpose");
    ck_assert_contains(fld_last_error(), "3 candidate(s) declined");

    slot_silent[0] = true;
    ck_assert_ptr_null(fld_op_lookup("no_such_op")); /* leaves a message behind */
    ck_assert_int_eq(call_op("t_op", &a), FLD_EUNAVAILABLE);
    ck_assert_msg(!strstr(fld_last_error(), "said:"), "%s", fld_last_error());
    /* a decline is not remembered: default.f serves directly again */
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Fallback and failure memory                                              */
/* ------------------------------------------------------------------------ */

/* vllm-plugin-FL's fallback test: impls "failing" then "fallback". */
static void add_failing_fallback(void)
{
    const fld_impl impls[] = {
        mk("t_op", "default.failing", FLD_KIND_DEFAULT, NULL, 150, 0),
        mk("t_op", "vendor.fallback", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    add_plugin("fb", impls, 2);
    slot_status[0] = FLD_EIMPL;
}

/* First call: failing runs, fails, fallback serves; second call skips failing. */
static void fail_once_then_remembered(void)
{
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_OK);
    ck_assert_int_eq(a.n, 2);
    ck_assert_int_eq(a.trace[0], 0);
    ck_assert_int_eq(a.trace[1], 1);
    ck_assert_int_eq(call_op("t_op", &a), FLD_OK);
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(a.trace[0], 1);
    ck_assert_int_eq(atomic_load(&runs[0]), 1);
}

START_TEST(fallback_order_and_memory)
{
    add_failing_fallback();
    capture_logs();
    fail_once_then_remembered();
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(atomic_load(&runs[0]), 1);
    ck_assert_int_eq(atomic_load(&runs[1]), 12);

    int warned = count_logs(FLD_LOG_WARNING,
                            "Implementation 'default.failing' failed for op 't_op' (cpu, f32)");
    int fell =
        count_logs(FLD_LOG_INFO,
                   "Op 't_op' (cpu, f32) fallback to 'vendor.fallback' (kind=vendor, vendor=acme)");
    if (warned != 1 || fell != 1)
        dump_logs();
    ck_assert_int_eq(warned, 1);
    ck_assert_int_eq(fell, 1);
    /* resolve still reports the policy's first choice */
    ck_assert_str_eq(resolved("t_op"), "default.failing");
}
END_TEST

START_TEST(failure_memory_is_per_device_and_dtype)
{
    /* a failure on (cpu, f32) is not remembered for (cpu, f16) */
    add_failing_fallback();
    fail_once_then_remembered();
    slot_status[0] = FLD_OK;
    struct targs a = {0};
    ck_assert_int_eq(fld_call_on(fld_op_lookup("t_op"), FLD_DEVICE_CPU, FLD_DTYPE_F16, &a), FLD_OK);
    ck_assert_int_eq(a.who, 0);
}
END_TEST

START_TEST(failure_forgotten_after_policy_change)
{
    /* vllm-plugin-FL's set_global_policy() kept the failed set */
    add_failing_fallback();
    fail_once_then_remembered();
    ck_assert_int_eq(fld_policy_set("deny_vendors", "nobody"), FLD_OK);
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_OK);
    ck_assert_int_eq(a.trace[0], 0);
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
}
END_TEST

/*
 * Failure memory and scoped overrides. A scope's calls run the chain of the scope's policy,
 * with its own memory: a failure remembered under the global policy is tried again inside a
 * scope; a failure inside a scope is remembered until that thread leaves a scope (its own or
 * a nested one); the global memory is untouched by scopes (vllm-plugin-FL kept one failed
 * set per manager across every policy).
 */
static int first_served(void)
{
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_OK);
    return a.trace[0];
}

START_TEST(failure_memory_across_scopes)
{
    add_failing_fallback();
    fail_once_then_remembered(); /* global: default.failing ran once and is remembered */
    ck_assert_int_eq(fld_policy_push_strict(false), FLD_OK);
    ck_assert_int_eq(first_served(), 0); /* tried again in the scope, fails again */
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
    ck_assert_int_eq(first_served(), 1); /* remembered for the rest of the scope */
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(first_served(), 1); /* the global memory is still there */
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
    ck_assert_int_eq(fld_policy_push_strict(false), FLD_OK);
    ck_assert_int_eq(first_served(), 0); /* a new scope starts with no memory */
    ck_assert_int_eq(atomic_load(&runs[0]), 3);
    /* Nested: the inner scope does not inherit the outer one's memory. */
    ck_assert_int_eq(fld_policy_push_preference("flagos"), FLD_OK);
    ck_assert_int_eq(first_served(), 0);
    ck_assert_int_eq(atomic_load(&runs[0]), 4);
    /* Leaving a scope drops the thread's scoped chains, so the outer scope, too, starts
     * over. */
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(first_served(), 0);
    ck_assert_int_eq(atomic_load(&runs[0]), 5);
    ck_assert_int_eq(first_served(), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(first_served(), 1); /* the global memory outlives them all */
    ck_assert_int_eq(atomic_load(&runs[0]), 5);
}
END_TEST

START_TEST(failure_forgotten_after_policy_reset)
{
    add_failing_fallback();
    fail_once_then_remembered();
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(failure_forgotten_after_clear_failures)
{
    add_failing_fallback();
    fail_once_then_remembered();
    ck_assert_int_eq(fld_clear_failures(NULL), FLD_OK);
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(clear_failures_of_one_op)
{
    add_failing_fallback();
    const fld_impl other[] = {
        mk("t_other", "default.failing", FLD_KIND_DEFAULT, NULL, 150, 2),
        mk("t_other", "vendor.fallback", FLD_KIND_VENDOR, "acme", 100, 3),
    };
    add_plugin("fb2", other, 2);
    slot_status[2] = FLD_EIMPL;
    fail_once_then_remembered();
    ck_assert_int_eq(run_op("t_other"), 3);
    ck_assert_int_eq(atomic_load(&runs[2]), 1);

    slot_status[0] = FLD_OK;
    slot_status[2] = FLD_OK;
    ck_assert_int_eq(fld_clear_failures("t_other"), FLD_OK);
    ck_assert_int_eq(run_op("t_other"), 2);
    /* t_op's failure is still remembered */
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_clear_failures("t_op"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(failure_forgotten_after_registry_change)
{
    add_failing_fallback();
    fail_once_then_remembered();
    const fld_impl unrelated[] = {
        mk("t_unrelated", "vendor.u", FLD_KIND_VENDOR, "acme", 100, 5),
    };
    add_plugin("late", unrelated, 1);
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(failure_forgotten_after_reload)
{
    add_failing_fallback();
    fail_once_then_remembered();
    ck_assert_int_eq(fld_reload(), FLD_OK);
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(all_fail)
{
    add_failing_fallback();
    slot_status[1] = FLD_EIMPL;
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(a.n, 2);
    const char *msg = fld_last_error();
    ck_assert_contains(msg, "failed");
    ck_assert_contains(msg, "t_op");
    ck_assert_contains(msg, "vendor.fallback");

    /* both are remembered now: nothing runs */
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(a.n, 0);
    ck_assert_contains(fld_last_error(), "failed");
    ck_assert_int_eq(atomic_load(&runs[0]), 1);
    ck_assert_int_eq(atomic_load(&runs[1]), 1);
}
END_TEST

START_TEST(all_fail_custom_status)
{
    /* a non-FLD status from an impl is still a failure */
    add_failing_fallback();
    slot_status[0] = -42;
    slot_status[1] = -42;
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(a.n, 2);
}
END_TEST

START_TEST(strict_returns_winner_status)
{
    setenv("VLLM_FL_STRICT", "1", 1);
    add_failing_fallback();
    slot_status[0] = -42;
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), -42);
    ck_assert_int_eq(a.n, 1);
    slot_status[0] = FLD_EIMPL;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(atomic_load(&runs[1]), 0);
    /* nothing remembered: the winner runs every time */
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
    slot_status[0] = FLD_OK;
    ck_assert_int_eq(run_op("t_op"), 0);

    /* leaving strict mode brings fallback back */
    slot_status[0] = FLD_EIMPL;
    ck_assert_int_eq(fld_policy_set("strict", "0"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
}
END_TEST

START_TEST(strict_scoped_override)
{
    add_failing_fallback();
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EIMPL);
    ck_assert_int_eq(a.n, 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* No candidates, explain                                                   */
/* ------------------------------------------------------------------------ */

START_TEST(no_candidates)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.gpu", FLD_KIND_VENDOR, "acme", 100, 0),
        mk("t_op", "vendor.half", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    impls[0].devices = FLD_DEVICE_MASK_CUDA;
    impls[1].dtypes = FLD_DTYPE_MASK_F16 | FLD_DTYPE_MASK_BF16;
    add_plugin("gpu", impls, 2);

    struct targs a;
    ck_assert_int_eq(call_op("t_op", &a), FLD_EUNAVAILABLE);
    ck_assert_int_eq(a.n, 0);
    ck_assert_contains(fld_last_error(), "t_op");
    ck_assert_contains(fld_last_error(), "vendor.gpu");
    ck_assert_contains(fld_last_error(), "vendor.half");
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_EUNAVAILABLE);
    const char *msg = fld_last_error();
    ck_assert_contains(msg, "vendor.gpu");
    ck_assert_contains(msg, "vendor.half");
    ck_assert_contains(msg, "does not support device cpu");

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_ptr_null(r->selected);
    ck_assert_uint_eq(r->n_candidates, 0);
    ck_assert_uint_eq(r->n_rejected, 2);
    fld_resolution_free(r);
    ck_assert_str_eq(rejection("t_op", "vendor.gpu"), "does not support device cpu");
    ck_assert_str_eq(rejection("t_op", "vendor.half"), "does not support dtype f32");
}
END_TEST

START_TEST(unknown_op)
{
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_nosuch", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_ENOTFOUND);
    ck_assert_contains(fld_last_error(), "t_nosuch");
    fld_resolution *r = NULL;
    ck_assert_int_eq(fld_explain("t_nosuch", FLD_DEVICE_CPU, FLD_DTYPE_F32, &r), FLD_ENOTFOUND);
    ck_assert_int_eq(fld_call_by_name("t_nosuch", NULL), FLD_ENOTFOUND);
    fld_resolution_free(NULL);
}
END_TEST

START_TEST(explain_lists_every_rejection)
{
    setenv("VLLM_FL_DENY_VENDORS", "zeta", 1);
    setenv("USE_FLAGGEMS", "0", 1);
    fld_impl impls[] = {
        mk("t_op", "default.f", FLD_KIND_DEFAULT, NULL, 150, 0),
        mk("t_op", "vendor.acme", FLD_KIND_VENDOR, "acme", 100, 1),
        mk("t_op", "vendor.zeta", FLD_KIND_VENDOR, "zeta", 100, 2),
        mk("t_op", "vendor.gone", FLD_KIND_VENDOR, "acme", 300, 3),
        mk("t_op", "vendor.cuda", FLD_KIND_VENDOR, "acme", 300, 4),
        mk("t_op", "reference.r", FLD_KIND_REFERENCE, NULL, 50, 5),
    };
    impls[3].is_available = never_available;
    impls[4].devices = FLD_DEVICE_MASK_CUDA;
    add_plugin("many", impls, 6);

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    ck_assert_str_eq(r->selected, "vendor.acme");
    ck_assert_uint_eq(r->n_candidates, 2);
    ck_assert_str_eq(r->candidates[1], "reference.r");
    ck_assert_uint_eq(r->n_rejected, 4);
    fld_resolution_free(r);
    ck_assert_contains(rejection("t_op", "default.f"), "flagos disabled by USE_FLAGGEMS");
    ck_assert_contains(rejection("t_op", "vendor.zeta"), "vendor 'zeta' denied");
    ck_assert_str_eq(rejection("t_op", "vendor.gone"), "unavailable: no device here");
    ck_assert_str_eq(rejection("t_op", "vendor.cuda"), "does not support device cpu");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Invalidation: policy and registry changes, no explicit bump               */
/* ------------------------------------------------------------------------ */

START_TEST(policy_set_changes_resolution)
{
    add_three_kinds();
    ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_set("prefer", "vendor"), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "vendor.v");
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_set("prefer", "reference"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 2);
    ck_assert_int_eq(fld_policy_set("per_op", "t_op=vendor"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_set("per_op", ""), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 2);
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(invalid_policy_set_changes_nothing)
{
    add_three_kinds();
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_set("prefer", "fastest"), FLD_ECONFIG);
    ck_assert_int_eq(fld_policy_set("no_such_key", "1"), FLD_ECONFIG);
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_str_eq(resolved("t_op"), "default.f");
}
END_TEST

START_TEST(late_plugin_is_used)
{
    /* vllm-plugin-FL's cache ignored registry changes */
    const fld_impl early[] = {
        mk("t_op", "vendor.early", FLD_KIND_VENDOR, "acme", 100, 0),
    };
    add_plugin("early", early, 1);
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_str_eq(resolved("t_op"), "vendor.early");

    const fld_impl late[] = {
        mk("t_op", "vendor.late", FLD_KIND_VENDOR, "zeta", 200, 1),
    };
    add_plugin("late", late, 1);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_str_eq(resolved("t_op"), "vendor.late");
    ck_assert_str_eq(candidates("t_op"), "vendor.late,vendor.early");
}
END_TEST

START_TEST(late_plugin_for_catalog_op)
{
    float xs[4] = {1, 2, 3, 4}, os[2] = {0, 0};
    int64_t xshape[2] = {1, 4}, oshape[2] = {1, 2};
    DLTensor x = {xs, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor out = {os, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, oshape, NULL, 0};
    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_OK);
    ck_assert_str_eq(resolved(FLD_OP_SILU_AND_MUL), "reference.c");

    const fld_impl late[] = {
        mk_catalog(FLD_OP_SILU_AND_MUL, "vendor.late", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    add_plugin("late", late, 1);
    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[1]), 1);
    ck_assert_str_eq(resolved(FLD_OP_SILU_AND_MUL), "vendor.late");
}
END_TEST

START_TEST(cache_returns_same_impl)
{
    fld_impl impls[] = {
        mk("t_op", "default.f", FLD_KIND_DEFAULT, NULL, 150, 0),
        mk("t_op", "vendor.v", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    impls[0].is_available = counted_available;
    impls[1].is_available = counted_available;
    add_plugin("cache", impls, 2);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(run_op("t_op"), 0);
    for (int i = 0; i < 10; i++)
        ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(atomic_load(&runs[0]), 1000);
    ck_assert_int_eq(atomic_load(&runs[1]), 0);
    /* is_available is asked once per impl per process, not per call */
    ck_assert_int_le(atomic_load(&avail_calls), 2);
    /* the same interned string every time */
    ck_assert_ptr_eq(resolved("t_op"), resolved("t_op"));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Scoped overrides                                                         */
/* ------------------------------------------------------------------------ */

struct thread_view {
    const char *resolved;
    int ran;
};

static void *other_thread_view(void *arg)
{
    struct thread_view *v = arg;
    v->resolved = NULL;
    fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &v->resolved);
    struct targs a = {0};
    fld_call_on(fld_op_lookup("t_op"), FLD_DEVICE_CPU, FLD_DTYPE_F32, &a);
    v->ran = a.who;
    return NULL;
}

static struct thread_view view_from_other_thread(void)
{
    struct thread_view v = {NULL, -1};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, other_thread_view, &v), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    return v;
}

START_TEST(scoped_preference_is_thread_local)
{
    add_three_kinds();
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "reference.r");
    ck_assert_int_eq(run_op("t_op"), 2);

    struct thread_view v = view_from_other_thread();
    ck_assert_ptr_nonnull(v.resolved);
    ck_assert_str_eq(v.resolved, "default.f");
    ck_assert_int_eq(v.ran, 0);

    /* nesting: the inner push applies on top of the outer one */
    ck_assert_int_eq(fld_policy_push_per_op("t_op=vendor|flagos"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 2);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
}
END_TEST

START_TEST(scoped_vendor_lists)
{
    add_vendors();
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_push_allowed_vendors("zeta"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_contains(rejection("t_op", "vendor.acme"), "not in allow list");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    ck_assert_int_eq(fld_policy_push_denied_vendors("acme"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
    /* denied lists add up */
    ck_assert_int_eq(fld_policy_push_denied_vendors("zeta,ACME"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 2);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(scoped_override_on_top_of_env)
{
    /* an allow list pushed on a thread replaces the environment's */
    setenv("VLLM_FL_ALLOW_VENDORS", "zeta", 1);
    add_vendors();
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_push_allowed_vendors("acme"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 1);
}
END_TEST

START_TEST(invalid_push_pushes_nothing)
{
    add_three_kinds();
    ck_assert_int_eq(fld_policy_push_preference("fastest"), FLD_ECONFIG);
    ck_assert_int_eq(fld_policy_push_per_op("t_op=bogus"), FLD_ECONFIG);
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(global_change_seen_under_override)
{
    /* a thread with a scoped override still sees registry changes */
    const fld_impl early[] = {
        mk("t_op", "vendor.early", FLD_KIND_VENDOR, "acme", 100, 0),
    };
    add_plugin("early", early, 1);
    ck_assert_int_eq(fld_policy_push_strict(false), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
    const fld_impl late[] = {
        mk("t_op", "vendor.late", FLD_KIND_VENDOR, "acme", 200, 1),
    };
    add_plugin("late", late, 1);
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Environment filters                                                      */
/* ------------------------------------------------------------------------ */

/*
 * A manifest pin overrides the token order but not the policy's hard
 * filters: a denied vendor, an op disabled by custom_ops or the kill switch
 * still win, and the normal order serves (non-strict) or nothing (strict).
 */
static void write_pin_manifest(char *path, size_t size)
{
    char dir[] = "/tmp/fld-test-pin-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, size, "%s/manifest.yaml", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("version: 1\nentries:\n  - {op: t_op, device: cpu, dtype: f32, impl: vendor.v}\n", f);
    fclose(f);
}

START_TEST(manifest_pin_respects_filters)
{
    char path[256];
    write_pin_manifest(path, sizeof path);
    setenv("VLLM_FL_MANIFEST", path, 1);
    add_three_kinds();
    ck_assert_str_eq(resolved("t_op"), "vendor.v"); /* the pin beats prefer=flagos */

    /* The global policy is frozen with the manifest: the filters change by
     * scoped overrides, or by the configuration re-read. */
    ck_assert_int_eq(fld_policy_set("deny_vendors", "acme"), FLD_ESTATE);
    ck_assert_int_eq(fld_policy_push_denied_vendors("acme"), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    setenv("VLLM_FL_CUSTOM_OPS", "-t_op", 1);
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "reference.r");
    unsetenv("VLLM_FL_CUSTOM_OPS");

    setenv("VLLM_FL_PREFER_ENABLED", "false", 1);
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "reference.r");
    unsetenv("VLLM_FL_PREFER_ENABLED");
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "vendor.v");

    /* strict: an excluded pin leaves no candidate, and explain says why */
    ck_assert_int_eq(fld_policy_push_denied_vendors("acme"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_EUNAVAILABLE);
    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32);
    bool named = false;
    for (size_t i = 0; i < r->n_rejected; i++)
        named |= strstr(r->rejected[i].reason, "manifest.yaml:3") != NULL &&
                 strstr(r->rejected[i].reason, "denied") != NULL;
    ck_assert_msg(named, "no rejection names the manifest entry and the deny list");
    fld_resolution_free(r);
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
}
END_TEST

START_TEST(use_flaggems_off_keeps_registration)
{
    setenv("USE_FLAGGEMS", "0", 1);
    add_three_kinds();
    ck_assert_str_eq(candidates("t_op"), "vendor.v,reference.r");
    ck_assert_contains(rejection("t_op", "default.f"), "flagos disabled by USE_FLAGGEMS");
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(fld_policy_set("use_flaggems", "1"), FLD_OK);
    ck_assert_str_eq(resolved("t_op"), "default.f");
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

START_TEST(prefer_enabled_off_keeps_reference_only)
{
    setenv("VLLM_FL_PREFER_ENABLED", "0", 1);
    add_three_kinds();
    ck_assert_str_eq(candidates("t_op"), "reference.r");
    ck_assert_contains(rejection("t_op", "default.f"), "reference implementations only");
    ck_assert_contains(rejection("t_op", "vendor.v"), "VLLM_FL_PREFER_ENABLED");
    ck_assert_int_eq(run_op("t_op"), 2);
    ck_assert_int_eq(fld_policy_set("enabled", "1"), FLD_OK);
    ck_assert_int_eq(run_op("t_op"), 0);
}
END_TEST

static void add_two_ops(void)
{
    const fld_impl impls[] = {
        mk("t_op", "default.f", FLD_KIND_DEFAULT, NULL, 150, 0),
        mk("t_op", "vendor.v", FLD_KIND_VENDOR, "acme", 100, 1),
        mk("t_op2", "default.f", FLD_KIND_DEFAULT, NULL, 150, 2),
        mk("t_op2", "vendor.v", FLD_KIND_VENDOR, "acme", 100, 3),
    };
    add_plugin("twoops", impls, 4);
}

START_TEST(flagos_blacklist_by_op)
{
    setenv("VLLM_FL_FLAGOS_BLACKLIST", "t_op,rms_norm", 1);
    add_two_ops();
    ck_assert_str_eq(candidates("t_op"), "vendor.v");
    ck_assert_contains(rejection("t_op", "default.f"), "op 't_op' in flagos blacklist");
    ck_assert_str_eq(candidates("t_op2"), "default.f,vendor.v");
    ck_assert_int_eq(run_op("t_op"), 1);
    ck_assert_int_eq(run_op("t_op2"), 2);
}
END_TEST

START_TEST(flagos_whitelist_by_op)
{
    setenv("VLLM_FL_FLAGOS_WHITELIST", "t_op2", 1);
    add_two_ops();
    ck_assert_str_eq(candidates("t_op"), "vendor.v");
    ck_assert_contains(rejection("t_op", "default.f"), "not in flagos whitelist");
    ck_assert_str_eq(candidates("t_op2"), "default.f,vendor.v");
}
END_TEST

START_TEST(external_filters)
{
    /* our in-process plugins are out-of-tree unless flagged in-tree for this version */
    const fld_impl oot[] = {
        mk("t_op", "vendor.oot", FLD_KIND_VENDOR, "acme", 300, 0),
    };
    const fld_impl intree[] = {
        mk("t_op", "vendor.intree", FLD_KIND_VENDOR, "acme", 100, 1),
    };
    const fld_impl stale[] = {
        mk("t_op", "vendor.stale", FLD_KIND_VENDOR, "acme", 200, 2),
    };
    ck_assert_int_eq(add_plugin_flags("oot", 0, FLD_VERSION_STRING, oot, 1), FLD_OK);
    ck_assert_int_eq(
        add_plugin_flags("intree", FLD_PLUGIN_FLAG_IN_TREE, FLD_VERSION_STRING, intree, 1), FLD_OK);
    ck_assert_int_eq(add_plugin_flags("stale", FLD_PLUGIN_FLAG_IN_TREE, "0.0.0-old", stale, 1),
                     FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "vendor.oot,vendor.stale,vendor.intree");

    ck_assert_int_eq(fld_policy_set("external_enabled", "0"), FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "vendor.intree");
    ck_assert_contains(rejection("t_op", "vendor.oot"), "external (out-of-tree) plugins disabled");
    ck_assert_contains(rejection("t_op", "vendor.stale"),
                       "external (out-of-tree) plugins disabled");
    ck_assert_int_eq(run_op("t_op"), 1);

    /* VLLM_FL_OOT_* mean engine layers (vllm-plugin-FL), not plugins: no effect here. */
    ck_assert_int_eq(fld_policy_set("external_enabled", "1"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("oot_enabled", "0"), FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "vendor.oot,vendor.stale,vendor.intree");
    ck_assert_int_eq(fld_policy_set("oot_enabled", "1"), FLD_OK);

    ck_assert_int_eq(fld_policy_set("external_blacklist", "t_op"), FLD_OK);
    ck_assert_str_eq(candidates("t_op"), "vendor.intree");
    ck_assert_contains(rejection("t_op", "vendor.oot"), "t_op");
}
END_TEST

START_TEST(external_disabled_keeps_builtin_reference)
{
    setenv("VLLM_FL_EXTERNAL_ENABLED", "0", 1);
    const fld_impl oot[] = {
        mk_catalog(FLD_OP_RMS_NORM, "vendor.oot", FLD_KIND_VENDOR, "acme", 300, 0),
    };
    add_plugin("oot", oot, 1);
    ck_assert_str_eq(resolved(FLD_OP_RMS_NORM), "reference.c");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Ops outside the catalog; catalog ops                                     */
/* ------------------------------------------------------------------------ */

static void add_masked(void)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.cpu32", FLD_KIND_VENDOR, "acme", 100, 0),
        mk("t_op", "vendor.cpu16", FLD_KIND_VENDOR, "acme", 110, 1),
        mk("t_op", "vendor.gpu", FLD_KIND_VENDOR, "acme", 300, 2),
    };
    impls[0].devices = FLD_DEVICE_MASK_CPU;
    impls[0].dtypes = FLD_DTYPE_MASK_F32;
    impls[1].devices = FLD_DEVICE_MASK_CPU;
    impls[1].dtypes = FLD_DTYPE_MASK_F16 | FLD_DTYPE_MASK_BF16;
    impls[2].devices = FLD_DEVICE_MASK_CUDA | FLD_DEVICE_MASK_ROCM;
    add_plugin("masked", impls, 3);
}

static int call_on(int device, DLDataType dtype)
{
    struct targs a = {.who = -1};
    int rc = fld_call_on(fld_op_lookup("t_op"), device, dtype, &a);
    ck_assert_msg(rc == FLD_OK, "call_on: %d %s", rc, fld_last_error());
    return a.who;
}

START_TEST(opaque_op_by_device_and_dtype)
{
    add_masked();
    ck_assert_int_eq(call_on(FLD_DEVICE_CPU, FLD_DTYPE_F32), 0);
    ck_assert_int_eq(call_on(FLD_DEVICE_CPU, FLD_DTYPE_F16), 1);
    ck_assert_int_eq(call_on(FLD_DEVICE_CPU, FLD_DTYPE_BF16), 1);
    ck_assert_int_eq(call_on(FLD_DEVICE_CUDA, FLD_DTYPE_F32), 2);
    ck_assert_int_eq(call_on(FLD_DEVICE_ROCM, FLD_DTYPE_BF16), 2);
    /* dtype ANY ignores the dtype masks */
    ck_assert_int_eq(call_on(FLD_DEVICE_CPU, FLD_DTYPE_ANY), 1);

    struct targs a = {.who = -1};
    ck_assert_int_eq(fld_call_on(fld_op_lookup("t_op"), FLD_DEVICE_ASCEND, FLD_DTYPE_F32, &a),
                     FLD_EUNAVAILABLE);
    ck_assert_int_eq(a.who, -1);
    ck_assert_str_eq(candidates_on("t_op", FLD_DEVICE_ASCEND, FLD_DTYPE_F32), "");
    ck_assert_str_eq(candidates_on("t_op", FLD_DEVICE_CPU, FLD_DTYPE_BF16), "vendor.cpu16");

    fld_resolution *r = explain_on("t_op", FLD_DEVICE_CUDA, FLD_DTYPE_BF16);
    ck_assert_uint_eq(r->n_candidates, 1);
    ck_assert_str_eq(r->selected, "vendor.gpu");
    int seen = 0;
    for (size_t i = 0; i < r->n_rejected; i++) {
        if (strcmp(r->rejected[i].impl_id, "vendor.cpu32") == 0) {
            ck_assert_str_eq(r->rejected[i].reason, "does not support device cuda");
            seen++;
        }
    }
    ck_assert_int_eq(seen, 1);
    fld_resolution_free(r);
}
END_TEST

START_TEST(opaque_op_by_handle_and_name)
{
    add_masked();
    fld_op h = fld_op_lookup("t_op");
    ck_assert_ptr_nonnull(h);
    /* fld_call ignores device and dtype for ops outside the catalog */
    struct targs a = {.who = -1};
    ck_assert_int_eq(fld_call(h, &a), FLD_OK);
    ck_assert_int_eq(a.who, 2);
    memset(&a, 0, sizeof a);
    a.who = -1;
    ck_assert_int_eq(fld_call_by_name("t_op", &a), FLD_OK);
    ck_assert_int_eq(a.who, 2);
    /* the args pointer reaches the impl as it is */
    ck_assert_int_eq(a.n, 1);

    ck_assert_int_eq(fld_policy_set("deny_vendors", "acme"), FLD_OK);
    ck_assert_int_eq(fld_call(h, &a), FLD_EUNAVAILABLE);
}
END_TEST

START_TEST(opaque_op_status_passes_through)
{
    setenv("VLLM_FL_STRICT", "1", 1);
    add_masked();
    slot_status[0] = -77;
    struct targs a = {0};
    ck_assert_int_eq(fld_call_on(fld_op_lookup("t_op"), FLD_DEVICE_CPU, FLD_DTYPE_F32, &a), -77);
}
END_TEST

START_TEST(catalog_op_plugin_and_reference)
{
    fld_impl impls[] = {
        mk_catalog(FLD_OP_SILU_AND_MUL, "vendor.fake", FLD_KIND_VENDOR, "acme", 100, 0),
    };
    impls[0].dtypes = FLD_DTYPE_MASK_F32;
    add_plugin("fake", impls, 1);
    float xs[4] = {1, 2, 3, 4}, os[2] = {-1, -1};
    int64_t xshape[2] = {1, 4}, oshape[2] = {1, 2};
    DLTensor x = {xs, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor out = {os, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, oshape, NULL, 0};

    ck_assert_str_eq(candidates(FLD_OP_SILU_AND_MUL), "vendor.fake,reference.c");
    /* the fake impl does not compute anything: out stays as it was */
    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[0]), 1);
    ck_assert_float_eq(os[0], -1.0f);

    /* its failure falls back to the library's reference kernel */
    slot_status[0] = FLD_EIMPL;
    fld_activation_args args = {&out, &x};
    ck_assert_int_eq(fld_call_by_name(FLD_OP_SILU_AND_MUL, &args), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[0]), 2);
    ck_assert_float_eq_tol(os[0], 2.1931758f, 1e-5f);
    ck_assert_float_eq_tol(os[1], 7.0463767f, 1e-5f);

    /* and f16 calls never reach an impl that declares f32 only */
    ck_assert_str_eq(candidates_on(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F16),
                     "reference.c");
}
END_TEST

/*
 * The cached call path takes no lock (fld_call() in fldispatch.h), also when the winner
 * has a supports() predicate, after a fallback, and while another thread
 * has a scoped override. The host lock is held here by fld_foreach_impl()
 * while its callback waits for calls made on another thread: a call that
 * took the lock would never finish.
 */
struct lockfree_probe {
    const char *op;
    atomic_int done;
    atomic_int status;
};

static void *call_from_thread(void *p)
{
    struct lockfree_probe *probe = p;
    struct targs a;
    fld_op h = fld_op_lookup(probe->op);
    memset(&a, 0, sizeof a);
    atomic_store(&probe->status, fld_call_on(h, FLD_DEVICE_CPU, FLD_DTYPE_F32, &a));
    atomic_store(&probe->done, 1);
    return NULL;
}

static int wait_for_call_under_lock(const fld_impl_info *info, void *user)
{
    struct lockfree_probe *probe = user;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, call_from_thread, probe), 0);
    for (int i = 0; i < 2000 && !atomic_load(&probe->done); i++)
        usleep(1000);
    int finished = atomic_load(&probe->done);
    if (!finished) {
        /* Let it finish once the lock is released, then report. */
        pthread_detach(t);
        return 1;
    }
    pthread_join(t, NULL);
    return 2; /* stop the walk: one probe is enough */
}

static void assert_call_needs_no_lock(const char *op)
{
    struct lockfree_probe probe = {.op = op};
    int rc = fld_foreach_impl(wait_for_call_under_lock, &probe);
    ck_assert_msg(rc == 2, "a cached call of '%s' waited for the host lock", op);
    ck_assert_int_eq(atomic_load(&probe.status), FLD_OK);
}

static void *push_and_hold(void *p)
{
    atomic_int *state = p;
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    atomic_store(state, 1);
    while (atomic_load(state) != 2)
        usleep(100);
    fld_policy_pop();
    return NULL;
}

START_TEST(cached_calls_take_no_lock)
{
    fld_impl impls[] = {
        mk("t_gated", "vendor.gated", FLD_KIND_VENDOR, "acme", FLD_PRIORITY_VENDOR, 0),
        mk("t_gated", "reference.r", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE, 1),
        mk("t_fb", "vendor.failing", FLD_KIND_VENDOR, "acme", FLD_PRIORITY_VENDOR, 2),
        mk("t_fb", "reference.r", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE, 3),
        mk("t_plain", "vendor.plain", FLD_KIND_VENDOR, "acme", FLD_PRIORITY_VENDOR, 4),
    };
    impls[0].supports = gate_supports;
    atomic_store(&gate_open, true);
    slot_status[2] = FLD_EIMPL;
    add_plugin("lockfree", impls, 5);
    /* Warm the caches (and make t_fb fall back once). */
    ck_assert_int_eq(run_op("t_gated"), 0);
    ck_assert_int_eq(run_op("t_fb"), 3);
    ck_assert_int_eq(run_op("t_plain"), 4);

    assert_call_needs_no_lock("t_plain");
    assert_call_needs_no_lock("t_gated");
    assert_call_needs_no_lock("t_fb");

    /* Another thread holds a scoped override: this thread's calls stay lock-free. */
    atomic_int state = 0;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, push_and_hold, &state), 0);
    while (atomic_load(&state) != 1)
        usleep(100);
    assert_call_needs_no_lock("t_plain");
    atomic_store(&state, 2);
    pthread_join(t, NULL);
}
END_TEST

START_TEST(catalog_op_invalid_args_before_any_impl)
{
    const fld_impl impls[] = {
        mk_catalog(FLD_OP_SILU_AND_MUL, "vendor.fake", FLD_KIND_VENDOR, "acme", 100, 0),
        mk_catalog(FLD_OP_SILU_AND_MUL, "default.fake", FLD_KIND_DEFAULT, NULL, 150, 1),
    };
    add_plugin("fake", impls, 2);
    float xs[4] = {1, 2, 3, 4}, os[3] = {0};
    int64_t xshape[2] = {1, 4}, oshape[2] = {1, 3};
    DLTensor x = {xs, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xshape, NULL, 0};
    DLTensor out = {os, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, oshape, NULL, 0};

    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_EINVAL);
    ck_assert_int_eq(fld_silu_and_mul(NULL, &x), FLD_EINVAL);
    ck_assert_int_eq(fld_silu_and_mul(&out, NULL), FLD_EINVAL);
    fld_activation_args args = {&out, &x};
    ck_assert_int_eq(fld_call_by_name(FLD_OP_SILU_AND_MUL, &args), FLD_EINVAL);
    ck_assert_int_eq(fld_call(fld_op_lookup(FLD_OP_SILU_AND_MUL), &args), FLD_EINVAL);
    ck_assert_int_eq(fld_call(fld_op_lookup(FLD_OP_SILU_AND_MUL), NULL), FLD_EINVAL);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
    ck_assert_int_eq(atomic_load(&runs[1]), 0);

    /* validation failures are not implementation failures: nothing was remembered */
    oshape[1] = 2;
    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[1]), 1);
}
END_TEST

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Many candidates: every one is ranked before a chain keeps its first 64   */
/* ------------------------------------------------------------------------ */

#define VARIANTS    100
#define CHAIN_KEEPS 64

static int rejected_with(const fld_resolution *r, const char *needle)
{
    int n = 0;
    for (size_t i = 0; i < r->n_rejected; i++)
        n += strstr(r->rejected[i].reason, needle) != NULL;
    return n;
}

/*
 * The real cpu plugin plus one plugin of VARIANTS low-priority f32
 * silu_and_mul variants whose impl_ids sort before 'vendor.cpu': ranked by
 * priority, vendor.cpu still wins and runs, and the variants ranked past
 * the chain's 64 are reported, not silently dropped.
 */
START_TEST(many_low_priority_variants_keep_vendor_cpu)
{
    static char ids[VARIANTS][32];
    static fld_impl variants[VARIANTS];
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lib/fldispatch/plugins/fld-cpu.so", tt_build_dir());
    capture_logs();
    fld_log_set_level(FLD_LOG_WARNING);
    int rc = fld_load_plugin(path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s", path, fld_last_error());
    for (int i = 0; i < VARIANTS; i++) {
        snprintf(ids[i], sizeof ids[i], "vendor.a_variant_%03d", i);
        variants[i] = mk_catalog(FLD_OP_SILU_AND_MUL, ids[i], FLD_KIND_VENDOR, "variants", 1, 0);
        variants[i].devices = FLD_DEVICE_MASK_CPU;
        variants[i].dtypes = FLD_DTYPE_MASK_F32;
    }
    add_plugin("variants", variants, VARIANTS);

    const char *impl = NULL;
    rc = fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &impl);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(impl, "vendor.cpu");

    fld_resolution *r = NULL;
    ck_assert_int_eq(fld_explain(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r), FLD_OK);
    ck_assert_uint_eq(r->n_candidates, CHAIN_KEEPS);
    ck_assert_str_eq(r->candidates[0], "vendor.cpu");
    /* vendor.cpu, the variants, then the reference impl(s): all ranked, the tail cut. */
    const size_t ranked = CHAIN_KEEPS + (size_t)rejected_with(r, "a chain keeps the first 64");
    ck_assert_uint_ge(ranked, VARIANTS + 2);
    ck_assert_str_eq(r->candidates[1], "vendor.a_variant_000"); /* ties by impl_id */
    fld_resolution_free(r);

    /* A real call runs vendor.cpu, not a variant (their kernel counts slot 0). */
    float xv[2 * 8], ov[2 * 4];
    for (int i = 0; i < 16; i++)
        xv[i] = (float)i / 8.0f;
    int64_t xs[2] = {2, 8}, os[2] = {2, 4};
    DLTensor x = {xv, {kDLCPU, 0}, 2, FLD_DTYPE_F32, xs, NULL, 0};
    DLTensor out = {ov, {kDLCPU, 0}, 2, FLD_DTYPE_F32, os, NULL, 0};
    ck_assert_int_eq(fld_silu_and_mul(&out, &x), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
    /* Building that chain said what it left out. */
    if (count_logs(FLD_LOG_WARNING, "a chain keeps the first 64") != 1)
        dump_logs();
    ck_assert_int_eq(count_logs(FLD_LOG_WARNING, "a chain keeps the first 64"), 1);
}
END_TEST

#define SMALL_PLUGINS 1000

/* 1,000 small plugins, then one whose impl has the highest priority: it is chosen. */
START_TEST(high_priority_impl_after_a_thousand_others)
{
    static char names[SMALL_PLUGINS + 1][16], ids[SMALL_PLUGINS + 1][32];
    static fld_impl impls[SMALL_PLUGINS + 1];
    static fld_plugin_descriptor descs[SMALL_PLUGINS + 1];
    capture_logs();
    fld_log_set_level(FLD_LOG_WARNING);
    for (int i = 0; i <= SMALL_PLUGINS; i++) {
        const bool last = i == SMALL_PLUGINS;
        snprintf(names[i], sizeof names[i], last ? "late" : "small%04d", i);
        snprintf(ids[i], sizeof ids[i], last ? "vendor.zz_late" : "vendor.small%04d", i);
        impls[i] = mk("t_many", ids[i], FLD_KIND_VENDOR, names[i], last ? 100000 : 1 + i % 7,
                      last ? 1 : 0);
        descs[i] = (fld_plugin_descriptor){FLD_PLUGIN_MAGIC,
                                           FLD_PLUGIN_ABI_MAJOR,
                                           FLD_PLUGIN_ABI_MINOR,
                                           sizeof(fld_plugin_descriptor),
                                           0,
                                           names[i],
                                           "1.0",
                                           FLD_VERSION_STRING,
                                           register_pending};
        pending = &impls[i];
        n_pending = 1;
        int rc = fld_register_plugin(&descs[i]);
        pending = NULL;
        n_pending = 0;
        ck_assert_msg(rc == FLD_OK, "plugin %s: %s", names[i], fld_last_error());
    }
    const char *impl = NULL;
    int rc = fld_resolve("t_many", FLD_DEVICE_CPU, FLD_DTYPE_F32, &impl);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(impl, "vendor.zz_late");
    struct targs a = {0};
    ck_assert_int_eq(fld_call_by_name("t_many", &a), FLD_OK);
    ck_assert_int_eq(a.who, 1);

    /* The chain holds the 64 best by priority (ties by impl_id), in that order. */
    fld_resolution *r = NULL;
    ck_assert_int_eq(fld_explain("t_many", FLD_DEVICE_CPU, FLD_DTYPE_F32, &r), FLD_OK);
    ck_assert_uint_eq(r->n_candidates, CHAIN_KEEPS);
    ck_assert_int_eq(rejected_with(r, "a chain keeps the first 64"),
                     SMALL_PLUGINS + 1 - CHAIN_KEEPS);
    ck_assert_str_eq(r->candidates[1], "vendor.small0006"); /* priority 7, the smallest id */
    ck_assert_str_eq(r->candidates[2], "vendor.small0013");
    fld_resolution_free(r);
}
END_TEST

static Suite *selection_suite(void)
{
    Suite *s = suite_create("selection");
    TCase *tc = tcase_create("order");
    tcase_add_test(tc, default_order_prefer_flagos);
    tcase_add_test(tc, default_order_prefer_vendor);
    tcase_add_test(tc, default_order_prefer_reference);
    tcase_add_test(tc, priority_does_not_cross_tokens);
    tcase_add_test(tc, ties_by_ascending_impl_id);
    tcase_add_test(tc, priority_descending_within_token);
    tcase_add_test(tc, registration_order_is_irrelevant);
    suite_add_tcase(s, tc);

    tc = tcase_create("many_candidates");
    tcase_add_test(tc, many_low_priority_variants_keep_vendor_cpu);
    tcase_add_test(tc, high_priority_impl_after_a_thousand_others);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("tokens");
    tcase_add_test(tc, deny_vendor);
    tcase_add_test(tc, deny_several_vendors);
    tcase_add_test(tc, allow_vendor);
    tcase_add_test(tc, deny_wins_over_allow);
    tcase_add_test(tc, vendor_name_token_ignores_case);
    tcase_add_test(tc, vendor_name_token_matching_nothing);
    tcase_add_test(tc, impl_token);
    tcase_add_test(tc, impl_token_does_not_bypass_filters);
    tcase_add_test(tc, per_op_order_replaces_default);
    tcase_add_test(tc, per_op_order_only_failing_is_exhausted);
    suite_add_tcase(s, tc);

    tc = tcase_create("availability");
    tcase_add_test(tc, unavailable_impl_skipped);
    tcase_add_test(tc, only_unavailable_impls);
    tcase_add_test(tc, supports_declines_to_next);
    tcase_add_test(tc, supports_declines_in_strict_mode);
    tcase_add_test(tc, unsupported_status_passes_without_memory);
    tcase_add_test(tc, direct_path_decline_keeps_the_reason);
    suite_add_tcase(s, tc);

    tc = tcase_create("fallback");
    tcase_add_test(tc, fallback_order_and_memory);
    tcase_add_test(tc, failure_memory_is_per_device_and_dtype);
    tcase_add_test(tc, failure_forgotten_after_policy_change);
    tcase_add_test(tc, failure_memory_across_scopes);
    tcase_add_test(tc, failure_forgotten_after_policy_reset);
    tcase_add_test(tc, failure_forgotten_after_clear_failures);
    tcase_add_test(tc, clear_failures_of_one_op);
    tcase_add_test(tc, failure_forgotten_after_registry_change);
    tcase_add_test(tc, failure_forgotten_after_reload);
    tcase_add_test(tc, all_fail);
    tcase_add_test(tc, all_fail_custom_status);
    tcase_add_test(tc, strict_returns_winner_status);
    tcase_add_test(tc, strict_scoped_override);
    suite_add_tcase(s, tc);

    tc = tcase_create("explain");
    tcase_add_test(tc, no_candidates);
    tcase_add_test(tc, unknown_op);
    tcase_add_test(tc, explain_lists_every_rejection);
    suite_add_tcase(s, tc);

    tc = tcase_create("invalidation");
    tcase_add_test(tc, policy_set_changes_resolution);
    tcase_add_test(tc, invalid_policy_set_changes_nothing);
    tcase_add_test(tc, late_plugin_is_used);
    tcase_add_test(tc, late_plugin_for_catalog_op);
    tcase_add_test(tc, cache_returns_same_impl);
    suite_add_tcase(s, tc);

    tc = tcase_create("scoped");
    tcase_add_test(tc, scoped_preference_is_thread_local);
    tcase_add_test(tc, scoped_vendor_lists);
    tcase_add_test(tc, scoped_override_on_top_of_env);
    tcase_add_test(tc, invalid_push_pushes_nothing);
    tcase_add_test(tc, global_change_seen_under_override);
    suite_add_tcase(s, tc);

    tc = tcase_create("filters");
    tcase_add_test(tc, use_flaggems_off_keeps_registration);
    tcase_add_test(tc, manifest_pin_respects_filters);
    tcase_add_test(tc, prefer_enabled_off_keeps_reference_only);
    tcase_add_test(tc, flagos_blacklist_by_op);
    tcase_add_test(tc, flagos_whitelist_by_op);
    tcase_add_test(tc, external_filters);
    tcase_add_test(tc, external_disabled_keeps_builtin_reference);
    suite_add_tcase(s, tc);

    tc = tcase_create("lockfree");
    tcase_add_test(tc, cached_calls_take_no_lock);
    suite_add_tcase(s, tc);

    tc = tcase_create("calls");
    tcase_add_test(tc, opaque_op_by_device_and_dtype);
    tcase_add_test(tc, opaque_op_by_handle_and_name);
    tcase_add_test(tc, opaque_op_status_passes_through);
    tcase_add_test(tc, catalog_op_plugin_and_reference);
    tcase_add_test(tc, catalog_op_invalid_args_before_any_impl);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_selection", selection_suite());
}
