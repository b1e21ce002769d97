/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld__gpu_api_emu: struct fld__gpu_api (plugins/shared/gpu/gpu_api.h) on host
 * memory, with the kernels of gpu_kernels.cuh run by the emulator (gpu_emu.h).
 * One "device" (id 0); "device" pointers are host pointers; copies and
 * launches are synchronous, so streams are ignored (the default stream is
 * FLD_EMU_PER_THREAD_STREAM, as CUDA's cudaStreamPerThread). Error codes are the
 * FLD_EMU_ERR_* values of gpu_emu.h.
 *
 * The exception is graph capture, emulated as the CUDA runtime does it:
 * capture_begin makes a stream object of the emulator, kept in a registry of
 * live streams (any other value, FLD_EMU_PER_THREAD_STREAM or a constant a
 * test passes, is a stream that runs everything at once; a value is looked up,
 * never dereferenced). An act, norm or rotary call on a capturing stream is
 * recorded (its variant, a copy of its arguments and the launch shape forced
 * then, if any) instead of run, and returns 0; stream_synchronize or memcpy on
 * it returns FLD_EMU_ERR_CAPTURE_UNSUPPORTED and invalidates the capture: later
 * launches on it, and capture_end, return FLD_EMU_ERR_CAPTURE_INVALIDATED. A graph
 * runs its launches in the order recorded, each replay timed with the
 * monotonic clock; the first launch error ends the replay with its code.
 *
 * It lets tests (and a fixture plugin standing in for fld-cuda.so) run the
 * whole glue + kernel path without a GPU. Link users add -lstdc++.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include "gpu_kernels.cuh"

namespace
{

const char *emu_error_string(int code)
{
    switch (code) {
    case FLD_EMU_OK:
        return "no error";
    case FLD_EMU_ERR_INVALID_VALUE:
        return "invalid argument (emulator)";
    case FLD_EMU_ERR_OUT_OF_MEMORY:
        return "out of memory (emulator)";
    case FLD_EMU_ERR_LAUNCH_CONFIG:
        return "invalid launch configuration (emulator)";
    case FLD_EMU_ERR_BARRIER:
        return "barrier not reached by every thread of the block (emulator)";
    case FLD_EMU_ERR_INVALID_DEVICE:
        return "invalid device ordinal (emulator)";
    case FLD_EMU_ERR_CAPTURE_UNSUPPORTED:
        return "operation not permitted when stream is capturing (emulator)";
    case FLD_EMU_ERR_CAPTURE_INVALIDATED:
        return "operation failed due to a previous error during capture (emulator)";
    default:
        return "unknown error (emulator)";
    }
}

int emu_runtime_version(int *version)
{
    *version = 0;
    return 0;
}

int emu_device_count(int *count)
{
    *count = 1;
    return 0;
}

int emu_device_name(int device_id, char *buf, size_t size)
{
    if (device_id != 0)
        return FLD_EMU_ERR_INVALID_DEVICE;
    if (size > 0)
        snprintf(buf, size, "fldispatch GPU emulator (CPU memory, warp %d)", fld_emu::warp_size());
    return 0;
}

/* Device 0 is always current; pushing it (the one device) is accepted. */
int emu_current_device(int *device_id)
{
    *device_id = 0;
    return 0;
}

int emu_push_device(int device_id)
{
    return device_id == 0 ? 0 : FLD_EMU_ERR_INVALID_DEVICE;
}

int emu_pop_device(void)
{
    return 0;
}

int emu_malloc(void **ptr, size_t bytes)
{
    /* 256-byte alignment, as cudaMalloc gives. */
    *ptr = aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes == 0 ? 256 : 0));
    return *ptr ? 0 : FLD_EMU_ERR_OUT_OF_MEMORY;
}

int emu_free(void *ptr)
{
    free(ptr);
    return 0;
}

/* ---- streams that capture, and graphs ---- */

/* The launch shape tests force (fld_emu_force_shape), or NULL: gpu_launch.h's. */
bool shape_forced = false;
struct fld__gpu_shape forced_shape;

enum launch_kind { LAUNCH_ACT, LAUNCH_NORM, LAUNCH_ROTARY };

/* One call recorded by a capture: what replaying it needs. */
struct recorded_launch {
    launch_kind kind;
    int variant;
    struct fld__gpu_act_args act;       /* with LAUNCH_ACT */
    struct fld__gpu_norm_args norm;     /* with LAUNCH_NORM */
    struct fld__gpu_rotary_args rotary; /* with LAUNCH_ROTARY */
    bool shaped;                        /* shape was forced (fld_emu_force_shape) */
    struct fld__gpu_shape shape;
};

struct emu_stream {
    bool capturing;   /* from capture_begin to capture_end */
    bool invalidated; /* a call the capture cannot record was made on it */
    std::vector<recorded_launch> launches;
};

/* A kept capture: its stream (no longer capturing) and its launches. */
struct emu_graph {
    emu_stream *stream;
    std::vector<recorded_launch> launches;
};

/* The live streams of capture_begin and graphs of capture_end; pointers are
   compared, and dereferenced only once found here. */
std::mutex capture_lock;
std::unordered_set<const void *> live_streams, live_graphs;
/* Streams now capturing: with none, a call skips the lock. */
std::atomic<int> capturing_count{0};

/* The capturing stream that stream names, or NULL; under capture_lock. */
emu_stream *capturing_locked(void *stream)
{
    if (!stream || live_streams.count(stream) == 0)
        return nullptr;
    emu_stream *s = static_cast<emu_stream *>(stream);
    return s->capturing ? s : nullptr;
}

/* For stream_synchronize and memcpy: FLD_EMU_ERR_CAPTURE_UNSUPPORTED (and
   the capture invalidated) on a capturing stream, else 0. */
int refuse_if_capturing(void *stream)
{
    if (capturing_count.load(std::memory_order_acquire) == 0)
        return 0;
    std::lock_guard<std::mutex> hold(capture_lock);
    emu_stream *s = capturing_locked(stream);
    if (!s)
        return 0;
    s->invalidated = true;
    return FLD_EMU_ERR_CAPTURE_UNSUPPORTED;
}

/* The call as a capture records it: its arguments copied, with the shape
   forced now. Other argument errors than a NULL a (refused at once, as
   there is nothing to record) surface when the graph is replayed. */
recorded_launch launch_of(launch_kind kind, const void *a, int variant)
{
    recorded_launch l = {};
    l.kind = kind;
    l.variant = variant;
    l.shaped = shape_forced;
    if (shape_forced)
        l.shape = forced_shape;
    if (kind == LAUNCH_ACT)
        l.act = *static_cast<const struct fld__gpu_act_args *>(a);
    else if (kind == LAUNCH_NORM)
        l.norm = *static_cast<const struct fld__gpu_norm_args *>(a);
    else
        l.rotary = *static_cast<const struct fld__gpu_rotary_args *>(a);
    return l;
}

/* Records the call when stream is capturing (*recorded true), else leaves it to run. */
int record_if_capturing(void *stream, launch_kind kind, const void *a, int variant, bool *recorded)
{
    *recorded = false;
    if (capturing_count.load(std::memory_order_acquire) == 0)
        return 0;
    std::lock_guard<std::mutex> hold(capture_lock);
    emu_stream *s = capturing_locked(stream);
    if (!s)
        return 0;
    if (s->invalidated) /* as CUDA: nothing more is recorded */
        return FLD_EMU_ERR_CAPTURE_INVALIDATED;
    try {
        s->launches.push_back(launch_of(kind, a, variant));
    } catch (const std::bad_alloc &) {
        s->invalidated = true;
        return FLD_EMU_ERR_OUT_OF_MEMORY;
    }
    *recorded = true;
    return 0;
}

/* Drops a stream of capture_begin; under capture_lock. */
void destroy_stream_locked(emu_stream *s)
{
    if (s->capturing)
        capturing_count.fetch_sub(1, std::memory_order_release);
    live_streams.erase(s);
    delete s;
}

int emu_capture_begin(void **stream)
{
    if (!stream)
        return FLD_EMU_ERR_INVALID_VALUE;
    *stream = nullptr;
    emu_stream *s = new (std::nothrow) emu_stream();
    if (!s)
        return FLD_EMU_ERR_OUT_OF_MEMORY;
    s->capturing = true;
    s->invalidated = false;
    std::lock_guard<std::mutex> hold(capture_lock);
    try {
        live_streams.insert(s);
    } catch (const std::bad_alloc &) {
        delete s;
        return FLD_EMU_ERR_OUT_OF_MEMORY;
    }
    capturing_count.fetch_add(1, std::memory_order_release);
    *stream = s;
    return 0;
}

int emu_capture_end(void *stream, int keep, void **graph)
{
    if (graph)
        *graph = nullptr;
    std::lock_guard<std::mutex> hold(capture_lock);
    emu_stream *s = capturing_locked(stream);
    if (!s)
        return FLD_EMU_ERR_INVALID_VALUE;
    if (s->invalidated) {
        destroy_stream_locked(s);
        return FLD_EMU_ERR_CAPTURE_INVALIDATED;
    }
    if (!keep) {
        destroy_stream_locked(s);
        return 0;
    }
    emu_graph *g = graph ? new (std::nothrow) emu_graph() : nullptr;
    if (g) {
        try {
            live_graphs.insert(g);
        } catch (const std::bad_alloc &) {
            delete g;
            g = nullptr;
        }
    }
    if (!g) {
        destroy_stream_locked(s);
        return graph ? FLD_EMU_ERR_OUT_OF_MEMORY : FLD_EMU_ERR_INVALID_VALUE;
    }
    s->capturing = false;
    capturing_count.fetch_sub(1, std::memory_order_release);
    g->stream = s;
    g->launches.swap(s->launches);
    *graph = g;
    return 0;
}

int run_recorded(const recorded_launch &l, void *stream)
{
    const struct fld__gpu_shape *shape = l.shaped ? &l.shape : nullptr;
    switch (l.kind) {
    case LAUNCH_ACT:
        return fld_gpu::run_act_shaped(&l.act, l.variant, stream, shape);
    case LAUNCH_NORM:
        return fld_gpu::run_norm_shaped(&l.norm, l.variant, stream, shape);
    default:
        return fld_gpu::run_rotary_shaped(&l.rotary, l.variant, stream, shape);
    }
}

/* Runs the launches in order; the first error ends it. */
int replay_once(const std::vector<recorded_launch> &launches, void *stream)
{
    for (const recorded_launch &l : launches) {
        int rc = run_recorded(l, stream);
        if (rc != 0)
            return rc;
    }
    return 0;
}

double monotonic_ns()
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int emu_graph_replay(void *graph, int replays, double *ns)
{
    if (!graph || replays < 1 || !ns)
        return FLD_EMU_ERR_INVALID_VALUE;
    /* A copy, run without the lock: launches on other streams go on meanwhile. */
    std::vector<recorded_launch> launches;
    void *stream = nullptr;
    {
        std::lock_guard<std::mutex> hold(capture_lock);
        if (live_graphs.count(graph) == 0)
            return FLD_EMU_ERR_INVALID_VALUE;
        const emu_graph *g = static_cast<const emu_graph *>(graph);
        try {
            launches = g->launches;
        } catch (const std::bad_alloc &) {
            return FLD_EMU_ERR_OUT_OF_MEMORY;
        }
        stream = g->stream;
    }
    int rc = replay_once(launches, stream); /* warm-up */
    double before = monotonic_ns();
    for (int i = 0; i < replays && rc == 0; i++) {
        rc = replay_once(launches, stream);
        const double after = monotonic_ns();
        ns[i] = after - before;
        before = after;
    }
    return rc;
}

int emu_graph_free(void *graph)
{
    if (!graph)
        return 0;
    std::lock_guard<std::mutex> hold(capture_lock);
    if (live_graphs.count(graph) == 0)
        return FLD_EMU_ERR_INVALID_VALUE;
    emu_graph *g = static_cast<emu_graph *>(graph);
    live_graphs.erase(g);
    destroy_stream_locked(g->stream);
    delete g;
    return 0;
}

int emu_memcpy(void *dst, const void *src, size_t bytes, int kind, void *stream)
{
    if (int rc = refuse_if_capturing(stream))
        return rc;
    if (kind < 0 || kind > 2 || (bytes && (!dst || !src)))
        return FLD_EMU_ERR_INVALID_VALUE;
    if (bytes)
        memmove(dst, src, bytes);
    return 0;
}

int emu_stream_synchronize(void *stream)
{
    return refuse_if_capturing(stream);
}

int emu_act(const struct fld__gpu_act_args *a, int variant, void *stream)
{
    bool recorded = false;
    int rc = a ? record_if_capturing(stream, LAUNCH_ACT, a, variant, &recorded) : 0;
    if (rc != 0 || recorded)
        return rc;
    return fld_gpu::run_act_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

int emu_norm(const struct fld__gpu_norm_args *a, int variant, void *stream)
{
    bool recorded = false;
    int rc = a ? record_if_capturing(stream, LAUNCH_NORM, a, variant, &recorded) : 0;
    if (rc != 0 || recorded)
        return rc;
    return fld_gpu::run_norm_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

int emu_rotary(const struct fld__gpu_rotary_args *a, int variant, void *stream)
{
    bool recorded = false;
    int rc = a ? record_if_capturing(stream, LAUNCH_ROTARY, a, variant, &recorded) : 0;
    if (rc != 0 || recorded)
        return rc;
    return fld_gpu::run_rotary_shaped(a, variant, stream, shape_forced ? &forced_shape : nullptr);
}

} // namespace

extern "C" __attribute__((visibility("default"))) const struct fld__gpu_api fld__gpu_api_emu = {
    FLD_GPU_API_VERSION,
    "emulator",
    emu_error_string,
    emu_runtime_version,
    nullptr, /* driver_version */
    emu_device_count,
    emu_device_name,
    nullptr, /* device_arch: no architecture to check */
    nullptr,
    emu_current_device,
    emu_push_device,
    emu_pop_device,
    (void *)FLD_EMU_PER_THREAD_STREAM,
    emu_malloc,
    emu_free,
    emu_memcpy,
    emu_stream_synchronize,
    emu_act,
    emu_norm,
    emu_rotary,
    emu_capture_begin,
    emu_capture_end,
    emu_graph_replay,
    emu_graph_free,
};

/* Every later act/norm/rotary call of fld__gpu_api_emu launches with *shape
   (the candidates bench/gpu_sweep.cu times), until a call with NULL puts
   gpu_launch.h's choice back. For tests; not thread-safe. */
extern "C" void fld_emu_force_shape(const struct fld__gpu_shape *shape)
{
    shape_forced = shape != nullptr;
    if (shape)
        forced_shape = *shape;
}

/* The emulator's warp width (32 or 64 lanes) and its order of ready threads
   (an enum fld_emu::schedule value) for this OS thread's later launches, for
   C callers (tests/fuzz). */
extern "C" void fld_emu_configure(int lanes, int order)
{
    fld_emu::set_warp_size(lanes);
    fld_emu::set_schedule(static_cast<fld_emu::schedule>(order));
}
