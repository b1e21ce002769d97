/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The "fakecuda" fixture plugin (tests/gpuplug/fakecuda.c): the GPU glue of
 * the cuda and rocm plugins (plugins/shared/gpu/gpu_plugin.c) over the GPU
 * emulator's api table (tests/gpu), registered as vendor "cuda" on CUDA
 * tensors that are really CPU memory. It wraps the emulator's table to
 * pretend to have FAKECUDA_DEVICES devices (default 2), each with a compute
 * capability and a primary context created on first use, and a per-thread
 * stack of current contexts as CUDA's driver keeps it (a thread starts with
 * none); it records what the glue passed, for the tests to read through
 * these functions (dlsym on the loaded plugin). The "build" has code for
 * FAKECUDA_BUILT (sm_80 sm_90 compute_90, as fld-cuda.so by default).
 *
 * Environment, read at registration:
 *   FAKECUDA_DEVICES=n        device count (0: "no device")
 *   FAKECUDA_COUNT_ERROR=code device_count() fails with that emulator code
 *   FAKECUDA_ARCHS=a,b,...    compute capability of device 0, 1, ... as
 *                             10 * major + minor (default 90 for each)
 *   FAKECUDA_DRIVER=v         what driver_version() answers (default 13000)
 *   FAKECUDA_NO_GRAPHS=1      the table has no graph functions (capture_begin,
 *                             capture_end, graph_replay, graph_free NULL), as
 *                             a runtime without graphs
 */
#ifndef FLD_TESTS_GPUPLUG_FAKECUDA_H
#define FLD_TESTS_GPUPLUG_FAKECUDA_H

#include <stddef.h>

#define FAKECUDA_EXPORT __attribute__((visibility("default")))

#define FAKECUDA_BUILT "sm_80 sm_90 compute_90"
/* Its default_stream (the value of cudaStreamPerThread). */
#define FAKECUDA_DEFAULT_STREAM ((void *)0x2)

struct fakecuda_record {
    void *stream;      /* of the last kernel, copy or synchronize */
    int variant;       /* of the last kernel: FLD_GPU_REFERENCE / FLD_GPU_VECTOR; -1 none */
    int device;        /* current device during the last kernel, copy or alloc (-1 none) */
    int kernels;       /* kernel launches that reached the emulator */
    int pushes, pops;  /* push_device() / pop_device() calls that succeeded */
    unsigned contexts; /* bit d: device d's primary context exists (created) */
    int memcpy_kind;   /* of the last copy; -1 none */
    int synchronizes;  /* stream_synchronize() calls */
    int device_counts; /* device_count() calls (the probe that initialises a driver) */
    int captures;      /* capture_end calls that kept a graph */
    int replays;       /* graph replays (warm-up excluded) */
};

/* What has been recorded in this process so far. */
FAKECUDA_EXPORT void fakecuda_record_get(struct fakecuda_record *out);
/* sizeof(struct fakecuda_record): a caller that mirrors the struct outside C
 * (python/tests/native/fake_cuda_calls.py) checks its copy against it before
 * it lets fakecuda_record_get write one. */
FAKECUDA_EXPORT size_t fakecuda_record_size(void);
/* The device of the calling thread's current context, -1 when it has none. */
FAKECUDA_EXPORT int fakecuda_current_device(void);
/* As cudaSetDevice: makes device current (creating its context); -1 leaves
 * the thread with no current context. */
FAKECUDA_EXPORT void fakecuda_set_current_device(int device);
/* The next kernel launch returns code without running. */
FAKECUDA_EXPORT void fakecuda_fail_next_launch(int code);

typedef void (*fakecuda_record_get_fn)(struct fakecuda_record *out);
typedef int (*fakecuda_current_device_fn)(void);
typedef void (*fakecuda_set_current_device_fn)(int device);
typedef void (*fakecuda_fail_next_launch_fn)(int code);

#endif
