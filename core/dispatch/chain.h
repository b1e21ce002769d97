/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of dispatch share about a chain's slot (private to them):
 * where a slot's cached state lives, and the functions by which one file of
 * the call path hands a call to the next.
 *
 * A chain is the ordered candidate list of one (op, device, dtype) under one
 * policy, built under the host lock by fld__select_chain() (select.h) and
 * then immutable except for two atomics: which candidates failed (non-strict
 * fallback memory) and which were announced in the log.
 *
 *   dispatch.c           the entry points and the hot path (dispatch.h);
 *   chain_cache.c        the global chains: op->slots[], row buckets;
 *   dispatch_override.c  the thread-local chains of a scoped override
 *                        (dispatch_override.h);
 *   chain_run.c          the run of a chain with fallback, failure memory,
 *                        and what opens the hot path (enable_fast());
 *   binding_call.c       a language binding's calls (binding.h);
 *   explain.c            fld_explain(), fld_resolve(), a call's key;
 *   failures.c           fld_clear_failures(), fld_foreach_failure().
 */
#ifndef FLD_CORE_CHAIN_H
#define FLD_CORE_CHAIN_H

#include "host.h"
#include "ops.h"
#include "policy.h"
#include "select.h"

/*
 * A slot's cached state: a key's in the op, a bucket's in op->buckets
 * (which exists whenever a bucket slot is in use: bucket slots come from a
 * published split, or, for a scoped override's chains, from the thread's
 * own cache, which keeps no state in the op).
 */
static inline struct fld_op_buckets *fld__op_buckets(const struct fld_op_s *op)
{
    return atomic_load_explicit(&op->buckets, memory_order_acquire);
}

static inline struct fld_fast_call *fld__fast_at(struct fld_op_s *op, unsigned slot)
{
    return slot < FLD_NSLOTS ? &op->fast[slot] : &fld__op_buckets(op)->fast[slot - FLD_NSLOTS];
}

static inline _Atomic(struct fld_chain *) *fld__chain_at(struct fld_op_s *op, unsigned slot)
{
    return slot < FLD_NSLOTS ? &op->slots[slot] : &fld__op_buckets(op)->slots[slot - FLD_NSLOTS];
}

/* The "switched" memory of a slot; a bucket slot without buckets (a scoped
 * override's) shares its key's. */
static inline _Atomic(const struct fld_impl_rec *) *fld__served_at(struct fld_op_s *op,
                                                                   unsigned slot)
{
    struct fld_op_buckets *b = slot < FLD_NSLOTS ? NULL : fld__op_buckets(op);
    return b ? &b->last_served[slot - FLD_NSLOTS] : &op->last_served[fld__slot_key(slot)];
}

/* The slot key's device and dtype indexes (FLD_DEV_*, FLD_DT_*). */
static inline void fld__slot_dev_dt(unsigned slot, int *dev, int *dt)
{
    unsigned key = fld__slot_key(slot);
    *dev = (int)key / (FLD_NDTYPES + 1);
    *dt = (int)key % (FLD_NDTYPES + 1);
}

/* fld__generation is 0 only while uninitialised or shutting down. */
static inline bool fld__library_open(void)
{
    return atomic_load_explicit(&fld__generation, memory_order_acquire) != 0;
}

/* ---- dispatch.c ---------------------------------------------------------- */

/*
 * Everything the hot path does not cover, under the global policy: the
 * slot's chain (built if missing or stale), run from its first candidate
 * inside a reader section.
 */
int fld__dispatch_slow(struct fld_op_s *op, unsigned slot, const void *args);
/* Some thread has a scoped override: this one's chains if it is that thread,
 * else fld__dispatch_slow(). */
int fld__dispatch_maybe_overridden(struct fld_op_s *op, unsigned slot, const void *args);
/* FLD_ESTATE naming fn: the library is shut down or shutting down. */
int fld__closed_handle(const char *fn);

/* ---- chain_cache.c ------------------------------------------------------- */

/* The global chain of (op, slot), rebuilt under the lock when stale; NULL
 * when out of memory. Inside a reader section. */
struct fld_chain *fld__global_chain(struct fld_op_s *op, unsigned slot);
/* Drops every cached chain of every op (host lock held; at shutdown). */
void fld__chains_drop(void);

/* ---- chain_run.c --------------------------------------------------------- */

/*
 * Runs chain c of (op, slot) from candidate `start`. If first_rc is not
 * FLD_OK, candidate start - 1 already ran (the hot path) and failed with
 * first_rc.
 */
int fld__run_chain(struct fld_op_s *op, unsigned slot, struct fld_chain *c, const void *args,
                   uint32_t start, int first_rc);
/*
 * Says that args, until the next call, is a language binding's own argument
 * record (binding.h fld_binding_call()), which plugin kernels decline;
 * returns the record this thread had before (NULL: none), to be put back
 * when the binding's call returns.
 */
const void *fld__binding_args_swap(const void *args);
/* The trace's record of a chain just built (its candidates, in order). */
void fld__trace_chain_built(const struct fld_op_s *op, unsigned slot, const struct fld_chain *c);

/* ---- explain.c ----------------------------------------------------------- */

/* The slot key (dev, dt) of a caller's device type and dtype (dtype all
 * zero: any); FLD_EINVAL naming the one that is not known. */
int fld__key_from(int device_type, DLDataType dtype, int *dev, int *dt);
/* FLD_ENOTFOUND for an op name nothing registered, with the closest names. */
int fld__unknown_op(const char *name);

#endif
