/*
 * The cuda plugin: vendor.cuda (128-bit vectorised kernels) and
 * reference.cuda (any layout) for every compute op in float32, float16 and
 * bfloat16 on CUDA tensors, vendor.cuda attention_backend, and the CUDA
 * device hooks. The kernels (cuda_kernels.cu) are linked with the static
 * CUDA runtime, so this object loads where no driver is installed; it then
 * reports itself unavailable with the reason. The glue is gpu_plugin.c.
 *
 * Never run on an NVIDIA GPU where this was written (no driver there): the
 * no-driver path is tested with the real object, the glue over the GPU
 * emulator (tests/gpuplug, tests/test_gpu_plugins.c).
 */
#include <dlfcn.h>
#include <stdio.h>

#include "gpu_plugin.h"

/* Defined by cuda_kernels.cu. */
extern const struct fld_gpu_api fld_gpu_api_cuda;

/* cudaError_t values (driver_types.h), stable across CUDA releases. */
enum { CUDA_ERROR_INSUFFICIENT_DRIVER = 35, CUDA_ERROR_NO_DEVICE = 100 };

/*
 * The runtime says "insufficient driver" both when there is no driver at
 * all and when it is older than the runtime; the loader tells them apart.
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
    snprintf(buf, size, "CUDA driver older than the runtime (%s)",
             fld_gpu_api_cuda.error_string(code));
}

static int register_builtins(fld_registry *reg)
{
    const struct fld_gpu_plugin p = {
        .api = &fld_gpu_api_cuda,
        .vendor = "cuda",
        .device_type = FLD_DEVICE_CUDA,
        .device_mask = FLD_DEVICE_MASK_CUDA,
        .attn_name = "FLASH_ATTN",
        .attn_mla_name = "FLASHMLA",
        .attn_sparse_name = "FLASHMLA_SPARSE",
        .explain = explain,
    };
    return fld__gpu_plugin_register(reg, &p);
}

FLD_PLUGIN_DEFINE("cuda", FLD_VERSION_STRING, register_builtins)
