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

#include "devices.h"
#include "dtypes.h"

/* The cache slots: one per (device index, dtype index), devices.h's and dtypes.h's. */
#define FLD_NSLOTS ((FLD_NDEVICES + 1) * (FLD_NDTYPES + 1))

static inline unsigned fld__slot(int dev, int dt)
{
    return (unsigned)(dev * (FLD_NDTYPES + 1) + dt);
}

/* FLD_DT_* index of a DLPack dtype, or -1 (same order as fld_dtype_index()). */
static inline int fld__dtype_index(DLDataType t)
{
    return fld_dtype_index(t);
}

/* What a validator derives from a call: the cache slot to use. */
struct fld_call_key {
    int device; /* FLD_DEV_* */
    int dtype;  /* FLD_DT_* */
};

/*
 * Checks a catalog op's arguments without touching tensor memory (except
 * rotary positions, which it reads to range-check). FLD_OK and the key, or
 * FLD_EINVAL with a message "<op>: <what is wrong, naming the tensor>".
 */
typedef int (*fld_validate_fn)(const char *op, const void *args, struct fld_call_key *key);

enum fld_catalog_index {
    FLD_CAT_SILU_AND_MUL,
    FLD_CAT_MUL_AND_SILU,
    FLD_CAT_GELU_AND_MUL,
    FLD_CAT_GELU_TANH_AND_MUL,
    FLD_CAT_RMS_NORM,
    FLD_CAT_GEMMA_RMS_NORM,
    FLD_CAT_ROTARY_EMBEDDING,
    FLD_CAT_ATTENTION_BACKEND,
    FLD_CAT_COUNT
};

/* One row of the schema table (core/catalog.c). */
struct fld_op_schema {
    const char *name;
    size_t args_size;
    fld_validate_fn validate;
    fld_kernel_fn reference;    /* the library's reference.c implementation */
    uint32_t reference_devices; /* FLD_DEVICE_MASK_* the reference serves */
    uint32_t reference_dtypes;  /* FLD_DTYPE_MASK_* */
    fld_args_kind args_kind;    /* the argument struct (fld_foreach_catalog_op) */
};

extern const struct fld_op_schema fld__catalog[FLD_CAT_COUNT];

struct fld_chain;
struct fld_impl_rec;

/*
 * What the dispatch fast path reads for one slot: it may call fn directly
 * while `generation` equals fld__generation. Kept in the op (which lives
 * until fld_shutdown()) so the hot path never dereferences a chain that a
 * policy change could retire. Written under the host lock (manager.c).
 */
struct fld_fast_call {
    _Atomic uint64_t generation;
    _Atomic(fld_kernel_fn) fn;
};

/* An interned op. Allocated at init (catalog) or on first registration. */
struct fld_op_s {
    const char *name;
    size_t name_len;
    const struct fld_op_schema *schema; /* NULL for ops outside the catalog */
    /* Direct calls per slot: the hot path reads nothing else. */
    struct fld_fast_call fast[FLD_NSLOTS];
    /* Cached chains per slot; read without the lock inside a reader section
     * (reclaim.h, manager.c). */
    _Atomic(struct fld_chain *) slots[FLD_NSLOTS];
    /* The impl that served the last call per slot, for "switched" log lines. */
    _Atomic(const struct fld_impl_rec *) last_served[FLD_NSLOTS];
    /* Registered implementations, sorted by impl_id; host lock held to use. */
    struct fld_impl_rec **impls;
    size_t n_impls, cap_impls;
    /* Records of the plugin being committed (registry.c's scratch; host lock held). */
    size_t n_staged;
};

/* Catalog op entries by FLD_CAT_* index (NULL before init). */
extern struct fld_op_s *_Atomic fld__catalog_ops[FLD_CAT_COUNT];

/*
 * Lock-free lookup of an interned op by name; NULL if unknown. Callers must
 * have initialised the library.
 */
struct fld_op_s *fld__op_find(const char *name);
/* Finds or creates an op entry; host lock held. NULL on ENOMEM. */
struct fld_op_s *fld__op_intern(const char *name);
/* Calls fn for every op in name order; host lock held. */
void fld__op_foreach(void (*fn)(struct fld_op_s *op, void *user), void *user);
/* Creates the catalog entries (init) and frees everything (shutdown). */
int fld__ops_init(void);
void fld__ops_shutdown(void);
/*
 * fld_shutdown()'s gate for the typed entry points: unpublishes the catalog
 * entries (a typed call then goes to fld_init(), which refuses while the
 * shutdown waits), and publishes them again when the shutdown gives up.
 */
void fld__ops_close(void);
void fld__ops_reopen(void);

#endif
