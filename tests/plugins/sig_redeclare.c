/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: declares sig_axpy (sig_ops.c, which loads first: directory
 * order is by name) with another signature, after
 * registering an implementation of an op of its own. The host must reject
 * the whole plugin: neither the declaration nor the implementation stays.
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
        .op = "sig_redeclare_own", .impl_id = "vendor.sig_redeclare", .kind = FLD_KIND_VENDOR,
        .vendor = "sig_redeclare", .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU, .dtypes = FLD_DTYPE_MASK_ALL, .fn = discarded_kernel,
    };
    int rc = fld_registry_register(reg, &impl);
    if (rc == FLD_OK)
        rc = fld_registry_declare_op(reg, "sig_redeclare_own", "(Tensor(a!) out) -> ()");
    /* the failure is ignored on purpose: the host rejects the plugin anyway */
    (void)fld_registry_declare_op(reg, "sig_axpy", "(Tensor(a!) out, Tensor x, int alpha) -> ()");
    return rc;
}

FLD_PLUGIN_DEFINE("sig_redeclare", "1.0.0", register_builtins)
