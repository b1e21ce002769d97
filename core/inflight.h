/*
 * Calls in flight: which threads are inside the library now, so that
 * fld_shutdown() frees nothing a call still uses.
 *
 * Every public entry point that uses the library's state runs between
 * fld__call_enter() and fld__call_leave() (FLD_CALL_SCOPE() does both for
 * a whole function). A thread's count lives in a slot of a fixed table,
 * found by hashing the thread pointer: entering and leaving cost a register
 * read, a multiply and a load, an increment and a store each way, no atomic
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
 * A slot's word: the low FLD_INFLIGHT_DEPTH_BITS count the calls its owner
 * is inside now (nested calls count), the bits above count the times that
 * number went back to 0. A shutdown that saw a thread inside a call waits
 * until it sees it outside, or sees the second count move (it was outside
 * meanwhile), so a thread that calls in a tight loop is not waited for
 * forever.
 */
#define FLD_INFLIGHT_DEPTH_BITS 16
#define FLD_INFLIGHT_DEPTH_MASK ((UINT64_C(1) << FLD_INFLIGHT_DEPTH_BITS) - 1)

struct fld_inflight_slot {
    _Atomic uintptr_t owner; /* the owning thread's pointer; 0 when free */
    _Atomic uint64_t calls;  /* written by the owner only (see above) */
    bool shared;             /* the overflow slot: counted with atomic read-modify-writes */
} __attribute__((aligned(64)));

extern struct fld_inflight_slot fld__inflight[FLD_INFLIGHT_SLOTS];

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

/* The calling thread's slot, claimed on its first call (or the overflow slot). */
struct fld_inflight_slot *fld__inflight_claim(uintptr_t self);

static inline struct fld_inflight_slot *fld__call_enter(void)
{
    const uintptr_t self = fld__thread_id();
    struct fld_inflight_slot *s = &fld__inflight[fld__inflight_hash(self)];
    if (__builtin_expect(atomic_load_explicit(&s->owner, memory_order_relaxed) != self, 0))
        s = fld__inflight_claim(self);
    if (__builtin_expect(s->shared, 0)) {
        atomic_fetch_add(&s->calls, 1u);
    } else {
        uint64_t w = atomic_load_explicit(&s->calls, memory_order_relaxed);
        atomic_store_explicit(&s->calls, w + 1, memory_order_relaxed);
    }
    /* The gates are read after this store; fld__inflight_barrier() orders it. */
    atomic_signal_fence(memory_order_seq_cst);
    return s;
}

static inline void fld__call_leave(struct fld_inflight_slot *s)
{
    if (__builtin_expect(s->shared, 0)) {
        atomic_fetch_sub(&s->calls, 1u);
        return;
    }
    uint64_t w = atomic_load_explicit(&s->calls, memory_order_relaxed);
    /* depth - 1, and one more return to 0 when depth was 1 (no branch) */
    uint64_t back_to_zero = (uint64_t)((w & FLD_INFLIGHT_DEPTH_MASK) == 1)
                            << FLD_INFLIGHT_DEPTH_BITS;
    atomic_store_explicit(&s->calls, w - 1 + back_to_zero, memory_order_release);
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
 * After the gates are closed: waits until no other thread is inside a call,
 * at most timeout seconds. Returns 0, or how many threads were still
 * inside when the time was up.
 */
unsigned fld__inflight_wait(double timeout);

/* In the child after fork(): only the calling thread survives. */
void fld__inflight_after_fork(void);

#endif
