/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: declares sig_axpy with sig_ops.c's signature spelt differently
 * (Tensor! for Tensor(a!), alpha=1 for 1.0): the same signature, so it
 * loads and adds an implementation that sig_ops' outranks.
 */
#include <fldispatch/plugin.h>

static int declined(const void *args)
{
    (void)args;
    return FLD_EUNSUPPORTED;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "sig_axpy", .impl_id = "reference.sig_same", .kind = FLD_KIND_REFERENCE,
        .priority = FLD_PRIORITY_REFERENCE, .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL, .fn = declined,
    };
    int rc = fld_registry_declare_op(reg, "sig_axpy",
                                     "( Tensor! out,Tensor x, Tensor y, float alpha=1 ) -> ()");
    if (rc == FLD_OK)
        rc = fld_registry_register(reg, &impl);
    return rc;
}

FLD_PLUGIN_DEFINE("sig_same", "1.0.0", register_builtins)
