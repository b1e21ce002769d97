/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Deferred reclamation of objects that threads read without the host lock.
 *
 * A policy change replaces the global policy and, on next use, every cached
 * chain; a thread may still be reading the old ones. They are retired, not
 * freed, and freed once no thread can hold them (epoch-based reclamation):
 *
 * - A thread that reads a retirable object without the host lock does so
 *   between fld__read_begin() and fld__read_end() (nestable). Entering
 *   publishes the current epoch in the thread's reader record; leaving
 *   clears it. Records are created on a thread's first section, reused after
 *   it exits, and never freed.
 * - fld__retire() (host lock held, object already unlinked) tags the object
 *   with the epoch and advances it. An object is freed when every reader
 *   record is idle or entered after its tag: such a reader loaded its
 *   pointers after the unlink, so it cannot hold the object.
 *
 * The dispatch fast path holds no retirable object (it reads the op's own
 * fast-call fields, see chain_run.c), so it pays nothing for this. Objects
 * whose address is handed to the application (fld_platform(),
 * fld_plugin_path()) use fld__retire_until_shutdown() instead.
 */
#ifndef FLD_CORE_RECLAIM_H
#define FLD_CORE_RECLAIM_H

#include <stddef.h>

/* Brackets a lock-free read of retirable objects by the calling thread. */
void fld__read_begin(void);
void fld__read_end(void);

/* Host lock held. Frees ptr with free_fn once no reader can hold it. */
void fld__retire(void *ptr, void (*free_fn)(void *));
/* Host lock held. Keeps ptr until fld_shutdown() (the application has it). */
void fld__retire_until_shutdown(void *ptr, void (*free_fn)(void *));

/* Host lock held. Frees every retired object no reader can hold. */
void fld__reclaim(void);
/* Host lock held, at fld_shutdown(): frees every retired object. */
void fld__reclaim_all(void);
/* In the child after fork(): only the calling thread survives. */
void fld__reclaim_after_fork(void);
/* Host lock held. How many retired objects are still waiting (tests). */
size_t fld__reclaim_pending(void);

#endif
