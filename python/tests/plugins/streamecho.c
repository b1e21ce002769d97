/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture plugin of the Python tests: "streamecho" serves silu_and_mul on
 * CUDA and ROCm float32 tensors that are really host memory (made by
 * python/tests/fakedl.py), and instead of computing anything writes the
 * stream the call runs on (fld_get_stream() of the tensor's device type) as
 * a uint64 into the first 8 bytes of out. The tests read it back to see which
 * stream reached the C side. Loaded with fldispatch.load_plugin().
 */
#include <stdint.h>
#include <string.h>

#include <fldispatch/plugin.h>

static int echo_stream(const void *args)
{
    const fld_activation_args *a = args;
    uint64_t stream = (uint64_t)(uintptr_t)fld_get_stream((int)a->out->device.device_type);
    if (a->out->shape[a->out->ndim - 1] < 2)
        return FLD_EINVAL;
    memcpy((char *)a->out->data + a->out->byte_offset, &stream, sizeof stream);
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.streamecho",
        .kind = FLD_KIND_VENDOR,
        .vendor = "streamecho",
        .priority = FLD_PRIORITY_VENDOR + 50,
        .devices = FLD_DEVICE_MASK_CUDA | FLD_DEVICE_MASK_ROCM,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = echo_stream,
    };
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("streamecho", "1.0.0", register_builtins)
