/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: device hooks for CUDA made of CPU memory whose alloc hook calls
 * fld_reload() before it allocates. The nested call is refused (FLD_ESTATE,
 * naming the plugin and the hook); the allocation itself goes on.
 */
#include <stdlib.h>

#include "reentry.h"

static int hook_alloc(int device_id, size_t bytes, void **ptr)
{
    (void)device_id;
    reentry_note("reentry_hook", "fld_reload", fld_reload());
    *ptr = malloc(bytes);
    return *ptr ? FLD_OK : FLD_ENOMEM;
}

static int hook_free(int device_id, void *ptr)
{
    (void)device_id;
    free(ptr);
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    static const fld_device_hooks hooks = {
        .struct_size = sizeof(fld_device_hooks),
        .device_type = FLD_DEVICE_CUDA,
        .alloc = hook_alloc,
        .free = hook_free,
    };
    int rc = fld_registry_set_device_hooks(reg, &hooks);
    if (rc == FLD_OK)
        rc = reentry_register(reg, "vendor.reentry_hook", "reentry_hook", NULL);
    return rc;
}

FLD_PLUGIN_DEFINE("reentry_hook", "1.0.0", register_builtins)
