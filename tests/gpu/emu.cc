/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU emulator's scheduler (see plugins/shared/gpu/gpu_emu.h): fibers with their own
 * stacks, a block barrier and per-warp barriers, all on the calling OS thread.
 */
#include "gpu_emu.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <vector>

/* Under AddressSanitizer the stack switches are announced to it, and a
   reused fiber stack is unpoisoned when its fiber starts afresh (one
   abandoned at a barrier never unwound its frames). */
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

/* Under valgrind the fiber stacks are registered as stacks: a switch
   between one and a thread's own stack nearby would otherwise look like a
   frame pushed or popped, and valgrind would mark the memory between them
   (the thread's TLS among it) inaccessible. Outside valgrind these are a
   few instructions; without valgrind's header, nothing. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define FLD_EMU_VALGRIND 1
#endif
#endif

/*
 * Under ThreadSanitizer every fiber is a TSan fiber, and the switches
 * between fibers synchronise nothing, so TSan sees a block's threads as
 * running at once. The kernels' accesses to shared and global memory are
 * then ordered only by what orders them on a GPU: the block barrier, and
 * the launch (the host's writes before it, its reads after it; blocks run
 * one after another). Two unordered accesses to the same bytes, one of them
 * a write, are reported as a data race whichever fiber the schedule ran
 * first: a missing barrier, a shared slot written again before every warp
 * has read it, two threads writing one output. Shuffles exchange values
 * but order no memory (CUDA's independent thread scheduling needs a
 * __syncwarp for that, which the kernels do not use). The emulator's own
 * bookkeeping, which the fibers and the scheduler share, is ignored by TSan.
 */
#if defined(__SANITIZE_THREAD__) /* gcc */
#define FLD_EMU_TSAN 1
#elif defined(__has_feature) /* clang */
#if __has_feature(thread_sanitizer)
#define FLD_EMU_TSAN 1
#endif
#endif
#ifdef FLD_EMU_TSAN
#include <sanitizer/tsan_interface.h>
/* exported by the TSan runtimes of gcc and clang, declared by neither header */
extern "C" void __tsan_ignore_thread_begin(void);
extern "C" void __tsan_ignore_thread_end(void);
#endif

/*
 * The direct switch: swapcontext saves and restores the signal mask with a
 * system call at every switch, which made the switches most of a kernel
 * test's time. Fibers never touch the signal mask, so on x86-64 a switch
 * pushes the callee-saved integer registers on the stack it leaves and pops
 * them from the one it enters (the x86-64 ABI saves no vector register
 * across a call). MXCSR and the x87 control word are left as they are:
 * kernels do not change them, so fibers run in the thread's floating-point
 * environment. Elsewhere (or by set_context_switch) fibers use ucontext.
 */
#if defined(__x86_64__) && defined(__linux__)
#define FLD_EMU_DIRECT_SWITCH 1
/* Saves the registers on the current stack and its pointer in *save, then
   continues on the stack to, as its last direct switch left it. */
extern "C" __attribute__((visibility("hidden"))) void fld_emu_switch_stack(void **save, void *to);
__asm__(".text\n"
        ".globl fld_emu_switch_stack\n"
        ".hidden fld_emu_switch_stack\n"
        ".type fld_emu_switch_stack, @function\n"
        "fld_emu_switch_stack:\n"
        ".cfi_startproc\n"
        "pushq %rbp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %rbx\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r12\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r13\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r14\n"
        ".cfi_adjust_cfa_offset 8\n"
        "pushq %r15\n"
        ".cfi_adjust_cfa_offset 8\n"
        "movq %rsp, (%rdi)\n"
        "movq %rsi, %rsp\n" /* the same layout on the stack entered */
        "popq %r15\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r14\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r13\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %r12\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rbx\n"
        ".cfi_adjust_cfa_offset -8\n"
        "popq %rbp\n"
        ".cfi_adjust_cfa_offset -8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size fld_emu_switch_stack, .-fld_emu_switch_stack\n");
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

/*
 * A fiber runs thread n of every block of every launch on its OS thread:
 * it loops, calling the launch's body and then waiting (DONE) until the
 * scheduler resumes it for the next block, so a block costs no fiber set-up.
 * One abandoned at a barrier (a failed launch) starts afresh at its next use.
 */
struct fiber {
    char *stack = nullptr;
    state st = DONE;
    dim3 idx;
    bool live = false;           /* started: suspended in fiber_main, resumable */
    bool direct = false;         /* switched by fld_emu_switch_stack, else ucontext */
    void *sp = nullptr;          /* the direct switch's saved stack pointer */
    ucontext_t uc{};             /* zeroed: glibc does not fill uc_stack, which ASan reads */
    void *fake_stack = nullptr;  /* AddressSanitizer's, while switched away */
    unsigned valgrind_stack = 0; /* valgrind's id of the stack */
    void *tsan = nullptr;        /* ThreadSanitizer's context of the fiber */
};

struct block_run {
    std::vector<fiber *> fibers;
    unsigned nthreads = 0;
    unsigned block_arrived = 0;
    std::vector<unsigned> warp_arrived;
    std::vector<float> exchange; /* one slot per thread for shuffles */
    /* Bit i: fiber i is READY (kept by set_state; the scheduler searches it a word at a time) */
    std::vector<uint64_t> ready;
    unsigned cur = 0;
    unsigned barrier_gen = 0; /* block barriers passed: its parity picks t_barrier_sync */
    void (*body)(void *) = nullptr;
    void *ctx = nullptr;
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

/*
 * ThreadSanitizer's view (see FLD_EMU_TSAN), no-ops without it. The fibers'
 * and the scheduler's bookkeeping runs between tsan_ignore(true) and
 * tsan_ignore(false); the orders a GPU gives are releases and acquires on
 * these addresses:
 *   t_start_sync     the scheduler releases it as a block starts, each
 *                    fiber acquires it as it starts the block's body
 *   t_done_sync      each fiber releases it as it ends the body or arrives
 *                    at a barrier (so a fiber abandoned there is ordered
 *                    too), the scheduler acquires it after the block
 *   t_barrier_sync   a block barrier: released by each fiber arriving,
 *                    acquired by each leaving. Two, taken by the barrier's
 *                    parity: a fiber may leave a barrier and arrive at the
 *                    next before another has left the first, and that one
 *                    must not acquire what was released at the next.
 */
thread_local char t_start_sync, t_done_sync, t_barrier_sync[2];
thread_local void *t_main_tsan;

void tsan_ignore(bool on)
{
#ifdef FLD_EMU_TSAN
    if (on)
        __tsan_ignore_thread_begin();
    else
        __tsan_ignore_thread_end();
#else
    (void)on;
#endif
}

void tsan_release(void *addr)
{
#ifdef FLD_EMU_TSAN
    __tsan_release(addr);
#else
    (void)addr;
#endif
}

void tsan_acquire(void *addr)
{
#ifdef FLD_EMU_TSAN
    __tsan_acquire(addr);
#else
    (void)addr;
#endif
}

/* Just before a stack switch: TSan's context becomes to's, with no order
   between the two. */
void tsan_switch(void *to)
{
#ifdef FLD_EMU_TSAN
    __tsan_switch_to_fiber(to, __tsan_switch_to_fiber_no_sync);
#else
    (void)to;
#endif
}

/* Ends the ignore that a suspended fiber's TSan context holds: it waits in
   the emulator's code, where its context ignores accesses once (at a
   barrier, or after its last body). Done in f's context, entered for the
   purpose (TSan's current context is all it follows; the stack stays the
   scheduler's). */
#ifdef FLD_EMU_TSAN
void tsan_end_ignore_of(fiber &f)
{
    void *self = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f.tsan, __tsan_switch_to_fiber_no_sync);
    __tsan_ignore_thread_end();
    __tsan_switch_to_fiber(self, __tsan_switch_to_fiber_no_sync);
}
#endif

/* Fiber f's TSan context as it starts afresh: a new one, or the one it
   had (its own accesses stay in order) with the ignore it was left in
   ended, as fiber_main begins its own. */
void tsan_start_context(fiber &f)
{
#ifdef FLD_EMU_TSAN
    if (f.tsan)
        tsan_end_ignore_of(f);
    else
        f.tsan = __tsan_create_fiber(0);
#else
    (void)f;
#endif
}

/* TSan reports a context that ends while ignoring accesses. */
void tsan_drop_context(fiber &f)
{
#ifdef FLD_EMU_TSAN
    if (!f.tsan)
        return;
    tsan_end_ignore_of(f);
    __tsan_destroy_fiber(f.tsan);
    f.tsan = nullptr;
#else
    (void)f;
#endif
}

thread_local block_run *t_run;
thread_local int t_warp = 32;
thread_local schedule t_schedule = SCHED_ROUND_ROBIN;
#ifdef FLD_EMU_DIRECT_SWITCH
thread_local context_switch t_switch = SWITCH_DIRECT;
#else
thread_local context_switch t_switch = SWITCH_UCONTEXT;
#endif
thread_local uint64_t t_launches, t_switches;
thread_local int t_rcp_offset, t_rsqrt_offset;
/* The scheduler's side of the switches: its context and, for
   AddressSanitizer, its stack. */
thread_local void *t_main_sp;
thread_local ucontext_t t_main_uc;
thread_local void *t_main_fake_stack;
thread_local const void *t_main_bottom;
thread_local size_t t_main_size;
/* Fibers (and their stacks) are kept between launches: a test makes many small ones. */
thread_local std::vector<fiber *> *t_pool;

void free_pool()
{
    if (!t_pool)
        return;
    for (fiber *f : *t_pool) {
#ifdef FLD_EMU_VALGRIND
        VALGRIND_STACK_DEREGISTER(f->valgrind_stack);
#endif
        tsan_drop_context(*f);
        free(f->stack);
        delete f;
    }
    delete t_pool;
    t_pool = nullptr;
}

struct fiber_pool_owner {
    ~fiber_pool_owner()
    {
        free_pool();
    }
};
thread_local fiber_pool_owner t_pool_owner;

bool reserve_fibers(unsigned n)
{
    (void)&t_pool_owner; /* constructs the owner, so the pool is freed at thread exit */
    if (!t_pool)
        t_pool = new std::vector<fiber *>();
    while (t_pool->size() < n) {
        char *s = static_cast<char *>(malloc(STACK_BYTES));
        if (!s)
            return false;
        fiber *f = new fiber();
        f->stack = s;
#ifdef FLD_EMU_VALGRIND
        f->valgrind_stack = VALGRIND_STACK_REGISTER(s, s + STACK_BYTES);
#endif
        t_pool->push_back(f);
    }
    return true;
}

/* From the scheduler into fiber f, until it switches back. */
void enter_fiber(fiber &f)
{
    t_switches++;
    switch_start(&t_main_fake_stack, f.stack, STACK_BYTES);
    tsan_switch(f.tsan);
#ifdef FLD_EMU_DIRECT_SWITCH
    if (f.direct)
        fld_emu_switch_stack(&t_main_sp, f.sp);
    else
#endif
        swapcontext(&t_main_uc, &f.uc);
    switch_finish(t_main_fake_stack, nullptr, nullptr);
}

/* From the running fiber f back to the scheduler, until it is resumed. */
void leave_fiber(fiber &f)
{
    t_switches++;
    switch_start(&f.fake_stack, t_main_bottom, t_main_size);
    tsan_switch(t_main_tsan);
#ifdef FLD_EMU_DIRECT_SWITCH
    if (f.direct)
        fld_emu_switch_stack(&f.sp, t_main_sp);
    else
#endif
        swapcontext(&f.uc, &t_main_uc);
    switch_finish(f.fake_stack, &t_main_bottom, &t_main_size);
}

/* Fiber i's state, and its bit in r->ready with it. */
void set_state(block_run *r, unsigned i, state st)
{
    const uint64_t bit = (uint64_t)1 << (i % 64);
    r->fibers[i]->st = st;
    r->ready[i / 64] = st == READY ? r->ready[i / 64] | bit : r->ready[i / 64] & ~bit;
}

/* The bits of r->ready's word w that stand for fibers in [from, to). */
uint64_t ready_bits(const block_run *r, unsigned w, unsigned from, unsigned to)
{
    const unsigned lo = w * 64;
    uint64_t bits = r->ready[w];
    if (from > lo)
        bits &= ~(uint64_t)0 << (from - lo);
    if (to < lo + 64)
        bits &= ((uint64_t)1 << (to - lo)) - 1;
    return bits;
}

/* The lowest / highest-numbered ready fiber in [from, to), or -1. */
int lowest_ready(const block_run *r, unsigned from, unsigned to)
{
    for (unsigned w = from / 64; from < to && w * 64 < to; w++)
        if (uint64_t bits = ready_bits(r, w, from, to))
            return (int)(w * 64 + (unsigned)__builtin_ctzll(bits));
    return -1;
}

int highest_ready(const block_run *r, unsigned from, unsigned to)
{
    if (from >= to)
        return -1;
    for (unsigned w = (to - 1) / 64 + 1; w-- > from / 64;)
        if (uint64_t bits = ready_bits(r, w, from, to))
            return (int)(w * 64 + 63 - (unsigned)__builtin_clzll(bits));
    return -1;
}

/* Every fiber's one frame at its stack's top. Only the body's accesses
   are TSan's business (see FLD_EMU_TSAN). */
void fiber_main()
{
    tsan_ignore(true);
    switch_finish(nullptr, &t_main_bottom, &t_main_size);
    for (;;) {
        block_run *r = t_run; /* the launch that resumed it */
        void (*body)(void *) = r->body;
        void *ctx = r->ctx;
        tsan_acquire(&t_start_sync);
        tsan_ignore(false);
        body(ctx);
        tsan_ignore(true);
        tsan_release(&t_done_sync);
        set_state(r, r->cur, DONE);
        leave_fiber(*r->fibers[r->cur]);
    }
}

/* Back to the scheduler from the running fiber, which waits at a barrier. */
void yield()
{
    block_run *r = t_run;
    leave_fiber(*r->fibers[r->cur]);
}

/* A fiber that starts at fiber_main on its next switch. Apart from
   run_block: getcontext returns twice, which -Wclobbered dislikes. */
__attribute__((noinline)) void start_fiber(fiber &f)
{
    f.fake_stack = nullptr;
    f.live = true;
    tsan_start_context(f);
    f.direct = t_switch == SWITCH_DIRECT;
#ifdef FLD_EMU_ASAN
    __asan_unpoison_memory_region(f.stack, STACK_BYTES);
#endif
#ifdef FLD_EMU_DIRECT_SWITCH
    if (f.direct) {
        /* What fld_emu_switch_stack pops, from the top: no return address
           for fiber_main (which never returns; it ends a backtrace), its
           address to return to, and six zeroed registers. fiber_main starts
           with the stack pointer 8 below a 16-byte boundary, as after a
           call. */
        uint64_t *p = reinterpret_cast<uint64_t *>(
            (reinterpret_cast<uintptr_t>(f.stack) + STACK_BYTES) & ~static_cast<uintptr_t>(15));
        *--p = 0;
        *--p = reinterpret_cast<uintptr_t>(&fiber_main);
        for (int i = 0; i < 6; i++)
            *--p = 0;
        f.sp = p;
        return;
    }
#endif
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack;
    f.uc.uc_stack.ss_size = STACK_BYTES;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_main, 0);
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
    tsan_release(&t_done_sync);
    unsigned w = warp_of(r->cur);
    set_state(r, r->cur, AT_WARP_BARRIER);
    if (++r->warp_arrived[w] == warp_lanes(w)) {
        r->warp_arrived[w] = 0;
        unsigned first = w * (unsigned)t_warp;
        for (unsigned i = first; i < first + warp_lanes(w); i++)
            set_state(r, i, READY);
    }
    yield();
}

/* Runs one block; 0 or FLD_EMU_ERR_BARRIER. */
int run_block(block_run *r)
{
    const bool direct = t_switch == SWITCH_DIRECT;
    const unsigned n = r->nthreads;
    for (unsigned i = 0; i < n; i++) {
        fiber *f = r->fibers[i];
        /* one waiting after its last body is resumed where it waits */
        if (!(f->live && f->direct == direct && f->st == DONE))
            start_fiber(*f);
        set_state(r, i, READY);
    }
    r->block_arrived = 0;
    for (unsigned &a : r->warp_arrived)
        a = 0;
    tsan_release(&t_start_sync);
    unsigned last = t_schedule == SCHED_REVERSE ? 0 : n - 1;
    for (;;) {
        /* The next ready fiber: after the last one run, in the schedule's
           direction (wrapping around), or the lowest-numbered one. */
        int next;
        if (t_schedule == SCHED_LOWEST_FIRST)
            next = lowest_ready(r, 0, n);
        else if (t_schedule == SCHED_REVERSE)
            next = (next = highest_ready(r, 0, last)) >= 0 ? next : highest_ready(r, last, n);
        else
            next = (next = lowest_ready(r, last + 1, n)) >= 0 ? next : lowest_ready(r, 0, last + 1);
        if (next < 0)
            break;
        const unsigned i = (unsigned)next;
        last = i;
        r->cur = i;
        t_thread_idx = r->fibers[i]->idx;
        enter_fiber(*r->fibers[i]);
    }
    tsan_acquire(&t_done_sync);
    int rc = FLD_EMU_OK;
    for (fiber *f : r->fibers)
        if (f->st != DONE) {
            f->live = false; /* abandoned at a barrier: starts afresh at its next use */
            rc = FLD_EMU_ERR_BARRIER;
        }
    return rc;
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
    tsan_ignore(true);
    if (!reserve_fibers((unsigned)nthreads)) {
        tsan_ignore(false);
        return FLD_EMU_ERR_OUT_OF_MEMORY;
    }

    block_run run;
    run.nthreads = (unsigned)nthreads;
    run.body = body;
    run.ctx = ctx;
    run.fibers.assign(t_pool->begin(), t_pool->begin() + (ptrdiff_t)nthreads);
    run.exchange.assign(nthreads, 0.0f);
    run.ready.assign((nthreads + 63) / 64, 0);
    run.warp_arrived.assign((nthreads + (unsigned)t_warp - 1) / (unsigned)t_warp, 0);
    unsigned n = 0;
    for (unsigned z = 0; z < block.z; z++)
        for (unsigned y = 0; y < block.y; y++)
            for (unsigned x = 0; x < block.x; x++, n++)
                run.fibers[n]->idx = dim3(x, y, z);

    t_block_dim = block;
    t_grid_dim = grid;
    t_run = &run;
#ifdef FLD_EMU_TSAN
    t_main_tsan = __tsan_get_current_fiber();
#endif
    int rc = FLD_EMU_OK;
    for (unsigned z = 0; z < grid.z && rc == FLD_EMU_OK; z++)
        for (unsigned y = 0; y < grid.y && rc == FLD_EMU_OK; y++)
            for (unsigned x = 0; x < grid.x && rc == FLD_EMU_OK; x++) {
                t_block_idx = dim3(x, y, z);
                rc = run_block(&run);
            }
    t_run = nullptr;
    tsan_ignore(false);
    return rc;
}

void syncthreads()
{
    tsan_ignore(true);
    block_run *r = t_run;
    const unsigned gen = r->barrier_gen;
    tsan_release(&t_barrier_sync[gen % 2]);
    tsan_release(&t_done_sync);
    set_state(r, r->cur, AT_BLOCK_BARRIER);
    if (++r->block_arrived == r->nthreads) {
        r->block_arrived = 0;
        r->barrier_gen++;
        for (unsigned i = 0; i < r->nthreads; i++)
            set_state(r, i, READY);
    }
    yield();
    tsan_acquire(&t_barrier_sync[gen % 2]);
    tsan_ignore(false);
}

float shfl_xor(float v, int mask)
{
    tsan_ignore(true);
    block_run *r = t_run;
    const unsigned me = r->cur, w = warp_of(me), first = w * (unsigned)t_warp;
    const unsigned lane = me - first, src = lane ^ (unsigned)mask;
    r->exchange[me] = v;
    warp_barrier(); /* every lane has written */
    float got = src < warp_lanes(w) ? r->exchange[first + src] : v;
    warp_barrier(); /* every lane has read before the slots are reused */
    tsan_ignore(false);
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

bool set_context_switch(context_switch kind)
{
#ifndef FLD_EMU_DIRECT_SWITCH
    if (kind == SWITCH_DIRECT)
        return false;
#endif
    t_switch = kind;
    return true;
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

bool checks_races()
{
#ifdef FLD_EMU_TSAN
    return true;
#else
    return false;
#endif
}

void free_fibers()
{
    if (!t_run)
        free_pool();
}

void unchecked_reads(bool on)
{
    tsan_ignore(on);
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
