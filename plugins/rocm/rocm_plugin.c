/*
 * The rocm plugin: vendor.rocm and reference.rocm for every compute op on
 * ROCm tensors, vendor.rocm attention_backend and the ROCm device hooks,
 * through the glue shared with CUDA (plugins/cuda/gpu_plugin.c).
 *
 * This object does not link the HIP runtime. The HIP kernels live in
 * libfld-rocm-hip.so, next to this file in the plugin directory, which links
 * libamdhip64; it is opened at registration. When it cannot be (no ROCm
 * runtime installed, file missing) the plugin still registers, so that
 * `fldispatch list` shows it unavailable with the loader's message rather
 * than rejected.
 *
 * Never run on an AMD GPU: where this was written there was none (the HIP
 * runtime answers hipErrorNoDevice), so only that path and the missing-
 * library path are tested with the real objects; the glue itself is tested
 * over the GPU emulator (tests/gpuplug).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cuda/gpu_plugin.h"

#define HIP_LIBRARY "libfld-rocm-hip.so"
#define HIP_API_SYM "fld_gpu_api_hip"

/* hipError_t value (hip_runtime_api.h). */
enum { HIP_ERROR_NO_DEVICE = 100 };

static char load_error[PATH_MAX + 512];

/*
 * Kept open for the life of the process: unloading the HIP runtime while
 * its own threads and atexit handlers are registered is not safe, and
 * dlopen() of the same file again (after fld_shutdown() + fld_init()) only
 * takes another reference.
 */
static const struct fld_gpu_api *open_hip(void)
{
    Dl_info self;
    if (!dladdr((const void *)open_hip, &self) || !self.dli_fname) {
        snprintf(load_error, sizeof load_error,
                 "HIP runtime not loadable: cannot find the directory of fld-rocm.so");
        return NULL;
    }
    const char *slash = strrchr(self.dli_fname, '/');
    int dir_len = slash ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash ? self.dli_fname : ".";
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%.*s/%s", dir_len, dir, HIP_LIBRARY);
    if (n < 0 || (size_t)n >= sizeof path) {
        snprintf(load_error, sizeof load_error,
                 "HIP runtime not loadable: path of " HIP_LIBRARY " too long");
        return NULL;
    }
    /* The host checked fld-rocm.so and its directory before loading it; the
     * library it pulls in gets the file checks too. A missing file is left to
     * dlopen(), whose message says so. */
    struct stat st;
    if (stat(path, &st) == 0) {
        if (st.st_mode & S_IWOTH) {
            snprintf(load_error, sizeof load_error,
                     "HIP runtime not loadable: %s is writable by others (mode %04o)", path,
                     (unsigned)(st.st_mode & 07777));
            return NULL;
        }
        if (st.st_uid != 0 && st.st_uid != geteuid()) {
            snprintf(load_error, sizeof load_error,
                     "HIP runtime not loadable: %s is owned by uid %u (neither root nor the "
                     "current user)",
                     path, (unsigned)st.st_uid);
            return NULL;
        }
    }
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "HIP runtime not loadable: %s", why ? why : path);
        return NULL;
    }
    const struct fld_gpu_api *api = dlsym(h, HIP_API_SYM);
    if (!api) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "HIP runtime not loadable: %s",
                 why ? why : HIP_API_SYM " not found");
        dlclose(h);
        return NULL;
    }
    return api;
}

static void explain(int code, char *buf, size_t size)
{
    if (code == HIP_ERROR_NO_DEVICE)
        snprintf(buf, size, "HIP runtime: hipErrorNoDevice (no ROCm device)");
}

/* 50221153 -> "5.2.21153" (HIP_VERSION: major * 10^7 + minor * 10^5 + patch). */
static void version_text(int v, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d.%d", v / 10000000, (v / 100000) % 100, v % 100000);
}

static int register_builtins(fld_registry *reg)
{
    load_error[0] = '\0';
    const struct fld_gpu_plugin p = {
        .api = open_hip(),
        .load_error = load_error,
        .vendor = "rocm",
        .device_type = FLD_DEVICE_ROCM,
        .device_mask = FLD_DEVICE_MASK_ROCM,
        .attn_name = "ROCM_ATTN",
        .attn_mla_name = "ROCM_AITER_MLA",
        .attn_sparse_name = "ROCM_AITER_MLA_SPARSE",
        .explain = explain,
        .version_text = version_text,
    };
    return fld__gpu_plugin_register(reg, &p);
}

FLD_PLUGIN_DEFINE("rocm", FLD_VERSION_STRING, register_builtins)
