// SPDX-License-Identifier: Apache-2.0
// A stand-in for PyTorch's CUDA backend in a CPU-only torch, for
// test_torch_native_gpu.py: tensors whose device is cuda:N and whose memory
// is host memory, and a device guard for the CUDA device type (c10's
// FakeGuardImpl: current device and stream ids per thread) whose streams have
// recognisable native handles (stream_handle()). A call of
// torch.ops.fldispatch.* on such tensors goes through the dispatcher's CUDA
// key to the native kernels (python/native/torch_ops.cpp), which ask this
// guard for the current stream and hand the library kDLCUDA tensors, which
// the fixture plugin fld-fakecuda.so (tests/gpuplug) serves on host memory.
//
// Loaded with torch.ops.load_library; its functions are the ops
// torch.ops.fake_cuda.{to_device, to_cpu, set_stream, stream_handle}. The
// guard is registered only where torch has none for CUDA (a CPU-only build):
// under a CUDA or ROCm torch the ops raise instead.
#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

constexpr std::uintptr_t kStreamHandleBase = 0x5eed0000;

// c10's FakeGuardImpl (final) for CUDA, with native stream handles.
class FakeCudaGuard final : public c10::impl::DeviceGuardImplInterface
{
  public:
    c10::DeviceType type() const override { return fake_.type(); }
    c10::Device exchangeDevice(c10::Device d) const override { return fake_.exchangeDevice(d); }
    c10::Device getDevice() const override { return fake_.getDevice(); }
    void setDevice(c10::Device d) const override { fake_.setDevice(d); }
    void uncheckedSetDevice(c10::Device d) const noexcept override { fake_.uncheckedSetDevice(d); }
    c10::Stream getStream(c10::Device d) const override { return fake_.getStream(d); }
    c10::Stream exchangeStream(c10::Stream s) const override { return fake_.exchangeStream(s); }
    c10::DeviceIndex deviceCount() const noexcept override { return fake_.deviceCount(); }
    void *getStreamNativeHandle(const c10::Stream s) const override
    {
        return reinterpret_cast<void *>(kStreamHandleBase + static_cast<std::uintptr_t>(s.id()));
    }

  private:
    c10::impl::FakeGuardImpl<c10::DeviceType::CUDA> fake_;
};

// Whether this library's guard serves the CUDA device type.
bool installed()
{
    static const bool ok = [] {
        if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA))
            return false;
        static FakeCudaGuard guard;
        static c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA, &guard);
        return true;
    }();
    return ok;
}

void require_installed()
{
    TORCH_CHECK(installed(), "fake_cuda: this torch has a CUDA backend of its own");
}

// A copy of cpu on cuda:device, contiguous, in host memory.
at::Tensor to_device(const at::Tensor &cpu, int64_t device)
{
    require_installed();
    TORCH_CHECK(cpu.is_cpu(), "fake_cuda.to_device: a CPU tensor is copied");
    const at::Tensor src = cpu.contiguous();
    const size_t bytes = src.nbytes();
    void *data = std::malloc(bytes ? bytes : 1);
    TORCH_CHECK(data, "fake_cuda.to_device: out of memory");
    if (bytes)
        std::memcpy(data, src.data_ptr(), bytes);
    const c10::Device where(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                         c10::DataPtr(data, data, &std::free, where), nullptr, false);
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA), src.dtype());
    t.unsafeGetTensorImpl()->set_sizes_contiguous(src.sizes());
    return t;
}

// A CPU copy of a fake CUDA tensor (any strides).
at::Tensor to_cpu(const at::Tensor &t)
{
    TORCH_CHECK(t.is_cuda(), "fake_cuda.to_cpu: a fake CUDA tensor is copied");
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                         t.options().device(c10::DeviceType::CPU))
        .clone();
}

// Makes stream `id` the calling thread's current stream of cuda:device.
void set_stream(int64_t device, int64_t id)
{
    require_installed();
    const c10::Device where(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
        ->exchangeStream(c10::Stream(c10::Stream::UNSAFE, where, static_cast<c10::StreamId>(id)));
}

// The native handle of the calling thread's current stream of cuda:device.
int64_t stream_handle(int64_t device)
{
    require_installed();
    const c10::Device where(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device));
    return static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(
        c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(where).native_handle()));
}

} // namespace

TORCH_LIBRARY(fake_cuda, m)
{
    m.def("to_device(Tensor cpu, int device) -> Tensor", to_device);
    m.def("to_cpu(Tensor t) -> Tensor", to_cpu);
    m.def("set_stream(int device, int id) -> ()", set_stream);
    m.def("stream_handle(int device) -> int", stream_handle);
}
