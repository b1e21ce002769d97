/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chains of a thread with a scoped policy override (policy_override.h):
 * a small thread-local cache keyed by the override's policy serial and the
 * generation; those chains belong to the thread and keep no state in the op.
 * Chains replaced while a call of this thread runs one are freed when the
 * outermost such call returns.
 */
#include <stdlib.h>
#include <string.h>

#include "chain.h"
#include "dispatch_override.h"
#include "error.h"
#include "host.h"
#include "manifest.h"
#include "rows.h"
#include "stats.h"

#define unlikely(x) __builtin_expect(!!(x), 0)

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

static void tls_free_retired(void)
{
    while (tls_retired) {
        struct fld_chain *c = tls_retired;
        tls_retired = c->tls_next;
        free(c);
    }
}

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
    fld__slot_dev_dt(slot, &dev, &dt);
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

int fld__dispatch_overridden(struct fld_op_s *op, unsigned slot, const void *args,
                             const struct fld_policy *pol)
{
    int64_t rows;
    slot = override_bucket(op, slot, args, pol, &rows);
    uint64_t gen = atomic_load_explicit(&fld__generation, memory_order_acquire);
    struct tls_entry *e = &tls_cache[(((uintptr_t)op >> 4) * 31 + slot) % TLS_CACHE_SIZE];
    if (e->op != op || e->slot != slot || e->serial != pol->serial || e->generation != gen ||
        !e->chain) {
        int dev, dt;
        fld__slot_dev_dt(slot, &dev, &dt);
        fld__lock();
        gen = atomic_load(&fld__generation);
        struct fld_chain *c = fld__select_chain(op, dev, dt, rows, pol, gen);
        fld__unlock();
        if (!c)
            return fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
        if (unlikely(atomic_load_explicit(&fld__stats_flags, memory_order_relaxed) &
                     FLD_STATS_FLAG_TRACE))
            fld__trace_chain_built(op, slot, c);
        if (e->chain) {
            e->chain->tls_next = tls_retired;
            tls_retired = e->chain;
        }
        *e = (struct tls_entry){op, slot, pol->serial, gen, c};
    }
    tls_depth++;
    int rc = fld__run_chain(op, slot, e->chain, args, 0, FLD_OK);
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

void fld__override_chains(uint64_t serial, uint64_t gen,
                          void (*fn)(const struct fld_op_s *op, unsigned slot,
                                     const struct fld_chain *c, void *user),
                          void *user)
{
    for (int i = 0; i < TLS_CACHE_SIZE; i++) {
        const struct tls_entry *e = &tls_cache[i];
        if (e->chain && e->serial == serial && e->generation == gen)
            fn(e->op, e->slot, e->chain, user);
    }
}
