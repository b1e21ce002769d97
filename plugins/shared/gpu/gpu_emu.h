/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The interface of a small host emulator for the GPU kernels of
 * gpu_kernels.cuh: what the device code compiles against under
 * -DFLD_GPU_EMULATE (see gpu_compat.cuh). The emulator itself (the fiber
 * scheduler, tests/gpu/emu.cc) and its api table (tests/gpu/emu_api.cc)
 * are test code; this header is here so that the kernel source depends on
 * nothing under tests/. It exists because no GPU is available to test on:
 * the device code runs on the CPU, with the semantics that matter for its
 * correctness.
 *
 * A launch runs the grid's blocks one after another on the calling thread.
 * Within a block, every thread is a cooperative fiber with its own stack
 * (see set_context_switch), and a fiber runs until it finishes or waits at
 * a barrier; the scheduler then resumes the next ready fiber in one of
 * three orders (see set_schedule), so that a race shows whichever way it
 * goes:
 *   - __syncthreads(): a block barrier; every thread of the block must
 *     reach it. If no fiber can run and some still wait (a barrier inside
 *     divergent code, or threads that returned early), the launch fails with
 *     FLD_EMU_ERR_BARRIER instead of hanging.
 *   - shfl_xor(): the lanes of one warp (warp_size() threads, 32 by default)
 *     exchange values through a per-warp barrier.
 *   - __shared__ variables are thread_local statics: one copy per OS thread,
 *     shared by the fibers of the block running on it.
 * Because fibers switch only at barriers, a kernel that reads another
 * thread's shared-memory write without a barrier between them sees the old
 * value -- a race shows up as a wrong answer, deterministically, in the
 * schedule that runs the reader first. Built with ThreadSanitizer, the
 * emulator also has TSan check every pair of accesses (see checks_races).
 *
 * Not emulated: memory spaces (device pointers are host pointers), streams
 * (everything is synchronous, except that a launch on a capturing stream is
 * recorded for graph replay: see tests/gpu/emu_api.cc), warp-synchronous
 * code without shuffles, atomics. Each OS thread has its own emulator
 * state; launches on different threads are independent.
 */
#ifndef FLD_GPU_EMU_H
#define FLD_GPU_EMU_H

#include <stdint.h>

enum {
    FLD_EMU_OK = 0,
    FLD_EMU_ERR_INVALID_VALUE = 1, /* bad arguments to an API function */
    FLD_EMU_ERR_LAUNCH_CONFIG = 9, /* empty grid or block, block > 1024 threads */
    FLD_EMU_ERR_OUT_OF_MEMORY = 2, /* fiber stacks or an allocation */
    FLD_EMU_ERR_BARRIER = 700,     /* a barrier no fiber can pass (divergence) */
    FLD_EMU_ERR_INVALID_DEVICE = 101,
    /* stream_synchronize or memcpy on a capturing stream, which invalidates
       the capture (cudaErrorStreamCaptureUnsupported's value) */
    FLD_EMU_ERR_CAPTURE_UNSUPPORTED = 900,
    /* capture_end of an invalidated capture (cudaErrorStreamCaptureInvalidated's value) */
    FLD_EMU_ERR_CAPTURE_INVALIDATED = 901
};

/* The api table's default_stream (the value of cudaStreamPerThread). */
#define FLD_EMU_PER_THREAD_STREAM ((uintptr_t)0x2)

namespace fld_emu
{

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* The built-in variables of the running fiber's thread and block. */
extern thread_local dim3 t_thread_idx, t_block_idx, t_block_dim, t_grid_dim;

/* Runs body once per thread of every block of grid; 0 or FLD_EMU_ERR_*. */
int launch_fn(dim3 grid, dim3 block, void (*body)(void *), void *ctx);

template <typename F> static inline int launch(dim3 grid, dim3 block, F &&f)
{
    return launch_fn(
        grid, block, [](void *p) { (*static_cast<F *>(p))(); }, &f);
}

/* Inside a kernel: the block barrier and the warp exchange. */
void syncthreads();
float shfl_xor(float v, int mask);

/* Lanes per warp: 32 (CUDA, RDNA) or 64 (CDNA). Set between launches. */
int warp_size();
void set_warp_size(int lanes);
/*
 * Which ready fiber runs next (set between launches):
 *   SCHED_ROUND_ROBIN   the next one in ascending thread order (default)
 *   SCHED_REVERSE       the next one in descending order
 *   SCHED_LOWEST_FIRST  always the lowest-numbered one: warp 0 runs ahead
 *                       as far as the barriers let it, which shows a
 *                       shared-memory slot reused before other warps read it
 */
enum schedule { SCHED_ROUND_ROBIN, SCHED_REVERSE, SCHED_LOWEST_FIRST };
void set_schedule(schedule order);

/*
 * How fibers switch (set between launches):
 *   SWITCH_DIRECT    registers saved and restored by a few instructions
 *                    (x86-64 Linux; the default there)
 *   SWITCH_UCONTEXT  swapcontext, which also saves the signal mask with a
 *                    system call (the default elsewhere)
 * Returns false, changing nothing, for SWITCH_DIRECT where it is not built.
 */
enum context_switch { SWITCH_DIRECT, SWITCH_UCONTEXT };
bool set_context_switch(context_switch kind);

/*
 * The approximate reciprocal the kernels' divisions start from
 * (rcp.approx.f32 on a GPU, within one unit in the last place of 1 / b):
 * here 1 / b correctly rounded, moved by offset units in its last place
 * (set between launches; 0 by default), so that tests run the divisions
 * from reciprocals as far off as the hardware's may be, and further.
 */
float rcp_approx(float b);
void set_rcp_offset(int units);

/*
 * The approximate reciprocal square root the norms scale by
 * (rsqrt.approx.f32 on a GPU, within two units in the last place of
 * 1 / sqrt(x) by CUDA's bound for rsqrtf): here 1 / sqrt(x) from double
 * rounded to float32, moved by offset units in its last place as
 * rcp_approx's is.
 */
float rsqrt_approx(float x);
void set_rsqrt_offset(int units);

/*
 * Whether this build has ThreadSanitizer check the kernels' memory accesses
 * (built with -fsanitize=thread): a block's threads are then concurrent to
 * TSan, ordered only by the block barrier and by the launch itself, so two
 * threads' accesses to the same shared or global bytes, one a write, with
 * no barrier between them are reported as a data race in every schedule.
 * Shuffles order no memory; blocks run, and are ordered, one after another.
 */
bool checks_races();
/* Inside a kernel: reads from unchecked_reads(true) to unchecked_reads(false)
   are not checked for races (a load whose value the thread drops). */
void unchecked_reads(bool on);

/*
 * Frees this OS thread's fibers and their stacks, which launches otherwise
 * keep until the thread exits (the next launch makes them again). Under
 * ThreadSanitizer a process forks with none: the fibers' TSan contexts do
 * not survive a fork, and a child that launches on them gets reports of
 * races that the launch orders (seen: a shared slot of one block against
 * the next block's).
 */
void free_fibers();

/* Totals on this OS thread since it started: launches and fiber switches. */
uint64_t launches();
uint64_t switches();

} // namespace fld_emu

#endif
