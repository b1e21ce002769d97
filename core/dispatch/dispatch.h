/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dispatch: the call path of an op, from its entry points to the cached
 * direct call of its winner (dispatch.c), with the lock-free per-(op,
 * device, dtype) cache of resolved chains and their run with non-strict
 * fallback and failure memory behind it (chain.h). The chains' contents
 * are selection's (select.h).
 */
#ifndef FLD_CORE_DISPATCH_H
#define FLD_CORE_DISPATCH_H

#include "host.h"
#include "inflight.h"
#include "ops.h"
#include "policy.h"

/* Dispatches a catalog op by index after validating args. */
int fld__call_catalog(enum fld_catalog_index idx, const void *args);
/*
 * The hot path, inlined into the entry points that know their family (the
 * typed calls of typed_entry.c, the prepared calls of prepared.c), so that such
 * a call is one function from its checks to the kernel. Everything but the
 * cached direct call is out of line in dispatch.c:
 *   fld__dispatch_miss()   a thread with a scoped override, a row-bucketed
 *                          key, a missing or stale chain;
 *   fld__dispatch_failed() the direct call returned rc: the rest of its chain;
 *   fld__call_unchecked()  the op's full validator, then dispatch (the
 *                          family's quick checks doubted the call, or the
 *                          library is not initialised: op is NULL).
 */
int fld__dispatch_miss(struct fld_op_s *op, unsigned slot, const void *args, uint64_t gen);
int fld__dispatch_failed(struct fld_op_s *op, unsigned slot, const void *args, fld_kernel_fn fn,
                         int rc);
int fld__call_unchecked(enum fld_catalog_index idx, struct fld_op_s *op, const void *args);
/* FLD_ESTATE: a call of op nested deeper than FLD_MAX_CALL_DEPTH (inflight.h). */
int fld__call_too_deep(const char *op);

/*
 * The direct call of fast entry f under generation gen (loaded with acquire
 * after the caller was counted in flight), or NULL when the hot path does not
 * apply: a thread has a scoped override, the entry is of another generation,
 * or it has no direct call (a failure, a supports() predicate, row buckets).
 */
static inline __attribute__((always_inline)) fld_kernel_fn
fld__fast_fn(const struct fld_fast_call *f, uint64_t gen)
{
    if (__builtin_expect(!atomic_load_explicit(&fld__override_threads, memory_order_relaxed) &&
                             atomic_load_explicit(&f->generation, memory_order_acquire) == gen,
                         1))
        return atomic_load_explicit(&f->fn, memory_order_relaxed);
    return NULL;
}

/* The hot path under generation gen (fld__fast_fn()). */
static inline __attribute__((always_inline)) int
fld__dispatch_gen(struct fld_op_s *op, unsigned slot, const void *args, uint64_t gen)
{
    const fld_kernel_fn fn = fld__fast_fn(&op->fast[slot], gen);
    if (__builtin_expect(fn != NULL, 1)) {
        const int rc = fn(args);
        if (__builtin_expect(rc == FLD_OK, 1))
            return FLD_OK;
        return fld__dispatch_failed(op, slot, args, fn, rc);
    }
    return fld__dispatch_miss(op, slot, args, gen);
}

static inline __attribute__((always_inline)) int fld__dispatch(struct fld_op_s *op, unsigned slot,
                                                               const void *args)
{
    return fld__dispatch_gen(op, slot, args,
                             atomic_load_explicit(&fld__generation, memory_order_acquire));
}

/*
 * A catalog call whose family checks ran inline: ok when they accepted the
 * call with the key slot, else the full validator decides. In flight from
 * before the op is read, as fld__call_catalog().
 */
static inline __attribute__((always_inline)) int
fld__call_family(enum fld_catalog_index idx, bool ok, unsigned slot, const void *args)
{
    uint32_t depth;
    struct fld_inflight_slot *in = fld__call_enter_depth(&depth);
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    int rc;
    if (__builtin_expect(ok && op != NULL && depth <= FLD_MAX_CALL_DEPTH, 1))
        rc = fld__dispatch(op, slot, args);
    else if (depth > FLD_MAX_CALL_DEPTH)
        rc = fld__call_too_deep(fld__catalog[idx].name);
    else
        rc = fld__call_unchecked(idx, op, args);
    fld__call_leave(in);
    return rc;
}

/* Drops every cached chain of every op (host lock held; at shutdown). */
void fld__dispatch_shutdown(void);

#endif
