/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registry: validation of implementation records, all-or-nothing
 * registration per plugin, duplicates, the listings for tools, availability
 * evaluated once per process, concurrent registration, op handles.
 *
 * Plugins are registered in-process with fld_register_plugin(); the real
 * plugins are kept out by pointing VLLM_FL_PLUGIN_DIR at an empty directory.
 * vllm-plugin-FL lost every reference impl when one registration failed
 * (#524); here a bad plugin loses only its own impls, and all of them.
 */
#include <check.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/catalog_args.h"
#include "util/harness.h"
#include <fldispatch/binding.h>
#include <fldispatch/plugin.h>

static int count_builtin_records(const fld_plugin_info *info, void *user);

#define ck_assert_contains(hay, needle)                                                            \
    do {                                                                                           \
        const char *hay_ = (hay);                                                                  \
        ck_assert_msg(hay_ &&strstr(hay_, (needle)), "expected '%s' in '%s'", (needle),            \
                      hay_ ? hay_ : "(null)");                                                     \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Implementations                                                          */
/* ------------------------------------------------------------------------ */

static atomic_int runs[4];
static atomic_int avail_calls;

struct targs {
    int who;
};

static int run_slot(int slot, const void *args)
{
    atomic_fetch_add(&runs[slot], 1);
    if (args)
        ((struct targs *)args)->who = slot;
    return FLD_OK;
}

static int fn0(const void *args)
{
    return run_slot(0, args);
}

static int fn1(const void *args)
{
    return run_slot(1, args);
}

static bool no_gpu_a(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    *reason = "no gpu A";
    return false;
}

static bool no_gpu_b(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    *reason = "no gpu B";
    return false;
}

static bool counted_yes(const char **reason)
{
    atomic_fetch_add(&avail_calls, 1);
    return true;
}

static int binding_fn(void *ctx, const void *args)
{
    (void)ctx;
    return run_slot(2, args);
}

static fld_impl mk(const char *op, const char *impl_id, fld_kind kind, const char *vendor,
                   int priority)
{
    fld_impl m = {
        .op = op,
        .impl_id = impl_id,
        .kind = kind,
        .vendor = vendor,
        .priority = priority,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = fn0,
    };
    return m;
}

/* ------------------------------------------------------------------------ */
/* In-process plugins                                                       */
/* ------------------------------------------------------------------------ */

/*
 * register_builtins has no user pointer: it registers what its caller staged
 * on the same thread, records each fld_registry_register() status and
 * message, and returns pending_return (after fld_set_error(pending_detail)).
 */
#define MAX_PENDING 8
static _Thread_local const fld_impl *pending;
static _Thread_local size_t n_pending;
static _Thread_local int pending_return;
static _Thread_local const char *pending_detail;
static _Thread_local int reg_status[MAX_PENDING];
static _Thread_local char reg_message[MAX_PENDING][512];
static atomic_int register_calls;

static int register_pending(fld_registry *reg)
{
    atomic_fetch_add(&register_calls, 1);
    for (size_t i = 0; i < n_pending; i++) {
        reg_status[i] = fld_registry_register(reg, &pending[i]);
        snprintf(reg_message[i], sizeof reg_message[i], "%s", fld_last_error());
    }
    if (pending_return != 0 && pending_detail)
        fld_set_error("%s", pending_detail);
    return pending_return;
}

/* Descriptors must outlive the library: a static pool, fresh in every forked test. */
static fld_plugin_descriptor descriptor_pool[64];
static atomic_int descriptors_used;

static fld_plugin_descriptor *descriptor(const char *name)
{
    int slot = atomic_fetch_add(&descriptors_used, 1);
    ck_assert_int_lt(slot, 64);
    fld_plugin_descriptor *d = &descriptor_pool[slot];
    *d = (fld_plugin_descriptor){FLD_PLUGIN_MAGIC,
                                 FLD_PLUGIN_ABI_MAJOR,
                                 FLD_PLUGIN_ABI_MINOR,
                                 sizeof(fld_plugin_descriptor),
                                 0,
                                 name,
                                 "1.0",
                                 FLD_VERSION_STRING,
                                 register_pending};
    return d;
}

static int register_desc(const fld_plugin_descriptor *d, const fld_impl *impls, size_t n)
{
    ck_assert_uint_le(n, MAX_PENDING);
    pending = impls;
    n_pending = n;
    int rc = fld_register_plugin(d);
    pending = NULL;
    n_pending = 0;
    return rc;
}

static int try_plugin(const char *name, const fld_impl *impls, size_t n)
{
    return register_desc(descriptor(name), impls, n);
}

static void add_plugin(const char *name, const fld_impl *impls, size_t n)
{
    int rc = try_plugin(name, impls, n);
    ck_assert_msg(rc == FLD_OK, "plugin %s: %d %s", name, rc, fld_last_error());
}

/*
 * A descriptor of another ABI major may have another layout: nothing past the
 * version fields may be read from it. Here its name field holds a wild
 * pointer, which the host must not follow.
 */
START_TEST(other_major_layout_is_not_read)
{
    struct future_descriptor {
        uint32_t magic;
        uint16_t abi_major, abi_minor;
        uint32_t struct_size, flags;
        uintptr_t fields[5];
    };
    static const struct future_descriptor future = {FLD_PLUGIN_MAGIC,
                                                    FLD_PLUGIN_ABI_MAJOR + 1,
                                                    0,
                                                    sizeof(struct future_descriptor),
                                                    0,
                                                    {0x10, 0x20, 0x30, 0x40, 0x50}};
    const fld_plugin_descriptor *d = (const fld_plugin_descriptor *)(const void *)&future;
    ck_assert_int_eq(fld_register_plugin(d), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "ABI major 2 is not supported");
    /* Rejected in-process descriptors do not pile up records. */
    ck_assert_int_eq(fld_register_plugin(d), FLD_EPLUGIN);
    ck_assert_int_eq(fld_register_plugin(NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_register_plugin(NULL), FLD_EINVAL);
    size_t builtin_records = 0;
    ck_assert_int_eq(fld_foreach_plugin(count_builtin_records, &builtin_records), FLD_OK);
    ck_assert_uint_le(builtin_records, 3); /* reference + one per distinct rejection */
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Listings                                                                 */
/* ------------------------------------------------------------------------ */

#define MAX_SEEN 256

struct impl_copy {
    char op[64], impl_id[64], kind[16], vendor[32], plugin[32], reason[128];
    bool has_vendor, in_tree, available;
    int priority;
    uint32_t devices, dtypes;
};
static struct impl_copy seen_impls[MAX_SEEN];
static int n_seen_impls;

static int copy_impl(const fld_impl_info *info, void *user)
{
    ck_assert_int_lt(n_seen_impls, MAX_SEEN);
    struct impl_copy *c = &seen_impls[n_seen_impls++];
    snprintf(c->op, sizeof c->op, "%s", info->op);
    snprintf(c->impl_id, sizeof c->impl_id, "%s", info->impl_id);
    snprintf(c->kind, sizeof c->kind, "%s", info->kind);
    c->has_vendor = info->vendor != NULL;
    snprintf(c->vendor, sizeof c->vendor, "%s", info->vendor ? info->vendor : "");
    snprintf(c->plugin, sizeof c->plugin, "%s", info->plugin);
    snprintf(c->reason, sizeof c->reason, "%s",
             info->unavailable_reason ? info->unavailable_reason : "(null)");
    c->in_tree = info->in_tree;
    c->available = info->available;
    c->priority = info->priority;
    c->devices = info->devices;
    c->dtypes = info->dtypes;
    return 0;
}

static void list_impls(void)
{
    n_seen_impls = 0;
    ck_assert_int_eq(fld_foreach_impl(copy_impl, NULL), 0);
}

static const struct impl_copy *find_impl(const char *op, const char *impl_id)
{
    for (int i = 0; i < n_seen_impls; i++)
        if (strcmp(seen_impls[i].op, op) == 0 && strcmp(seen_impls[i].impl_id, impl_id) == 0)
            return &seen_impls[i];
    return NULL;
}

static int impls_of_plugin(const char *plugin)
{
    int n = 0;
    for (int i = 0; i < n_seen_impls; i++)
        if (strcmp(seen_impls[i].plugin, plugin) == 0)
            n++;
    return n;
}

struct plugin_copy {
    char name[32], path[64], version[16], reason[512];
    unsigned abi_major, abi_minor;
    bool in_tree;
    fld_plugin_status status;
    size_t n_impls;
};
static struct plugin_copy seen_plugins[64];
static int n_seen_plugins;

static int copy_plugin(const fld_plugin_info *info, void *user)
{
    ck_assert_int_lt(n_seen_plugins, 64);
    struct plugin_copy *c = &seen_plugins[n_seen_plugins++];
    snprintf(c->name, sizeof c->name, "%s", info->name);
    snprintf(c->path, sizeof c->path, "%s", info->path);
    snprintf(c->version, sizeof c->version, "%s", info->version);
    snprintf(c->reason, sizeof c->reason, "%s", info->reason ? info->reason : "(null)");
    c->abi_major = info->abi_major;
    c->abi_minor = info->abi_minor;
    c->in_tree = info->in_tree;
    c->status = info->status;
    c->n_impls = info->n_impls;
    return 0;
}

static void list_plugins(void)
{
    n_seen_plugins = 0;
    ck_assert_int_eq(fld_foreach_plugin(copy_plugin, NULL), 0);
}

static const struct plugin_copy *find_plugin(const char *name)
{
    const struct plugin_copy *found = NULL;
    for (int i = 0; i < n_seen_plugins; i++)
        if (strcmp(seen_plugins[i].name, name) == 0) {
            ck_assert_msg(found == NULL, "plugin %s listed twice", name);
            found = &seen_plugins[i];
        }
    ck_assert_msg(found != NULL, "plugin %s not listed", name);
    return found;
}

static int call_t(const char *op)
{
    fld_op h = fld_op_lookup(op);
    ck_assert_msg(h != NULL, "lookup %s: %s", op, fld_last_error());
    struct targs a = {-1};
    int rc = fld_call_on(h, FLD_DEVICE_CPU, FLD_DTYPE_F32, &a);
    ck_assert_msg(rc == FLD_OK, "call %s: %d %s", op, rc, fld_last_error());
    return a.who;
}

/* ------------------------------------------------------------------------ */
/* Validation of records                                                    */
/* ------------------------------------------------------------------------ */

struct bad_record {
    const char *what;
    const char *op;
    const char *impl_id;
    fld_kind kind;
    const char *vendor;
    uint32_t devices, dtypes;
    bool null_fn;
    /* both expected in fld_last_error() and in the plugin's reason: the thing at fault, what is
     * wrong */
    const char *names, *message;
};

#define ALL_DEV FLD_DEVICE_MASK_ALL
#define ALL_DT  FLD_DTYPE_MASK_ALL
#define VENDOR  FLD_KIND_VENDOR

static const struct bad_record bad_records[] = {
    {"empty impl_id", "t_bad", "", VENDOR, "acme", ALL_DEV, ALL_DT, false, "impl_id ''", "empty"},
    {"NULL impl_id", "t_bad", NULL, VENDOR, "acme", ALL_DEV, ALL_DT, false, "impl_id", "impl_id"},
    {"impl_id without kind prefix", "t_bad", "acme", VENDOR, "acme", ALL_DEV, ALL_DT, false,
     "impl_id 'acme'", "must look like"},
    {"impl_id with unknown prefix", "t_bad", "fast.acme", VENDOR, "acme", ALL_DEV, ALL_DT, false,
     "impl_id 'fast.acme'", "must look like"},
    {"impl_id kind differs from kind", "t_bad", "default.acme", VENDOR, "acme", ALL_DEV, ALL_DT,
     false, "impl_id 'default.acme'", "must look like"},
    {"impl_id with empty name", "t_bad", "vendor.", VENDOR, "acme", ALL_DEV, ALL_DT, false,
     "impl_id 'vendor.'", "must look like"},
    {"reference impl_id on a default impl", "t_bad", "reference.x", FLD_KIND_DEFAULT, NULL, ALL_DEV,
     ALL_DT, false, "impl_id 'reference.x'", "must look like"},
    {"vendor without vendor name", "t_bad", "vendor.x", VENDOR, NULL, ALL_DEV, ALL_DT, false,
     "impl 'vendor.x'", "kind VENDOR requires a vendor name"},
    {"vendor with empty vendor name", "t_bad", "vendor.x", VENDOR, "", ALL_DEV, ALL_DT, false,
     "impl 'vendor.x'", "kind VENDOR requires a vendor name"},
    {"NULL fn", "t_bad", "vendor.x", VENDOR, "acme", ALL_DEV, ALL_DT, true, "impl 'vendor.x'",
     "fn is NULL"},
    {"empty device mask", "t_bad", "vendor.x", VENDOR, "acme", 0, ALL_DT, false, "impl 'vendor.x'",
     "device mask"},
    {"empty dtype mask", "t_bad", "vendor.x", VENDOR, "acme", ALL_DEV, 0, false, "impl 'vendor.x'",
     "dtype mask"},
    {"empty op name", "", "vendor.x", VENDOR, "acme", ALL_DEV, ALL_DT, false, "impl 'vendor.x'",
     "op name ''"},
    {"NULL op name", NULL, "vendor.x", VENDOR, "acme", ALL_DEV, ALL_DT, false, "impl 'vendor.x'",
     "op name"},
    {"op name with a space", "t bad", "vendor.x", VENDOR, "acme", ALL_DEV, ALL_DT, false,
     "impl 'vendor.x'", "op name 't bad'"},
};
#define N_BAD_RECORDS ((int)(sizeof bad_records / sizeof bad_records[0]))

START_TEST(invalid_record_rejects_plugin)
{
    const struct bad_record *bad = &bad_records[_i];
    fld_impl impls[] = {
        mk("t_good", "vendor.good", FLD_KIND_VENDOR, "acme", 100),
        mk(bad->op, bad->impl_id, bad->kind, bad->vendor, 100),
    };
    impls[1].devices = bad->devices;
    impls[1].dtypes = bad->dtypes;
    if (bad->null_fn)
        impls[1].fn = NULL;
    int rc = try_plugin("badrec", impls, 2);
    ck_assert_msg(rc == FLD_EPLUGIN, "%s: fld_register_plugin gave %d", bad->what, rc);
    ck_assert_contains(fld_last_error(), "invalid implementation record");
    ck_assert_contains(fld_last_error(), bad->names);
    ck_assert_contains(fld_last_error(), bad->message);

    /* what the plugin itself saw */
    ck_assert_int_eq(reg_status[0], FLD_OK);
    ck_assert_msg(reg_status[1] == FLD_EINVAL, "%s: fld_registry_register gave %d", bad->what,
                  reg_status[1]);
    ck_assert_contains(reg_message[1], bad->names);
    ck_assert_contains(reg_message[1], bad->message);

    list_plugins();
    const struct plugin_copy *p = find_plugin("badrec");
    ck_assert_int_eq(p->status, FLD_PLUGIN_REJECTED);
    ck_assert_contains(p->reason, "invalid implementation record");
    ck_assert_contains(p->reason, bad->names);
    ck_assert_contains(p->reason, bad->message);
    ck_assert_uint_eq(p->n_impls, 0);

    list_impls();
    ck_assert_int_eq(impls_of_plugin("badrec"), 0);
    ck_assert_ptr_null(find_impl("t_good", "vendor.good"));
    const char *id = NULL;
    ck_assert_int_ne(fld_resolve("t_good", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_int_eq(atomic_load(&runs[0]), 0);
}
END_TEST

START_TEST(duplicate_within_plugin)
{
    const fld_impl impls[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "zeta", 200),
    };
    ck_assert_int_eq(try_plugin("dup", impls, 2), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "duplicate impl_id 'vendor.x' for op 't_op'");
    ck_assert_int_eq(reg_status[1], FLD_EINVAL);
    ck_assert_contains(reg_message[1], "duplicate impl_id 'vendor.x' for op 't_op'");
    list_impls();
    ck_assert_int_eq(impls_of_plugin("dup"), 0);
}
END_TEST

START_TEST(all_or_nothing)
{
    /* two good impls, then a bad one: none stays, and other plugins are untouched */
    const fld_impl keep[] = {
        mk("t_keep", "vendor.k", FLD_KIND_VENDOR, "acme", 100),
    };
    add_plugin("keeper", keep, 1);
    const fld_impl impls[] = {
        mk("t_one", "vendor.a", FLD_KIND_VENDOR, "acme", 100),
        mk("t_two", "default.b", FLD_KIND_DEFAULT, NULL, 150),
        mk("t_one", "vendor.c", FLD_KIND_VENDOR, NULL, 100),
    };
    ck_assert_int_eq(try_plugin("partial", impls, 3), FLD_EPLUGIN);
    ck_assert_int_eq(reg_status[0], FLD_OK);
    ck_assert_int_eq(reg_status[1], FLD_OK);
    ck_assert_int_eq(reg_status[2], FLD_EINVAL);

    list_impls();
    ck_assert_int_eq(impls_of_plugin("partial"), 0);
    ck_assert_ptr_null(find_impl("t_one", "vendor.a"));
    ck_assert_ptr_null(find_impl("t_two", "default.b"));
    ck_assert_ptr_nonnull(find_impl("t_keep", "vendor.k"));
    const char *id = NULL;
    ck_assert_int_ne(fld_resolve("t_one", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_int_ne(fld_resolve("t_two", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_int_eq(call_t("t_keep"), 0);
    /* the catalog's reference survives a bad plugin (vllm-plugin-FL #524) */
    ck_assert_int_eq(fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "reference.c");

    /* the rejected plugin's impl_ids are free for a later plugin */
    const fld_impl again[] = {
        mk("t_one", "vendor.a", FLD_KIND_VENDOR, "acme", 100),
    };
    add_plugin("again", again, 1);
    ck_assert_int_eq(call_t("t_one"), 0);
}
END_TEST

START_TEST(register_builtins_error_keeps_nothing)
{
    const fld_impl impls[] = {
        mk("t_one", "vendor.a", FLD_KIND_VENDOR, "acme", 100),
        mk("t_two", "vendor.b", FLD_KIND_VENDOR, "acme", 100),
    };
    pending_return = FLD_EIMPL;
    pending_detail = "selA could not open its device";
    ck_assert_int_eq(try_plugin("failing", impls, 2), FLD_EPLUGIN);
    pending_return = 0;
    ck_assert_int_eq(reg_status[0], FLD_OK);
    ck_assert_int_eq(reg_status[1], FLD_OK);
    ck_assert_contains(fld_last_error(), "register_builtins failed");
    ck_assert_contains(fld_last_error(), "selA could not open its device");

    list_plugins();
    const struct plugin_copy *p = find_plugin("failing");
    ck_assert_int_eq(p->status, FLD_PLUGIN_REJECTED);
    ck_assert_contains(p->reason, "register_builtins failed");
    ck_assert_contains(p->reason, fld_strerror(FLD_EIMPL));
    list_impls();
    ck_assert_int_eq(impls_of_plugin("failing"), 0);
    const char *id = NULL;
    ck_assert_int_ne(fld_resolve("t_one", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
}
END_TEST

/* The resolution of t_op on CPU/f32 now: its candidates joined by ' '. */
static void explain_t(const char *op, char *buf, size_t size)
{
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain(op, FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < res->n_candidates && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? " " : "", res->candidates[i]);
    fld_resolution_free(res);
}

/*
 * One impl_id from two plugins (a vendor's own package beside the in-tree
 * plugin of that vendor): both stay, each named impl_id@plugin, ranked by
 * priority, then out-of-tree before in-tree, then plugin name; a token
 * impl:ID@PLUGIN picks one, impl:ID matches both.
 */
START_TEST(same_impl_id_across_plugins)
{
    fld_impl first[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
    };
    fld_impl second[] = {
        mk("t_other", "vendor.y", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "zeta", 100),
    };
    second[0].fn = fn1;
    second[1].fn = fn1;
    add_plugin("first", first, 1);
    char buf[256];
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x"); /* alone: its own id */
    add_plugin("second", second, 2);

    list_impls();
    int n = 0;
    for (int i = 0; i < n_seen_impls; i++)
        if (strcmp(seen_impls[i].op, "t_op") == 0) {
            ck_assert_str_eq(seen_impls[i].impl_id, "vendor.x");
            ck_assert_str_eq(seen_impls[i].plugin, n++ ? "second" : "first");
        }
    ck_assert_int_eq(n, 2);
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x@first vendor.x@second");
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.x@first");
    ck_assert_int_eq(call_t("t_op"), 0);

    ck_assert_int_eq(fld_policy_push_per_op("t_op=impl:vendor.x@second"), FLD_OK);
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x@second");
    ck_assert_int_eq(call_t("t_op"), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_push_per_op("t_op=impl:vendor.x"), FLD_OK);
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x@first vendor.x@second");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_push_per_op("t_op=vendor:zeta"), FLD_OK);
    ck_assert_int_eq(call_t("t_op"), 1);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    /* a plugin that registered no such record: nothing matches (a warning, non-strict) */
    ck_assert_int_eq(fld_policy_push_per_op("t_op=impl:vendor.x@third|vendor"), FLD_OK);
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x@first vendor.x@second");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_push_per_op("t_op=impl:vendor.x@"), FLD_ECONFIG);
    ck_assert_contains(fld_last_error(), "invalid impl id 'vendor.x@'");

    list_plugins();
    ck_assert_int_eq(find_plugin("first")->status, FLD_PLUGIN_LOADED);
    ck_assert_int_eq(find_plugin("second")->status, FLD_PLUGIN_LOADED);
}
END_TEST

/* A higher priority wins over the tie rule. */
START_TEST(same_impl_id_priority_first)
{
    fld_impl low[] = {mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100)};
    fld_impl high[] = {mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 120)};
    high[0].fn = fn1;
    add_plugin("a_low", low, 1);
    add_plugin("z_high", high, 1);
    char buf[256];
    explain_t("t_op", buf, sizeof buf);
    ck_assert_str_eq(buf, "vendor.x@z_high vendor.x@a_low");
    ck_assert_int_eq(call_t("t_op"), 1);
}
END_TEST

/* The built-in reference plugin is in-tree: an out-of-tree record of its id goes first. */
START_TEST(same_impl_id_as_builtin_reference)
{
    const fld_impl impls[] = {
        mk(FLD_OP_RMS_NORM, "reference.c", FLD_KIND_REFERENCE, NULL, 50),
    };
    add_plugin("clash", impls, 1);
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    int at_clash = -1, at_builtin = -1;
    for (size_t i = 0; i < res->n_candidates; i++) {
        if (strcmp(res->candidates[i], "reference.c@clash") == 0)
            at_clash = (int)i;
        else if (strncmp(res->candidates[i], "reference.c@", 12) == 0)
            at_builtin = (int)i;
    }
    fld_resolution_free(res);
    ck_assert_int_ge(at_clash, 0);
    ck_assert_int_eq(at_builtin, at_clash + 1);
}
END_TEST

/* A plugin registering an impl_id of an op again, in a later registration: refused. */
START_TEST(duplicate_within_plugin_across_registrations)
{
    static const fld_binding_impl one = {
        .op = "t_op",
        .impl_id = "reference.h",
        .kind = FLD_KIND_REFERENCE,
        .priority = 50,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = binding_fn,
    };
    ck_assert_int_eq(fld_binding_register("hostp", "1", "test:hostp", &one, 1), FLD_OK);
    ck_assert_int_eq(fld_binding_register("hostp", "1", "test:hostp", &one, 1), FLD_EINVAL);
    ck_assert_contains(fld_last_error(),
                       "duplicate impl_id 'reference.h' for op 't_op' (already registered by the "
                       "same plugin 'hostp')");
    ck_assert_int_eq(fld_binding_register("hostq", "1", "test:hostq", &one, 1), FLD_OK);
}
END_TEST

START_TEST(same_impl_id_for_different_ops)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op2", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
        mk(FLD_OP_SILU_AND_MUL, "reference.c2", FLD_KIND_REFERENCE, NULL, 50),
    };
    impls[1].fn = fn1;
    add_plugin("shared", impls, 3);
    list_plugins();
    const struct plugin_copy *p = find_plugin("shared");
    ck_assert_int_eq(p->status, FLD_PLUGIN_LOADED);
    ck_assert_uint_eq(p->n_impls, 3);
    ck_assert_int_eq(call_t("t_op"), 0);
    ck_assert_int_eq(call_t("t_op2"), 1);
}
END_TEST

static int count_builtin_records(const fld_plugin_info *info, void *user)
{
    if (strcmp(info->path, "(built-in)") == 0)
        ++*(size_t *)user;
    return 0;
}

START_TEST(descriptor_checks_before_any_call)
{
    static const fld_plugin_descriptor bad_magic = {0x12345678u,
                                                    FLD_PLUGIN_ABI_MAJOR,
                                                    FLD_PLUGIN_ABI_MINOR,
                                                    sizeof(fld_plugin_descriptor),
                                                    0,
                                                    "magic",
                                                    "1.0",
                                                    FLD_VERSION_STRING,
                                                    register_pending};
    static const fld_plugin_descriptor new_major = {FLD_PLUGIN_MAGIC,
                                                    FLD_PLUGIN_ABI_MAJOR + 1,
                                                    FLD_PLUGIN_ABI_MINOR,
                                                    sizeof(fld_plugin_descriptor),
                                                    0,
                                                    "major",
                                                    "1.0",
                                                    FLD_VERSION_STRING,
                                                    register_pending};
    static const fld_plugin_descriptor new_minor = {FLD_PLUGIN_MAGIC,
                                                    FLD_PLUGIN_ABI_MAJOR,
                                                    FLD_PLUGIN_ABI_MINOR + 5,
                                                    sizeof(fld_plugin_descriptor),
                                                    0,
                                                    "minor",
                                                    "1.0",
                                                    FLD_VERSION_STRING,
                                                    register_pending};
    static const fld_plugin_descriptor bad_name = {FLD_PLUGIN_MAGIC,
                                                   FLD_PLUGIN_ABI_MAJOR,
                                                   FLD_PLUGIN_ABI_MINOR,
                                                   sizeof(fld_plugin_descriptor),
                                                   0,
                                                   "Bad Name",
                                                   "1.0",
                                                   FLD_VERSION_STRING,
                                                   register_pending};
    static const fld_plugin_descriptor no_fn = {FLD_PLUGIN_MAGIC,
                                                FLD_PLUGIN_ABI_MAJOR,
                                                FLD_PLUGIN_ABI_MINOR,
                                                sizeof(fld_plugin_descriptor),
                                                0,
                                                "nofn",
                                                "1.0",
                                                FLD_VERSION_STRING,
                                                NULL};
    const fld_impl impls[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
    };
    ck_assert_int_eq(register_desc(&bad_magic, impls, 1), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "bad descriptor magic");
    ck_assert_int_eq(register_desc(&new_major, impls, 1), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "ABI major 2 is not supported");
    ck_assert_int_eq(register_desc(&new_minor, impls, 1), FLD_EPLUGIN);
    char minor_msg[64];
    snprintf(minor_msg, sizeof minor_msg, "built for ABI %d.%d", FLD_PLUGIN_ABI_MAJOR,
             FLD_PLUGIN_ABI_MINOR + 5);
    ck_assert_contains(fld_last_error(), minor_msg);
    ck_assert_int_eq(register_desc(&bad_name, impls, 1), FLD_EPLUGIN);
    ck_assert_int_eq(register_desc(&no_fn, impls, 1), FLD_EPLUGIN);
    ck_assert_int_eq(atomic_load(&register_calls), 0);
    list_impls();
    ck_assert_ptr_null(find_impl("t_op", "vendor.x"));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Listings                                                                 */
/* ------------------------------------------------------------------------ */

START_TEST(foreach_impl_order_and_fields)
{
    fld_impl impls[] = {
        mk("t_zeta", "vendor.z", FLD_KIND_VENDOR, "acme", 120),
        mk("t_alpha", "vendor.y", FLD_KIND_VENDOR, "zeta", 100),
        mk("t_zeta", "default.a", FLD_KIND_DEFAULT, NULL, 150),
        mk("t_alpha", "reference.q", FLD_KIND_REFERENCE, NULL, 50),
        mk("t_alpha", "default.m", FLD_KIND_DEFAULT, NULL, 151),
    };
    impls[0].devices = FLD_DEVICE_MASK_CUDA | FLD_DEVICE_MASK_ROCM;
    impls[0].dtypes = FLD_DTYPE_MASK_BF16;
    impls[1].is_available = no_gpu_a;
    add_plugin("sela", impls, 5);

    list_impls();
    /* every impl, the built-in reference ones included, by op then impl_id */
    for (int i = 1; i < n_seen_impls; i++) {
        int by_op = strcmp(seen_impls[i - 1].op, seen_impls[i].op);
        ck_assert_msg(by_op < 0 || (by_op == 0 &&
                                    strcmp(seen_impls[i - 1].impl_id, seen_impls[i].impl_id) < 0),
                      "%s/%s listed before %s/%s", seen_impls[i - 1].op, seen_impls[i - 1].impl_id,
                      seen_impls[i].op, seen_impls[i].impl_id);
    }
    char mine[256] = "";
    for (int i = 0; i < n_seen_impls; i++) {
        if (strcmp(seen_impls[i].plugin, "sela") != 0)
            continue;
        strcat(mine, seen_impls[i].op);
        strcat(mine, "/");
        strcat(mine, seen_impls[i].impl_id);
        strcat(mine, " ");
    }
    ck_assert_str_eq(mine, "t_alpha/default.m t_alpha/reference.q t_alpha/vendor.y "
                           "t_zeta/default.a t_zeta/vendor.z ");

    const struct impl_copy *c = find_impl("t_zeta", "vendor.z");
    ck_assert_str_eq(c->kind, "vendor");
    ck_assert(c->has_vendor);
    ck_assert_str_eq(c->vendor, "acme");
    ck_assert_int_eq(c->priority, 120);
    ck_assert_uint_eq(c->devices, FLD_DEVICE_MASK_CUDA | FLD_DEVICE_MASK_ROCM);
    ck_assert_uint_eq(c->dtypes, FLD_DTYPE_MASK_BF16);
    ck_assert(!c->in_tree);
    ck_assert(c->available);
    ck_assert_str_eq(c->reason, "");

    c = find_impl("t_zeta", "default.a");
    ck_assert_str_eq(c->kind, "flagos");
    ck_assert(!c->has_vendor);
    ck_assert_int_eq(c->priority, 150);
    ck_assert_uint_eq(c->devices, FLD_DEVICE_MASK_ALL);
    ck_assert_uint_eq(c->dtypes, FLD_DTYPE_MASK_ALL);

    c = find_impl("t_alpha", "reference.q");
    ck_assert_str_eq(c->kind, "reference");
    ck_assert(!c->has_vendor);
    ck_assert_int_eq(c->priority, 50);
    ck_assert_str_eq(c->plugin, "sela");

    c = find_impl("t_alpha", "vendor.y");
    ck_assert_str_eq(c->vendor, "zeta");
    ck_assert(!c->available);
    ck_assert_str_eq(c->reason, "no gpu A");

    /* the library's own reference kernels */
    c = find_impl(FLD_OP_ROTARY_EMBEDDING, "reference.c");
    ck_assert_ptr_nonnull(c);
    ck_assert_str_eq(c->kind, "reference");
    ck_assert_str_eq(c->plugin, "reference");
    ck_assert(c->in_tree);
    ck_assert_int_eq(c->priority, FLD_PRIORITY_REFERENCE);
    ck_assert_uint_eq(c->devices, FLD_DEVICE_MASK_CPU);
    ck_assert_uint_eq(c->dtypes, FLD_DTYPE_MASK_ALL);
    c = find_impl(FLD_OP_ATTENTION_BACKEND, "reference.c");
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(c->devices, FLD_DEVICE_MASK_ALL);
}
END_TEST

static int stop_at_third(const fld_impl_info *info, void *user)
{
    int *n = user;
    return ++*n == 3 ? 77 : 0;
}

static int stop_at_second_plugin(const fld_plugin_info *info, void *user)
{
    int *n = user;
    return ++*n == 2 ? -5 : 0;
}

START_TEST(foreach_stops_early)
{
    const fld_impl impls[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
    };
    add_plugin("one", impls, 1);
    int n = 0;
    ck_assert_int_eq(fld_foreach_impl(stop_at_third, &n), 77);
    ck_assert_int_eq(n, 3);
    n = 0;
    ck_assert_int_eq(fld_foreach_plugin(stop_at_second_plugin, &n), -5);
    ck_assert_int_eq(n, 2);
}
END_TEST

START_TEST(foreach_plugin_statuses)
{
    fld_impl gone[] = {
        mk("t_op", "vendor.a", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op2", "vendor.b", FLD_KIND_VENDOR, "acme", 100),
    };
    gone[0].is_available = no_gpu_a;
    gone[1].is_available = no_gpu_b;
    fld_impl half[] = {
        mk("t_op", "vendor.c", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op", "vendor.d", FLD_KIND_VENDOR, "acme", 100),
    };
    half[0].is_available = no_gpu_b;
    const fld_impl bad[] = {
        mk("t_op", "vendor.e", FLD_KIND_VENDOR, NULL, 100),
    };
    fld_plugin_descriptor *in_tree = descriptor("intree");
    in_tree->flags = FLD_PLUGIN_FLAG_IN_TREE;
    const fld_impl intree_impls[] = {
        mk("t_op", "vendor.f", FLD_KIND_VENDOR, "acme", 100),
    };
    fld_plugin_descriptor *stale = descriptor("stale");
    stale->flags = FLD_PLUGIN_FLAG_IN_TREE;
    stale->host_version = "0.0.0-older";
    stale->version = "2.3.4";
    const fld_impl stale_impls[] = {
        mk("t_op", "vendor.g", FLD_KIND_VENDOR, "acme", 100),
    };

    add_plugin("gone", gone, 2);
    add_plugin("half", half, 2);
    ck_assert_int_eq(try_plugin("bad", bad, 1), FLD_EPLUGIN);
    ck_assert_int_eq(register_desc(in_tree, intree_impls, 1), FLD_OK);
    ck_assert_int_eq(register_desc(stale, stale_impls, 1), FLD_OK);

    list_plugins();
    ck_assert_int_ge(n_seen_plugins, 6);
    /* load order: the built-in reference first, then ours as registered */
    ck_assert_str_eq(seen_plugins[0].name, "reference");
    ck_assert_str_eq(seen_plugins[0].path, "(built-in)");
    ck_assert(seen_plugins[0].in_tree);
    ck_assert_int_eq(seen_plugins[0].status, FLD_PLUGIN_LOADED);
    ck_assert_uint_eq(seen_plugins[0].n_impls, TT_CAT_N_OPS); /* reference.c: every catalog op */
    const char *order[] = {"gone", "half", "bad", "intree", "stale"};
    for (int i = 0; i < 5; i++)
        ck_assert_str_eq(seen_plugins[n_seen_plugins - 5 + i].name, order[i]);

    const struct plugin_copy *p = find_plugin("gone");
    ck_assert_int_eq(p->status, FLD_PLUGIN_UNAVAILABLE);
    ck_assert_str_eq(p->reason, "no gpu A");
    ck_assert_uint_eq(p->n_impls, 2);
    ck_assert_str_eq(p->path, "(built-in)");
    ck_assert_str_eq(p->version, "1.0");
    ck_assert_uint_eq(p->abi_major, FLD_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(p->abi_minor, FLD_PLUGIN_ABI_MINOR);
    ck_assert(!p->in_tree);

    p = find_plugin("half");
    ck_assert_int_eq(p->status, FLD_PLUGIN_LOADED);
    ck_assert_str_eq(p->reason, "");
    ck_assert_uint_eq(p->n_impls, 2);

    p = find_plugin("bad");
    ck_assert_int_eq(p->status, FLD_PLUGIN_REJECTED);
    ck_assert_contains(p->reason, "requires a vendor name");

    p = find_plugin("intree");
    ck_assert_int_eq(p->status, FLD_PLUGIN_LOADED);
    ck_assert(p->in_tree);
    p = find_plugin("stale");
    ck_assert_int_eq(p->status, FLD_PLUGIN_LOADED);
    ck_assert(!p->in_tree);
    ck_assert_str_eq(p->version, "2.3.4");

    list_impls();
    ck_assert(find_impl("t_op", "vendor.f")->in_tree);
    ck_assert(!find_impl("t_op", "vendor.g")->in_tree);
}
END_TEST

START_TEST(availability_evaluated_once)
{
    fld_impl impls[] = {
        mk("t_op", "vendor.yes", FLD_KIND_VENDOR, "acme", 100),
        mk("t_op", "vendor.no", FLD_KIND_VENDOR, "acme", 200),
    };
    impls[0].is_available = counted_yes;
    impls[1].is_available = no_gpu_a;
    add_plugin("avail", impls, 2);

    const char *id = NULL;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20; i++) {
            ck_assert_int_eq(call_t("t_op"), 0);
            ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
            ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F16, &id), FLD_OK);
            fld_resolution *r = NULL;
            ck_assert_int_eq(fld_explain("t_op", FLD_DEVICE_CUDA, FLD_DTYPE_F32, &r), FLD_OK);
            fld_resolution_free(r);
        }
        list_impls();
        list_plugins();
        ck_assert_int_eq(fld_policy_set("prefer", round % 2 ? "flagos" : "vendor"), FLD_OK);
        ck_assert_int_eq(fld_clear_failures(NULL), FLD_OK);
        ck_assert_int_eq(fld_reload(), FLD_OK);
        const fld_impl more[] = {
            mk("t_more",
               round == 0   ? "vendor.m0"
               : round == 1 ? "vendor.m1"
                            : "vendor.m2",
               FLD_KIND_VENDOR, "acme", 100),
        };
        add_plugin(round == 0 ? "more0" : round == 1 ? "more1" : "more2", more, 1);
    }
    /* one call for each of the two impls, whatever happened since */
    ck_assert_int_eq(atomic_load(&avail_calls), 2);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Concurrent registration                                                  */
/* ------------------------------------------------------------------------ */

#define N_THREADS 10
static pthread_barrier_t start_line;
static const char *const thread_plugins[N_THREADS] = {"thr0", "thr1", "thr2", "thr3", "thr4",
                                                      "thr5", "thr6", "thr7", "thr8", "thr9"};
static const char *const thread_impls[N_THREADS] = {
    "vendor.t0", "vendor.t1", "vendor.t2", "vendor.t3", "vendor.t4",
    "vendor.t5", "vendor.t6", "vendor.t7", "vendor.t8", "vendor.t9"};
static const char *const thread_ops[N_THREADS] = {"t_thr0", "t_thr1", "t_thr2", "t_thr3", "t_thr4",
                                                  "t_thr5", "t_thr6", "t_thr7", "t_thr8", "t_thr9"};

static void *register_from_thread(void *arg)
{
    int i = (int)(intptr_t)arg;
    const fld_impl impls[] = {
        mk("t_op", thread_impls[i], FLD_KIND_VENDOR, "acme", 100 + i),
        mk(thread_ops[i], thread_impls[i], FLD_KIND_VENDOR, "acme", 100),
    };
    pthread_barrier_wait(&start_line);
    int rc = try_plugin(thread_plugins[i], impls, 2);
    return (void *)(intptr_t)rc;
}

START_TEST(concurrent_registration)
{
    pthread_t t[N_THREADS];
    ck_assert_int_eq(pthread_barrier_init(&start_line, NULL, N_THREADS), 0);
    for (int i = 0; i < N_THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, register_from_thread, (void *)(intptr_t)i), 0);
    for (int i = 0; i < N_THREADS; i++) {
        void *rc = NULL;
        ck_assert_int_eq(pthread_join(t[i], &rc), 0);
        ck_assert_int_eq((int)(intptr_t)rc, FLD_OK);
    }
    pthread_barrier_destroy(&start_line);

    list_plugins();
    for (int i = 0; i < N_THREADS; i++) {
        const struct plugin_copy *p = find_plugin(thread_plugins[i]);
        ck_assert_int_eq(p->status, FLD_PLUGIN_LOADED);
        ck_assert_uint_eq(p->n_impls, 2);
    }
    list_impls();
    for (int i = 0; i < N_THREADS; i++) {
        const struct impl_copy *c = find_impl("t_op", thread_impls[i]);
        ck_assert_ptr_nonnull(c);
        ck_assert_str_eq(c->plugin, thread_plugins[i]);
        ck_assert_ptr_nonnull(find_impl(thread_ops[i], thread_impls[i]));
        ck_assert_int_eq(call_t(thread_ops[i]), 0);
    }
    const char *id = NULL;
    ck_assert_int_eq(fld_resolve("t_op", FLD_DEVICE_CPU, FLD_DTYPE_F32, &id), FLD_OK);
    ck_assert_str_eq(id, "vendor.t9");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Op handles                                                               */
/* ------------------------------------------------------------------------ */

START_TEST(op_lookup_unknown)
{
    ck_assert_ptr_null(fld_op_lookup("t_never_registered"));
    ck_assert_contains(fld_last_error(), "t_never_registered");
    ck_assert_int_eq(fld_call_by_name("t_never_registered", NULL), FLD_ENOTFOUND);
    ck_assert_contains(fld_last_error(), "t_never_registered");
}
END_TEST

START_TEST(op_lookup_after_registration)
{
    ck_assert_ptr_null(fld_op_lookup("t_op"));
    const fld_impl impls[] = {
        mk("t_op", "vendor.x", FLD_KIND_VENDOR, "acme", 100),
    };
    add_plugin("ops", impls, 1);
    fld_op h = fld_op_lookup("t_op");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_eq(fld_op_lookup("t_op"), h);
    ck_assert_str_eq(fld_op_name(h), "t_op");
    ck_assert_ptr_null(fld_op_lookup("t_o"));
    ck_assert_ptr_null(fld_op_lookup("t_op_"));
    ck_assert_ptr_null(fld_op_lookup("T_OP"));
    struct targs a = {-1};
    ck_assert_int_eq(fld_call(h, &a), FLD_OK);
    ck_assert_int_eq(a.who, 0);
}
END_TEST

START_TEST(op_name_round_trip)
{
    static const char *const catalog[] = {
        FLD_OP_SILU_AND_MUL,      FLD_OP_MUL_AND_SILU,      FLD_OP_GELU_AND_MUL,
        FLD_OP_GELU_TANH_AND_MUL, FLD_OP_RMS_NORM,          FLD_OP_GEMMA_RMS_NORM,
        FLD_OP_ROTARY_EMBEDDING,  FLD_OP_ATTENTION_BACKEND,
    };
    fld_op seen[8];
    for (int i = 0; i < 8; i++) {
        seen[i] = fld_op_lookup(catalog[i]);
        ck_assert_msg(seen[i] != NULL, "%s: %s", catalog[i], fld_last_error());
        ck_assert_str_eq(fld_op_name(seen[i]), catalog[i]);
        for (int j = 0; j < i; j++)
            ck_assert_ptr_ne(seen[i], seen[j]);
        /* the handle does not depend on the caller's string */
        char copy[64];
        snprintf(copy, sizeof copy, "%s", catalog[i]);
        ck_assert_ptr_eq(fld_op_lookup(copy), seen[i]);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Many ops: registration linear in time and memory                         */
/* ------------------------------------------------------------------------ */

/*
 * A plugin that registers `count` generated ops (names counting DOWN, so
 * the name order is the reverse of the registration order), one impl each,
 * and, when dup_at >= 0, registers op dup_at's record a second time at the
 * end (a duplicate that only a check over every staged record finds).
 */
static _Thread_local struct {
    const char *prefix;
    int count, dup_at;
} gen;

static void gen_name(char *buf, size_t size, const char *prefix, int i)
{
    snprintf(buf, size, "%s_%06d", prefix, i);
}

static int register_generated(fld_registry *reg)
{
    char op[64];
    for (int i = gen.count - 1; i >= 0; i--) {
        gen_name(op, sizeof op, gen.prefix, i);
        fld_impl m = mk(op, "vendor.gen", FLD_KIND_VENDOR, "gen", 100);
        int rc = fld_registry_register(reg, &m);
        if (rc != FLD_OK)
            return rc;
    }
    if (gen.dup_at >= 0) {
        gen_name(op, sizeof op, gen.prefix, gen.dup_at);
        fld_impl m = mk(op, "vendor.gen", FLD_KIND_VENDOR, "gen", 100);
        return fld_registry_register(reg, &m);
    }
    return FLD_OK;
}

static int add_generated(const char *prefix, int count, int dup_at)
{
    fld_plugin_descriptor *d = descriptor(prefix);
    d->register_builtins = register_generated;
    gen.prefix = prefix;
    gen.count = count;
    gen.dup_at = dup_at;
    return fld_register_plugin(d);
}

struct name_walk {
    char last[64];
    int seen;
    bool ordered;
};

static int walk_gen_impls(const fld_impl_info *info, void *user)
{
    struct name_walk *w = user;
    if (strncmp(info->op, "t_many_", 7) != 0)
        return 0;
    if (w->seen && strcmp(w->last, info->op) >= 0)
        w->ordered = false;
    snprintf(w->last, sizeof w->last, "%s", info->op);
    w->seen++;
    return 0;
}

/*
 * 4000 ops: the heap grows by about 1 KiB per op (one copy of the whole op
 * table per op added, with room for every record of the plugin in every op,
 * would take about 350 MiB). Listings stay in name order.
 */
START_TEST(many_ops_linear_memory)
{
    enum { N = 4000 };
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct mallinfo2 before = mallinfo2();
    ck_assert_msg(add_generated("t_many", N, -1) == FLD_OK, "%s", fld_last_error());
    struct mallinfo2 after = mallinfo2();
    double kib_per_op = ((double)after.uordblks - (double)before.uordblks) / 1024.0 / N;
    ck_assert_msg(kib_per_op < 2.0, "%.2f KiB of heap per op", kib_per_op);

    char op[64];
    for (int i = 0; i < N; i++) {
        gen_name(op, sizeof op, "t_many", i);
        fld_op h = fld_op_lookup(op);
        ck_assert_msg(h != NULL, "%s: %s", op, fld_last_error());
        ck_assert_str_eq(fld_op_name(h), op);
    }
    ck_assert_ptr_null(fld_op_lookup("t_many_004000"));
    ck_assert_int_eq(call_t("t_many_000000"), 0);
    ck_assert_int_eq(call_t("t_many_003999"), 0);
    /* the catalog is still found after the table grew around it */
    ck_assert_ptr_nonnull(fld_op_lookup(FLD_OP_ROTARY_EMBEDDING));

    struct name_walk w = {.ordered = true};
    ck_assert_int_eq(fld_foreach_impl(walk_gen_impls, &w), FLD_OK);
    ck_assert_int_eq(w.seen, N);
    ck_assert_msg(w.ordered, "ops not listed in name order");
}
END_TEST

START_TEST(duplicate_found_among_many_staged)
{
    ck_assert_int_eq(add_generated("t_dups", 3000, 1234), FLD_EPLUGIN);
    ck_assert_contains(fld_last_error(), "duplicate impl_id 'vendor.gen' for op 't_dups_001234'");
    ck_assert_contains(fld_last_error(), "registered twice");
    ck_assert_ptr_null(fld_op_lookup("t_dups_001234"));
    /* a clean plugin of the same names then registers */
    ck_assert_int_eq(add_generated("t_dups", 3000, -1), FLD_OK);
    ck_assert_ptr_nonnull(fld_op_lookup("t_dups_001234"));
}
END_TEST

/* Looks up the catalog and the first plugin's ops until told to stop. */
static atomic_bool stop_lookups;

static void *lookup_loop(void *arg)
{
    (void)arg;
    long misses = 0;
    char op[64];
    for (int round = 0; !atomic_load(&stop_lookups); round++) {
        if (!fld_op_lookup(FLD_OP_RMS_NORM) || !fld_op_lookup(FLD_OP_SILU_AND_MUL))
            misses++;
        gen_name(op, sizeof op, "t_grow0", round % 50);
        if (!fld_op_lookup(op))
            misses++;
    }
    return (void *)(intptr_t)misses;
}

/* Lookups without the lock stay correct while the table grows (and old tables are retired). */
START_TEST(lookups_while_the_table_grows)
{
    ck_assert_int_eq(add_generated("t_grow0", 50, -1), FLD_OK);
    atomic_store(&stop_lookups, false);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, lookup_loop, NULL), 0);
    char prefix[32];
    for (int p = 1; p <= 12; p++) {
        snprintf(prefix, sizeof prefix, "t_grow%d", p);
        ck_assert_msg(add_generated(prefix, 100 * p, -1) == FLD_OK, "%s", fld_last_error());
    }
    atomic_store(&stop_lookups, true);
    void *misses;
    ck_assert_int_eq(pthread_join(t, &misses), 0);
    ck_assert_int_eq((int)(intptr_t)misses, 0);
    ck_assert_ptr_nonnull(fld_op_lookup("t_grow12_001199"));
}
END_TEST

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int binding_declines(void *ctx, const void *args)
{
    (void)ctx;
    (void)args;
    return FLD_EUNSUPPORTED;
}

struct id_walk {
    char last[64];
    size_t seen, shared;
    bool ordered;
};

static int walk_silu_impls(const fld_impl_info *info, void *user)
{
    struct id_walk *w = user;
    if (strcmp(info->op, FLD_OP_SILU_AND_MUL) != 0)
        return 0;
    if (w->seen && strcmp(w->last, info->impl_id) > 0)
        w->ordered = false;
    snprintf(w->last, sizeof w->last, "%s", info->impl_id);
    w->seen++;
    return 0;
}

/*
 * Many implementations of one op stay near-linear to register: a real
 * plugin's 40000 in descending impl_id order (tests/plugins/many_impls.c),
 * a binding's 40000 of the same ids in one call (each id then shared by two
 * plugins), and 2000 more registered one call each: seconds at most, where
 * a scan or a shift of the op's whole list per record would take minutes.
 */
START_TEST(many_impls_of_one_op)
{
    enum { N = 40000, ONE_BY_ONE = 2000 };
    char text[32], path[PATH_MAX];
    snprintf(text, sizeof text, "%d", N);
    setenv("FLD_FIXTURE_MANY_IMPLS", text, 1);
    snprintf(path, sizeof path, "%s/tests/plugins/fld-many_impls.so", tt_build_dir());
    ck_assert_int_eq(fld_init(), FLD_OK);

    double start = seconds_now();
    int rc = fld_load_plugin(path);
    ck_assert_msg(rc == FLD_OK, "fld_load_plugin(%s): %s", path, fld_last_error());
    double loaded = seconds_now();

    fld_binding_impl *b = calloc(N, sizeof *b);
    char(*ids)[32] = calloc(N, sizeof *ids);
    ck_assert(b && ids);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "vendor.many_%06d", i);
        b[i] = (fld_binding_impl){.op = FLD_OP_SILU_AND_MUL,
                                  .impl_id = ids[i],
                                  .kind = FLD_KIND_VENDOR,
                                  .vendor = "many",
                                  .priority = FLD_PRIORITY_VENDOR,
                                  .devices = FLD_DEVICE_MASK_CPU,
                                  .dtypes = FLD_DTYPE_MASK_ALL,
                                  .fn = binding_declines};
    }
    rc = fld_binding_register("many_binding", "1.0", "test:many", b, N);
    ck_assert_msg(rc == FLD_OK, "fld_binding_register: %s", fld_last_error());
    double shared = seconds_now();
    for (int i = ONE_BY_ONE - 1; i >= 0; i--) {
        snprintf(ids[0], sizeof ids[0], "vendor.more_%06d", i);
        rc = fld_binding_register("more_binding", "1.0", "test:more", b, 1);
        ck_assert_msg(rc == FLD_OK, "fld_binding_register %s: %s", ids[0], fld_last_error());
    }
    double done = seconds_now();
    free(b);
    free(ids);
    double limit = 3.0 * tt_time_scale();
    ck_assert_msg(done - start < limit,
                  "registering took %.2f s, over %.1f s: the plugin's %.2f s, the shared ids' "
                  "%.2f s, %d one by one %.2f s",
                  done - start, limit, loaded - start, shared - loaded, ONE_BY_ONE,
                  done - shared);

    struct id_walk w = {.ordered = true};
    ck_assert_int_eq(fld_foreach_impl(walk_silu_impls, &w), FLD_OK);
    ck_assert_uint_eq(w.seen, 2 * N + ONE_BY_ONE + 1); /* and reference.c */
    ck_assert_msg(w.ordered, "silu_and_mul's implementations not listed in impl_id order");
    /* Ties by impl_id, then out-of-tree plugins by name: the binding's record first. */
    const char *impl = NULL;
    rc = fld_resolve(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &impl);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(impl, "vendor.many_000000@many_binding");
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain(FLD_OP_SILU_AND_MUL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    ck_assert_str_eq(res->candidates[1], "vendor.many_000000@many_impls");
    ck_assert_str_eq(res->candidates[2], "vendor.many_000001@many_binding");
    fld_resolution_free(res);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("validation");
    tcase_add_loop_test(tc, invalid_record_rejects_plugin, 0, N_BAD_RECORDS);
    tcase_add_test(tc, duplicate_within_plugin);
    tcase_add_test(tc, all_or_nothing);
    tcase_add_test(tc, register_builtins_error_keeps_nothing);
    tcase_add_test(tc, same_impl_id_across_plugins);
    tcase_add_test(tc, same_impl_id_priority_first);
    tcase_add_test(tc, same_impl_id_as_builtin_reference);
    tcase_add_test(tc, duplicate_within_plugin_across_registrations);
    tcase_add_test(tc, same_impl_id_for_different_ops);
    tcase_add_test(tc, descriptor_checks_before_any_call);
    tcase_add_test(tc, other_major_layout_is_not_read);
    suite_add_tcase(s, tc);

    tc = tcase_create("listings");
    tcase_add_test(tc, foreach_impl_order_and_fields);
    tcase_add_test(tc, foreach_stops_early);
    tcase_add_test(tc, foreach_plugin_statuses);
    tcase_add_test(tc, availability_evaluated_once);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_test(tc, concurrent_registration);
    suite_add_tcase(s, tc);

    tc = tcase_create("ops");
    tcase_add_test(tc, op_lookup_unknown);
    tcase_add_test(tc, op_lookup_after_registration);
    tcase_add_test(tc, op_name_round_trip);
    suite_add_tcase(s, tc);

    tc = tcase_create("scale");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, many_ops_linear_memory);
    tcase_add_test(tc, duplicate_found_among_many_staged);
    tcase_add_test(tc, lookups_while_the_table_grows);
    tcase_add_test(tc, many_impls_of_one_op);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_registry", registry_suite());
}
