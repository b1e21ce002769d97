/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calls in flight (see inflight.h): the slot table, claiming a slot for a
 * thread, the barrier and the wait of fld_shutdown().
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#endif

#include <fldispatch/fldispatch.h>

#include "inflight.h"

struct fld_inflight_slot fld__inflight[FLD_INFLIGHT_SLOTS];

/* Slots for threads that found the table full: pushed once, reused, never freed. */
static _Atomic(struct fld_inflight_slot *) extras;

/* The calling thread's slot, once found (the slow path's shortcut). */
static _Thread_local struct fld_inflight_slot *tls_slot;

static pthread_key_t slot_key;
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;
static int slot_key_status = -1;

/* Every slot once: the table, then the extras. */
static struct fld_inflight_slot *next_slot(struct fld_inflight_slot *s, unsigned *index)
{
    if (*index + 1 < FLD_INFLIGHT_SLOTS)
        return &fld__inflight[++*index];
    if (*index + 1 == FLD_INFLIGHT_SLOTS) {
        ++*index;
        return atomic_load(&extras);
    }
    return s->next;
}
#define FOR_EACH_SLOT(s)                                                                           \
    for (unsigned s##_i = 0, s##_once = 1; s##_once; s##_once = 0)                                 \
        for (struct fld_inflight_slot *s = fld__inflight; s; s = next_slot(s, &s##_i))

/* At thread exit: the slot goes back for the next thread. */
static void release_slot(void *arg)
{
    struct fld_inflight_slot *s = arg;
    atomic_store_explicit(&s->count, 0, memory_order_relaxed);
    atomic_store_explicit(&s->owner, 0, memory_order_release);
    tls_slot = NULL;
}

static void make_slot_key(void)
{
    slot_key_status = pthread_key_create(&slot_key, release_slot);
}

static bool take(struct fld_inflight_slot *s, uintptr_t self)
{
    uintptr_t free_owner = 0;
    return atomic_load_explicit(&s->owner, memory_order_relaxed) == 0 &&
           atomic_compare_exchange_strong(&s->owner, &free_owner, self);
}

/* A free slot for self: the table from its hash on, then an extra one. */
static struct fld_inflight_slot *claim_new(uintptr_t self)
{
    const unsigned h = fld__inflight_hash(self);
    for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
        struct fld_inflight_slot *s = &fld__inflight[(h + i) & (FLD_INFLIGHT_SLOTS - 1)];
        if (take(s, self))
            return s;
    }
    for (struct fld_inflight_slot *s = atomic_load(&extras); s; s = s->next)
        if (take(s, self))
            return s;
    struct fld_inflight_slot *s = aligned_alloc(64, sizeof *s);
    if (!s)
        return NULL;
    memset(s, 0, sizeof *s);
    atomic_init(&s->owner, self);
    struct fld_inflight_slot *head = atomic_load(&extras);
    do
        s->next = head;
    while (!atomic_compare_exchange_weak(&extras, &head, s));
    return s;
}

struct fld_inflight_slot *fld__inflight_claim(uintptr_t self)
{
    struct fld_inflight_slot *s = tls_slot;
    if (s && atomic_load_explicit(&s->owner, memory_order_relaxed) == self)
        return s; /* its hash slot belongs to another thread */
    pthread_once(&slot_key_once, make_slot_key);
    s = claim_new(self);
    if (!s || slot_key_status != 0 || pthread_setspecific(slot_key, s) != 0) {
        /* Cannot be counted: calls are still made, but a shutdown cannot see
         * them. Out of memory or keys only; logged once. */
        static _Atomic bool said;
        if (!atomic_exchange(&said, true))
            fprintf(stderr, "[fldispatch] out of memory tracking calls in flight; fld_shutdown() "
                            "cannot wait for this thread's calls\n");
        if (s)
            atomic_store(&s->owner, 0);
        static struct fld_inflight_slot untracked;
        return &untracked;
    }
    tls_slot = s;
    return s;
}

unsigned fld__inflight_mine(void)
{
    const uintptr_t self = fld__thread_id();
    struct fld_inflight_slot *s = &fld__inflight[fld__inflight_hash(self)];
    if (atomic_load_explicit(&s->owner, memory_order_relaxed) != self)
        s = tls_slot && atomic_load_explicit(&tls_slot->owner, memory_order_relaxed) == self
                ? tls_slot
                : NULL;
    return s ? FLD_INFLIGHT_DEPTH(atomic_load_explicit(&s->count, memory_order_relaxed)) : 0;
}

/*
 * A full memory barrier on every running thread of the process, so that a
 * count stored before a gate was read is visible to the reads that follow.
 * Returns 0, or the errno of membarrier(2) when it is not available and a
 * pause stood in for it (the caller, above the log, says so).
 */
static int barrier_all_threads(void)
{
    int err = ENOSYS;
#if defined(__linux__) && defined(SYS_membarrier)
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return 0;
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
        return 0;
    err = errno;
#endif
    /* No membarrier (old kernel, a seccomp filter, valgrind): a store waits
     * in a core's buffer for nanoseconds, so a pause of milliseconds makes
     * it visible in practice. */
    static _Atomic int fence_word; /* a read-modify-write: a full barrier here (and TSan-clean) */
    atomic_exchange(&fence_word, 0);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    return err ? err : ENOSYS;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

unsigned fld__inflight_wait(double timeout, int *barrier_err)
{
    const uintptr_t self = fld__thread_id();
    const double deadline = now_seconds() + timeout;
    long pause_ns = 50 * 1000;
    int err = barrier_all_threads();
    if (barrier_err)
        *barrier_err = err;
    for (;;) {
        /* A thread that was outside once after the gates closed is done: its
         * later calls meet them. It is seen at 0, or its exits (inflight.h)
         * have moved since the first look: a thread that calls in a loop is
         * outside only for a moment between its calls. */
        unsigned busy = 0;
        FOR_EACH_SLOT(s)
        {
            unsigned char watch = atomic_load_explicit(&s->watch, memory_order_relaxed);
            if (watch == 2)
                continue;
            uint64_t count = atomic_load_explicit(&s->count, memory_order_acquire);
            if (!FLD_INFLIGHT_DEPTH(count) ||
                atomic_load_explicit(&s->owner, memory_order_relaxed) == self ||
                (watch == 1 && FLD_INFLIGHT_EXITS(count) !=
                                   atomic_load_explicit(&s->watch_exits, memory_order_relaxed))) {
                atomic_store_explicit(&s->watch, 2, memory_order_relaxed);
                continue;
            }
            if (watch == 0) {
                atomic_store_explicit(&s->watch_exits, FLD_INFLIGHT_EXITS(count),
                                      memory_order_relaxed);
                atomic_store_explicit(&s->watch, 1, memory_order_relaxed);
            }
            busy++;
        }
        if (!busy || now_seconds() >= deadline) {
            FOR_EACH_SLOT(s)
            atomic_store_explicit(&s->watch, 0, memory_order_relaxed);
            return busy;
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 5 * 1000 * 1000)
            pause_ns *= 2;
    }
}

void fld__inflight_after_fork(void)
{
    const uintptr_t self = fld__thread_id();
    FOR_EACH_SLOT(s)
    {
        if (atomic_load_explicit(&s->owner, memory_order_relaxed) == self)
            continue;
        atomic_store_explicit(&s->count, 0, memory_order_relaxed);
        atomic_store_explicit(&s->owner, 0, memory_order_relaxed);
    }
}
