/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld__gpu_api_cuda: the device side of fld-cuda.so (gpu_api.h), built by
 * nvcc for the architectures of CUDA_ARCHS (plugin.mk passes the list as
 * FLD_GPU_BUILT_ARCHS) and linked with the static CUDA runtime, so the
 * plugin loads where there is no driver: every call then returns the
 * runtime's error (cudaErrorInsufficientDriver, cudaErrorNoDevice), which
 * the glue reports as the reason.
 *
 * Contexts: the runtime has no way to ask whether the calling thread has a
 * current context (cudaGetDevice answers 0 on a thread that never chose a
 * device), nor to make a device current and later put back "nothing".
 * The driver has (cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent), and
 * the runtime itself has loaded it by the time a device is counted: its
 * functions are found with dlopen(RTLD_NOLOAD) + dlsym, under the names
 * every driver since CUDA 4 exports. The runtime uses whatever context is
 * current, so a kernel launched between push and pop runs on the pushed
 * device.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../shared/gpu/gpu_kernels.cuh"

#ifndef FLD_GPU_BUILT_ARCHS
#error "FLD_GPU_BUILT_ARCHS (e.g. \"sm_80 sm_90 compute_90\") must name what nvcc builds"
#endif

namespace
{

const char *cuda_error_string(int code)
{
    return cudaGetErrorString((cudaError_t)code);
}

int cuda_runtime_version(int *version)
{
    return (int)cudaRuntimeGetVersion(version);
}

int cuda_driver_version(int *version)
{
    *version = 0;
    return (int)cudaDriverGetVersion(version);
}

int cuda_device_count(int *count)
{
    *count = 0;
    return (int)cudaGetDeviceCount(count);
}

int cuda_device_name(int device_id, char *buf, size_t size)
{
    cudaDeviceProp prop;
    cudaError_t rc = cudaGetDeviceProperties(&prop, device_id);
    if (rc != cudaSuccess)
        return (int)rc;
    if (size > 0)
        snprintf(buf, size, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
                 prop.multiProcessorCount,
                 (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return 0;
}

int cuda_device_arch(int device_id, int *arch)
{
    int major = 0, minor = 0;
    cudaError_t rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_id);
    if (rc == cudaSuccess)
        rc = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_id);
    *arch = rc == cudaSuccess ? 10 * major + minor : 0;
    return (int)rc;
}

/* ---- the driver's context functions (see the top of this file) ---- */

typedef int (*ctx_get_current_fn)(void **ctx);
typedef int (*ctx_get_device_fn)(int *dev);
typedef int (*device_get_fn)(int *dev, int ordinal);
typedef int (*primary_retain_fn)(void **ctx, int dev);
typedef int (*ctx_push_fn)(void *ctx);
typedef int (*ctx_pop_fn)(void **ctx);

struct driver_ctx_api {
    bool ok;
    ctx_get_current_fn get_current;
    ctx_get_device_fn get_device;
    device_get_fn device_get;
    primary_retain_fn primary_retain;
    ctx_push_fn push;
    ctx_pop_fn pop;
};

pthread_once_t driver_once = PTHREAD_ONCE_INIT;
driver_ctx_api drv;

void driver_resolve()
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h)
        return;
    drv.get_current = (ctx_get_current_fn)dlsym(h, "cuCtxGetCurrent");
    drv.get_device = (ctx_get_device_fn)dlsym(h, "cuCtxGetDevice");
    drv.device_get = (device_get_fn)dlsym(h, "cuDeviceGet");
    drv.primary_retain = (primary_retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
    drv.push = (ctx_push_fn)dlsym(h, "cuCtxPushCurrent_v2");
    drv.pop = (ctx_pop_fn)dlsym(h, "cuCtxPopCurrent_v2");
    drv.ok = drv.get_current && drv.get_device && drv.device_get && drv.primary_retain &&
             drv.push && drv.pop;
    /* The runtime holds its own reference; this one is dropped, the
       library stays. */
    dlclose(h);
}

/* The driver functions, once the runtime has loaded the driver; NULL before. */
const driver_ctx_api *driver()
{
    pthread_once(&driver_once, driver_resolve);
    return drv.ok ? &drv : nullptr;
}

/* Primary contexts retained by push_device, one per device, for the life of
   the process (the runtime keeps them too). */
enum { MAX_CACHED_DEVICES = 64 };
pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
void *primary[MAX_CACHED_DEVICES];

int cuda_current_device(int *device_id)
{
    *device_id = -1;
    const driver_ctx_api *d = driver();
    if (!d) {
        /* No driver loaded yet: the runtime has not created a context on
           this thread, since it loads the driver first. */
        return 0;
    }
    void *ctx = nullptr;
    int rc = d->get_current(&ctx);
    if (rc != 0 || !ctx)
        return rc;
    int dev = -1;
    rc = d->get_device(&dev);
    if (rc != 0)
        return rc;
    /* A CUdevice is the ordinal in every driver so far; checked, not assumed. */
    int h = -1;
    if (d->device_get(&h, dev) == 0 && h == dev) {
        *device_id = dev;
        return 0;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess)
        count = 0;
    for (int i = 0; i < count; i++) {
        if (d->device_get(&h, i) == 0 && h == dev) {
            *device_id = i;
            return 0;
        }
    }
    return 0;
}

/* Driver errors are returned as they are: CUresult and cudaError_t share the
   values that can occur here (101 invalid device, 201 invalid context, ...). */
int cuda_push_device(int device_id)
{
    if (device_id < 0)
        return (int)cudaErrorInvalidDevice;
    const driver_ctx_api *d = driver();
    if (!d)
        return (int)cudaErrorInitializationError;
    void *ctx = nullptr;
    int rc = 0;
    if (device_id < MAX_CACHED_DEVICES) {
        pthread_mutex_lock(&primary_lock);
        ctx = primary[device_id];
        if (!ctx) {
            int dev = -1;
            rc = d->device_get(&dev, device_id);
            if (rc == 0)
                rc = d->primary_retain(&ctx, dev);
            if (rc == 0)
                primary[device_id] = ctx;
        }
        pthread_mutex_unlock(&primary_lock);
    } else {
        int dev = -1;
        rc = d->device_get(&dev, device_id);
        if (rc == 0)
            rc = d->primary_retain(&ctx, dev);
    }
    if (rc != 0)
        return rc;
    return d->push(ctx);
}

int cuda_pop_device(void)
{
    const driver_ctx_api *d = driver();
    if (!d)
        return (int)cudaErrorInitializationError;
    void *ctx = nullptr;
    return d->pop(&ctx);
}

int cuda_malloc(void **ptr, size_t bytes)
{
    return (int)cudaMalloc(ptr, bytes);
}

int cuda_free(void *ptr)
{
    return (int)cudaFree(ptr);
}

int cuda_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    cudaMemcpyKind k;
    switch (kind) {
    case 0:
        k = cudaMemcpyHostToDevice;
        break;
    case 1:
        k = cudaMemcpyDeviceToHost;
        break;
    case 2:
        k = cudaMemcpyDeviceToDevice;
        break;
    default:
        return (int)cudaErrorInvalidValue;
    }
    cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream);
    if (rc == cudaSuccess && kind != 2) /* host copies are complete on return */
        rc = cudaStreamSynchronize((cudaStream_t)stream);
    return (int)rc;
}

int cuda_stream_synchronize(void *stream)
{
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

/* ---- graphs ---- */

/* A captured graph, ready to replay on the stream it was captured on. */
struct cuda_graph {
    cudaStream_t stream;
    cudaGraphExec_t exec;
};

int cuda_capture_begin(void **stream)
{
    if (!stream)
        return (int)cudaErrorInvalidValue;
    *stream = nullptr;
    cudaStream_t s = nullptr;
    cudaError_t rc = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (rc != cudaSuccess)
        return (int)rc;
    rc = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (rc != cudaSuccess) {
        cudaStreamDestroy(s);
        return (int)rc;
    }
    *stream = (void *)s;
    return 0;
}

int cuda_capture_end(void *stream, int keep, void **graph)
{
    if (graph)
        *graph = nullptr;
    cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t g = nullptr;
    /* Ends the capture whatever follows: a stream still capturing cannot
       be destroyed cleanly. */
    cudaError_t rc = cudaStreamEndCapture(s, &g);
    if (rc == cudaSuccess && keep && !graph)
        rc = cudaErrorInvalidValue;
    cudaGraphExec_t exec = nullptr;
    if (rc == cudaSuccess && keep)
        rc = cudaGraphInstantiate(&exec, g, 0);
    if (g)
        cudaGraphDestroy(g); /* the executable graph does not need it */
    cuda_graph *out = nullptr;
    if (rc == cudaSuccess && keep) {
        out = static_cast<cuda_graph *>(malloc(sizeof *out));
        if (!out)
            rc = cudaErrorMemoryAllocation;
    }
    if (rc != cudaSuccess || !keep) {
        if (exec)
            cudaGraphExecDestroy(exec);
        cudaStreamDestroy(s);
        return (int)rc;
    }
    out->stream = s;
    out->exec = exec;
    *graph = out;
    return 0;
}

int cuda_graph_replay(void *graph, int replays, double *ns)
{
    if (!graph || replays < 1 || !ns)
        return (int)cudaErrorInvalidValue;
    const cuda_graph *g = static_cast<const cuda_graph *>(graph);
    const int n = replays + 1;
    cudaEvent_t *ev = static_cast<cudaEvent_t *>(malloc((size_t)n * sizeof *ev));
    if (!ev)
        return (int)cudaErrorMemoryAllocation;
    int made = 0; /* events created, the ones to destroy */
    cudaError_t rc = cudaSuccess;
    while (made < n && (rc = cudaEventCreate(&ev[made])) == cudaSuccess)
        made++;
    if (rc == cudaSuccess)
        rc = cudaGraphLaunch(g->exec, g->stream); /* warm-up */
    if (rc == cudaSuccess)
        rc = cudaEventRecord(ev[0], g->stream);
    for (int i = 0; i < replays && rc == cudaSuccess; i++) {
        rc = cudaGraphLaunch(g->exec, g->stream);
        if (rc == cudaSuccess)
            rc = cudaEventRecord(ev[i + 1], g->stream);
    }
    if (rc == cudaSuccess)
        rc = cudaEventSynchronize(ev[replays]);
    for (int i = 0; i < replays && rc == cudaSuccess; i++) {
        float ms = 0.0f;
        rc = cudaEventElapsedTime(&ms, ev[i], ev[i + 1]);
        ns[i] = (double)ms * 1e6;
    }
    /* After a failure, work queued before it may still use the events:
       cudaEventDestroy releases them once it is done. */
    for (int i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
    return (int)rc;
}

int cuda_graph_free(void *graph)
{
    if (!graph)
        return 0;
    cuda_graph *g = static_cast<cuda_graph *>(graph);
    cudaError_t rc = cudaGraphExecDestroy(g->exec);
    cudaError_t rs = cudaStreamDestroy(g->stream);
    free(g);
    return (int)(rc != cudaSuccess ? rc : rs);
}

int cuda_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    return fld_gpu::run_act(a, variant, stream);
}

int cuda_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    return fld_gpu::run_norm(a, variant, stream);
}

int cuda_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    return fld_gpu::run_rotary(a, variant, stream);
}

} // namespace

extern "C" __attribute__((visibility("default"))) const struct fld__gpu_api fld__gpu_api_cuda = {
    FLD_GPU_API_VERSION,
    "CUDA",
    cuda_error_string,
    cuda_runtime_version,
    cuda_driver_version,
    cuda_device_count,
    cuda_device_name,
    cuda_device_arch,
    FLD_GPU_BUILT_ARCHS,
    cuda_current_device,
    cuda_push_device,
    cuda_pop_device,
    (void *)cudaStreamPerThread,
    cuda_malloc,
    cuda_free,
    cuda_memcpy,
    cuda_stream_synchronize,
    cuda_act,
    cuda_norm,
    cuda_rotary,
    cuda_capture_begin,
    cuda_capture_end,
    cuda_graph_replay,
    cuda_graph_free,
};
