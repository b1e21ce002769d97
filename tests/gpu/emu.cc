/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU emulator's scheduler (see plugins/shared/gpu/gpu_emu.h): fibers on ucontext, a block
 * barrier and per-warp barriers, all on the calling OS thread.
 */
#include "gpu_emu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <vector>

/* Under AddressSanitizer the stack switches are announced to it, and a
   reused fiber stack is unpoisoned (a fiber abandoned at a barrier never
   unwound its frames). */
#if defined(__SANITIZE_ADDRESS__) /* gcc */
#define FLD_EMU_ASAN 1
#elif defined(__has_feature) /* clang */
#if __has_feature(address_sanitizer)
#define FLD_EMU_ASAN 1
#endif
#endif
#ifdef FLD_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace fld_emu
{

thread_local dim3 t_thread_idx, t_block_idx, t_block_dim, t_grid_dim;

namespace
{

/* Kernels use little stack: scalars, a few 8-float arrays, libm calls. */
constexpr size_t STACK_BYTES = 64 * 1024;
constexpr unsigned MAX_THREADS = 1024;

enum state { READY, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct fiber {
    ucontext_t ctx;
    char *stack;
    state st;
    dim3 idx;
    void *fake_stack; /* AddressSanitizer's, while switched away */
};

struct block_run {
    ucontext_t main{}; /* zeroed: glibc does not fill uc_stack, which ASan reads on swapcontext */
    std::vector<fiber> fibers;
    unsigned nthreads = 0;
    unsigned block_arrived = 0;
    std::vector<unsigned> warp_arrived;
    std::vector<float> exchange; /* one slot per thread for shuffles */
    unsigned cur = 0;
    void (*body)(void *) = nullptr;
    void *ctx = nullptr;
    /* The scheduler's stack, for AddressSanitizer. */
    void *main_fake_stack = nullptr;
    const void *main_bottom = nullptr;
    size_t main_size = 0;
};

void switch_start(void **fake_stack_save, const void *bottom, size_t size)
{
#ifdef FLD_EMU_ASAN
    __sanitizer_start_switch_fiber(fake_stack_save, bottom, size);
#else
    (void)fake_stack_save, (void)bottom, (void)size;
#endif
}

void switch_finish(void *fake_stack_save, const void **bottom_old, size_t *size_old)
{
#ifdef FLD_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_save, bottom_old, size_old);
#else
    (void)fake_stack_save, (void)bottom_old, (void)size_old;
#endif
}

thread_local block_run *t_run;
thread_local int t_warp = 32;
thread_local schedule t_schedule = SCHED_ROUND_ROBIN;
thread_local uint64_t t_launches, t_switches;
thread_local int t_rcp_offset, t_rsqrt_offset;
/* Stacks are kept between launches: a test makes many small ones. */
thread_local std::vector<char *> *t_stacks;

struct stack_pool_owner {
    ~stack_pool_owner()
    {
        if (!t_stacks)
            return;
        for (char *s : *t_stacks)
            free(s);
        delete t_stacks;
        t_stacks = nullptr;
    }
};
thread_local stack_pool_owner t_pool_owner;

bool reserve_stacks(unsigned n)
{
    (void)&t_pool_owner; /* constructs the owner, so the pool is freed at thread exit */
    if (!t_stacks)
        t_stacks = new std::vector<char *>();
    while (t_stacks->size() < n) {
        char *s = static_cast<char *>(malloc(STACK_BYTES));
        if (!s)
            return false;
        t_stacks->push_back(s);
    }
    return true;
}

void fiber_entry()
{
    block_run *r = t_run;
    switch_finish(nullptr, &r->main_bottom, &r->main_size);
    r->body(r->ctx);
    r->fibers[r->cur].st = DONE;
    t_switches++;
    switch_start(nullptr, r->main_bottom, r->main_size); /* this fiber is over */
    swapcontext(&r->fibers[r->cur].ctx, &r->main);
    abort(); /* a finished fiber is never resumed */
}

/* Back to the scheduler from the running fiber. */
void yield()
{
    block_run *r = t_run;
    fiber &f = r->fibers[r->cur];
    t_switches++;
    switch_start(&f.fake_stack, r->main_bottom, r->main_size);
    swapcontext(&f.ctx, &r->main);
    switch_finish(f.fake_stack, &r->main_bottom, &r->main_size);
}

/* Apart from run_block: getcontext returns twice, which -Wclobbered dislikes. */
__attribute__((noinline)) void init_fiber(fiber &f)
{
    f.st = READY;
    f.fake_stack = nullptr;
#ifdef FLD_EMU_ASAN
    __asan_unpoison_memory_region(f.stack, STACK_BYTES);
#endif
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
}

unsigned warp_of(unsigned tid)
{
    return tid / (unsigned)t_warp;
}

unsigned warp_lanes(unsigned warp)
{
    unsigned first = warp * (unsigned)t_warp, n = t_run->nthreads - first;
    return n < (unsigned)t_warp ? n : (unsigned)t_warp;
}

void warp_barrier()
{
    block_run *r = t_run;
    unsigned w = warp_of(r->cur);
    r->fibers[r->cur].st = AT_WARP_BARRIER;
    if (++r->warp_arrived[w] == warp_lanes(w)) {
        r->warp_arrived[w] = 0;
        unsigned first = w * (unsigned)t_warp;
        for (unsigned i = first; i < first + warp_lanes(w); i++)
            r->fibers[i].st = READY;
    }
    yield();
}

/* Runs one block; 0 or FLD_EMU_ERR_BARRIER. */
int run_block(block_run *r)
{
    for (unsigned i = 0; i < r->nthreads; i++)
        init_fiber(r->fibers[i]);
    r->block_arrived = 0;
    for (unsigned &a : r->warp_arrived)
        a = 0;
    const unsigned n = r->nthreads;
    unsigned last = t_schedule == SCHED_REVERSE ? 0 : n - 1;
    for (;;) {
        /* The next ready fiber: after the last one run, in the schedule's
           direction, or the lowest-numbered one. */
        unsigned i = 0, k = 0;
        for (; k < n; k++) {
            if (t_schedule == SCHED_LOWEST_FIRST)
                i = k;
            else if (t_schedule == SCHED_REVERSE)
                i = (last + n - 1 - k) % n;
            else
                i = (last + 1 + k) % n;
            if (r->fibers[i].st == READY)
                break;
        }
        if (k == n)
            break;
        last = i;
        r->cur = i;
        t_thread_idx = r->fibers[i].idx;
        t_switches++;
        switch_start(&r->main_fake_stack, r->fibers[i].stack, STACK_BYTES);
        swapcontext(&r->main, &r->fibers[i].ctx);
        switch_finish(r->main_fake_stack, nullptr, nullptr);
    }
    for (unsigned i = 0; i < n; i++)
        if (r->fibers[i].st != DONE)
            return FLD_EMU_ERR_BARRIER;
    return FLD_EMU_OK;
}

} // namespace

int launch_fn(dim3 grid, dim3 block, void (*body)(void *), void *ctx)
{
    t_launches++;
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || nthreads == 0 || nthreads > MAX_THREADS ||
        grid.y > 65535 || grid.z > 65535)
        return FLD_EMU_ERR_LAUNCH_CONFIG;
    if (t_run) /* a launch from inside a kernel: not supported */
        return FLD_EMU_ERR_LAUNCH_CONFIG;
    if (!reserve_stacks((unsigned)nthreads))
        return FLD_EMU_ERR_OUT_OF_MEMORY;

    block_run run;
    run.nthreads = (unsigned)nthreads;
    run.body = body;
    run.ctx = ctx;
    run.fibers.resize(nthreads);
    run.exchange.assign(nthreads, 0.0f);
    run.warp_arrived.assign((nthreads + (unsigned)t_warp - 1) / (unsigned)t_warp, 0);
    unsigned n = 0;
    for (unsigned z = 0; z < block.z; z++)
        for (unsigned y = 0; y < block.y; y++)
            for (unsigned x = 0; x < block.x; x++, n++) {
                run.fibers[n].stack = (*t_stacks)[n];
                run.fibers[n].idx = dim3(x, y, z);
            }

    t_block_dim = block;
    t_grid_dim = grid;
    t_run = &run;
    int rc = FLD_EMU_OK;
    for (unsigned z = 0; z < grid.z && rc == FLD_EMU_OK; z++)
        for (unsigned y = 0; y < grid.y && rc == FLD_EMU_OK; y++)
            for (unsigned x = 0; x < grid.x && rc == FLD_EMU_OK; x++) {
                t_block_idx = dim3(x, y, z);
                rc = run_block(&run);
            }
    t_run = nullptr;
    return rc;
}

void syncthreads()
{
    block_run *r = t_run;
    r->fibers[r->cur].st = AT_BLOCK_BARRIER;
    if (++r->block_arrived == r->nthreads) {
        r->block_arrived = 0;
        for (fiber &f : r->fibers)
            f.st = READY;
    }
    yield();
}

float shfl_xor(float v, int mask)
{
    block_run *r = t_run;
    const unsigned me = r->cur, w = warp_of(me), first = w * (unsigned)t_warp;
    const unsigned lane = me - first, src = lane ^ (unsigned)mask;
    r->exchange[me] = v;
    warp_barrier(); /* every lane has written */
    float got = src < warp_lanes(w) ? r->exchange[first + src] : v;
    warp_barrier(); /* every lane has read before the slots are reused */
    return got;
}

int warp_size()
{
    return t_warp;
}

void set_warp_size(int lanes)
{
    t_warp = lanes > 0 ? lanes : 32;
}

void set_schedule(schedule order)
{
    t_schedule = order;
}

/* r moved by units in its last place (its bits as an integer) */
static float moved_by(float r, int units)
{
    uint32_t u;
    memcpy(&u, &r, sizeof u);
    u += (uint32_t)units;
    float moved;
    memcpy(&moved, &u, sizeof moved);
    return moved;
}

float rcp_approx(float b)
{
    return moved_by(1.0f / b, t_rcp_offset);
}

void set_rcp_offset(int units)
{
    t_rcp_offset = units;
}

float rsqrt_approx(float x)
{
    /* 1 / sqrt(x) in double, rounded to float32 */
    return moved_by((float)(1.0 / sqrt((double)x)), t_rsqrt_offset);
}

void set_rsqrt_offset(int units)
{
    t_rsqrt_offset = units;
}

uint64_t launches()
{
    return t_launches;
}

uint64_t switches()
{
    return t_switches;
}

} // namespace fld_emu
