/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The global chains: op->slots[] (a slot per (device, dtype) key, and per row
 * bucket where the global manifest splits a key), rebuilt under the host
 * lock when their generation is stale, published with a release store and
 * read without the lock inside a reader section; a replaced chain is
 * retired and freed once no section can hold it (reclaim.h).
 */
#include <stdlib.h>

#include "chain.h"
#include "host.h"
#include "manifest.h"
#include "reclaim.h"
#include "rows.h"
#include "stats.h"

#define unlikely(x) __builtin_expect(!!(x), 0)

/* Gives op its bucket record on first need (host lock held; freed at
 * shutdown by drop_op_chains()); false when out of memory. */
static bool ensure_buckets(struct fld_op_s *op)
{
    if (fld__op_buckets(op))
        return true;
    struct fld_op_buckets *b = calloc(1, sizeof *b);
    if (b)
        atomic_store_explicit(&op->buckets, b, memory_order_release);
    return b != NULL;
}

/* fld__retire()'s callback for a replaced global chain. */
static void chain_free(void *p)
{
    free(p);
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
    fld__slot_dev_dt(key, &dev, &dt);
    int64_t lo[FLD_MAX_BUCKETS], hi[FLD_MAX_BUCKETS];
    int n = pol->manifest ? fld__manifest_buckets(pol->manifest, op->name, dev, dt, lo, hi) : 0;
    struct fld_fast_call *f = &op->fast[key];
    struct fld_op_buckets *ob = n && ensure_buckets(op) ? fld__op_buckets(op) : NULL;
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

/*
 * The global chain of (op, slot), rebuilt under the lock when stale. A
 * bucket's chain is built after its key's, whose rebuild publishes the
 * key's buckets (publish_split()): the bucket's rows are then this
 * generation's.
 */
struct fld_chain *fld__global_chain(struct fld_op_s *op, unsigned slot)
{
    fld__lock();
    if (slot >= FLD_NSLOTS && !ensure_buckets(op)) {
        fld__unlock();
        return NULL;
    }
    uint64_t gen = atomic_load(&fld__generation);
    struct fld_chain *c = atomic_load(fld__chain_at(op, slot));
    if (!c || c->generation != gen) {
        int dev, dt;
        fld__slot_dev_dt(slot, &dev, &dt);
        const unsigned key = fld__slot_key(slot), bucket = fld__slot_bucket(slot);
        int64_t rows = 0; /* the key, and the rest: no bucket */
        if (bucket >= 1 && bucket <= FLD_MAX_BUCKETS) {
            const struct fld_chain *k = fld__global_chain(op, key); /* the lock is recursive */
            rows = k && bucket <= k->buckets
                       ? atomic_load(&fld__op_buckets(op)->split[key].lo[bucket - 1])
                       : 0;
        }
        struct fld_chain *fresh = fld__select_chain(op, dev, dt, rows, fld__policy_global(), gen);
        if (fresh && bucket == 0)
            publish_split(op, key, fresh);
        if (fresh) {
            if (unlikely(atomic_load_explicit(&fld__stats_flags, memory_order_relaxed) &
                         FLD_STATS_FLAG_TRACE))
                fld__trace_chain_built(op, slot, fresh);
            fresh->global = true;
            atomic_store_explicit(fld__chain_at(op, slot), fresh, memory_order_release);
            if (c)
                fld__retire(c, chain_free);
        }
        c = fresh;
    }
    fld__unlock();
    return c;
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

void fld__chains_drop(void)
{
    fld__op_foreach(drop_op_chains, NULL);
}
