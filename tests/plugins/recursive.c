/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: implementations that call the op they serve. "recursive_call"
 * (an op outside the catalog, one implementation) calls itself by name
 * until its argument's count runs out, or without end when it starts
 * below zero; vendor.recursive serves rms_norm by calling fld_rms_norm()
 * with its own arguments, without end. The host refuses the call past its
 * nesting limit, so each ends in an error instead of a stack overflow.
 */
#include <fldispatch/plugin.h>

/* The argument struct of "recursive_call"; tests declare the same layout. */
typedef struct recursive_args {
    int remaining; /* calls still to make; below zero: without end */
    int calls;     /* calls made so far */
} recursive_args;

static int recursive_call(const void *args)
{
    recursive_args *a = (recursive_args *)args;
    a->calls++;
    if (a->remaining == 0)
        return FLD_OK;
    if (a->remaining > 0)
        a->remaining--;
    return fld_call_by_name("recursive_call", a);
}

static int recursive_rms_norm(const void *args)
{
    const fld_rms_norm_args *a = args;
    return fld_rms_norm(a->out, a->x, a->weight, a->residual, a->eps);
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl by_name = {
        .op = "recursive_call",
        .impl_id = "vendor.recursive",
        .kind = FLD_KIND_VENDOR,
        .vendor = "recursive",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = recursive_call,
    };
    const fld_impl norm = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = "vendor.recursive",
        .kind = FLD_KIND_VENDOR,
        .vendor = "recursive",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = recursive_rms_norm,
    };
    int rc = fld_registry_register(reg, &by_name);
    return rc ? rc : fld_registry_register(reg, &norm);
}

FLD_PLUGIN_DEFINE("recursive", "1.0.0", register_builtins)
