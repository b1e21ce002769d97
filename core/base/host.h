/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The base level's process state: the one host lock, the generation counter
 * that invalidates cached choices, and the ready flag of lazy initialisation.
 * Nothing here includes a module above the base level (reentry, error, log,
 * reclaim, inflight); init, reload, shutdown and what a forked child must
 * redo above this level are lifecycle.c's.
 *
 * The one upward call: fld__ensure_init_from() calls fld__init_from(), which
 * lifecycle.c defines (as SQLite's autoinit: any public function may be the
 * first call). It is declared here so that no module includes lifecycle.c's
 * neighbours to reach it.
 *
 * Lock: a single recursive mutex (fld__lock) protects the registry (op
 * entries' impl lists, plugin records), policy publication and chain
 * building. The cached call path takes no lock: it reads atomics only.
 * pthread_atfork handlers, registered when the lock is first taken, hold the
 * lock around fork(), so a child never inherits it held.
 */
#ifndef FLD_CORE_HOST_H
#define FLD_CORE_HOST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "reentry.h"

void fld__lock(void);
void fld__unlock(void);

/*
 * What a forked child redoes above the base level (lifecycle.c), run by the
 * child's atfork handler after the lock, the reclaimer and the in-flight
 * counts were made fresh. Set before the library changes any state a child
 * would have to fix (lifecycle.c sets it at its first initialisation).
 */
void fld__host_on_fork_child(void (*fn)(void));

/* 0 until initialised; bumped on every registry or policy change. Read by
 * every call: hidden in the declaration too, so that the compiler addresses
 * it directly rather than through the GOT (as fld__inflight, fld__catalog_ops,
 * fld__override_threads). */
extern __attribute__((visibility("hidden"))) _Atomic uint64_t fld__generation;
/* Host lock held. Invalidates every cached chain and remembered failure. */
void fld__bump_generation(void);

/* True once initialised; read on every by-name and typed call. Written by
 * lifecycle.c under the host lock. */
extern _Atomic bool fld__ready;

/* fld_init() on behalf of the entry point fn, which it names when it
 * refuses. Defined in lifecycle.c: the documented upward call. */
int fld__init_from(const char *fn);
/*
 * FLD_OK once initialised (lazily initialising), else the init error; from
 * code the library calls out to (plugin code while loading, a device hook, the
 * application's log callback: reentry.h), FLD_ESTATE naming fn.
 * The fast path is two loads: the refusal is checked only while some thread
 * runs such code.
 */
static inline int fld__ensure_init_from(const char *fn)
{
    if (__builtin_expect(atomic_load_explicit(&fld__ready, memory_order_acquire) &&
                             !atomic_load_explicit(&fld__callout_threads, memory_order_relaxed),
                         1))
        return 0;
    return fld__init_from(fn);
}
/* fld__ensure_init_from() naming the public function it is called in. */
#define fld__ensure_init() fld__ensure_init_from(__func__)

#endif
