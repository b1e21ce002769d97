/*
 * fld_gpu_api_cuda: the device side of fld-cuda.so (gpu_api.h), built by
 * nvcc for sm_80 and sm_90 plus compute_90 PTX and linked with the static
 * CUDA runtime, so the plugin loads where there is no driver: every call
 * then returns the runtime's error (cudaErrorInsufficientDriver,
 * cudaErrorNoDevice), which the glue reports as the reason.
 *
 * Compiled here but never run on a GPU (none was available); the kernels
 * it launches are tested under the host emulator in tests/gpu.
 */
#include <stdio.h>

#include "gpu_kernels.cuh"

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

int cuda_get_device(int *device_id)
{
    return (int)cudaGetDevice(device_id);
}

int cuda_set_device(int device_id)
{
    return (int)cudaSetDevice(device_id);
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

int cuda_act(const struct fld_gpu_act_args *a, int variant, void *stream)
{
    return fld_gpu::run_act(a, variant, stream);
}

int cuda_norm(const struct fld_gpu_norm_args *a, int variant, void *stream)
{
    return fld_gpu::run_norm(a, variant, stream);
}

int cuda_rotary(const struct fld_gpu_rotary_args *a, int variant, void *stream)
{
    return fld_gpu::run_rotary(a, variant, stream);
}

} // namespace

extern "C" __attribute__((visibility("default"))) const struct fld_gpu_api fld_gpu_api_cuda = {
    FLD_GPU_API_VERSION,
    "CUDA",
    cuda_error_string,
    cuda_runtime_version,
    cuda_device_count,
    cuda_device_name,
    cuda_get_device,
    cuda_set_device,
    cuda_malloc,
    cuda_free,
    cuda_memcpy,
    cuda_stream_synchronize,
    cuda_act,
    cuda_norm,
    cuda_rotary,
};
