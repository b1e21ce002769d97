/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: declares an op with a signature that does not parse (a type
 * misspelt), after a valid declaration and an implementation. The host
 * must reject the whole plugin and keep nothing of it.
 */
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    abort();
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "sig_malformed_ok", .impl_id = "vendor.sig_malformed", .kind = FLD_KIND_VENDOR,
        .vendor = "sig_malformed", .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU, .dtypes = FLD_DTYPE_MASK_ALL, .fn = discarded_kernel,
    };
    int rc = fld_registry_declare_op(reg, "sig_malformed_ok", "(Tensor(a!) out) -> ()");
    if (rc == FLD_OK)
        rc = fld_registry_register(reg, &impl);
    if (rc == FLD_OK)
        rc = fld_registry_declare_op(reg, "sig_malformed_bad", "(Tensor(a!) out, Tensr x) -> ()");
    return rc;
}

FLD_PLUGIN_DEFINE("sig_malformed", "1.0.0", register_builtins)
