/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dispatch: the entry points of a call and its hot path. Which
 * implementations a chain holds, and in which order, is selection's
 * (select.c); the chains' cache, their run with fallback and the scoped
 * overrides' chains are the other files of dispatch (chain.h).
 *
 * Global-policy chains live in op->slots[] and are valid while their
 * generation equals fld__generation; any registry or policy change bumps the
 * generation, so stale chains (and their failure memory) are rebuilt on next
 * use. Threads use a chain without the lock inside a reader section
 * (reclaim.h).
 *
 * Once a chain's first candidate has served a call (and has no supports()
 * predicate and has not failed), op->fast[slot] lets the hot path call it
 * directly: load generation, load the slot's fast generation, compare, load
 * fn, call — no lock, no write, no chain. A call that overlaps a policy
 * change may be served under the old or the new policy; one that starts
 * after the change returned sees it (its generation differs until the slot
 * is rebuilt).
 *
 * The hot path stays in this file, with the entry points that inline it
 * (fld__call_catalog(), fld_call(), fld_call_on(); typed_entry.c and prepared.c
 * inline it through dispatch.h). Each function is defined before its
 * callers: read from the bottom for the order a call meets them — the entry
 * points, call_validated(), dispatch(), and what the hot path leaves out of
 * line (a failed direct call, a row-bucketed key, a stale or missing chain,
 * a scoped override).
 */
#include <stdlib.h>

#include <fldispatch/internal/tool_api.h>

#include "chain.h"
#include "dispatch.h"
#include "dispatch_override.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "reclaim.h"
#include "registry.h"
#include "rows.h"
#include "signature.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

__attribute__((noinline, cold)) static int null_args(const struct fld_op_s *op)
{
    return fld__fail(FLD_EINVAL, "%s: argument 'args' is NULL", op->name);
}

__attribute__((noinline, cold)) static int null_handle(void)
{
    return fld__fail(FLD_EINVAL, "fld_call: argument 'op' is NULL");
}

/* Out of line: fld__library_open() said no. */
__attribute__((noinline, cold)) int fld__closed_handle(const char *fn)
{
    return fld__fail(FLD_ESTATE,
                     "%s: the library is shut down or shutting down (fld_op handles are invalid "
                     "after fld_shutdown(); look them up again)",
                     fn);
}

/*
 * The slot of a call of a bucketed key: its row bucket's, or the rest's
 * (rows no bucket covers, and ops outside the catalog, whose rows the host
 * cannot read).
 */
static inline __attribute__((always_inline)) unsigned
bucket_slot(const struct fld_op_s *op, unsigned key, const void *args, uint32_t buckets)
{
    const struct fld_op_buckets *ob = fld__op_buckets(op);
    const uint32_t keep = atomic_load_explicit(&ob->rows_source.keep, memory_order_relaxed);
    const int64_t rows =
        keep == FLD_ROWS_NONE
            ? 0
            : fld__rows_at(args,
                           atomic_load_explicit(&ob->rows_source.offset, memory_order_relaxed),
                           (int)keep);
    const struct fld_row_split *s = &ob->split[key];
    if ((uint64_t)rows < FLD_SMALL_ROWS)
        return key + atomic_load_explicit(&s->small[rows], memory_order_relaxed) * FLD_NKEYS;
    /* Ascending and disjoint: the first bucket that ends at or after rows
     * is the only one that can hold it. */
    const uint32_t n = buckets < FLD_MAX_BUCKETS ? buckets : FLD_MAX_BUCKETS;
    uint32_t b = 0;
    while (b + 1 < n && rows > atomic_load_explicit(&s->hi[b], memory_order_relaxed))
        b++;
    if (rows >= atomic_load_explicit(&s->lo[b], memory_order_relaxed) &&
        rows <= atomic_load_explicit(&s->hi[b], memory_order_relaxed))
        return key + (b + 1) * FLD_NKEYS;
    return key + FLD_BUCKET_REST * FLD_NKEYS;
}

/*
 * Everything the hot path does not cover. A valid cached chain is still used
 * without the lock (its first candidate has a supports() predicate, or has
 * failed, or this is the first call through it); the lock is taken only to
 * build a chain. The chain is held inside a reader section.
 */
__attribute__((noinline)) int fld__dispatch_slow(struct fld_op_s *op, unsigned slot,
                                                 const void *args)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(fld__chain_at(op, slot));
    if (!c || c->generation != atomic_load(&fld__generation))
        c = fld__global_chain(op, slot);
    if (c && c->buckets) {
        /* A bucketed key: the call runs on its bucket's chain. */
        slot = bucket_slot(op, slot, args, c->buckets);
        c = atomic_load(fld__chain_at(op, slot));
        if (!c || c->generation != atomic_load(&fld__generation))
            c = fld__global_chain(op, slot);
    }
    int rc = c ? fld__run_chain(op, slot, c, args, 0, FLD_OK)
               : fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
    fld__read_end();
    return rc;
}

/* Some thread has a scoped override: this one's chain if it is that thread, else the slow path. */
__attribute__((noinline, cold)) int fld__dispatch_maybe_overridden(struct fld_op_s *op,
                                                                   unsigned slot, const void *args)
{
    const struct fld_policy *top = fld__policy_override_top();
    if (top)
        return fld__dispatch_overridden(op, slot, args, top);
    return fld__dispatch_slow(op, slot, args);
}

/* The directly called fn (the first candidate) failed with rc: continue its
 * chain, or start again if the chain changed meanwhile. */
__attribute__((noinline, cold)) static int fast_failed(struct fld_op_s *op, unsigned slot,
                                                       const void *args, fld_kernel_fn fn, int rc)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(fld__chain_at(op, slot));
    if (c && c->generation == atomic_load(&fld__generation) && c->n && c->impls[0]->fn == fn)
        rc = fld__run_chain(op, slot, c, args, 1, rc);
    else
        rc = fld__dispatch_slow(op, slot, args);
    fld__read_end();
    return rc;
}

/*
 * No direct call for the key: when the manifest splits it into row buckets
 * (its fast entry of this generation has no fn, and its split is of this
 * generation with a bucket count), the
 * same direct call on the bucket's slot; else fld__dispatch_slow(). Out of line,
 * so that the unbucketed path stays as it was.
 */
__attribute__((noinline)) static int dispatch_bucketed(struct fld_op_s *op, unsigned key,
                                                       const void *args, uint64_t gen)
{
    struct fld_fast_call *f = &op->fast[key];
    const struct fld_op_buckets *ob = fld__op_buckets(op);
    uint32_t buckets;
    if (!ob || atomic_load_explicit(&f->generation, memory_order_acquire) != gen ||
        atomic_load_explicit(&ob->split[key].generation, memory_order_acquire) != gen ||
        !(buckets = atomic_load_explicit(&ob->split[key].n, memory_order_relaxed)))
        return fld__dispatch_slow(op, key, args);
    unsigned slot = bucket_slot(op, key, args, buckets);
    f = fld__fast_at(op, slot);
    fld_kernel_fn fn;
    if (likely(atomic_load_explicit(&f->generation, memory_order_acquire) == gen &&
               (fn = atomic_load_explicit(&f->fn, memory_order_relaxed)))) {
        int rc = fn(args);
        if (likely(rc == FLD_OK))
            return FLD_OK;
        return fast_failed(op, slot, args, fn, rc);
    }
    return fld__dispatch_slow(op, slot, args);
}

/*
 * The hot path of this file's entry points: dispatch.h's fld__dispatch(),
 * which the typed and prepared calls inline too, so that there is one copy
 * of it. Every slow case is a call to a non-inlined function.
 */
static inline __attribute__((always_inline)) int dispatch(struct fld_op_s *op, unsigned slot,
                                                          const void *args)
{
    return fld__dispatch(op, slot, args);
}

static inline int call_validated(struct fld_op_s *op, const void *args)
{
    if (unlikely(!args))
        return null_args(op);
    struct fld_call_key key;
    int rc = op->schema->validate(op->name, args, &key);
    if (unlikely(rc))
        return rc;
    return dispatch(op, fld__slot(key.device, key.dtype), args);
}

/* A declared op's call (signature.h): checked, keyed by its tensors. */
__attribute__((noinline)) static int call_declared(struct fld_op_s *op, const struct fld_sig *sig,
                                                   const void *args)
{
    int dev, dt;
    int rc = fld__sig_check(sig, args, &dev, &dt);
    if (unlikely(rc))
        return rc;
    return dispatch(op, fld__slot(dev, dt < 0 ? FLD_DT_ANY : dt), args);
}

/* An op's call, its thread already counted in flight and the library open. */
static inline int call_op(struct fld_op_s *op, const void *args)
{
    if (op->schema)
        return call_validated(op, args);
    const struct fld_sig *sig = atomic_load_explicit(&op->sig, memory_order_acquire);
    if (unlikely(sig != NULL))
        return call_declared(op, sig, args);
    return dispatch(op, fld__slot(FLD_DEV_ANY, FLD_DT_ANY), args);
}

/* A typed call before initialisation, or while fld_shutdown() waits. */
__attribute__((noinline, cold)) static int call_catalog_cold(enum fld_catalog_index idx,
                                                             const void *args)
{
    int rc = fld__ensure_init_from(fld__catalog[idx].name);
    if (rc)
        return rc;
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    if (!op)
        return fld__fail(FLD_ESTATE, "%s: the library was shut down during the call",
                         fld__catalog[idx].name);
    return call_validated(op, args);
}

/*
 * The typed entry points. The call counts as in flight (inflight.h) from
 * before its op is read: fld_shutdown() unpublishes the catalog entries
 * first, then waits for such counts.
 */
int fld__call_catalog(enum fld_catalog_index idx, const void *args)
{
    uint32_t depth;
    struct fld_inflight_slot *in = fld__call_enter_depth(&depth);
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    int rc = unlikely(depth > FLD_MAX_CALL_DEPTH) ? fld__call_too_deep(fld__catalog[idx].name)
             : likely(op != NULL)                 ? call_validated(op, args)
                                                  : call_catalog_cold(idx, args);
    fld__call_leave(in);
    return rc;
}

__attribute__((noinline, cold)) int fld__call_too_deep(const char *op)
{
    return fld__fail(FLD_ESTATE,
                     "%s: refused, calls of ops nested more than %d deep on this thread (an "
                     "implementation that calls the op it serves, directly or through other ops, "
                     "without end?)",
                     op, FLD_MAX_CALL_DEPTH);
}

/*
 * The out-of-line parts of the inlined hot path (dispatch.h fld__dispatch(),
 * fld__call_family()): the typed calls of typed_entry.c and the prepared calls
 * of prepared.c run their family's checks and the cached direct call in one
 * function, and come here for anything else.
 */
__attribute__((noinline)) int fld__dispatch_miss(struct fld_op_s *op, unsigned slot,
                                                 const void *args, uint64_t gen)
{
    if (unlikely(atomic_load_explicit(&fld__override_threads, memory_order_relaxed)))
        return fld__dispatch_maybe_overridden(op, slot, args);
    return dispatch_bucketed(op, slot, args, gen);
}

__attribute__((noinline, cold)) int fld__dispatch_failed(struct fld_op_s *op, unsigned slot,
                                                         const void *args, fld_kernel_fn fn, int rc)
{
    return fast_failed(op, slot, args, fn, rc);
}

/* The family's quick checks doubted the call (or op is NULL: not initialised). In flight. */
__attribute__((noinline)) int fld__call_unchecked(enum fld_catalog_index idx, struct fld_op_s *op,
                                                  const void *args)
{
    return likely(op != NULL) ? call_validated(op, args) : call_catalog_cold(idx, args);
}

int fld_call(fld_op handle, const void *args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (unlikely(!op))
        return null_handle();
    uint32_t depth;
    struct fld_inflight_slot *in = fld__call_enter_depth(&depth);
    int rc = unlikely(!fld__library_open())        ? fld__closed_handle("fld_call")
             : unlikely(depth > FLD_MAX_CALL_DEPTH) ? fld__call_too_deep(op->name)
                                                    : call_op(op, args);
    fld__call_leave(in);
    return rc;
}

int fld_call_by_name(const char *name, const void *args)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name)
        return fld__fail(FLD_EINVAL, "fld_call_by_name: argument 'name' is NULL");
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        return fld__fail(FLD_ENOTFOUND, "no op named '%s'", name);
    if (unlikely(fld__inflight_mine() > FLD_MAX_CALL_DEPTH))
        return fld__call_too_deep(op->name);
    return call_op(op, args); /* counted in flight by the scope above; initialised, so open */
}

int fld_call_on(fld_op handle, int device_type, DLDataType dtype, const void *args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op)
        return fld__fail(FLD_EINVAL, "fld_call_on: argument 'op' is NULL");
    FLD_CALL_SCOPE();
    if (unlikely(!fld__library_open()))
        return fld__closed_handle("fld_call_on");
    if (unlikely(fld__inflight_mine() > FLD_MAX_CALL_DEPTH))
        return fld__call_too_deep(op->name);
    if (op->schema)
        return call_validated(op, args);
    int dev, dt;
    int rc = fld__key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    const struct fld_sig *sig = atomic_load_explicit(&op->sig, memory_order_acquire);
    if (sig) {
        int ignored_dev, ignored_dt;
        if ((rc = fld__sig_check(sig, args, &ignored_dev, &ignored_dt)) != FLD_OK)
            return rc;
    }
    return dispatch(op, fld__slot(dev, dt), args);
}

void fld__dispatch_shutdown(void)
{
    fld__chains_drop();
    fld__dispatch_tls_flush();
}
