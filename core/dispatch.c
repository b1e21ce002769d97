/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op manager: the call path, the cache of resolved chains and the run
 * of a chain with fallback. Which implementations a chain holds, and in
 * which order, is selection's (select.c).
 *
 * A chain is the ordered candidate list of one (op, device, dtype) under one
 * policy, built under the host lock by fld__select_chain() and then
 * immutable except for two atomics: which candidates failed (non-strict
 * fallback memory) and which were announced in the log.
 *
 * Global-policy chains live in op->slots[] and are valid while their
 * generation equals fld__generation; any registry or policy change bumps the
 * generation, so stale chains (and their failure memory) are rebuilt on next
 * use. Threads use a chain without the lock inside a reader section
 * (reclaim.h); a replaced chain is retired and freed once no section can
 * hold it.
 *
 * Once a chain's first candidate has served a call (and has no supports()
 * predicate and has not failed), op->fast[slot] lets the hot path call it
 * directly: load generation, load the slot's fast generation, compare, load
 * fn, call — no lock, no write, no chain. A call that overlaps a policy
 * change may be served under the old or the new policy; one that starts
 * after the change returned sees it (its generation differs until the slot
 * is rebuilt).
 *
 * Threads with a scoped policy override use a small thread-local cache keyed
 * by the override's policy serial; those chains belong to the thread.
 *
 * The file reads top-down, in the order a call meets it:
 *   - the entry points: fld__call_catalog() (calls by catalog index),
 *     the out-of-line parts of manager.h's inlined hot path (the typed
 *     calls of catalog.c, the prepared calls of prepared.c), fld_call(),
 *     fld_call_by_name(), fld_call_on(), down to call_validated();
 *   - the hot path, dispatch() (inlined into each entry point), and what it
 *     leaves to out-of-line functions: a failed direct call, a stale or
 *     missing chain (dispatch_slow(), global_chain()), a scoped override
 *     (the thread-local chains, dispatch_thread_policy());
 *   - the run of a chain with fallback: run_chain(), note_served() and
 *     enable_fast() (which opens the hot path), mark_failed(),
 *     no_candidate();
 *   - fld_explain(), fld_resolve(), fld_clear_failures(), shutdown.
 * The hot path stays in this file so that it inlines; the static functions
 * are declared first so that the order can follow the reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>
#include <fldispatch/internal/tool_api.h>

#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "dispatch.h"
#include "manifest.h"
#include "names.h"
#include "policy.h"
#include "reclaim.h"
#include "registry.h"
#include "rows.h"
#include "select.h"
#include "signature.h"
#include "stats.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ---- the static functions, in the order they appear --------------------- */

/* The entry points. */
__attribute__((noinline, cold)) static int call_catalog_cold(enum fld_catalog_index idx,
                                                             const void *args);
static inline int call_op(struct fld_op_s *op, const void *args);
static inline bool library_open(void);
static inline int call_validated(struct fld_op_s *op, const void *args);
static int key_from(int device_type, DLDataType dtype, int *dev, int *dt);
__attribute__((noinline, cold)) static int null_args(const struct fld_op_s *op);
__attribute__((noinline)) static int call_declared(struct fld_op_s *op, const struct fld_sig *sig,
                                                   const void *args);
__attribute__((noinline, cold)) static int null_handle(void);
__attribute__((noinline, cold)) static int closed_handle(const char *fn);
static __attribute__((cold, noinline)) int unknown_device_type(int device_type);

/* The hot path and what it leaves out of line. */
static inline __attribute__((always_inline)) int dispatch(struct fld_op_s *op, unsigned slot,
                                                          const void *args);
__attribute__((noinline, cold)) static int fast_failed(struct fld_op_s *op, unsigned slot,
                                                       const void *args, fld_kernel_fn fn, int rc);
__attribute__((noinline, cold)) static int
dispatch_maybe_overridden(struct fld_op_s *op, unsigned slot, const void *args);
__attribute__((noinline)) static int dispatch_slow(struct fld_op_s *op, unsigned slot,
                                                   const void *args);
static inline unsigned bucket_slot(const struct fld_op_s *op, unsigned key, const void *args,
                                   uint32_t buckets);
__attribute__((noinline)) static int dispatch_bucketed(struct fld_op_s *op, unsigned key,
                                                       const void *args, uint64_t gen);
static struct fld_chain *global_chain(struct fld_op_s *op, unsigned slot);
static void publish_split(struct fld_op_s *op, unsigned key, struct fld_chain *c);
static void chain_free(void *p);
static int dispatch_thread_policy(struct fld_op_s *op, unsigned slot, const void *args,
                                  const struct fld_policy *pol);
static void tls_free_retired(void);

/* The run of a chain. */
static inline int run_plugin_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                                  const void *args);
static inline int run_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                           const void *args);
static int run_chain(struct fld_op_s *op, unsigned slot, struct fld_chain *c, const void *args,
                     uint32_t start, int first_rc);
static void note_served(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i);
static void enable_fast(struct fld_op_s *op, unsigned slot, struct fld_chain *c);
static void mark_failed(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i);
static int no_candidate(struct fld_op_s *op, unsigned slot);
static void slot_key(unsigned slot, int *dev, int *dt);
static void describe_impl(const struct fld_impl_rec *r, char *buf, size_t size);

/*
 * A slot's cached state: a key's in the op, a bucket's in op->buckets
 * (which exists whenever a bucket slot is in use: bucket slots come from a
 * published split, or, for a scoped override's chains, from the thread's
 * own cache, which keeps no state in the op).
 */
static inline struct fld_op_buckets *op_buckets(const struct fld_op_s *op)
{
    return atomic_load_explicit(&op->buckets, memory_order_acquire);
}

static inline struct fld_fast_call *fast_at(struct fld_op_s *op, unsigned slot)
{
    return slot < FLD_NSLOTS ? &op->fast[slot] : &op_buckets(op)->fast[slot - FLD_NSLOTS];
}

static inline _Atomic(struct fld_chain *) *chain_at(struct fld_op_s *op, unsigned slot)
{
    return slot < FLD_NSLOTS ? &op->slots[slot] : &op_buckets(op)->slots[slot - FLD_NSLOTS];
}

/* The "switched" memory of a slot; a bucket slot without buckets (a scoped
 * override's) shares its key's. */
static inline _Atomic(const struct fld_impl_rec *) *served_at(struct fld_op_s *op, unsigned slot)
{
    struct fld_op_buckets *b = slot < FLD_NSLOTS ? NULL : op_buckets(op);
    return b ? &b->last_served[slot - FLD_NSLOTS] : &op->last_served[fld__slot_key(slot)];
}

/* Gives op its bucket record on first need (host lock held; freed at
 * shutdown by drop_op_chains()); false when out of memory. */
static bool ensure_buckets(struct fld_op_s *op)
{
    if (op_buckets(op))
        return true;
    struct fld_op_buckets *b = calloc(1, sizeof *b);
    if (b)
        atomic_store_explicit(&op->buckets, b, memory_order_release);
    return b != NULL;
}

/* What ran (stats.h), on while VLLM_FL_STATS, VLLM_FL_TRACE or fld_stats_enable() ask. */
struct observed {
    struct fld_stats_cell *last;   /* the cell of the last implementation called */
    struct fld_stats_cell *failed; /* one that failed; a fallback if another runs */
};
__attribute__((noinline)) static int call_observed(const struct fld_op_s *op,
                                                   struct fld_impl_rec *r, unsigned slot, int dev,
                                                   int dt, const void *args, unsigned flags,
                                                   struct observed *ob);
__attribute__((noinline, cold)) static void
trace_chain_built(const struct fld_op_s *op, unsigned slot, const struct fld_chain *c);

/* Explain, failures, shutdown. */
static int explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out);
static int unknown_op(const char *name);
static void clear_op_failures(struct fld_op_s *op, void *user);
static void list_op_failures(struct fld_op_s *op, void *user);
static void drop_op_chains(struct fld_op_s *op, void *user);

/* ---- the entry points --------------------------------------------------- */

/*
 * The typed entry points. The call counts as in flight (inflight.h) from
 * before its op is read: fld_shutdown() unpublishes the catalog entries
 * first, then waits for such counts.
 */
int fld__call_catalog(enum fld_catalog_index idx, const void *args)
{
    struct fld_inflight_slot *in = fld__call_enter();
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    int rc = likely(op != NULL) ? call_validated(op, args) : call_catalog_cold(idx, args);
    fld__call_leave(in);
    return rc;
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
 * The out-of-line parts of the inlined hot path (manager.h fld__dispatch(),
 * fld__call_family()): the typed calls of catalog.c and the prepared calls
 * of prepared.c run their family's checks and the cached direct call in one
 * function, and come here for anything else.
 */
__attribute__((noinline)) int fld__dispatch_miss(struct fld_op_s *op, unsigned slot,
                                                 const void *args, uint64_t gen)
{
    if (unlikely(atomic_load_explicit(&fld__override_threads, memory_order_relaxed)))
        return dispatch_maybe_overridden(op, slot, args);
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
    struct fld_inflight_slot *in = fld__call_enter();
    int rc = likely(library_open()) ? call_op(op, args) : closed_handle("fld_call");
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
    return call_op(op, args); /* counted in flight by the scope above; initialised, so open */
}

int fld_call_on(fld_op handle, int device_type, DLDataType dtype, const void *args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op)
        return fld__fail(FLD_EINVAL, "fld_call_on: argument 'op' is NULL");
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_call_on");
    if (op->schema)
        return call_validated(op, args);
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
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

static inline bool library_open(void)
{
    return atomic_load_explicit(&fld__generation, memory_order_acquire) != 0;
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

static int key_from(int device_type, DLDataType dtype, int *dev, int *dt)
{
    *dev = fld__device_index(device_type);
    if (*dev < 0)
        return unknown_device_type(device_type);
    if (dtype.code == 0 && dtype.bits == 0 && dtype.lanes == 0) {
        *dt = FLD_DT_ANY;
        return FLD_OK;
    }
    *dt = fld__dtype_index(dtype);
    if (*dt < 0)
        return fld__fail(FLD_EINVAL,
                         "unsupported dtype (code %d, bits %d, lanes %d; valid: f32, "
                         "f16, bf16)",
                         dtype.code, dtype.bits, dtype.lanes);
    return FLD_OK;
}

__attribute__((noinline, cold)) static int null_args(const struct fld_op_s *op)
{
    return fld__fail(FLD_EINVAL, "%s: argument 'args' is NULL", op->name);
}

__attribute__((noinline, cold)) static int null_handle(void)
{
    return fld__fail(FLD_EINVAL, "fld_call: argument 'op' is NULL");
}

/* fld__generation is 0 only while uninitialised or shutting down. */
__attribute__((noinline, cold)) static int closed_handle(const char *fn)
{
    return fld__fail(FLD_ESTATE,
                     "%s: the library is shut down or shutting down (fld_op handles are invalid "
                     "after fld_shutdown(); look them up again)",
                     fn);
}

/* Out of line: key_from() runs on fld_call_on()'s path. */
static __attribute__((cold, noinline)) int unknown_device_type(int device_type)
{
    return fld__fail(FLD_EINVAL, "unknown device type %d (valid: %s)", device_type,
                     fld__device_text(FLD_DEVICE_TEXT_CODES));
}

/* ---- the hot path and what it leaves out of line ------------------------ */

/*
 * The hot path of this file's entry points: manager.h's fld__dispatch(),
 * which the typed and prepared calls inline too, so that there is one copy
 * of it. Every slow case is a call to a non-inlined function.
 */
static inline __attribute__((always_inline)) int dispatch(struct fld_op_s *op, unsigned slot,
                                                          const void *args)
{
    return fld__dispatch(op, slot, args);
}

/*
 * No direct call for the key: when the manifest splits it into row buckets
 * (its fast entry of this generation has no fn, and its split is of this
 * generation with a bucket count), the
 * same direct call on the bucket's slot; else dispatch_slow(). Out of line,
 * so that the unbucketed path stays as it was.
 */
__attribute__((noinline)) static int dispatch_bucketed(struct fld_op_s *op, unsigned key,
                                                       const void *args, uint64_t gen)
{
    struct fld_fast_call *f = &op->fast[key];
    const struct fld_op_buckets *ob = op_buckets(op);
    uint32_t buckets;
    if (!ob || atomic_load_explicit(&f->generation, memory_order_acquire) != gen ||
        atomic_load_explicit(&ob->split[key].generation, memory_order_acquire) != gen ||
        !(buckets = atomic_load_explicit(&ob->split[key].n, memory_order_relaxed)))
        return dispatch_slow(op, key, args);
    unsigned slot = bucket_slot(op, key, args, buckets);
    f = fast_at(op, slot);
    fld_kernel_fn fn;
    if (likely(atomic_load_explicit(&f->generation, memory_order_acquire) == gen &&
               (fn = atomic_load_explicit(&f->fn, memory_order_relaxed)))) {
        int rc = fn(args);
        if (likely(rc == FLD_OK))
            return FLD_OK;
        return fast_failed(op, slot, args, fn, rc);
    }
    return dispatch_slow(op, slot, args);
}

/*
 * The slot of a call of a bucketed key: its row bucket's, or the rest's
 * (rows no bucket covers, and ops outside the catalog, whose rows the host
 * cannot read).
 */
static inline __attribute__((always_inline)) unsigned
bucket_slot(const struct fld_op_s *op, unsigned key, const void *args, uint32_t buckets)
{
    const struct fld_op_buckets *ob = op_buckets(op);
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

/* The directly called fn (the first candidate) failed with rc: continue its
 * chain, or start again if the chain changed meanwhile. */
__attribute__((noinline, cold)) static int fast_failed(struct fld_op_s *op, unsigned slot,
                                                       const void *args, fld_kernel_fn fn, int rc)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(chain_at(op, slot));
    if (c && c->generation == atomic_load(&fld__generation) && c->n && c->impls[0]->fn == fn)
        rc = run_chain(op, slot, c, args, 1, rc);
    else
        rc = dispatch_slow(op, slot, args);
    fld__read_end();
    return rc;
}

/* Some thread has a scoped override: this one's chain if it is that thread, else the slow path. */
__attribute__((noinline, cold)) static int
dispatch_maybe_overridden(struct fld_op_s *op, unsigned slot, const void *args)
{
    const struct fld_policy *top = fld__policy_override_top();
    if (top)
        return dispatch_thread_policy(op, slot, args, top);
    return dispatch_slow(op, slot, args);
}

/*
 * Everything the hot path does not cover. A valid cached chain is still used
 * without the lock (its first candidate has a supports() predicate, or has
 * failed, or this is the first call through it); the lock is taken only to
 * build a chain. The chain is held inside a reader section.
 */
__attribute__((noinline)) static int dispatch_slow(struct fld_op_s *op, unsigned slot,
                                                   const void *args)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(chain_at(op, slot));
    if (!c || c->generation != atomic_load(&fld__generation))
        c = global_chain(op, slot);
    if (c && c->buckets) {
        /* A bucketed key: the call runs on its bucket's chain. */
        slot = bucket_slot(op, slot, args, c->buckets);
        c = atomic_load(chain_at(op, slot));
        if (!c || c->generation != atomic_load(&fld__generation))
            c = global_chain(op, slot);
    }
    int rc = c ? run_chain(op, slot, c, args, 0, FLD_OK)
               : fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
    fld__read_end();
    return rc;
}

/*
 * The global chain of (op, slot), rebuilt under the lock when stale. A
 * bucket's chain is built after its key's, whose rebuild publishes the
 * key's buckets (publish_split()): the bucket's rows are then this
 * generation's.
 */
static struct fld_chain *global_chain(struct fld_op_s *op, unsigned slot)
{
    fld__lock();
    if (slot >= FLD_NSLOTS && !ensure_buckets(op)) {
        fld__unlock();
        return NULL;
    }
    uint64_t gen = atomic_load(&fld__generation);
    struct fld_chain *c = atomic_load(chain_at(op, slot));
    if (!c || c->generation != gen) {
        int dev, dt;
        slot_key(slot, &dev, &dt);
        const unsigned key = fld__slot_key(slot), bucket = fld__slot_bucket(slot);
        int64_t rows = 0; /* the key, and the rest: no bucket */
        if (bucket >= 1 && bucket <= FLD_MAX_BUCKETS) {
            const struct fld_chain *k = global_chain(op, key); /* the lock is recursive */
            rows = k && bucket <= k->buckets
                       ? atomic_load(&op_buckets(op)->split[key].lo[bucket - 1])
                       : 0;
        }
        struct fld_chain *fresh = fld__select_chain(op, dev, dt, rows, fld__policy_global(), gen);
        if (fresh && bucket == 0)
            publish_split(op, key, fresh);
        if (fresh) {
            if (unlikely(atomic_load_explicit(&fld__stats_flags, memory_order_relaxed) &
                         FLD_STATS_FLAG_TRACE))
                trace_chain_built(op, slot, fresh);
            fresh->global = true;
            atomic_store_explicit(chain_at(op, slot), fresh, memory_order_release);
            if (c)
                fld__retire(c, chain_free);
        }
        c = fresh;
    }
    fld__unlock();
    return c;
}

/*
 * A key's fresh chain (host lock held): the global manifest's row buckets of
 * the key go into op->split[] and the chain; the key's fast entry says
 * "bucketed" for this generation (no direct fn: the calls go to their
 * buckets' slots), or is left to enable_fast() when the key has none.
 */
static void publish_split(struct fld_op_s *op, unsigned key, struct fld_chain *c)
{
    const struct fld_policy *pol = fld__policy_global();
    int dev, dt;
    slot_key(key, &dev, &dt);
    int64_t lo[FLD_MAX_BUCKETS], hi[FLD_MAX_BUCKETS];
    int n = pol->manifest ? fld__manifest_buckets(pol->manifest, op->name, dev, dt, lo, hi) : 0;
    struct fld_fast_call *f = &op->fast[key];
    struct fld_op_buckets *ob = n && ensure_buckets(op) ? op_buckets(op) : NULL;
    if (!ob) { /* none, or out of memory: the key resolves without its buckets */
        c->buckets = 0;
        return;
    }
    c->buckets = (uint32_t)n;
    struct fld_row_split *split = &ob->split[key];
    for (int b = 0; b < n; b++) {
        atomic_store_explicit(&split->lo[b], lo[b], memory_order_relaxed);
        atomic_store_explicit(&split->hi[b], hi[b], memory_order_relaxed);
    }
    for (int64_t r = 0; r < FLD_SMALL_ROWS; r++) {
        uint8_t bucket = FLD_BUCKET_REST;
        for (int b = 0; b < n; b++)
            if (r >= lo[b] && r <= hi[b])
                bucket = (uint8_t)(b + 1);
        atomic_store_explicit(&split->small[r], bucket, memory_order_relaxed);
    }
    size_t offset = 0;
    int keep = 0;
    bool has_rows = op->schema && fld__rows_source(op->schema->args_kind, &offset, &keep);
    atomic_store_explicit(&ob->rows_source.offset, (uint32_t)offset, memory_order_relaxed);
    atomic_store_explicit(&ob->rows_source.keep, has_rows ? (uint32_t)keep : FLD_ROWS_NONE,
                          memory_order_relaxed);
    atomic_store_explicit(&split->n, (uint32_t)n, memory_order_relaxed);
    atomic_store_explicit(&split->generation, c->generation, memory_order_release);
    atomic_store(&f->fn, NULL);
    atomic_store_explicit(&f->generation, c->generation, memory_order_release);
}

/* fld__retire()'s callback for a replaced global chain. */
static void chain_free(void *p)
{
    free(p);
}

/* ---- thread-local chains for scoped overrides --------------------------- */

#define TLS_CACHE_SIZE 64

struct tls_entry {
    const struct fld_op_s *op;
    unsigned slot;
    uint64_t serial;
    uint64_t generation;
    struct fld_chain *chain;
};

static _Thread_local struct tls_entry tls_cache[TLS_CACHE_SIZE];
static _Thread_local struct fld_chain *tls_retired;
static _Thread_local int tls_depth;

/*
 * Under a scoped policy with a manifest, the slot of a catalog call's row
 * bucket in that manifest (key + bucket * FLD_NKEYS), and the bucket's
 * first row count for selection; the key slot and 0 otherwise.
 */
static unsigned override_bucket(const struct fld_op_s *op, unsigned slot, const void *args,
                                const struct fld_policy *pol, int64_t *rows)
{
    *rows = 0;
    if (!pol->manifest || !op->schema)
        return slot;
    int dev, dt;
    slot_key(slot, &dev, &dt);
    int64_t lo[FLD_MAX_BUCKETS], hi[FLD_MAX_BUCKETS];
    int n = fld__manifest_buckets(pol->manifest, op->name, dev, dt, lo, hi);
    if (!n)
        return slot;
    int64_t r = fld__call_rows(op->schema->args_kind, args);
    for (int b = 0; b < n; b++)
        if (r >= lo[b] && r <= hi[b]) {
            *rows = lo[b];
            return slot + (unsigned)(b + 1) * FLD_NKEYS;
        }
    return slot + FLD_BUCKET_REST * FLD_NKEYS;
}

static int dispatch_thread_policy(struct fld_op_s *op, unsigned slot, const void *args,
                                  const struct fld_policy *pol)
{
    int64_t rows;
    slot = override_bucket(op, slot, args, pol, &rows);
    uint64_t gen = atomic_load_explicit(&fld__generation, memory_order_acquire);
    struct tls_entry *e = &tls_cache[(((uintptr_t)op >> 4) * 31 + slot) % TLS_CACHE_SIZE];
    if (e->op != op || e->slot != slot || e->serial != pol->serial || e->generation != gen ||
        !e->chain) {
        int dev, dt;
        slot_key(slot, &dev, &dt);
        fld__lock();
        gen = atomic_load(&fld__generation);
        struct fld_chain *c = fld__select_chain(op, dev, dt, rows, pol, gen);
        fld__unlock();
        if (!c)
            return fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
        if (unlikely(atomic_load_explicit(&fld__stats_flags, memory_order_relaxed) &
                     FLD_STATS_FLAG_TRACE))
            trace_chain_built(op, slot, c);
        if (e->chain) {
            e->chain->tls_next = tls_retired;
            tls_retired = e->chain;
        }
        *e = (struct tls_entry){op, slot, pol->serial, gen, c};
    }
    tls_depth++;
    int rc = run_chain(op, slot, e->chain, args, 0, FLD_OK);
    if (--tls_depth == 0)
        tls_free_retired();
    return rc;
}

void fld__dispatch_tls_flush(void)
{
    for (int i = 0; i < TLS_CACHE_SIZE; i++) {
        if (tls_cache[i].chain) {
            tls_cache[i].chain->tls_next = tls_retired;
            tls_retired = tls_cache[i].chain;
        }
        memset(&tls_cache[i], 0, sizeof tls_cache[i]);
    }
    if (tls_depth == 0)
        tls_free_retired();
}

static void tls_free_retired(void)
{
    while (tls_retired) {
        struct fld_chain *c = tls_retired;
        tls_retired = c->tls_next;
        free(c);
    }
}

/* ---- host calls (binding.h) ------------------------------------------ */

/* The binding's argument record of the host call this thread is making, if
 * any: plugin implementations decline it (run_plugin_impl()). */
static _Thread_local const void *tls_binding_args;

int fld_binding_call(fld_op handle, int device_type, DLDataType dtype, const void *binding_args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op)
        return fld__fail(FLD_EINVAL, "fld_binding_call: argument 'op' is NULL");
    if (!binding_args)
        return fld__fail(FLD_EINVAL, "fld_binding_call: argument 'binding_args' is NULL");
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_binding_call");
    if (op->schema)
        return fld__fail(FLD_EINVAL,
                         "%s is a catalog op: call it with its argument struct (its typed entry "
                         "point or fld_call()), not with a binding's own arguments",
                         op->name);
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    unsigned slot = fld__slot(dev, dt);
    const void *outer = tls_binding_args;
    tls_binding_args = binding_args;
    /* Not dispatch(): its direct path may call a plugin kernel. */
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        rc = dispatch_maybe_overridden(op, slot, binding_args);
    else
        rc = dispatch_slow(op, slot, binding_args);
    tls_binding_args = outer;
    return rc;
}

int fld_binding_first(fld_op handle, int device_type, DLDataType dtype, fld_binding_kernel_fn *fn,
                   void **ctx, uint64_t *stamp)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op || !fn || !ctx || !stamp)
        return fld__fail(FLD_EINVAL, "fld_binding_first: argument '%s' is NULL",
                         !op    ? "op"
                         : !fn  ? "fn"
                         : !ctx ? "ctx"
                                : "stamp");
    *fn = NULL;
    *ctx = NULL;
    *stamp = 0;
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_binding_first");
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    if (op->schema || atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        return FLD_OK;
    unsigned slot = fld__slot(dev, dt);
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (!c || c->generation != atomic_load(&fld__generation))
        c = global_chain(op, slot);
    if (c && c->n && !c->impls[0]->fn && !(atomic_load(&c->failed) & 1u) &&
        (atomic_load(&c->announced) & 1u)) {
        *fn = c->impls[0]->binding_fn;
        *ctx = c->impls[0]->binding_ctx;
        *stamp = c->generation;
    }
    fld__read_end();
    return FLD_OK;
}

int fld_binding_op_keyed(fld_op handle, uint64_t *stamp)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op || !stamp)
        return fld__fail(FLD_EINVAL, "fld_binding_op_keyed: argument '%s' is NULL",
                         op ? "stamp" : "op");
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_binding_op_keyed");
    fld__lock();
    *stamp = atomic_load(&fld__generation);
    int keyed = op->schema || fld__policy_global()->manifest;
    for (size_t i = 0; i < op->n_impls && !keyed; i++)
        keyed = op->impls[i]->devices != FLD_DEVICE_MASK_ALL ||
                op->impls[i]->dtypes != FLD_DTYPE_MASK_ALL;
    fld__unlock();
    return keyed;
}

uint64_t fld_binding_stamp(void)
{
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        return 0;
    return atomic_load_explicit(&fld__generation, memory_order_acquire);
}

int fld_binding_first_failed(fld_op handle, int device_type, DLDataType dtype, const void *binding_args,
                          void *ctx, int status)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op || !binding_args)
        return fld__fail(FLD_EINVAL, "fld_binding_first_failed: argument '%s' is NULL",
                         op ? "binding_args" : "op");
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_binding_first_failed");
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    unsigned slot = fld__slot(dev, dt);
    const void *outer = tls_binding_args;
    tls_binding_args = binding_args;
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (c && c->generation == atomic_load(&fld__generation) && c->n && !c->impls[0]->fn &&
        c->impls[0]->binding_ctx == ctx)
        rc = run_chain(op, slot, c, binding_args, 1, status == FLD_OK ? FLD_EIMPL : status);
    else
        rc = dispatch_slow(op, slot, binding_args);
    fld__read_end();
    tls_binding_args = outer;
    return rc;
}

/* A plugin kernel, unless args is a binding's own record, which it cannot read. */
static inline int run_plugin_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                                  const void *args)
{
    if (unlikely(args == tls_binding_args && args))
        return fld__fail(FLD_EUNSUPPORTED,
                         "%s: '%s' is a C implementation (plugin '%s') and the call came from a "
                         "language binding with its own arguments, which it cannot read (an op "
                         "called from a binding runs on C kernels only through its argument "
                         "struct)",
                         op->name, r->impl_id, r->plugin ? r->plugin->name : "?");
    return r->fn(args);
}

/* One candidate of a chain: a plugin kernel, or a binding's kernel with its context. */
static inline int run_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                           const void *args)
{
    return r->fn ? run_plugin_impl(op, r, args) : r->binding_fn(r->binding_ctx, args);
}

/* ---- the run of a chain ------------------------------------------------- */

/*
 * Runs chain c from candidate `start`. If first_rc is not FLD_OK, candidate
 * start - 1 already ran (the hot path) and failed with first_rc.
 */
static int run_chain(struct fld_op_s *op, unsigned slot, struct fld_chain *c, const void *args,
                     uint32_t start, int first_rc)
{
    int dev, dt;
    slot_key(slot, &dev, &dt);
    int last_rc = FLD_OK;
    const struct fld_impl_rec *last_failed = NULL;
    char last_msg[512] = "";
    /* The last decliner's own explanation, if it gave one (e.g. "no sparse
     * MLA attention backend on ascend"), for the message when all decline. */
    char decline_msg[512] = "";
    const struct fld_impl_rec *last_decliner = NULL;
    uint32_t tried = 0, skipped_failed = 0;
    /* One load when off: the counting is out of line. */
    const unsigned stats = atomic_load_explicit(&fld__stats_flags, memory_order_relaxed);
    struct observed ob = {NULL, NULL};

    if (first_rc == FLD_EUNSUPPORTED) {
        /* Declined on the direct path, where its reason cannot be told from a
         * message left by an earlier call: ask it again below with the
         * message cleared (a decline leaves the outputs untouched). */
        start--;
        first_rc = FLD_OK;
    }
    if (first_rc != FLD_OK) {
        struct fld_impl_rec *r = c->impls[start - 1];
        if (unlikely(stats & FLD_STATS_FLAG_COUNT)) {
            /* It ran on the direct path, which counting closes: a call that
             * raced the switch. */
            ob.last = fld__stats_cell(r, fld__slot_key(slot), dev, dt);
            if (ob.last)
                fld__stats_count(ob.last, first_rc, 0);
            ob.failed = c->strict ? NULL : ob.last;
        }
        if (c->strict) {
            return first_rc;
        } else {
            mark_failed(op, slot, c, start - 1);
            fld__error_copy(last_msg, sizeof last_msg);
            fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                     fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt),
                     fld_strerror(first_rc), last_msg[0] ? ": " : "", last_msg);
            last_rc = first_rc;
            last_failed = r;
            tried++;
        }
    }
    if (c->n == 0)
        return no_candidate(op, slot);

    for (uint32_t i = start; i < c->n; i++) {
        if (atomic_load_explicit(&c->failed, memory_order_relaxed) & (1ull << i)) {
            skipped_failed++;
            continue;
        }
        struct fld_impl_rec *r = c->impls[i];
        if (r->supports && !r->supports(args))
            continue;
        /* Whatever message follows a failure is then the impl's own. */
        fld__error_clear();
        int rc = likely(!stats) ? run_impl(op, r, args)
                                : call_observed(op, r, slot, dev, dt, args, stats, &ob);
        if (rc == FLD_OK) {
            note_served(op, slot, c, i);
            return FLD_OK;
        }
        if (rc == FLD_EUNSUPPORTED) {
            fld__log(FLD_LOG_DEBUG, "Implementation '%s' declined op '%s' (%s, %s)",
                     fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt));
            if (fld_last_error()[0]) {
                fld__error_copy(decline_msg, sizeof decline_msg);
                last_decliner = r;
                fld__error_clear();
            }
            continue;
        }
        if (c->strict)
            return rc; /* the winner's own status and message, unchanged */
        mark_failed(op, slot, c, i);
        if (unlikely(stats))
            ob.failed = ob.last;
        fld__error_copy(last_msg, sizeof last_msg);
        fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                 fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt),
                 fld_strerror(rc), last_msg[0] ? ": " : "", last_msg);
        last_rc = rc;
        last_failed = r;
        tried++;
    }
    if (tried)
        return fld__fail(FLD_EIMPL,
                         "all %u implementation(s) of op '%s' (%s, %s) that ran failed; last error "
                         "from '%s': %s%s%s",
                         tried, op->name, fld__device_label(dev), fld__dtype_label(dt),
                         fld__impl_name(last_failed), fld_strerror(last_rc),
                         last_msg[0] ? ": " : "", last_msg);
    if (skipped_failed)
        return fld__fail(FLD_EIMPL,
                         "every implementation of op '%s' (%s, %s) that accepts these arguments "
                         "has failed earlier; they are retried after a policy or registry change "
                         "or fld_clear_failures()",
                         op->name, fld__device_label(dev), fld__dtype_label(dt));
    return fld__fail(FLD_EUNAVAILABLE,
                     "no implementation of op '%s' (%s, %s) accepts these arguments (%u "
                     "candidate(s) declined)%s%s%s%s",
                     op->name, fld__device_label(dev), fld__dtype_label(dt), c->n,
                     last_decliner ? "; '" : "", last_decliner ? fld__impl_name(last_decliner) : "",
                     last_decliner ? "' said: " : "", last_decliner ? decline_msg : "");
}

/*
 * One call of r, counted and timed as flags ask: the previous failed
 * implementation, if any, fell back to this one.
 */
__attribute__((noinline)) static int call_observed(const struct fld_op_s *op,
                                                   struct fld_impl_rec *r, unsigned slot, int dev,
                                                   int dt, const void *args, unsigned flags,
                                                   struct observed *ob)
{
    struct fld_stats_cell *cell = fld__stats_cell(r, fld__slot_key(slot), dev, dt);
    if (ob->failed) {
        if (flags & FLD_STATS_FLAG_COUNT)
            fld__stats_fallback(ob->failed);
        ob->failed = NULL;
    }
    ob->last = cell;
    const bool timed = flags & (FLD_STATS_FLAG_TIME | FLD_STATS_FLAG_TRACE);
    uint64_t start = timed ? fld__stats_now() : 0;
    int rc = run_impl(op, r, args);
    uint64_t end = timed ? fld__stats_now() : 0;
    if (cell) {
        if (flags & FLD_STATS_FLAG_COUNT)
            fld__stats_count(cell, rc, end - start);
        if (flags & FLD_STATS_FLAG_TRACE)
            fld__trace_call(cell, start, end, rc);
    }
    return rc;
}

/* The trace's record of a chain just built (its candidates, in order). */
__attribute__((noinline, cold)) static void
trace_chain_built(const struct fld_op_s *op, unsigned slot, const struct fld_chain *c)
{
    int dev, dt;
    slot_key(slot, &dev, &dt);
    const char *ids[64];
    size_t n = c->n < 64 ? c->n : 64;
    for (size_t i = 0; i < n; i++)
        ids[i] = fld__impl_name(c->impls[i]);
    fld__trace_chain(op->name, dev, dt, ids, n);
}

/* Logs the first use of impls[i] through chain c, then lets the hot path in. */
static void note_served(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    uint64_t bit = 1ull << i;
    if (!(atomic_load_explicit(&c->announced, memory_order_relaxed) & bit) &&
        !(atomic_fetch_or(&c->announced, bit) & bit)) {
        struct fld_impl_rec *r = c->impls[i];
        const struct fld_impl_rec *prev = atomic_exchange(served_at(op, slot), r);
        int dev, dt;
        slot_key(slot, &dev, &dt);
        char what[128];
        describe_impl(r, what, sizeof what);
        if (i > 0 && atomic_load(&c->failed))
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) fallback to '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(r), what);
        else if (!prev)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) using '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(r), what);
        else if (prev != r)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) switched from '%s' to '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(prev),
                     fld__impl_name(r), what);
    }
    if (i == 0 && c->global && !c->buckets && c->impls[0]->fn && !c->impls[0]->supports &&
        !(atomic_load(&c->failed) & 1u))
        enable_fast(op, slot, c);
}

/*
 * Lets the hot path call c's first candidate directly, if c is still the
 * slot's chain of the current generation. A failure of that candidate
 * recorded meanwhile must win (mark_failed sets the bit, then clears fn):
 * the bit is checked again after fn is stored, so either this or that clear
 * comes last (both sequentially consistent: keep them so).
 */
static void enable_fast(struct fld_op_s *op, unsigned slot, struct fld_chain *c)
{
    /* Counting and tracing need every call on the chain path: no direct one. */
    if (atomic_load_explicit(&fld__stats_flags, memory_order_relaxed))
        return;
    struct fld_fast_call *f = fast_at(op, slot);
    const fld_kernel_fn fn = c->impls[0]->fn;
    if (atomic_load_explicit(&f->generation, memory_order_relaxed) == c->generation &&
        atomic_load_explicit(&f->fn, memory_order_relaxed) == fn)
        return;
    fld__lock();
    if (atomic_load(chain_at(op, slot)) == c && c->generation == atomic_load(&fld__generation)) {
        atomic_store(&f->fn, fn);
        atomic_store_explicit(&f->generation, c->generation, memory_order_release);
        if (atomic_load(&c->failed) & 1u)
            atomic_store(&f->fn, NULL);
    }
    fld__unlock();
}

/* impls[i] of c failed: remembered; if it is the one called directly, no
 * longer (the fast path only ever calls impls[0]). */
static void mark_failed(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    atomic_fetch_or(&c->failed, 1ull << i);
    if (i == 0 && c->global)
        atomic_store(&fast_at(op, slot)->fn, NULL); /* a newer chain's: it is enabled again */
}

static int no_candidate(struct fld_op_s *op, unsigned slot)
{
    int dev, dt;
    slot_key(slot, &dev, &dt);
    /* Say why each implementation that declares this device and dtype was
     * dropped (unavailable, with the plugin's reason; or the policy), so a
     * call on a device whose plugin cannot run names the cause. */
    char why[768] = "";
    size_t len = 0, listed = 0, others = 0;
    fld_resolution *res = NULL;
    DLDataType dtype = {kDLFloat, 32, 1};
    if (dt == FLD_DT_F16)
        dtype = (DLDataType){kDLFloat, 16, 1};
    else if (dt == FLD_DT_BF16)
        dtype = (DLDataType){kDLBfloat, 16, 1};
    int dev_type = dev == FLD_DEV_ANY ? FLD_DEVICE_CPU : fld__device_type_of(dev);
    if (fld_explain(op->name, dev_type, dtype, &res) == FLD_OK) {
        /* First pass: those that declare (dev, dt); when there are none,
         * the second lists what every registered one does support. */
        for (int pass = 0; pass < 2 && !listed; pass++) {
            for (size_t i = 0; i < res->n_rejected; i++) {
                const fld_rejection *r = &res->rejected[i];
                bool declares = strncmp(r->reason, "does not support ", 17) != 0;
                if (declares != (pass == 0))
                    continue;
                if (len < sizeof why)
                    len += (size_t)snprintf(why + len, sizeof why - len, "%s%s: %s",
                                            listed++ ? "; " : "", r->impl_id, r->reason);
            }
            if (!listed)
                others = 1;
        }
        fld_resolution_free(res);
    }
    return fld__fail(FLD_EUNAVAILABLE,
                     "no available implementation for op '%s' (%s, %s)%s: %s (run 'fldispatch "
                     "resolve %s' for details)",
                     op->name, fld__device_label(dev), fld__dtype_label(dt),
                     others ? ": none supports it" : "", listed ? why : "none registered",
                     op->name);
}

static void slot_key(unsigned slot, int *dev, int *dt)
{
    unsigned key = fld__slot_key(slot);
    *dev = (int)key / (FLD_NDTYPES + 1);
    *dt = (int)key % (FLD_NDTYPES + 1);
}

static void describe_impl(const struct fld_impl_rec *r, char *buf, size_t size)
{
    snprintf(buf, size, "kind=%s%s%s", fld__kind_token(r->kind), r->vendor ? ", vendor=" : "",
             r->vendor ? r->vendor : "");
}

/* ---- explain, resolve, failures, shutdown ------------------------------- */

int fld_explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    FLD_CALL_SCOPE();
    if (out)
        *out = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !out)
        return fld__fail(FLD_EINVAL, "fld_explain: argument '%s' is NULL", name ? "out" : "op");
    return explain(name, device_type, dtype, out);
}

int fld_resolve(const char *name, int device_type, DLDataType dtype, const char **impl_id)
{
    FLD_CALL_SCOPE();
    if (impl_id)
        *impl_id = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !impl_id)
        return fld__fail(FLD_EINVAL, "fld_resolve: argument '%s' is NULL", name ? "impl_id" : "op");
    fld_resolution *res;
    rc = explain(name, device_type, dtype, &res);
    if (rc)
        return rc;
    if (!res->selected) {
        char detail[700] = "";
        size_t len = 0;
        for (size_t i = 0; i < res->n_rejected && len < sizeof detail; i++)
            len += (size_t)snprintf(detail + len, sizeof detail - len, "%s%s: %s", i ? "; " : "",
                                    res->rejected[i].impl_id, res->rejected[i].reason);
        rc = fld__fail(FLD_EUNAVAILABLE, "no available implementation for op '%s' on %s/%s%s%s",
                       name, fld_device_name(device_type), fld_dtype_name(dtype),
                       res->n_rejected ? "; registered: " : " (none registered)", detail);
    } else {
        *impl_id = res->selected;
    }
    fld_resolution_free(res);
    return rc;
}

/* fld_explain() once the public function has checked its arguments. */
static int explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    return fld__explain_rows(name, device_type, dtype, 0, out);
}

int fld__explain_rows(const char *name, int device_type, DLDataType dtype, int64_t rows,
                      fld_resolution **out)
{
    *out = NULL;
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        return unknown_op(name);
    return fld__select_explain(op, dev, dt, rows, device_type, dtype, out);
}

/* FLD_ENOTFOUND for an op name nothing registered, with the closest names. */
static int unknown_op(const char *name)
{
    char hint[256];
    fld__lock();
    fld__did_you_mean_op(name, hint, sizeof hint);
    fld__unlock();
    return fld__fail(FLD_ENOTFOUND,
                     "no op named '%s' (not in the catalog and no plugin registered it)%s", name,
                     hint);
}

int fld_clear_failures(const char *name)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    fld__lock();
    if (name) {
        struct fld_op_s *op = fld__op_find(name);
        if (!op) {
            fld__unlock();
            return unknown_op(name);
        }
        clear_op_failures(op, NULL);
    } else {
        fld__op_foreach(clear_op_failures, NULL);
    }
    fld__unlock();
    fld__dispatch_tls_flush();
    return FLD_OK;
}

static void clear_op_failures(struct fld_op_s *op, void *user)
{
    const unsigned n = op_buckets(op) ? FLD_NALLSLOTS : FLD_NSLOTS;
    for (unsigned s = 0; s < n; s++) {
        struct fld_chain *c = atomic_load(chain_at(op, s));
        if (c)
            atomic_store(&c->failed, 0);
    }
}

/* fld_foreach_failure()'s walk: the callback, and its first non-zero return. */
struct failure_walk {
    int (*fn)(const fld_failure_info *info, void *user);
    void *user;
    int rc;
};

/* Reports the failed candidates of chain c, cached for op's slot. */
static void list_chain_failures(struct failure_walk *w, const struct fld_op_s *op, unsigned slot,
                                const struct fld_chain *c)
{
    static const DLDataType dtypes[] = {
        [FLD_DT_F32] = {kDLFloat, 32, 1},
        [FLD_DT_F16] = {kDLFloat, 16, 1},
        [FLD_DT_BF16] = {kDLBfloat, 16, 1},
        [FLD_DT_ANY] = {0, 0, 0},
    };
    int dev, dt;
    slot_key(slot, &dev, &dt);
    uint64_t failed = atomic_load(&c->failed);
    for (uint32_t i = 0; i < c->n && i < 64 && w->rc == 0; i++) {
        if (!(failed & (1ull << i)))
            continue;
        fld_failure_info info = {
            .op = op->name,
            .device_type = dev == FLD_DEV_ANY ? 0 : fld__device_type_of(dev),
            .dtype = dtypes[dt],
            .impl_id = fld__impl_name(c->impls[i]),
        };
        w->rc = w->fn(&info, w->user);
    }
}

static void list_op_failures(struct fld_op_s *op, void *user)
{
    struct failure_walk *w = user;
    uint64_t gen = atomic_load(&fld__generation);
    const unsigned n = op_buckets(op) ? FLD_NALLSLOTS : FLD_NSLOTS;
    for (unsigned s = 0; s < n && w->rc == 0; s++) {
        const struct fld_chain *c = atomic_load(chain_at(op, s));
        if (c && c->generation == gen)
            list_chain_failures(w, op, s, c);
    }
}

int fld_foreach_failure(int (*fn)(const fld_failure_info *info, void *user), void *user)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_failure: argument 'fn' is NULL");
    struct failure_walk w = {fn, user, 0};
    fld__lock();
    fld__op_foreach(list_op_failures, &w);
    /* The calling thread's chains under the override in force. */
    const struct fld_policy *top = fld__policy_override_top();
    uint64_t gen = atomic_load(&fld__generation);
    for (int i = 0; i < TLS_CACHE_SIZE && top && w.rc == 0; i++) {
        const struct tls_entry *e = &tls_cache[i];
        if (e->chain && e->serial == top->serial && e->generation == gen)
            list_chain_failures(&w, e->op, e->slot, e->chain);
    }
    fld__unlock();
    return w.rc;
}

void fld__dispatch_shutdown(void)
{
    fld__op_foreach(drop_op_chains, NULL);
    fld__dispatch_tls_flush();
}

static void drop_op_chains(struct fld_op_s *op, void *user)
{
    struct fld_op_buckets *b = atomic_exchange(&op->buckets, NULL);
    for (unsigned s = 0; s < FLD_NSLOTS; s++) {
        free(atomic_exchange(&op->slots[s], NULL));
        atomic_store(&op->last_served[s], NULL);
        atomic_store(&op->fast[s].fn, NULL);
        atomic_store(&op->fast[s].generation, 0);
    }
    for (unsigned s = 0; b && s < FLD_NBSLOTS; s++)
        free(atomic_load(&b->slots[s]));
    free(b);
}
