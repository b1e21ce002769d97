/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cuda plugin: vendor.cuda (128-bit vectorised kernels) and
 * reference.cuda (any layout) for every compute op in float32, float16 and
 * bfloat16 on CUDA tensors, vendor.cuda attention_backend, and the CUDA
 * device hooks. The kernels (cuda_kernels.cu) are linked with the static
 * CUDA runtime, so this object loads where no driver is installed; it then
 * reports itself unavailable with the reason. The glue, shared with the rocm
 * plugin, is plugins/shared/gpu/gpu_plugin.c. What has run where:
 * docs/device-plugins.md.
 */
#include <dlfcn.h>
#include <stdio.h>

#include "../shared/gpu/gpu_plugin.h"

/* Defined by cuda_kernels.cu. */
extern const struct fld__gpu_api fld__gpu_api_cuda;

/* cudaError_t values (driver_types.h), stable across CUDA releases. */
enum { CUDA_ERROR_INSUFFICIENT_DRIVER = 35, CUDA_ERROR_NO_DEVICE = 100 };

/* 12020 -> "12.2" (CUDA's version numbers: 1000 * major + 10 * minor). */
static void version_text(int v, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* The oldest driver branch a runtime of this major version runs on
 * (NVIDIA's minor version compatibility: 11.x 450, 12.x 525, 13.x 580). */
static int driver_floor(int runtime_version)
{
    int major = runtime_version / 1000;
    return major >= 13 ? 580 : major == 12 ? 525 : major == 11 ? 450 : 0;
}

static const char *runtime_note(int runtime_version)
{
    static char note[64];
    int floor = driver_floor(runtime_version);
    if (!floor)
        return NULL;
    snprintf(note, sizeof note, "needs NVIDIA driver >= %d", floor);
    return note;
}

/*
 * The runtime says "insufficient driver" both when there is no driver at
 * all and when it is older than the runtime; the loader tells them apart.
 * The glue appends the driver and runtime versions.
 */
static void explain(int code, char *buf, size_t size)
{
    if (code == CUDA_ERROR_NO_DEVICE) {
        snprintf(buf, size, "no CUDA device");
        return;
    }
    if (code != CUDA_ERROR_INSUFFICIENT_DRIVER)
        return;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(buf, size, "no CUDA driver: %s", why ? why : "libcuda.so.1 not loadable");
        return;
    }
    dlclose(h);
    int rt = 0;
    char floor[96] = "";
    if (fld__gpu_api_cuda.runtime_version(&rt) == 0 && driver_floor(rt))
        snprintf(floor, sizeof floor,
                 "; this build needs driver >= %d: rebuild with a CUDA %d toolkit for older "
                 "drivers",
                 driver_floor(rt), rt / 1000 - 1);
    snprintf(buf, size, "CUDA driver older than the runtime (%s)%s",
             fld__gpu_api_cuda.error_string(code), floor);
}

static int register_builtins(fld_registry *reg)
{
    const struct fld__gpu_plugin p = {
        .api = &fld__gpu_api_cuda,
        .vendor = "cuda",
        .device_type = FLD_DEVICE_CUDA,
        .device_mask = FLD_DEVICE_MASK_CUDA,
        .attn_name = "FLASH_ATTN",
        .attn_mla_name = "FLASHMLA",
        .attn_sparse_name = "FLASHMLA_SPARSE",
        .explain = explain,
        .version_text = version_text,
        .rebuild_hint = "rebuild with CUDA_ARCHS naming it (e.g. make CUDA_ARCHS=\"70 75 80 90\")",
        .runtime_note = runtime_note,
    };
    return fld__gpu_plugin_register(reg, &p);
}

FLD_PLUGIN_DEFINE("cuda", FLD_VERSION_STRING, register_builtins)
