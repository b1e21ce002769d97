/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calls in flight: which threads are inside the library now, so that
 * fld_shutdown() frees nothing a call still uses.
 *
 * Every public entry point that uses the library's state runs between
 * fld__call_enter() and fld__call_leave() (FLD_CALL_SCOPE() does both for
 * a whole function). A thread's count lives in a slot of a fixed table,
 * found by hashing the thread pointer: entering costs a register read, a
 * multiply, a compare and a store, leaving a store; no atomic
 * read-modify-write and no shared cache line, so the dispatch fast path
 * stays cheap and scales across threads.
 *
 * The handshake with fld_shutdown() is asymmetric (as in userspace RCU): a
 * thread stores its count and then reads the gates (fld__ready, the
 * catalog's op pointers, fld__generation) with only a compiler barrier in
 * between; fld_shutdown() closes the gates, runs fld__inflight_barrier()
 * (membarrier(2): a full memory barrier on every running thread of the
 * process), then reads every count. So either it sees the thread's count
 * and waits for it, or the thread sees a closed gate and touches nothing.
 */
#ifndef FLD_CORE_INFLIGHT_H
#define FLD_CORE_INFLIGHT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define FLD_INFLIGHT_SLOTS 256 /* a power of two */

/*
 * One thread's count. Slots of the table, and more for threads past it
 * (claimed, never freed).
 *
 * The count is one word that only its owner writes: the low half is how many
 * library calls the owner is inside now (nested calls count), the high half
 * how many times it has come out of its outermost call (wrapping). A waiting
 * fld_shutdown() counts a thread done when it sees it outside, or when the
 * high half has moved since it first looked: either way the thread was
 * outside after the gates closed, and its later calls meet them. A thread
 * that calls in a loop is inside nearly all the time, so a sampled zero alone
 * would rarely be seen.
 */
#define FLD_INFLIGHT_DEPTH(word) ((uint32_t)(word))
#define FLD_INFLIGHT_EXITS(word) ((uint32_t)((word) >> 32))

struct fld_inflight_slot {
    _Atomic uintptr_t owner;        /* the owning thread's pointer; 0 when free */
    _Atomic uint64_t count;         /* depth | exits << 32; written by the owner only */
    struct fld_inflight_slot *next; /* the extra slots' list */
    /* fld__inflight_wait()'s own marks: 0 not looked at yet, 1 watched since
     * exits were `watch_exits`, 2 done. */
    _Atomic unsigned char watch;
    _Atomic uint32_t watch_exits;
} __attribute__((aligned(64)));

/* Hidden in the declaration too: addressed directly, not through the GOT. */
extern __attribute__((
    visibility("hidden"))) struct fld_inflight_slot fld__inflight[FLD_INFLIGHT_SLOTS];

/* An identity of the calling thread that is cheap to read (the thread pointer). */
static inline uintptr_t fld__thread_id(void)
{
#if defined(__x86_64__) || defined(__aarch64__) || defined(__i386__) || defined(__riscv)
    return (uintptr_t)__builtin_thread_pointer();
#else
    return (uintptr_t)pthread_self();
#endif
}

static inline unsigned fld__inflight_hash(uintptr_t self)
{
    return (unsigned)(((uint64_t)self * 0x9e3779b97f4a7c15ull) >> 56) & (FLD_INFLIGHT_SLOTS - 1);
}

/* The calling thread's slot when its hash slot is another thread's; claimed on first use. */
struct fld_inflight_slot *fld__inflight_claim(uintptr_t self);

/*
 * How deep calls of ops may nest on one thread (a kernel that calls an op
 * calls in again). A call deeper than this fails with FLD_ESTATE
 * (fld__call_too_deep()) instead of running the thread out of stack: an
 * implementation that calls the op it serves, directly or through others,
 * ends there, as a recursion in Python ends in RecursionError.
 */
#define FLD_MAX_CALL_DEPTH 64

/* Counts the calling thread in; *depth is how many calls it is inside now, this one included. */
static inline struct fld_inflight_slot *fld__call_enter_depth(uint32_t *depth)
{
    const uintptr_t self = fld__thread_id();
    struct fld_inflight_slot *s = &fld__inflight[fld__inflight_hash(self)];
    if (__builtin_expect(atomic_load_explicit(&s->owner, memory_order_relaxed) != self, 0))
        s = fld__inflight_claim(self);
    uint64_t n = atomic_load_explicit(&s->count, memory_order_relaxed);
    atomic_store_explicit(&s->count, n + 1, memory_order_relaxed);
    /* The gates are read after this store; fld__inflight_wait()'s barrier orders it. */
    atomic_signal_fence(memory_order_seq_cst);
    *depth = FLD_INFLIGHT_DEPTH(n + 1);
    return s;
}

static inline struct fld_inflight_slot *fld__call_enter(void)
{
    uint32_t depth;
    return fld__call_enter_depth(&depth);
}

static inline void fld__call_leave(struct fld_inflight_slot *s)
{
    uint64_t n = atomic_load_explicit(&s->count, memory_order_relaxed) - 1;
    /* Out of the outermost call: one more exit (no branch on the hot path). */
    n += (uint64_t)(FLD_INFLIGHT_DEPTH(n) == 0) << 32;
    atomic_store_explicit(&s->count, n, memory_order_release);
}

static inline void fld__call_scope_end(struct fld_inflight_slot **s)
{
    fld__call_leave(*s);
}

/* Counts the rest of the enclosing function as a call in flight. */
#define FLD_CALL_SCOPE()                                                                           \
    struct fld_inflight_slot *fld__call_scope_                                                     \
        __attribute__((cleanup(fld__call_scope_end), unused)) = fld__call_enter()

/* How many calls the calling thread is inside now (0 outside the library). */
unsigned fld__inflight_mine(void);

/*
 * After the gates are closed: waits until every other thread that was
 * inside a call has been outside once since (seen outside, or its exits
 * moved: a later call of it meets the closed gates), at most timeout seconds. Returns 0, or how
 * many threads were still inside when the time was up. *barrier_err (when not NULL) is 0, or the
 * errno of membarrier(2) when a pause had to stand in for it.
 */
unsigned fld__inflight_wait(double timeout, int *barrier_err);

/* In the child after fork(): only the calling thread survives. */
void fld__inflight_after_fork(void);

#endif
