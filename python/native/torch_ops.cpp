// SPDX-License-Identifier: Apache-2.0
// torch.ops.fldispatch.* CPU kernels registered with PyTorch's dispatcher in
// C++ (TORCH_LIBRARY_IMPL), each calling libfldispatch's typed entry point on
// DLTensor views of the at::Tensor arguments: a call pays the dispatcher and
// the library, not the Python interpreter. Optional: built by
// `make python-torch-native` when torch's headers are importable, and loaded
// by fldispatch/torch.py in place of its Python-level CPU kernels. The
// schemas are defined by torch.py; these are the CPU implementations only.
#include <Python.h>

#include <torch/library.h>
#include <ATen/core/Tensor.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <initializer_list>
#include <string>
#include <utility>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <fldispatch/plugin.h>

namespace {

// A DLTensor view of t: no copy, no ownership (t outlives the call).
DLTensor view(const at::Tensor &t)
{
    DLTensor d{};
    d.data = t.data_ptr();
    d.device = DLDevice{kDLCPU, 0};
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

template <int (*Fn)(DLTensor *, const DLTensor *), const char *Name>
void activation(const at::Tensor &out, const at::Tensor &x)
{
    refuse_grad(Name, {{"out", &out}, {"x", &x}});
    DLTensor o = view(out), i = view(x);
    check(Fn(&o, &i));
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
    DLTensor o = view(out), i = view(x), w{}, r{};
    if (weight)
        w = view(*weight);
    if (residual)
        r = view(*residual);
    check(Fn(&o, &i, weight ? &w : nullptr, residual ? &r : nullptr, static_cast<float>(eps)));
    written(out);
    if (residual)
        written(*residual);
}

// Rotary over torch's intra-op threads. Through torch.ops the caller is a
// torch process whose OpenMP team spins for a while after each parallel
// region (GOMP_SPINCOUNT): a second pool of threads (the cpu plugin's) then
// shares the cores with spinning threads and a two-thread call runs little
// faster than a one-thread one (docs/BENCHMARKS.md). A large call is instead
// cut into token ranges that at::parallel_for hands to torch's own threads,
// each range a library call small enough for the plugin to run on the thread
// that makes it (kSliceBytes, below the plugin's parallel threshold), as
// vLLM's own CPU kernels run on that team.
//
// at::parallel_for is inlined here: this file is compiled with -fopenmp and
// resolves the OpenMP runtime torch itself loaded (libgomp.so.1 from torch's
// lib directory, already in the process), so the ranges run on torch's team.
//
// Arguments are checked before anything is written: fld_prepare() checks the
// whole call (the checks and messages of the call itself, positions
// included) and the first range runs before the others, so a call with a bad
// argument writes nothing. Not split: calls
// under a thread-local policy override (the team's threads would not see
// it), with statistics on (a call would count once per range), inside a
// parallel region, with positions other than one contiguous [T], or with
// query and key overlapping.
constexpr int64_t kSplitMinBytes = 512 * 1024; // the plugin's default parallel threshold
constexpr int64_t kSliceBytes = 128 * 1024;

struct TokenRange {
    DLTensor t;
    int64_t shape[4];
};

// Tokens [begin, end) of d, whose dimension 0 is the token dimension (ndim <= 4).
TokenRange tokens_of(const DLTensor &d, int64_t begin, int64_t end)
{
    TokenRange r{d, {}};
    for (int i = 0; i < d.ndim; i++)
        r.shape[i] = d.shape[i];
    r.shape[0] = end - begin;
    r.t.shape = r.shape;
    const int64_t stride0 = d.strides ? d.strides[0] : 1;
    r.t.data = static_cast<char *>(d.data) + begin * stride0 * (d.dtype.bits / 8);
    return r;
}

// The bytes [first, last) that t's elements span.
std::pair<uintptr_t, uintptr_t> span(const at::Tensor &t)
{
    uintptr_t first = reinterpret_cast<uintptr_t>(t.data_ptr()), last = first;
    for (int64_t i = 0; i < t.dim(); i++)
        last += static_cast<uintptr_t>((t.size(i) - 1) * t.stride(i)) * t.element_size();
    return {first, last + t.element_size()};
}

bool rotary_splits(const at::Tensor &positions, const at::Tensor &query,
                   const std::optional<at::Tensor> &key, int64_t bytes)
{
    if (bytes < kSplitMinBytes || at::get_num_threads() < 2 || at::in_parallel_region() ||
        fld_policy_depth() != 0 || fld_stats_mode() != FLD_STATS_OFF)
        return false;
    if (positions.dim() != 1 || positions.size(0) < 2 || !positions.is_contiguous() ||
        query.dim() < 2 || query.dim() > 4 || query.numel() == 0)
        return false;
    if (key) {
        if (key->dim() < 2 || key->dim() > 4 || key->numel() == 0)
            return false;
        auto a = span(query), b = span(*key);
        if (a.first < b.second && b.first < a.second)
            return false;
    }
    return true;
}

void rotary(const at::Tensor &positions, const at::Tensor &query,
            const std::optional<at::Tensor> &key, int64_t head_size,
            const at::Tensor &cos_sin_cache, bool is_neox)
{
    refuse_grad("rotary_embedding", {{"positions", &positions},
                                     {"query", &query},
                                     {"key", key ? &*key : nullptr},
                                     {"cos_sin_cache", &cos_sin_cache}});
    DLTensor p = view(positions), q = view(query), k{}, c = view(cos_sin_cache);
    if (key)
        k = view(*key);
    const int64_t bytes = 2 * (query.numel() * query.element_size() +
                               (key ? key->numel() * key->element_size() : 0));
    if (!rotary_splits(positions, query, key, bytes)) {
        check(fld_rotary_embedding(&p, &q, key ? &k : nullptr, head_size, &c, is_neox));
    } else {
        fld_rotary_embedding_args whole{&p, &q, key ? &k : nullptr, head_size, &c, is_neox};
        fld_prepared *checked = nullptr;
        check(fld_prepare(FLD_OP_ROTARY_EMBEDDING, &whole, &checked));
        fld_prepared_free(checked);
        const int64_t T = positions.size(0);
        const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, bytes / T));
        auto run = [&](int64_t begin, int64_t end) {
            TokenRange rp = tokens_of(p, begin, end), rq = tokens_of(q, begin, end);
            TokenRange rk = key ? tokens_of(k, begin, end) : TokenRange{};
            return fld_rotary_embedding(&rp.t, &rq.t, key ? &rk.t : nullptr, head_size, &c,
                                        is_neox);
        };
        const int64_t first = std::min(T, slice);
        check(run(0, first)); // a failure here has written nothing
        std::atomic<int> status{FLD_OK};
        std::mutex lock;
        std::string message;
        at::parallel_for(first, T, slice, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end && status.load(std::memory_order_relaxed) == FLD_OK;
                 t += slice) {
                const int rc = run(t, std::min(end, t + slice));
                if (rc != FLD_OK) {
                    std::lock_guard<std::mutex> guard(lock);
                    if (status.load() == FLD_OK) {
                        message = fld_last_error();
                        status.store(rc);
                    }
                }
            }
        });
        if (status.load() != FLD_OK) {
            fld_set_error("%s", message.c_str());
            fail(status.load());
        }
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
    DLTensor p = view(positions), q = view(query), k{}, c = view(cos_sin_cache);
    DLTensor qo = view(query_out), ko{};
    if (key)
        k = view(*key);
    if (key_out)
        ko = view(*key_out);
    const int64_t bytes = 2 * (query.numel() * query.element_size() +
                               (key ? key->numel() * key->element_size() : 0));
    if (!rotary_out_splits(positions, query, key, cos_sin_cache, query_out, key_out, bytes)) {
        check(fld_rotary_embedding_out(&p, &q, key ? &k : nullptr, head_size, &c, is_neox, &qo,
                                       key_out ? &ko : nullptr));
    } else {
        const int64_t T = positions.size(0);
        const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, bytes / T));
        auto run = [&](int64_t begin, int64_t end) {
            TokenRange rp = tokens_of(p, begin, end), rq = tokens_of(q, begin, end);
            TokenRange rqo = tokens_of(qo, begin, end);
            TokenRange rk = key ? tokens_of(k, begin, end) : TokenRange{};
            TokenRange rko = key ? tokens_of(ko, begin, end) : TokenRange{};
            return fld_rotary_embedding_out(&rp.t, &rq.t, key ? &rk.t : nullptr, head_size, &c,
                                            is_neox, &rqo.t, key ? &rko.t : nullptr);
        };
        const int64_t first = std::min(T, slice);
        check(run(0, first)); // a failure here has written nothing
        std::atomic<int> status{FLD_OK};
        std::mutex lock;
        std::string message;
        at::parallel_for(first, T, slice, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end && status.load(std::memory_order_relaxed) == FLD_OK;
                 t += slice) {
                const int rc = run(t, std::min(end, t + slice));
                if (rc != FLD_OK) {
                    std::lock_guard<std::mutex> guard(lock);
                    if (status.load() == FLD_OK) {
                        message = fld_last_error();
                        status.store(rc);
                    }
                }
            }
        });
        if (status.load() != FLD_OK) {
            fld_set_error("%s", message.c_str());
            fail(status.load());
        }
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

} // namespace

TORCH_LIBRARY_IMPL(fldispatch, CPU, m)
{
// Every catalog op with tensors, by its family's kernel (attention_backend has none: torch.py
// registers its Python kernel for every key).
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
