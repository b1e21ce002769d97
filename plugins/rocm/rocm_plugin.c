/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rocm plugin: vendor.rocm and reference.rocm for every compute op on
 * ROCm tensors, vendor.rocm attention_backend and the ROCm device hooks,
 * through the glue shared with CUDA (plugins/shared/gpu/gpu_plugin.c).
 *
 * This object does not link the HIP runtime, and neither does the HIP
 * kernels library, libfld-rocm-hip.so, next to this file in the plugin
 * directory: its HIP symbols are left undefined at link time. On first use
 * (the first availability question, not at registration: opening the HIP
 * runtime costs 10-20 ms even where there is no AMD GPU) the plugin opens
 * the newest HIP runtime present -- libamdhip64.so.7, .so.6, .so.5, then
 * plain libamdhip64.so -- with RTLD_GLOBAL, then the kernels library, whose
 * symbols bind to it. When either cannot be opened the plugin stays
 * registered and unavailable with the loader's message, so that
 * `fldispatch list` shows why rather than a rejected plugin. What has run
 * where: docs/device-plugins.md.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../shared/gpu/gpu_plugin.h"

#define HIP_LIBRARY   "libfld-rocm-hip.so"
#define HIP_API_SYM   "fld__gpu_api_hip"
#define HIP_BUILD_SYM "fld__gpu_hip_build_version"

/* hipError_t value (hip_runtime_api.h). */
enum { HIP_ERROR_NO_DEVICE = 100 };

/* Newest first: a machine with several ROCm releases gets the newest. */
static const char *const hip_runtimes[] = {"libamdhip64.so.7", "libamdhip64.so.6",
                                           "libamdhip64.so.5", "libamdhip64.so"};

static char load_error[PATH_MAX + 512];
static const char *runtime_soname; /* the one opened, for messages */
static int build_version;          /* HIP_VERSION the kernels were compiled with */

/* "5.2.21153" from HIP_VERSION's encoding (major * 10^7 + minor * 10^5 + patch). */
static void version_text(int v, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d.%d", v / 10000000, (v / 100000) % 100, v % 100000);
}

/* The kernels library's path next to this object, checked as the host checks plugins. */
static bool kernels_path(char *path, size_t size)
{
    Dl_info self;
    if (!dladdr((const void *)kernels_path, &self) || !self.dli_fname) {
        snprintf(load_error, sizeof load_error,
                 "HIP runtime not loadable: cannot find the directory of fld-rocm.so");
        return false;
    }
    const char *slash = strrchr(self.dli_fname, '/');
    int dir_len = slash ? (int)(slash - self.dli_fname) : 1;
    const char *dir = slash ? self.dli_fname : ".";
    int n = snprintf(path, size, "%.*s/%s", dir_len, dir, HIP_LIBRARY);
    if (n < 0 || (size_t)n >= size) {
        snprintf(load_error, sizeof load_error,
                 "HIP runtime not loadable: path of " HIP_LIBRARY " too long");
        return false;
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
            return false;
        }
        if (st.st_uid != 0 && st.st_uid != geteuid()) {
            snprintf(load_error, sizeof load_error,
                     "HIP runtime not loadable: %s is owned by uid %u (neither root nor the "
                     "current user)",
                     path, (unsigned)st.st_uid);
            return false;
        }
    }
    return true;
}

/* Opens the newest HIP runtime present, global so that the kernels bind to it. */
static bool open_runtime(void)
{
    const char *why = NULL;
    for (size_t i = 0; i < sizeof hip_runtimes / sizeof hip_runtimes[0]; i++) {
        dlerror();
        if (dlopen(hip_runtimes[i], RTLD_NOW | RTLD_GLOBAL)) {
            runtime_soname = hip_runtimes[i];
            return true;
        }
        const char *e = dlerror();
        if (e && (!why || !strstr(e, "cannot open shared object file")))
            why = e; /* keep a message other than "not found" when there is one */
    }
    snprintf(load_error, sizeof load_error,
             "HIP runtime not loadable: none of libamdhip64.so.7, .so.6, .so.5, .so could be "
             "opened (%s)",
             why ? why : "no message from the loader");
    return false;
}

/*
 * The deferred loader (fld__gpu_plugin.load). Kept open for the life of the
 * process: unloading the HIP runtime while its own threads and atexit
 * handlers are registered is not safe, and dlopen() of the same files again
 * (after fld_shutdown() + fld_init()) only takes another reference.
 */
static const struct fld__gpu_api *open_hip(void)
{
    char path[PATH_MAX];
    if (!kernels_path(path, sizeof path))
        return NULL;
    struct stat st;
    bool present = stat(path, &st) == 0;
    /* Without the kernels library there is nothing to run: say so without
     * loading a runtime (the loader's own message, as dlopen() words it). */
    if (present && !open_runtime())
        return NULL;
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "HIP runtime not loadable: %s", why ? why : path);
        return NULL;
    }
    const struct fld__gpu_api *api = dlsym(h, HIP_API_SYM);
    const int *built = dlsym(h, HIP_BUILD_SYM);
    if (!api) {
        const char *why = dlerror();
        snprintf(load_error, sizeof load_error, "HIP runtime not loadable: %s",
                 why ? why : HIP_API_SYM " not found");
        dlclose(h);
        return NULL;
    }
    build_version = built ? *built : 0;
    int rt = 0;
    char rtv[32] = "?", bv[32] = "?";
    if (api->runtime_version && api->runtime_version(&rt) == 0 && rt > 0)
        version_text(rt, rtv, sizeof rtv);
    if (build_version > 0)
        version_text(build_version, bv, sizeof bv);
    fld_log(FLD_LOG_INFO, "rocm: opened the HIP runtime %s (%s); kernels built with HIP %s%s",
            runtime_soname, rtv, bv,
            rt > 0 && build_version > 0 && rt / 10000000 != build_version / 10000000
                ? " (another major release: rebuild with this ROCm's hipcc if launches fail)"
                : "");
    return api;
}

static void explain(int code, char *buf, size_t size)
{
    if (code == HIP_ERROR_NO_DEVICE)
        snprintf(buf, size, "HIP runtime %s: hipErrorNoDevice (no ROCm device)",
                 runtime_soname ? runtime_soname : "");
}

static int register_builtins(fld_registry *reg)
{
    load_error[0] = '\0';
    const struct fld__gpu_plugin p = {
        .load = open_hip,
        .load_error = load_error,
        .load_note = "HIP runtime opened on first use (the first of libamdhip64.so.7, .so.6, "
                     ".so.5, .so)",
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
