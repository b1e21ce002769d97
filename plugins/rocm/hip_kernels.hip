/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld__gpu_api_hip: the device side of fld-rocm.so (plugins/shared/gpu/gpu_api.h),
 * the kernels of plugins/shared/gpu/gpu_kernels.cuh built by hipcc for the AMD
 * architectures of ROCM_ARCHS that the hipcc at hand supports (plugin.mk
 * asks it; Debian's hipcc 5.2: gfx908, gfx90a, gfx1030, not gfx942). It is
 * a separate shared object, linked without the HIP runtime (its HIP
 * symbols are undefined): fld-rocm.so opens the HIP runtime present first
 * (libamdhip64.so.7, .6 or .5), then this, so a missing runtime is a reason
 * the plugin reports, not a load failure. The table and the build version
 * are the exported symbols (default visibility; the rest is hidden).
 */
#include <stdio.h>
#include <stdlib.h>

#include "../shared/gpu/gpu_kernels.cuh"

/* The device pass sees these host functions (their bodies instantiate the
   kernels it must compile) but not the table that uses them. */
#if defined(__HIP_DEVICE_COMPILE__)
#pragma clang diagnostic ignored "-Wunused-function"
#endif

namespace
{

const char *hip_error_string(int code)
{
    return hipGetErrorString((hipError_t)code);
}

int hip_runtime_version(int *version)
{
    return (int)hipRuntimeGetVersion(version);
}

int hip_driver_version(int *version)
{
    *version = 0;
    return (int)hipDriverGetVersion(version);
}

int hip_device_count(int *count)
{
    *count = 0;
    return (int)hipGetDeviceCount(count);
}

/* Name and memory through functions whose signatures every HIP release
   shares (hipDeviceProp_t changed layout in ROCm 6, so it is not used). */
int hip_device_name(int device_id, char *buf, size_t size)
{
    char name[256] = "";
    size_t mem = 0;
    hipDevice_t dev;
    hipError_t rc = hipDeviceGet(&dev, device_id);
    if (rc == hipSuccess)
        rc = hipDeviceGetName(name, (int)sizeof name, dev);
    if (rc == hipSuccess)
        rc = hipDeviceTotalMem(&mem, dev);
    if (rc != hipSuccess)
        return (int)rc;
    if (size > 0)
        snprintf(buf, size, "%s (%.0f GiB)", name, (double)mem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

/*
 * HIP creates every device's context when it initialises, so a device made
 * current costs nothing more; the thread's current device (hipGetDevice,
 * always one) is what push saves and pop puts back.
 */
int hip_current_device(int *device_id)
{
    *device_id = -1;
    return (int)hipGetDevice(device_id);
}

enum { MAX_DEPTH = 16 };
thread_local int saved[MAX_DEPTH];
thread_local int depth;

int hip_push_device(int device_id)
{
    if (depth >= MAX_DEPTH)
        return (int)hipErrorInvalidValue;
    int prev = 0;
    hipError_t rc = hipGetDevice(&prev);
    if (rc == hipSuccess)
        rc = hipSetDevice(device_id);
    if (rc == hipSuccess)
        saved[depth++] = prev;
    return (int)rc;
}

int hip_pop_device(void)
{
    if (depth <= 0)
        return (int)hipErrorInvalidValue;
    return (int)hipSetDevice(saved[--depth]);
}

int hip_malloc(void **ptr, size_t bytes)
{
    return (int)hipMalloc(ptr, bytes);
}

int hip_free(void *ptr)
{
    return (int)hipFree(ptr);
}

int hip_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    hipMemcpyKind k;
    switch (kind) {
    case 0:
        k = hipMemcpyHostToDevice;
        break;
    case 1:
        k = hipMemcpyDeviceToHost;
        break;
    case 2:
        k = hipMemcpyDeviceToDevice;
        break;
    default:
        return (int)hipErrorInvalidValue;
    }
    hipError_t rc = hipMemcpyAsync(dst, src, bytes, k, (hipStream_t)stream);
    if (rc == hipSuccess && kind != 2) /* host copies are complete on return */
        rc = hipStreamSynchronize((hipStream_t)stream);
    return (int)rc;
}

int hip_stream_synchronize(void *stream)
{
    return (int)hipStreamSynchronize((hipStream_t)stream);
}

/* ---- graphs ---- */

/* A captured graph, ready to replay on the stream it was captured on. */
struct hip_graph {
    hipStream_t stream;
    hipGraphExec_t exec;
};

int hip_capture_begin(void **stream)
{
    if (!stream)
        return (int)hipErrorInvalidValue;
    *stream = nullptr;
    hipStream_t s = nullptr;
    hipError_t rc = hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
    if (rc != hipSuccess)
        return (int)rc;
    rc = hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal);
    if (rc != hipSuccess) {
        (void)hipStreamDestroy(s);
        return (int)rc;
    }
    *stream = (void *)s;
    return 0;
}

int hip_capture_end(void *stream, int keep, void **graph)
{
    if (graph)
        *graph = nullptr;
    hipStream_t s = (hipStream_t)stream;
    hipGraph_t g = nullptr;
    /* Ends the capture whatever follows: a stream still capturing cannot
       be destroyed cleanly. */
    hipError_t rc = hipStreamEndCapture(s, &g);
    if (rc == hipSuccess && keep && !graph)
        rc = hipErrorInvalidValue;
    hipGraphExec_t exec = nullptr;
    if (rc == hipSuccess && keep)
        rc = hipGraphInstantiate(&exec, g, nullptr, nullptr, 0);
    if (g)
        (void)hipGraphDestroy(g); /* the executable graph does not need it */
    hip_graph *out = nullptr;
    if (rc == hipSuccess && keep) {
        out = static_cast<hip_graph *>(malloc(sizeof *out));
        if (!out)
            rc = hipErrorOutOfMemory;
    }
    if (rc != hipSuccess || !keep) {
        if (exec)
            (void)hipGraphExecDestroy(exec);
        (void)hipStreamDestroy(s);
        return (int)rc;
    }
    out->stream = s;
    out->exec = exec;
    *graph = out;
    return 0;
}

int hip_graph_replay(void *graph, int replays, double *ns)
{
    if (!graph || replays < 1 || !ns)
        return (int)hipErrorInvalidValue;
    const hip_graph *g = static_cast<const hip_graph *>(graph);
    const int n = replays + 1;
    hipEvent_t *ev = static_cast<hipEvent_t *>(malloc((size_t)n * sizeof *ev));
    if (!ev)
        return (int)hipErrorOutOfMemory;
    int made = 0; /* events created, the ones to destroy */
    hipError_t rc = hipSuccess;
    while (made < n && (rc = hipEventCreate(&ev[made])) == hipSuccess)
        made++;
    if (rc == hipSuccess)
        rc = hipGraphLaunch(g->exec, g->stream); /* warm-up */
    if (rc == hipSuccess)
        rc = hipEventRecord(ev[0], g->stream);
    for (int i = 0; i < replays && rc == hipSuccess; i++) {
        rc = hipGraphLaunch(g->exec, g->stream);
        if (rc == hipSuccess)
            rc = hipEventRecord(ev[i + 1], g->stream);
    }
    if (rc == hipSuccess)
        rc = hipEventSynchronize(ev[replays]);
    for (int i = 0; i < replays && rc == hipSuccess; i++) {
        float ms = 0.0f;
        rc = hipEventElapsedTime(&ms, ev[i], ev[i + 1]);
        ns[i] = (double)ms * 1e6;
    }
    for (int i = 0; i < made; i++)
        (void)hipEventDestroy(ev[i]);
    free(ev);
    return (int)rc;
}

int hip_graph_free(void *graph)
{
    if (!graph)
        return 0;
    hip_graph *g = static_cast<hip_graph *>(graph);
    hipError_t rc = hipGraphExecDestroy(g->exec);
    hipError_t rs = hipStreamDestroy(g->stream);
    free(g);
    return (int)(rc != hipSuccess ? rc : rs);
}

int hip_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    return fld_gpu::run_act(a, variant, stream);
}

int hip_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    return fld_gpu::run_norm(a, variant, stream);
}

int hip_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    return fld_gpu::run_rotary(a, variant, stream);
}

} // namespace

/* Host-only: the device pass must not emit a table of host functions. */
#if !defined(__HIP_DEVICE_COMPILE__)
/* The HIP release the kernels were compiled with, for fld-rocm.so's log line. */
extern "C" __attribute__((visibility("default"))) const int fld__gpu_hip_build_version =
    HIP_VERSION;

extern "C" __attribute__((visibility("default"))) const struct fld__gpu_api fld__gpu_api_hip = {
    FLD_GPU_API_VERSION,
    "HIP",
    hip_error_string,
    hip_runtime_version,
    hip_driver_version,
    hip_device_count,
    hip_device_name,
    nullptr, /* device_arch: the HIP runtime matches code objects itself */
    nullptr,
    hip_current_device,
    hip_push_device,
    hip_pop_device,
    (void *)hipStreamPerThread,
    hip_malloc,
    hip_free,
    hip_memcpy,
    hip_stream_synchronize,
    hip_act,
    hip_norm,
    hip_rotary,
    hip_capture_begin,
    hip_capture_end,
    hip_graph_replay,
    hip_graph_free,
};
#endif
