/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An out-of-tree plugin "oot", built the way a third party builds one:
 * against the installed headers and library only,
 *
 *     cc -shared -fPIC $(pkg-config --cflags --libs fldispatch) oot_plugin.c
 *
 * It includes nothing but <fldispatch/plugin.h> (not even <math.h>, which
 * would need -lm), so it carries its own exponential. The Makefile does not
 * build it; tests/test_discovery.c does, from an installed tree.
 */
#include <fldispatch/plugin.h>

/* e^x for the float range: x = k*ln2 + r with |r| <= ln2/2, e^r by Taylor
 * series in double (error far below float precision), scaled by 2^k. */
static double oot_exp(double x)
{
    const double ln2 = 0.69314718055994530942;
    if (x > 88.0)
        x = 88.0;
    if (x < -88.0)
        x = -88.0;
    double kd = x / ln2;
    int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = x - k * ln2;
    double term = 1.0, sum = 1.0;
    for (int n = 1; n <= 12; n++) {
        term *= r / n;
        sum += term;
    }
    double scale = 1.0;
    for (; k > 0; k--)
        scale *= 2.0;
    for (; k < 0; k++)
        scale *= 0.5;
    return sum * scale;
}

static int oot_silu_and_mul(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    for (int64_t r = 0; r < out.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *orow = (float *)out.data + r * out.stride;
        for (int64_t i = 0; i < out.width; i++) {
            double g = xr[i];
            orow[i] = (float)(g / (1.0 + oot_exp(-g)) * xr[out.width + i]);
        }
    }
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.oot",
        .kind = FLD_KIND_VENDOR,
        .vendor = "oot",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = oot_silu_and_mul,
    };
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("oot", "0.0.1", register_builtins)
