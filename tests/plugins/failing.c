/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: "vendor.failing" serves silu_and_mul on CPU (all dtypes) and
 * always fails with FLD_EIMPL, leaving the output untouched, so tests can
 * watch non-strict fallback and the memory of failures.
 * fld_fixture_failing_calls() counts the attempts.
 */
#include <stdatomic.h>

#include <fldispatch/plugin.h>

static _Atomic long attempts;

__attribute__((visibility("default"))) long fld_fixture_failing_calls(void);
__attribute__((visibility("default"))) long fld_fixture_failing_calls(void)
{
    return atomic_load(&attempts);
}

static int failing_silu_and_mul(const void *args)
{
    (void)args;
    atomic_fetch_add(&attempts, 1);
    fld_set_error("failing fixture: vendor.failing always fails");
    return FLD_EIMPL;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.failing",
        .kind = FLD_KIND_VENDOR,
        .vendor = "failing",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = failing_silu_and_mul,
    };
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("failing", "1.0.0", register_builtins)
