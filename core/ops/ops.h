/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Operators: the catalog schema table and the interned op entries that hold
 * each op's implementations (the registry) and its cached choices.
 */
#ifndef FLD_CORE_OPS_H
#define FLD_CORE_OPS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/plugin.h>

#include "call_key.h"
#include "devices.h"
#include "dtypes.h"

/*
 * Cache slots. A key is a (device, dtype): slots 0 to FLD_NSLOTS - 1, in
 * every op. When the global policy's manifest splits a key into row
 * buckets (manifest.h), each bucket has a slot of its own, slot = key +
 * bucket * FLD_NKEYS: bucket 0 is the key itself (whose fast entry then
 * says "look at the rows"), 1 to FLD_MAX_BUCKETS the manifest's buckets in
 * ascending order, FLD_BUCKET_REST the rows no bucket covers. The bucket
 * slots live in the op's fld_op_buckets, allocated for the ops that have
 * buckets only (an op without costs what it did).
 */
#define FLD_MAX_BUCKETS 6
#define FLD_BUCKET_REST (FLD_MAX_BUCKETS + 1)
#define FLD_NKEYS       ((FLD_NDEVICES + 1) * (FLD_NDTYPES + 1))
#define FLD_NSLOTS      FLD_NKEYS
#define FLD_NBSLOTS                                                                                \
    (FLD_NKEYS * (FLD_MAX_BUCKETS + 1)) /* bucket slots: key + b * FLD_NKEYS, b >= 1 */
#define FLD_NALLSLOTS (FLD_NSLOTS + FLD_NBSLOTS)

static inline unsigned fld__slot(int dev, int dt)
{
    return (unsigned)(dev * (FLD_NDTYPES + 1) + dt);
}

/* The key slot of any slot, and its bucket. */
static inline unsigned fld__slot_key(unsigned slot)
{
    return slot % FLD_NKEYS;
}

static inline unsigned fld__slot_bucket(unsigned slot)
{
    return slot / FLD_NKEYS;
}

/* FLD_DT_* index of a DLPack dtype, or -1 (same order as fld_dtype_index()). */
static inline int fld__dtype_index(DLDataType t)
{
    return fld_dtype_index(t);
}

/*
 * Checks a catalog op's arguments without touching tensor memory (except
 * rotary positions, which it reads to range-check). FLD_OK and the key, or
 * FLD_EINVAL with a message "<op>: <what is wrong, naming the tensor>".
 */
typedef int (*fld_validate_fn)(const char *op, const void *args, struct fld_call_key *key);

/* Catalog indexes: FLD_CAT_<ID> per row of <fldispatch/catalog.def>, in its order. */
enum fld_catalog_index {
#define FLD_CATALOG_OP(id, name, family, doc) FLD_CAT_##id,
#include <fldispatch/catalog.def>
    FLD_CAT_COUNT
};

/* One row of the schema table (the catalog's data, core/ops/catalog.c). */
struct fld_op_schema {
    const char *name;
    size_t args_size;
    fld_validate_fn validate;
    fld_kernel_fn reference;    /* the library's reference.c implementation */
    uint32_t reference_devices; /* FLD_DEVICE_MASK_* the reference serves */
    uint32_t reference_dtypes;  /* FLD_DTYPE_MASK_* */
    fld_args_kind args_kind;    /* the argument struct (fld_foreach_catalog_op) */
    const char *signature;      /* its Python and torch form (fld_op_signature()) */
};

/*
 * The table, defined by catalog.c (a level below this one, read by the
 * dispatch and the tools' walks): ops.c itself keeps the table that
 * fld__ops_init() is handed.
 */
extern const struct fld_op_schema fld__catalog[FLD_CAT_COUNT];

struct fld_chain;
struct fld_impl_rec;

/*
 * What the dispatch fast path reads for one slot: it may call fn directly
 * while `generation` equals fld__generation. Kept in the op (which lives
 * until fld_shutdown()) so the hot path never dereferences a chain that a
 * policy change could retire. Written under the host lock (chain_cache.c, chain_run.c).
 */
struct fld_fast_call {
    _Atomic uint64_t generation;
    _Atomic(fld_kernel_fn) fn; /* NULL for a bucketed key: see fld_row_split */
};

/*
 * The row buckets of one key under the global policy, in ascending order:
 * bucket b (1-based) holds the calls with lo[b-1] <= rows <= hi[b-1]. The
 * key is bucketed while `generation` equals fld__generation and n > 0; its
 * fast entry then carries that generation with no fn, and the call goes to
 * its bucket's slot. Written under the host lock, the generation last
 * (release); read with relaxed loads after it.
 */
#define FLD_SMALL_ROWS 64
struct fld_row_split {
    _Atomic uint64_t generation;
    _Atomic uint32_t n;
    _Atomic int64_t lo[FLD_MAX_BUCKETS];
    _Atomic int64_t hi[FLD_MAX_BUCKETS];
    /* The slot's bucket (FLD_BUCKET_REST when none) for row counts below
     * FLD_SMALL_ROWS: decode calls find theirs with one load. */
    _Atomic uint8_t small[FLD_SMALL_ROWS];
};

/* Where a catalog op's calls keep their row count (rows.h): set with each
 * split, the same every time. */
struct fld_rows_source {
    _Atomic uint32_t offset; /* of the tensor pointer in the argument struct */
    _Atomic uint32_t keep;   /* trailing dims left out; FLD_ROWS_NONE: no rows (rest bucket) */
};
#define FLD_ROWS_NONE 255u

struct fld_chain;
struct fld_impl_rec;

/* An op's bucket slots (index slot - FLD_NSLOTS) and the splits of its keys. */
struct fld_op_buckets {
    struct fld_fast_call fast[FLD_NBSLOTS];
    _Atomic(struct fld_chain *) slots[FLD_NBSLOTS];
    _Atomic(const struct fld_impl_rec *) last_served[FLD_NBSLOTS];
    struct fld_row_split split[FLD_NKEYS];
    struct fld_rows_source rows_source;
};

/* An interned op. Allocated at init (catalog) or on first registration. */
struct fld_op_s {
    const char *name;
    size_t name_len;
    const struct fld_op_schema *schema; /* NULL for ops outside the catalog */
    /* The declared signature (signature.h), or NULL: set once under the
     * host lock, read without it, freed at shutdown. */
    struct fld_sig *_Atomic sig;
    /* Direct calls per slot: the hot path reads nothing else (a bucketed
     * key: also its split, in buckets). */
    struct fld_fast_call fast[FLD_NSLOTS];
    /* The bucket slots and splits, once a manifest gave this op buckets;
     * written once (host lock), freed at shutdown (chain_cache.c). */
    struct fld_op_buckets *_Atomic buckets;
    /* Cached chains per slot; read without the lock inside a reader section
     * (reclaim.h, chain_cache.c). */
    _Atomic(struct fld_chain *) slots[FLD_NSLOTS];
    /* The impl that served the last call per slot, for "switched" log lines. */
    _Atomic(const struct fld_impl_rec *) last_served[FLD_NSLOTS];
    /* Registered implementations, sorted by impl_id; host lock held to use. */
    struct fld_impl_rec **impls;
    size_t n_impls, cap_impls;
    /* Records of the plugin being committed (registry.c's scratch; host lock held). */
    size_t n_staged;
};

/* Catalog op entries by FLD_CAT_* index (NULL before init). Hidden in the
 * declaration too: the typed calls address it directly, not through the GOT. */
extern
    __attribute__((visibility("hidden"))) struct fld_op_s *_Atomic fld__catalog_ops[FLD_CAT_COUNT];

/*
 * Lock-free lookup of an interned op by name; NULL if unknown. Callers must
 * have initialised the library.
 */
struct fld_op_s *fld__op_find(const char *name);
/* Finds or creates an op entry; host lock held. NULL on ENOMEM. */
struct fld_op_s *fld__op_intern(const char *name);
/* Calls fn for every op in name order; host lock held. */
void fld__op_foreach(void (*fn)(struct fld_op_s *op, void *user), void *user);
/*
 * Creates the entries of the catalog ops, the FLD_CAT_COUNT rows of
 * catalog (fld__catalog, handed over by lifecycle.c), which op entries of
 * the same names then point at (init); frees everything (shutdown).
 */
int fld__ops_init(const struct fld_op_schema *catalog);
void fld__ops_shutdown(void);
/*
 * fld_shutdown()'s gate for the typed entry points: unpublishes the catalog
 * entries (a typed call then goes to fld_init(), which refuses while the
 * shutdown waits), and publishes them again when the shutdown gives up.
 */
void fld__ops_close(void);
void fld__ops_reopen(void);

#endif
