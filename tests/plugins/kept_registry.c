/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin that keeps the fld_registry pointer of its
 * register_builtins and uses it later, from the kernel of its op
 * "kept_registry_late", and from a thread of its own while register_builtins
 * waits for it. Each of those calls must be refused with FLD_ESTATE naming
 * the plugin, and register nothing. The kernel's arguments say which
 * function to call and bring back its status and fld_last_error(); the
 * thread's status is kept for fld_fixture_kept_registry_thread_status().
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <fldispatch/plugin.h>

/* The argument struct of "kept_registry_late"; tests declare the same layout. */
typedef struct kept_registry_args {
    int which; /* 0 register, 1 declare_op, 2 set_detail, 3 set_device_hooks */
    int status;
    char message[1024];
} kept_registry_args;

static fld_registry *kept;
static int thread_status = 1;

__attribute__((visibility("default"))) int fld_fixture_kept_registry_thread_status(void);
__attribute__((visibility("default"))) int fld_fixture_kept_registry_thread_status(void)
{
    return thread_status;
}

static int unused_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int use_kept(fld_registry *reg, int which)
{
    const fld_impl late = {
        .op = "kept_registry_extra",
        .impl_id = "vendor.kept_registry",
        .kind = FLD_KIND_VENDOR,
        .vendor = "kept_registry",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = unused_kernel,
    };
    const fld_device_hooks hooks = {.struct_size = sizeof hooks, .device_type = FLD_DEVICE_CUDA};
    switch (which) {
    case 0:
        return fld_registry_register(reg, &late);
    case 1:
        return fld_registry_declare_op(reg, "kept_registry_extra", "(Tensor(a!) out) -> ()");
    case 2:
        return fld_registry_set_detail(reg, "set after loading");
    default:
        return fld_registry_set_device_hooks(reg, &hooks);
    }
}

static int late_kernel(const void *args)
{
    kept_registry_args *a = (kept_registry_args *)args;
    a->status = use_kept(kept, a->which);
    snprintf(a->message, sizeof a->message, "%s", fld_last_error());
    return FLD_OK;
}

static void *other_thread(void *arg)
{
    thread_status = use_kept(arg, 0);
    return NULL;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "kept_registry_late",
        .impl_id = "vendor.kept_registry",
        .kind = FLD_KIND_VENDOR,
        .vendor = "kept_registry",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = late_kernel,
    };
    int rc = fld_registry_register(reg, &impl);
    if (rc != FLD_OK)
        return rc;
    rc = fld_registry_set_detail(reg, "loaded");
    if (rc != FLD_OK)
        return rc;
    pthread_t t;
    if (pthread_create(&t, NULL, other_thread, reg) != 0) {
        fld_set_error("kept_registry: pthread_create failed");
        return FLD_EPLUGIN;
    }
    pthread_join(t, NULL);
    kept = reg;
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("kept_registry", "1.0.0", register_builtins)
