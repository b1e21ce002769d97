/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base level's process state: the host lock and its fork handling, the
 * generation counter, the ready flag. See host.h for the locking rules;
 * lifecycle.c changes the state above this level.
 */
#include <pthread.h>

#include "host.h"
#include "inflight.h"
#include "reclaim.h"

static pthread_mutex_t host_lock;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static void (*_Atomic fork_child_hook)(void);

_Atomic bool fld__ready;

_Atomic uint64_t fld__generation;
static uint64_t generation_counter; /* last value handed out; survives shutdown */

static void make_lock(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&host_lock, &attr);
    pthread_mutexattr_destroy(&attr);
}

/* fork(): hold the lock across it so the child never inherits it mid-change. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&host_lock);
}

static void atfork_parent(void)
{
    pthread_mutex_unlock(&host_lock);
}

static void atfork_child(void)
{
    /* The child has one thread; the inherited mutex state is not to be
     * trusted (other threads' holds are gone), so start a fresh one. */
    make_lock();
    fld__reclaim_after_fork();
    fld__inflight_after_fork();
    void (*hook)(void) = atomic_load(&fork_child_hook);
    if (hook)
        hook();
}

static void host_setup(void)
{
    make_lock();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

void fld__lock(void)
{
    pthread_once(&host_once, host_setup);
    pthread_mutex_lock(&host_lock);
}

void fld__unlock(void)
{
    pthread_mutex_unlock(&host_lock);
}

void fld__host_on_fork_child(void (*fn)(void))
{
    atomic_store(&fork_child_hook, fn);
}

void fld__bump_generation(void)
{
    atomic_store_explicit(&fld__generation, ++generation_counter, memory_order_release);
}
