/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Interned ops. Lookups by name read a hash table without a lock and
 * without a reader section: open addressing with linear probing, slots
 * that only ever go from empty to an op (ops are never removed before
 * fld_shutdown()). Adding an op (host lock held) stores it into its empty
 * slot in place, so a lookup running at the same time finds it or not, and
 * finds every other op. When the table would be more than half full, one
 * of twice the capacity is built and published through an atomic pointer;
 * the old one is retired until fld_shutdown() (reclaim.h), because a
 * lookup may still be probing it. Those old tables are the halves of the
 * live one (16, 32, ... slots), so together they are smaller than it:
 * adding n ops costs O(n) amortised time and memory.
 *
 * Why no reader section: fld_call_by_name() looks its op up on every call,
 * and entering a section is an atomic exchange; measured on the Zen 4
 * development VM it made a call by name 6-8 ns slower (14-15 -> 20-23 ns),
 * to free at most a table's worth of memory before fld_shutdown().
 *
 * Op entries live until fld_shutdown(). The list of all ops in name order
 * (for walks, host lock held) is sorted when a walk needs it, not per op.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "inflight.h"
#include "host.h"
#include "ops.h"
#include "reclaim.h"
#include "signature.h"

struct op_table {
    size_t mask;                       /* capacity - 1 (a power of two) */
    _Atomic(struct fld_op_s *) slot[]; /* NULL or an op */
};

/* Every op, host lock held: appended, sorted by name when a walk needs it. */
static struct {
    struct fld_op_s **v;
    size_t n, cap;
    bool sorted;
} all = {NULL, 0, 0, true};

static _Atomic(struct op_table *) table;
struct fld_op_s *_Atomic fld__catalog_ops[FLD_CAT_COUNT];
/* The catalog's schema rows (FLD_CAT_COUNT), as fld__ops_init() was handed them. */
static const struct fld_op_schema *catalog;

/*
 * Op names are short and hashed on every by-name call: eight bytes per
 * multiply, the length folded in at the end so that one pass over a
 * NUL-terminated name gives both (hash_cstr) and agrees with hash_bytes.
 */
static size_t hash_finish(uint64_t h, uint64_t tail, size_t len)
{
    h = (h ^ tail ^ ((uint64_t)len << 56)) * 0xc4ceb9fe1a85ec53ull;
    return (size_t)(h ^ (h >> 29));
}

static size_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ull, w = 0;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
    }
    w = 0;
    for (unsigned k = 0; i < len; i++, k++)
        w |= (uint64_t)(unsigned char)s[i] << (8 * k);
    return hash_finish(h, w, len);
}

static size_t hash_cstr(const char *s, size_t *len_out)
{
    uint64_t h = 0x9e3779b97f4a7c15ull, w = 0;
    size_t len = 0;
    unsigned k = 0;
    for (; s[len]; len++) {
        w |= (uint64_t)(unsigned char)s[len] << (8 * k);
        if (++k == 8) {
            h = (h ^ w) * 0xff51afd7ed558ccdull;
            w = 0;
            k = 0;
        }
    }
    *len_out = len;
    return hash_finish(h, w, len);
}

/* a and b both have len readable bytes. */
static bool same_bytes(const char *a, const char *b, size_t len)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return false;
    }
    for (; i < len; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

struct fld_op_s *fld__op_find(const char *name)
{
    const struct op_table *t = atomic_load_explicit(&table, memory_order_acquire);
    if (!t)
        return NULL;
    size_t len;
    for (size_t i = hash_cstr(name, &len) & t->mask;; i = (i + 1) & t->mask) {
        struct fld_op_s *op = atomic_load_explicit(&t->slot[i], memory_order_acquire);
        if (!op || (op->name_len == len && same_bytes(op->name, name, len)))
            return op;
    }
}

static void table_free(void *p)
{
    free(p);
}

static struct op_table *table_new(size_t cap)
{
    struct op_table *t = calloc(1, sizeof *t + cap * sizeof t->slot[0]);
    if (t)
        t->mask = cap - 1;
    return t;
}

/* Stores op into its first empty slot of t (which has one); host lock held. */
static void table_put(struct op_table *t, struct fld_op_s *op)
{
    size_t i = hash_bytes(op->name, op->name_len) & t->mask;
    while (atomic_load_explicit(&t->slot[i], memory_order_relaxed))
        i = (i + 1) & t->mask;
    /* release: a lookup that sees op sees it initialised */
    atomic_store_explicit(&t->slot[i], op, memory_order_release);
}

static int by_name_cmp(const void *a, const void *b)
{
    const struct fld_op_s *x = *(const struct fld_op_s *const *)a;
    const struct fld_op_s *y = *(const struct fld_op_s *const *)b;
    return strcmp(x->name, y->name);
}

/* Adds op to the list and the table (host lock held); nothing changes on failure. */
static int table_add(struct fld_op_s *op)
{
    if (all.n == all.cap) {
        size_t cap = all.cap ? 2 * all.cap : 16;
        struct fld_op_s **v = realloc(all.v, cap * sizeof *v);
        if (!v)
            return FLD_ENOMEM;
        all.v = v;
        all.cap = cap;
    }
    struct op_table *old = atomic_load_explicit(&table, memory_order_relaxed);
    const size_t n = all.n + 1;
    if (!old || 2 * n > old->mask + 1) {
        size_t cap = old ? 2 * (old->mask + 1) : 16;
        while (cap < 2 * n)
            cap *= 2;
        struct op_table *t = table_new(cap);
        if (!t)
            return FLD_ENOMEM;
        for (size_t k = 0; k < all.n; k++)
            table_put(t, all.v[k]);
        table_put(t, op);
        atomic_store_explicit(&table, t, memory_order_release);
        if (old)
            fld__retire_until_shutdown(old, table_free);
    } else {
        table_put(old, op);
    }
    all.sorted = all.sorted && (all.n == 0 || strcmp(all.v[all.n - 1]->name, op->name) < 0);
    all.v[all.n++] = op;
    return FLD_OK;
}

static const struct fld_op_schema *catalog_schema(const char *name)
{
    for (int i = 0; catalog && i < FLD_CAT_COUNT; i++)
        if (strcmp(catalog[i].name, name) == 0)
            return &catalog[i];
    return NULL;
}

struct fld_op_s *fld__op_intern(const char *name)
{
    struct fld_op_s *op = fld__op_find(name);
    if (op)
        return op;
    op = calloc(1, sizeof *op);
    char *copy = strdup(name);
    if (!op || !copy)
        goto fail;
    op->name = copy;
    op->name_len = strlen(copy);
    op->schema = catalog_schema(name);
    if (table_add(op) != FLD_OK)
        goto fail;
    if (op->schema)
        atomic_store(&fld__catalog_ops[op->schema - catalog], op);
    return op;
fail:
    free(copy);
    free(op);
    return NULL;
}

void fld__op_foreach(void (*fn)(struct fld_op_s *op, void *user), void *user)
{
    if (!all.sorted) {
        qsort(all.v, all.n, sizeof *all.v, by_name_cmp);
        all.sorted = true;
    }
    for (size_t i = 0; i < all.n; i++)
        fn(all.v[i], user);
}

int fld__ops_init(const struct fld_op_schema *rows)
{
    catalog = rows;
    for (int i = 0; i < FLD_CAT_COUNT; i++) {
        struct fld_op_s *op = fld__op_intern(catalog[i].name);
        if (!op)
            return fld__fail(FLD_ENOMEM, "out of memory interning op '%s'", catalog[i].name);
        char err[1024];
        struct fld_sig *s;
        int rc = fld__sig_parse(op->name, catalog[i].signature, true, "the catalog", &s, err,
                                sizeof err);
        if (rc)
            return fld__fail(rc, "%s", err);
        s->info.catalog = true;
        fld__sig_free(atomic_exchange(&op->sig, s));
    }
    return FLD_OK;
}

void fld__ops_close(void)
{
    for (int i = 0; i < FLD_CAT_COUNT; i++)
        atomic_store(&fld__catalog_ops[i], NULL);
}

void fld__ops_reopen(void)
{
    for (int i = 0; i < FLD_CAT_COUNT; i++)
        atomic_store(&fld__catalog_ops[i], catalog ? fld__op_find(catalog[i].name) : NULL);
}

void fld__ops_shutdown(void)
{
    struct op_table *t = atomic_load(&table);
    for (int i = 0; i < FLD_CAT_COUNT; i++)
        atomic_store(&fld__catalog_ops[i], NULL);
    atomic_store(&table, NULL);
    table_free(t);
    for (size_t i = 0; i < all.n; i++) {
        struct fld_op_s *op = all.v[i];
        free(op->impls);
        fld__sig_free(atomic_load(&op->sig));
        free((char *)op->name);
        free(op);
    }
    free(all.v);
    all.v = NULL;
    all.n = all.cap = 0;
    all.sorted = true;
    catalog = NULL;
}

fld_op fld_op_lookup(const char *name)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return NULL;
    if (!name) {
        fld__fail(FLD_EINVAL, "fld_op_lookup: argument 'name' is NULL");
        return NULL;
    }
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        fld__fail(FLD_ENOTFOUND,
                  "no op named '%s' (not in the catalog and no plugin registered it)", name);
    return op;
}

const char *fld_op_name(fld_op op)
{
    return op ? op->name : NULL;
}
