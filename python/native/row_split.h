// SPDX-License-Identifier: Apache-2.0
// Large torch.ops.fldispatch.* calls over torch's intra-op threads, for
// torch_ops.cpp. Through torch.ops the caller is a torch process whose
// OpenMP team spins for a while after each parallel region (GOMP_SPINCOUNT):
// a second pool of threads (the cpu plugin's) then shares the cores with
// spinning threads, and a two-thread call runs little faster than a
// one-thread one (docs/BENCHMARKS.md); inside vLLM the plugin runs on one
// thread (VLLM_FL_CPU_THREADS=1) while torch's team has more. A large call
// is instead cut into row ranges that at::parallel_for hands to torch's own
// threads, each range a library call small enough for the plugin to run on
// the thread that makes it (kSliceBytes, below the plugin's parallel
// threshold), as vLLM's own CPU kernels run on that team.
//
// at::parallel_for is inlined here: torch_ops.cpp is compiled with -fopenmp
// and resolves the OpenMP runtime torch itself loaded (libgomp.so.1 from
// torch's lib directory, already in the process), so the ranges run on
// torch's team.
//
// What the cut keeps of the single call:
//   - the checks: fld_prepare() checks the whole call first (its checks and
//     messages, rotary positions included; the overlaps between what the op
//     writes and its other tensors, so the one the ops allow, rms_norm's out
//     == x, is the only one left, and it stays row by row), and the first
//     range runs alone before the others (a call no implementation serves
//     fails there), so a call with a bad argument writes nothing;
//   - the results, bit for bit: rows are independent in every op cut here,
//     and each range runs the implementation the whole call would. Not cut:
//     calls under a thread-local policy override (the team's threads would
//     not see it) or while a manifest is in force (a manifest may pin an
//     implementation by row count);
//   - the counts: not cut with statistics on (a call would count once per
//     range), nor inside a parallel region.
// The trace (VLLM_FL_TRACE without statistics) shows each range as a call
// on the thread that ran it. On CPUs shared with other processes a cut call
// waits until torch's second thread gets a CPU, and can lose to one call
// (docs/BENCHMARKS.md, "Norms and activations on torch's threads").
// The families say which layouts they cut (rotary_embedding: one contiguous
// [T] of positions, query and key apart; the norms and the activations: any
// layout the library takes, as rows of their leading dimensions).
#ifndef FLDISPATCH_NATIVE_ROW_SPLIT_H
#define FLDISPATCH_NATIVE_ROW_SPLIT_H

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include <ATen/Parallel.h>

#include <fldispatch/binding.h>

namespace fld_split
{

constexpr int64_t kSplitMinBytes = 512 * 1024; // the plugin's default parallel threshold
constexpr int64_t kSliceBytes = 128 * 1024;

// Whether the policy in force holds a manifest (fld_foreach_config_field()
// names it), asked again whenever the library's choices may have changed
// (fld_binding_stamp() moved, or is 0 while some thread has an override).
inline bool manifest_in_force()
{
    static std::atomic<uint64_t> cached{0}; // stamp << 1 | answer; 0: not asked yet
    const uint64_t stamp = fld_binding_stamp();
    const uint64_t seen = cached.load(std::memory_order_acquire);
    if (stamp && seen >> 1 == stamp)
        return seen & 1;
    const bool found = fld_foreach_config_field(
                           [](const fld_config_field *f, void *) {
                               return std::strcmp(f->key, "manifest") == 0 ? 1 : 0;
                           },
                           nullptr) == 1;
    if (stamp)
        cached.store(stamp << 1 | (found ? 1 : 0), std::memory_order_release);
    return found;
}

// Whether a call of `rows` independent rows moving `bytes` (read and
// written) is cut, by what any family's call needs (above).
inline bool splits(int64_t rows, int64_t bytes)
{
    return bytes >= kSplitMinBytes && rows >= 2 && at::get_num_threads() >= 2 &&
           !at::in_parallel_region() && fld_policy_depth() == 0 &&
           fld_stats_mode() == FLD_STATS_OFF && !manifest_in_force();
}

// Runs run(begin, end) over rows [0, rows), ranges of about kSliceBytes
// of the call's `bytes`: the first alone, the others on torch's threads.
// run makes the library call of its rows and returns its status. Returns
// FLD_OK or the first failure's status, with its message as the calling
// thread's fld_last_error(). The caller has made sure that a range can only
// fail where the first one would (run_split() below, or checks of its own).
template <class Run> int run_ranges(int64_t rows, int64_t bytes, Run run)
{
    const int64_t slice = std::max<int64_t>(1, kSliceBytes / std::max<int64_t>(1, bytes / rows));
    const int64_t ranges = (rows + slice - 1) / slice;
    auto range = [&](int64_t i) { return run(i * slice, std::min(rows, (i + 1) * slice)); };
    int rc = range(0); // a failure here has written nothing
    if (rc != FLD_OK)
        return rc;
    std::atomic<int> status{FLD_OK};
    std::mutex lock;
    std::string message;
    at::parallel_for(1, ranges, 1, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end && status.load(std::memory_order_relaxed) == FLD_OK; i++) {
            const int st = range(i);
            if (st != FLD_OK) {
                std::lock_guard<std::mutex> guard(lock);
                if (status.load() == FLD_OK) {
                    message = fld_last_error();
                    status.store(st);
                }
            }
        }
    });
    if (status.load() != FLD_OK)
        fld_set_error("%s", message.c_str());
    return status.load();
}

// The call of op with args, checked whole first (fld_prepare()), then
// run_ranges().
template <class Run>
int run_split(const char *op, const void *args, int64_t rows, int64_t bytes, Run run)
{
    fld_prepared *checked = nullptr;
    int rc = fld_prepare(op, args, &checked);
    fld_prepared_free(checked);
    if (rc != FLD_OK)
        return rc;
    return run_ranges(rows, bytes, run);
}

// Rows [begin, end) of a tensor the library validated, as a [rows, width]
// view (its leading dimensions collapse into one row stride).
struct RowRange {
    DLTensor t;
    int64_t shape[2];
    int64_t strides[2];
};

inline RowRange rows_of(const DLTensor &d, int64_t begin, int64_t end)
{
    fld_rows all;
    fld_tensor_rows(&d, &all);
    RowRange r{d, {end - begin, all.width}, {all.stride, 1}};
    r.t.ndim = 2;
    r.t.shape = r.shape;
    r.t.strides = r.strides;
    r.t.byte_offset = 0;
    r.t.data = static_cast<char *>(all.data) + begin * all.stride * (d.dtype.bits / 8);
    return r;
}

// Tokens [begin, end) of d, whose dimension 0 is the token dimension (ndim
// <= 4), its other dimensions kept (rotary reads heads from them).
struct TokenRange {
    DLTensor t;
    int64_t shape[4];
};

inline TokenRange tokens_of(const DLTensor &d, int64_t begin, int64_t end)
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

} // namespace fld_split

#endif
