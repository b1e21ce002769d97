/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a well-formed plugin "good" (built without FLD_IN_TREE, so it is
 * out-of-tree). It serves silu_and_mul on CPU for float32 correctly, and an
 * op outside the catalog, "good_echo", whose argument struct holds one int
 * that the implementation increments. fld_fixture_good_calls() counts the
 * silu_and_mul calls so tests can prove this plugin served them;
 * fld_fixture_good_thread_calls() counts those of the calling thread.
 */
#include <math.h>
#include <stdatomic.h>

#include <fldispatch/plugin.h>

/* The argument struct of "good_echo"; tests declare the same layout. */
typedef struct good_echo_args {
    int value;
} good_echo_args;

static _Atomic long silu_calls;
static _Thread_local long thread_silu_calls;

__attribute__((visibility("default"))) long fld_fixture_good_calls(void);
__attribute__((visibility("default"))) long fld_fixture_good_calls(void)
{
    return atomic_load(&silu_calls);
}

__attribute__((visibility("default"))) long fld_fixture_good_thread_calls(void);
__attribute__((visibility("default"))) long fld_fixture_good_thread_calls(void)
{
    return thread_silu_calls;
}

static int good_silu_and_mul(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    for (int64_t r = 0; r < out.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *orow = (float *)out.data + r * out.stride;
        for (int64_t i = 0; i < out.width; i++) {
            float g = xr[i];
            orow[i] = g / (1.0f + expf(-g)) * xr[out.width + i];
        }
    }
    atomic_fetch_add(&silu_calls, 1);
    thread_silu_calls++;
    return FLD_OK;
}

static int good_echo(const void *args)
{
    good_echo_args *a = (good_echo_args *)args;
    a->value++;
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl silu = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.good",
        .kind = FLD_KIND_VENDOR,
        .vendor = "good",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = good_silu_and_mul,
    };
    const fld_impl echo = {
        .op = "good_echo",
        .impl_id = "vendor.good",
        .kind = FLD_KIND_VENDOR,
        .vendor = "good",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_ALL,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = good_echo,
    };
    int rc = fld_registry_register(reg, &silu);
    if (rc == FLD_OK)
        rc = fld_registry_set_detail(reg, "first detail, replaced");
    if (rc == FLD_OK)
        rc = fld_registry_set_detail(reg, "mode %s;\ttwo\nlines", "good");
    if (rc == FLD_OK && fld_registry_set_detail(reg, NULL) != FLD_EINVAL)
        rc = FLD_EPLUGIN;
    if (rc != FLD_OK)
        return rc;
    return fld_registry_register(reg, &echo);
}

FLD_PLUGIN_DEFINE("good", "1.0.0", register_builtins)
