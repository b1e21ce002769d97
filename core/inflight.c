/*
 * Calls in flight (see inflight.h): the slot table, claiming a slot for a
 * thread, the barrier and the wait of fld_shutdown().
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#endif

#include <fldispatch/fldispatch.h>

#include "inflight.h"
#include "log.h"

struct fld_inflight_slot fld__inflight[FLD_INFLIGHT_SLOTS];

/* For threads that find no free slot: counted together, with atomic RMWs. */
static struct fld_inflight_slot overflow = {.owner = UINTPTR_MAX, .shared = true};

static pthread_key_t slot_key;
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;
static int slot_key_status = -1;

/* At thread exit: the slot goes back for the next thread. */
static void release_slot(void *arg)
{
    struct fld_inflight_slot *s = arg;
    atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
    atomic_store_explicit(&s->owner, 0, memory_order_release);
}

static void make_slot_key(void)
{
    slot_key_status = pthread_key_create(&slot_key, release_slot);
}

/* The slot self owns, starting the search at its hash; NULL when none. */
static struct fld_inflight_slot *find_own(uintptr_t self)
{
    const unsigned h = fld__inflight_hash(self);
    for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
        struct fld_inflight_slot *s = &fld__inflight[(h + i) & (FLD_INFLIGHT_SLOTS - 1)];
        if (atomic_load_explicit(&s->owner, memory_order_relaxed) == self)
            return s;
    }
    return NULL; /* (slots freed by exited threads leave holes: no early stop) */
}

struct fld_inflight_slot *fld__inflight_claim(uintptr_t self)
{
    struct fld_inflight_slot *s = find_own(self);
    if (s)
        return s; /* its hash slot belongs to another thread: it sits further on */
    pthread_once(&slot_key_once, make_slot_key);
    if (slot_key_status != 0)
        return &overflow;
    const unsigned h = fld__inflight_hash(self);
    for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
        s = &fld__inflight[(h + i) & (FLD_INFLIGHT_SLOTS - 1)];
        uintptr_t free_owner = 0;
        if (atomic_load_explicit(&s->owner, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&s->owner, &free_owner, self)) {
            atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
            if (pthread_setspecific(slot_key, s) != 0) {
                atomic_store(&s->owner, 0);
                return &overflow;
            }
            return s;
        }
    }
    return &overflow;
}

unsigned fld__inflight_mine(void)
{
    struct fld_inflight_slot *s = find_own(fld__thread_id());
    return s ? (unsigned)(atomic_load_explicit(&s->calls, memory_order_relaxed) &
                          FLD_INFLIGHT_DEPTH_MASK)
             : 0;
}

/*
 * A full memory barrier on every running thread of the process, so that a
 * count stored before a gate was read is visible to the reads that follow.
 */
static void barrier_all_threads(void)
{
#if defined(__linux__) && defined(SYS_membarrier)
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0)
        return;
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) == 0)
        return;
#endif
    /* No membarrier (old kernel, a seccomp filter, valgrind): a store waits
     * in a core's buffer for nanoseconds, so a pause of milliseconds makes
     * it visible in practice. */
    static _Atomic bool said;
    if (!atomic_exchange(&said, true))
        fld__log(FLD_LOG_DEBUG,
                 "fld_shutdown: membarrier(2) is not available (%s); pausing "
                 "20 ms instead",
                 strerror(errno));
    atomic_thread_fence(memory_order_seq_cst);
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t depth_of(uint64_t w)
{
    return w & FLD_INFLIGHT_DEPTH_MASK;
}

unsigned fld__inflight_wait(double timeout)
{
    const uintptr_t self = fld__thread_id();
    const double deadline = now_seconds() + timeout;
    long pause_ns = 100 * 1000;
    barrier_all_threads();
    /* Who is inside a call now, and each one's count of returns to 0. */
    uint64_t seen[FLD_INFLIGHT_SLOTS];
    bool waiting[FLD_INFLIGHT_SLOTS];
    for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
        const struct fld_inflight_slot *s = &fld__inflight[i];
        seen[i] = atomic_load_explicit(&s->calls, memory_order_acquire);
        waiting[i] =
            depth_of(seen[i]) && atomic_load_explicit(&s->owner, memory_order_relaxed) != self;
    }
    for (;;) {
        unsigned busy = 0;
        for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
            if (!waiting[i])
                continue;
            uint64_t w = atomic_load_explicit(&fld__inflight[i].calls, memory_order_acquire);
            if (!depth_of(w) ||
                (w >> FLD_INFLIGHT_DEPTH_BITS) != (seen[i] >> FLD_INFLIGHT_DEPTH_BITS))
                waiting[i] = false; /* it was outside since: its calls then have returned */
            else
                busy++;
        }
        /* Threads past the table: only their sum is known. */
        busy += atomic_load_explicit(&overflow.calls, memory_order_acquire) ? 1 : 0;
        if (!busy || now_seconds() >= deadline)
            return busy;
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 10 * 1000 * 1000)
            pause_ns *= 2;
    }
}

void fld__inflight_after_fork(void)
{
    const uintptr_t self = fld__thread_id();
    for (unsigned i = 0; i < FLD_INFLIGHT_SLOTS; i++) {
        struct fld_inflight_slot *s = &fld__inflight[i];
        if (atomic_load_explicit(&s->owner, memory_order_relaxed) == self)
            continue;
        atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
        atomic_store_explicit(&s->owner, 0, memory_order_relaxed);
    }
    atomic_store(&overflow.calls, 0);
}
