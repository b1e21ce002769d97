/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: an implementation record without a kernel (fn NULL), after a
 * valid one. Unlike dup_impl it passes the registration error on, as a
 * careful plugin would. Nothing may stay registered (the valid kernel aborts).
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "null_fn fixture: a discarded implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = "vendor.null_fn",
        .kind = FLD_KIND_VENDOR,
        .vendor = "null_fn",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = discarded_kernel,
    };
    int rc = fld_registry_register(reg, &impl);
    if (rc != FLD_OK)
        return rc;
    impl.op = FLD_OP_SILU_AND_MUL;
    impl.fn = NULL;
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("null_fn", "1.0.0", register_builtins)
