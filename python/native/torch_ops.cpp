// SPDX-License-Identifier: Apache-2.0
// torch.ops.fldispatch.* kernels registered with PyTorch's dispatcher in C++
// (TORCH_LIBRARY_IMPL) for the CPU and CUDA keys (PyTorch's ROCm build uses
// the CUDA key too), each calling libfldispatch's typed entry point on
// DLTensor views of the at::Tensor arguments: a call pays the dispatcher and
// the library, not the Python interpreter. Optional: built by
// `make python-torch-native` when torch's headers are importable, and loaded
// by fldispatch/torch.py in place of its Python-level kernels for those keys.
// The schemas are defined by torch.py. On the CPU a large call of the norms,
// the activations or rotary runs on torch's intra-op threads in row ranges
// (row_split.h); on a GPU a call runs whole, on torch's current stream of the
// tensors' device (CallStream), and the plugin selects the tensors' device
// itself from their DLPack device id, as for fldispatch's own functions.
#include <Python.h>

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/variable.h>

#include <cstdint>
#include <optional>
#include <initializer_list>
#include <string>
#include <utility>

#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <fldispatch/plugin.h>

#include "row_split.h"

namespace {

// The DLPack device type of torch's CUDA device type: kDLROCM where the
// torch is a ROCm build (its CUDA hooks, compiled with it, say so: at::
// toDLPack names the device in the same way), else kDLCUDA.
DLDeviceType cuda_device_type()
{
    static const DLDeviceType type = at::detail::getCUDAHooks().hasROCM() ? kDLROCM : kDLCUDA;
    return type;
}

// The DLPack device of t, the one fldispatch's own functions see for it. The
// kernels are registered for the CPU and CUDA keys; a tensor on another
// device (an argument beside tensors on those) is refused.
DLDevice dlpack_device(const at::Tensor &t)
{
    if (t.is_cpu())
        return DLDevice{kDLCPU, 0};
    TORCH_CHECK(t.is_cuda(), "fldispatch: a tensor on ", t.device(),
                " beside tensors on the CPU or a CUDA device");
    return DLDevice{cuda_device_type(), t.get_device()};
}

// A DLTensor view of t: no copy, no ownership (t outlives the call). Each
// tensor has its own device: the library refuses a call whose tensors' devices
// differ, naming the tensor.
DLTensor view(const at::Tensor &t)
{
    DLTensor d{};
    d.data = t.data_ptr();
    d.device = dlpack_device(t);
    d.ndim = static_cast<int32_t>(t.dim());
    switch (t.scalar_type()) {
    case at::kFloat: d.dtype = FLD_DTYPE_F32; break;
    case at::kHalf: d.dtype = FLD_DTYPE_F16; break;
    case at::kBFloat16: d.dtype = FLD_DTYPE_BF16; break;
    case at::kLong: d.dtype = DLDataType{kDLInt, 64, 1}; break;
    case at::kInt: d.dtype = DLDataType{kDLInt, 32, 1}; break;
    default: d.dtype = DLDataType{kDLOpaqueHandle, 0, 0}; break; // the library names it
    }
    d.shape = const_cast<int64_t *>(t.sizes().data());
    d.strides = const_cast<int64_t *>(t.strides().data());
    d.byte_offset = 0; // data_ptr() already points at the first element
    return d;
}

// The fldispatch exception class of a status: the subclass of fldispatch._C.Error
// whose `status` is rc (errors.c's classes), else Error itself. New reference.
PyObject *error_class(int rc)
{
    PyObject *mod = PyImport_ImportModule("fldispatch._C");
    if (!mod)
        return nullptr;
    PyObject *base = PyObject_GetAttrString(mod, "Error");
    PyObject *names = base ? PyObject_Dir(mod) : nullptr;
    PyObject *found = nullptr;
    for (Py_ssize_t i = 0; names && !found && i < PyList_Size(names); i++) {
        PyObject *obj = PyObject_GetAttr(mod, PyList_GetItem(names, i));
        if (obj && PyType_Check(obj) && PyObject_IsSubclass(obj, base) == 1) {
            PyObject *st = PyObject_GetAttrString(obj, "status");
            if (st && PyLong_Check(st) && PyLong_AsLong(st) == rc)
                found = Py_NewRef(obj);
            Py_XDECREF(st);
        }
        Py_XDECREF(obj);
        PyErr_Clear();
    }
    Py_XDECREF(names);
    Py_DECREF(mod);
    if (!found)
        return base;
    Py_XDECREF(base);
    return found;
}

// A failed call raises what fldispatch's own functions raise: the exception
// class of its status (InvalidArgumentError, ...) with fld_last_error().
[[noreturn]] void fail(int rc)
{
    const std::string message = fld_last_error();
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *cls = error_class(rc);
    if (cls) {
        PyErr_SetString(cls, message.c_str());
        Py_DECREF(cls);
    }
    PyGILState_Release(gil);
    throw python_error();
}

inline void check(int rc)
{
    if (rc != FLD_OK)
        fail(rc);
}

// For a call on a GPU: the library launches on torch's current stream of the
// device of the call's first tensor (torch.cuda.current_stream(), also while
// a CUDA graph is being captured), set with fld_set_stream() for the call and
// the thread's previous stream put back after it, as fldispatch's own
// functions do. The stream comes through c10's device-generic interface
// (the device guard of the tensor's device type, which PyTorch's CUDA and
// ROCm builds register), so the kernels need no CUDA headers or libraries.
// Nothing for a CPU tensor; the current device is left alone (the plugin
// works on the device the tensors' DLPack device id names).
class CallStream
{
  public:
    explicit CallStream(const at::Tensor &first)
    {
        if (first.is_cpu())
            return;
        const c10::Device device = first.device();
        void *stream =
            c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
        device_type_ = dlpack_device(first).device_type;
        previous_ = fld_get_stream(device_type_);
        check(fld_set_stream(device_type_, stream));
        set_ = true;
    }
    ~CallStream()
    {
        if (set_)
            fld_set_stream(device_type_, previous_);
    }
    CallStream(const CallStream &) = delete;
    CallStream &operator=(const CallStream &) = delete;

  private:
    bool set_ = false;
    int device_type_ = kDLCPU;
    void *previous_ = nullptr;
};

// As the Python kernels: with grad mode on, an argument that requires grad is
// refused, naming it (the ops have no derivative and write in place).
void refuse_grad(const char *op, std::initializer_list<std::pair<const char *, const at::Tensor *>> args)
{
    if (!at::GradMode::is_enabled())
        return;
    for (const auto &a : args) {
        if (a.second && a.second->requires_grad()) {
            fld_set_error("%s: argument '%s' requires grad, but fldispatch ops have no derivative "
                          "(they write their outputs in place, as PyTorch's out= functions, which "
                          "refuse it too): call under torch.no_grad() or pass %s.detach()",
                          op, a.first, a.first);
            fail(FLD_EINVAL);
        }
    }
}

// A tensor the op wrote in place: autograd's version counter moves, as for
// the Python kernels (the dispatcher does not bump optional mutable arguments).
inline void written(const at::Tensor &t)
{
    torch::autograd::impl::bump_version(t);
}

// The rows a call of the norms or the activations is cut by
// (row_split.h): those of x's leading dimensions, which out's and the
// residual's follow (0 for a tensor without elements).
int64_t leading_rows(const at::Tensor &x)
{
    return x.dim() < 1 || x.numel() == 0 ? 0 : x.numel() / x.size(-1);
}

int64_t bytes_of(const at::Tensor &t)
{
    return t.numel() * t.element_size();
}

template <int (*Fn)(DLTensor *, const DLTensor *), const char *Name>
void activation(const at::Tensor &out, const at::Tensor &x)
{
    refuse_grad(Name, {{"out", &out}, {"x", &x}});
    CallStream stream(out);
    DLTensor o = view(out), i = view(x);
    const int64_t rows = leading_rows(x), bytes = bytes_of(x) + bytes_of(out);
    if (!out.is_cpu() || !fld_split::splits(rows, bytes)) {
        check(Fn(&o, &i));
    } else {
        fld_activation_args whole{&o, &i};
        check(fld_split::run_split(Name, &whole, rows, bytes, [&](int64_t begin, int64_t end) {
            auto ro = fld_split::rows_of(o, begin, end), ri = fld_split::rows_of(i, begin, end);
            return Fn(&ro.t, &ri.t);
        }));
    }
    written(out);
}

template <int (*Fn)(DLTensor *, const DLTensor *, const DLTensor *, DLTensor *, float),
          const char *Name>
void norm(const at::Tensor &out, const at::Tensor &x, const std::optional<at::Tensor> &weight,
          const std::optional<at::Tensor> &residual, double eps)
{
    refuse_grad(Name, {{"out", &out},
                       {"x", &x},
                       {"weight", weight ? &*weight : nullptr},
                       {"residual", residual ? &*residual : nullptr}});
    CallStream stream(out);
    DLTensor o = view(out), i = view(x), w{}, r{};
    if (weight)
        w = view(*weight);
    if (residual)
        r = view(*residual);
    const DLTensor *wp = weight ? &w : nullptr;
    const float e = static_cast<float>(eps);
    const int64_t rows = leading_rows(x);
    const int64_t bytes = bytes_of(x) + bytes_of(out) + (residual ? 2 * bytes_of(*residual) : 0);
    if (!out.is_cpu() || !fld_split::splits(rows, bytes)) {
        check(Fn(&o, &i, wp, residual ? &r : nullptr, e));
    } else {
        // out may be x itself: then each range's out is its x, the in-place form again.
        fld_rms_norm_args whole{&o, &i, wp, residual ? &r : nullptr, e};
        check(fld_split::run_split(Name, &whole, rows, bytes, [&](int64_t begin, int64_t end) {
            auto ro = fld_split::rows_of(o, begin, end), ri = fld_split::rows_of(i, begin, end);
            auto rr = residual ? fld_split::rows_of(r, begin, end) : fld_split::RowRange{};
            return Fn(&ro.t, &ri.t, wp, residual ? &rr.t : nullptr, e);
        }));
    }
    written(out);
    if (residual)
        written(*residual);
}

// The bytes [first, last) that t's elements span.
std::pair<uintptr_t, uintptr_t> span(const at::Tensor &t)
{
    uintptr_t first = reinterpret_cast<uintptr_t>(t.data_ptr()), last = first;
    for (int64_t i = 0; i < t.dim(); i++)
        last += static_cast<uintptr_t>((t.size(i) - 1) * t.stride(i)) * t.element_size();
    return {first, last + t.element_size()};
}

// Rotary is cut by tokens (row_split.h) where positions are one contiguous
// [T] and query and key apart (the bytes they span do not meet).
bool rotary_splits(const at::Tensor &positions, const at::Tensor &query,
                   const std::optional<at::Tensor> &key, int64_t bytes)
{
    if (positions.dim() != 1 || !positions.is_contiguous() || query.dim() < 2 ||
        query.dim() > 4 || query.numel() == 0)
        return false;
    if (key) {
        if (key->dim() < 2 || key->dim() > 4 || key->numel() == 0)
            return false;
        auto a = span(query), b = span(*key);
        if (a.first < b.second && b.first < a.second)
            return false;
    }
    return fld_split::splits(positions.size(0), bytes);
}

void rotary(const at::Tensor &positions, const at::Tensor &query,
            const std::optional<at::Tensor> &key, int64_t head_size,
            const at::Tensor &cos_sin_cache, bool is_neox)
{
    refuse_grad("rotary_embedding", {{"positions", &positions},
                                     {"query", &query},
                                     {"key", key ? &*key : nullptr},
                                     {"cos_sin_cache", &cos_sin_cache}});
    CallStream stream(positions);
    DLTensor p = view(positions), q = view(query), k{}, c = view(cos_sin_cache);
    if (key)
        k = view(*key);
    const int64_t bytes = 2 * (query.numel() * query.element_size() +
                               (key ? key->numel() * key->element_size() : 0));
    if (!positions.is_cpu() || !rotary_splits(positions, query, key, bytes)) {
        check(fld_rotary_embedding(&p, &q, key ? &k : nullptr, head_size, &c, is_neox));
    } else {
        fld_rotary_embedding_args whole{&p, &q, key ? &k : nullptr, head_size, &c, is_neox};
        check(fld_split::run_split(
            FLD_OP_ROTARY_EMBEDDING, &whole, positions.size(0), bytes,
            [&](int64_t begin, int64_t end) {
                auto rp = fld_split::tokens_of(p, begin, end);
                auto rq = fld_split::tokens_of(q, begin, end);
                auto rk = key ? fld_split::tokens_of(k, begin, end) : fld_split::TokenRange{};
                return fld_rotary_embedding(&rp.t, &rq.t, key ? &rk.t : nullptr, head_size, &c,
                                            is_neox);
            }));
    }
    written(query);
    if (key)
        written(*key);
}

// rotary_embedding_out, split over torch's threads as rotary() is. It has no
// prepared form to check the whole call first; instead a call is split only
// when nothing a range's check can refuse differs between ranges: every
// position in [0, max_pos) (checked here) and the outputs' bytes apart from
// every input's and from each other (spans, a conservative test). Any other
// call goes to the library whole, which checks it before writing anything.
bool rotary_out_splits(const at::Tensor &positions, const at::Tensor &query,
                       const std::optional<at::Tensor> &key, const at::Tensor &cos_sin_cache,
                       const at::Tensor &query_out, const std::optional<at::Tensor> &key_out,
                       int64_t bytes)
{
    if (!rotary_splits(positions, query, key, bytes) || !key != !key_out ||
        query_out.sizes() != query.sizes() || (key && key_out->sizes() != key->sizes()) ||
        cos_sin_cache.dim() != 2 || query_out.numel() == 0)
        return false;
    const int64_t max_pos = cos_sin_cache.size(0);
    const int64_t T = positions.size(0);
    if (positions.scalar_type() == at::kLong) {
        const int64_t *p = positions.const_data_ptr<int64_t>();
        for (int64_t i = 0; i < T; i++)
            if (p[i] < 0 || p[i] >= max_pos)
                return false;
    } else if (positions.scalar_type() == at::kInt) {
        const int32_t *p = positions.const_data_ptr<int32_t>();
        for (int64_t i = 0; i < T; i++)
            if (p[i] < 0 || p[i] >= max_pos)
                return false;
    } else {
        return false;
    }
    auto meet = [](std::pair<uintptr_t, uintptr_t> a, std::pair<uintptr_t, uintptr_t> b) {
        return a.first < b.second && b.first < a.second;
    };
    std::pair<uintptr_t, uintptr_t> outs[2] = {span(query_out), {0, 0}};
    std::pair<uintptr_t, uintptr_t> ins[5] = {span(query), {0, 0}, span(positions),
                                              span(cos_sin_cache), {0, 0}};
    if (key) {
        outs[1] = span(*key_out);
        ins[1] = span(*key);
        ins[4] = outs[0];
    }
    for (int o = 0; o < (key ? 2 : 1); o++)
        for (const auto &in : ins)
            if (in.second != 0 && meet(outs[o], in))
                return false;
    return true;
}

void rotary_out(const at::Tensor &positions, const at::Tensor &query,
                const std::optional<at::Tensor> &key, int64_t head_size,
                const at::Tensor &cos_sin_cache, bool is_neox, const at::Tensor &query_out,
                const std::optional<at::Tensor> &key_out)
{
    refuse_grad("rotary_embedding_out", {{"positions", &positions},
                                         {"query", &query},
                                         {"key", key ? &*key : nullptr},
                                         {"cos_sin_cache", &cos_sin_cache},
                                         {"query_out", &query_out},
                                         {"key_out", key_out ? &*key_out : nullptr}});
    CallStream stream(positions);
    DLTensor p = view(positions), q = view(query), k{}, c = view(cos_sin_cache);
    DLTensor qo = view(query_out), ko{};
    if (key)
        k = view(*key);
    if (key_out)
        ko = view(*key_out);
    const int64_t bytes = 2 * (query.numel() * query.element_size() +
                               (key ? key->numel() * key->element_size() : 0));
    // rotary_out_splits reads the positions: host memory only.
    if (!positions.is_cpu() ||
        !rotary_out_splits(positions, query, key, cos_sin_cache, query_out, key_out, bytes)) {
        check(fld_rotary_embedding_out(&p, &q, key ? &k : nullptr, head_size, &c, is_neox, &qo,
                                       key_out ? &ko : nullptr));
    } else {
        check(fld_split::run_ranges(positions.size(0), bytes, [&](int64_t begin, int64_t end) {
            auto rp = fld_split::tokens_of(p, begin, end), rq = fld_split::tokens_of(q, begin, end);
            auto rqo = fld_split::tokens_of(qo, begin, end);
            auto rk = key ? fld_split::tokens_of(k, begin, end) : fld_split::TokenRange{};
            auto rko = key ? fld_split::tokens_of(ko, begin, end) : fld_split::TokenRange{};
            return fld_rotary_embedding_out(&rp.t, &rq.t, key ? &rk.t : nullptr, head_size, &c,
                                            is_neox, &rqo.t, key ? &rko.t : nullptr);
        }));
    }
    written(query_out);
    if (key_out)
        written(*key_out);
}

// Do-nothing kernels with the argument lists of the three families, served
// as torch.ops.fldispatch._floor_<family> (fldispatch.torch.dispatch_floor()):
// a call of one costs what PyTorch's dispatcher alone adds to a call of an op
// registered as ours are, the floor a benchmark measures our ops against.
void floor_activation(const at::Tensor &, const at::Tensor &) {}

void floor_norm(const at::Tensor &, const at::Tensor &, const std::optional<at::Tensor> &,
                const std::optional<at::Tensor> &, double)
{
}

void floor_rotary(const at::Tensor &, const at::Tensor &, const std::optional<at::Tensor> &,
                  int64_t, const at::Tensor &, bool)
{
}

// Each catalog op's name, a template argument of its kernel (one per row of <fldispatch/catalog.def>).
#define FLD_CATALOG_OP(id, name, family, doc) constexpr char name_##name[] = #name;
#include <fldispatch/catalog.def>

// The kernels of every catalog op with tensors, by its family
// (attention_backend has none: torch.py registers its Python kernel for every
// key), and the dispatcher's floors, for one dispatch key.
void register_kernels(torch::Library &m)
{
#define NATIVE_GATED(name)       m.impl(#name, activation<fld_##name, name_##name>);
#define NATIVE_ELEMENTWISE(name) m.impl(#name, activation<fld_##name, name_##name>);
#define NATIVE_NORM(name)        m.impl(#name, norm<fld_##name, name_##name>);
#define NATIVE_ROTARY(name)      m.impl(#name, rotary);
#define NATIVE_ROTARY_OUT(name)  m.impl(#name, rotary_out);
#define NATIVE_ATTENTION(name)
#define FLD_CATALOG_OP(id, name, family, doc) NATIVE_##family(name)
#include <fldispatch/catalog.def>
    m.impl("_floor_activation", floor_activation);
    m.impl("_floor_norm", floor_norm);
    m.impl("_floor_rotary", floor_rotary);
}

} // namespace

TORCH_LIBRARY_IMPL(fldispatch, CPU, m)
{
    register_kernels(m);
}

// PyTorch's CUDA and ROCm builds. PrivateUse1 (torch_npu) keeps torch.py's
// Python-level kernels (fldispatch/torch.py says why).
TORCH_LIBRARY_IMPL(fldispatch, CUDA, m)
{
    register_kernels(m);
}
