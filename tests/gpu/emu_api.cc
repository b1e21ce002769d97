/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld__gpu_api_emu: struct fld__gpu_api (plugins/shared/gpu/gpu_api.h) on host
 * memory, with the kernels of gpu_kernels.cuh run by the emulator (gpu_emu.h).
 * One "device" (id 0); "device" pointers are host pointers; copies and
 * launches are synchronous, so streams are ignored (the default stream is
 * FLD_EMU_PER_THREAD_STREAM, as CUDA's cudaStreamPerThread). Error codes are the
 * FLD_EMU_ERR_* values of gpu_emu.h.
 *
 * It lets tests (and a fixture plugin standing in for fld-cuda.so) run the
 * whole glue + kernel path without a GPU. Link users add -lstdc++.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_kernels.cuh"

namespace
{

const char *emu_error_string(int code)
{
    switch (code) {
    case FLD_EMU_OK:
        return "no error";
    case FLD_EMU_ERR_INVALID_VALUE:
        return "invalid argument (emulator)";
    case FLD_EMU_ERR_OUT_OF_MEMORY:
        return "out of memory (emulator)";
    case FLD_EMU_ERR_LAUNCH_CONFIG:
        return "invalid launch configuration (emulator)";
    case FLD_EMU_ERR_BARRIER:
        return "barrier not reached by every thread of the block (emulator)";
    case FLD_EMU_ERR_INVALID_DEVICE:
        return "invalid device ordinal (emulator)";
    default:
        return "unknown error (emulator)";
    }
}

int emu_runtime_version(int *version)
{
    *version = 0;
    return 0;
}

int emu_device_count(int *count)
{
    *count = 1;
    return 0;
}

int emu_device_name(int device_id, char *buf, size_t size)
{
    if (device_id != 0)
        return FLD_EMU_ERR_INVALID_DEVICE;
    if (size > 0)
        snprintf(buf, size, "fldispatch GPU emulator (CPU memory, warp %d)", fld_emu::warp_size());
    return 0;
}

/* Device 0 is always current; pushing it (the one device) is accepted. */
int emu_current_device(int *device_id)
{
    *device_id = 0;
    return 0;
}

int emu_push_device(int device_id)
{
    return device_id == 0 ? 0 : FLD_EMU_ERR_INVALID_DEVICE;
}

int emu_pop_device(void)
{
    return 0;
}

int emu_malloc(void **ptr, size_t bytes)
{
    /* 256-byte alignment, as cudaMalloc gives. */
    *ptr = aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
    return *ptr ? 0 : FLD_EMU_ERR_OUT_OF_MEMORY;
}

int emu_free(void *ptr)
{
    free(ptr);
    return 0;
}

int emu_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    (void)stream;
    if (kind < 0 || kind > 2 || (bytes && (!dst || !src)))
        return FLD_EMU_ERR_INVALID_VALUE;
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

int emu_stream_synchronize(void *stream)
{
    (void)stream;
    return 0;
}

/* The launch shape tests force (fld_emu_force_shape), or NULL: gpu_launch.h's. */
bool shape_forced = false;
struct fld__gpu_shape forced_shape;

int emu_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    return fld_gpu::run_act_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

int emu_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    return fld_gpu::run_norm_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

int emu_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    return fld_gpu::run_rotary_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

} // namespace

extern "C" __attribute__((visibility("default"))) const struct fld__gpu_api fld__gpu_api_emu = {
    FLD_GPU_API_VERSION,
    "emulator",
    emu_error_string,
    emu_runtime_version,
    nullptr, /* driver_version */
    emu_device_count,
    emu_device_name,
    nullptr, /* device_arch: no architecture to check */
    nullptr,
    emu_current_device,
    emu_push_device,
    emu_pop_device,
    (void *)FLD_EMU_PER_THREAD_STREAM,
    emu_malloc,
    emu_free,
    emu_memcpy,
    emu_stream_synchronize,
    emu_act,
    emu_norm,
    emu_rotary,
};

/* Every later act/norm/rotary call of fld__gpu_api_emu launches with *shape
   (the candidates bench/gpu_sweep.cu times), until a call with NULL puts
   gpu_launch.h's choice back. For tests; not thread-safe. */
extern "C" void fld_emu_force_shape(const struct fld__gpu_shape *shape)
{
    shape_forced = shape != nullptr;
    if (shape)
        forced_shape = *shape;
}
