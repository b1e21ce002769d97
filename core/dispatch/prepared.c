/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prepared calls (fldispatch.h, "Operators: prepared calls"): a catalog
 * op's arguments validated once and copied, then called again with new data
 * pointers, or run again on the pointers last bound.
 *
 * What a new data pointer can break is known in advance: NULL data, the
 * alignment to the element, a span that wraps past the end of the address
 * space, memory shared between a tensor the op writes and another, and (rotary
 * on the CPU) positions out of the cache's range, since their values are read.
 * fld_prepare() records per tensor what those checks need (its byte_offset,
 * the bytes it spans, its element size); binding new pointers (a call with
 * pointers, fld_prepared_bind()) runs them, one family's pairs of tensors
 * that must not meet spelled out, in straight-line integer code folded into
 * one "doubt" word.
 *
 * The per-pointer checks only say "surely fine": anything they doubt (a NULL,
 * a misaligned or wrapping pointer, byte ranges that meet, a position out of
 * range, a template with an empty tensor) sends the new pointers to the op's
 * full validator, which accepts exactly what the typed entry point accepts
 * (interleaved views of one buffer, out == x for rms_norm) and otherwise
 * fails with its own message. So a prepared call and the typed call of the
 * same tensors always agree. Pointers are stored only once accepted: a
 * refused bind or call leaves the object bound as it was.
 *
 * The bound pointers have passed every check that does not read tensor data,
 * so fld_prepared_run() checks nothing of them again (rotary on the CPU reads
 * the positions again: their values change between calls). What a run, and
 * the dispatch of a call with pointers, does is run_bound(): the op is read
 * from the catalog once and cached with the generation it was read in; a
 * call whose generation is still that one goes straight to the hot path
 * (dispatch.h fld__dispatch_gen()), which compares the slot's direct call
 * with the same generation. Every policy and registry change bumps the
 * generation (a scoped override is seen by the hot path itself), and a
 * shutdown sets it to 0 after a bump, so a cached op is never used after
 * either.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "host.h"
#include "inflight.h"
#include "dispatch.h"
#include "ops.h"
#include "validate.h"

#define NT FLD_PREPARED_MAX_TENSORS

/* No generation is ever this: nothing cached (generations count up from 1). */
#define NO_GENERATION UINT64_MAX

struct fld_prepared {
    /* What run_bound() reads, first. */
    uint64_t gen;                     /* NO_GENERATION: no op cached */
    const struct fld_fast_call *fast; /* the op's direct call of the slot, read in `gen` */
    struct fld_op_s *op;              /* the catalog's op, read in generation `gen` */
    unsigned slot;                    /* the dispatch key, fld__slot(device, dtype) */
    bool read_positions; /* rotary on the CPU: the positions' values are checked per call */
    union {
        fld_activation_args act;
        fld_rms_norm_args norm;
        fld_rotary_embedding_args rot;
    } args;
    enum fld_catalog_index idx;
    fld_args_kind kind;
    int ntensors;         /* data pointers a call takes */
    bool always_full;     /* a template with an empty tensor: new pointers are fully validated */
    bool positions_int32; /* else int64 */
    bool out_may_be_x;    /* rms_norm: out at x's start is the allowed in-place form */
    bool has[NT];         /* the tensor is part of the call (weight, residual, key may not be) */
    uintptr_t offset[NT]; /* its byte_offset */
    uintptr_t end[NT];    /* byte_offset + the bytes it spans: data + end is past its last byte */
    uintptr_t align[NT];  /* its element size - 1 */
    int64_t tokens, max_pos;
    DLTensor tensors[NT]; /* the copies, holding the bound data pointers; an absent one is unused */
    int64_t dims[];       /* the copies' shape and stride arrays */
};

/* ---- preparing ---------------------------------------------------------- */

/* The catalog index of name; -1 when it is not a catalog op. */
static int catalog_index(const char *name)
{
    for (int i = 0; i < FLD_CAT_COUNT; i++)
        if (strcmp(fld__catalog[i].name, name) == 0)
            return i;
    return -1;
}

static __attribute__((cold)) int not_preparable(const char *name)
{
    int idx = catalog_index(name);
    if (idx >= 0 && fld__catalog[idx].args_kind == FLD_ARGS_ROTARY_EMBEDDING_OUT)
        return fld__fail(FLD_EINVAL, "fld_prepare: op '%s' has no prepared form; call it directly",
                         name);
    if (idx >= 0)
        return fld__fail(FLD_EINVAL,
                         "fld_prepare: op '%s' has no tensors to prepare; call it directly", name);
    if (fld__op_find(name))
        return fld__fail(FLD_EINVAL,
                         "fld_prepare: op '%s' is outside the catalog: its arguments are opaque to "
                         "the host, which cannot prepare them (call it with fld_call())",
                         name);
    return fld__fail(FLD_ENOTFOUND, "fld_prepare: no op named '%s'", name);
}

/* The tensors of a family's argument struct, in its order, and how many. */
static int tensors_of(fld_args_kind kind, const void *args, const DLTensor *src[NT])
{
    memset(src, 0, sizeof(const DLTensor *) * NT);
    switch (kind) {
    case FLD_ARGS_ACTIVATION: {
        const fld_activation_args *a = args;
        src[0] = a->out;
        src[1] = a->x;
        return 2;
    }
    case FLD_ARGS_RMS_NORM: {
        const fld_rms_norm_args *a = args;
        src[0] = a->out;
        src[1] = a->x;
        src[2] = a->weight;
        src[3] = a->residual;
        return 4;
    }
    case FLD_ARGS_ROTARY_EMBEDDING: {
        const fld_rotary_embedding_args *a = args;
        src[0] = a->positions;
        src[1] = a->query;
        src[2] = a->key;
        src[3] = a->cos_sin_cache;
        return 4;
    }
    default:
        return 0;
    }
}

/* The copy of src in slot i, its shape and strides appended at *dims. */
static void copy_tensor(fld_prepared *p, int i, const DLTensor *src, int64_t **dims)
{
    DLTensor *t = &p->tensors[i];
    *t = *src;
    memcpy(*dims, src->shape, sizeof(int64_t) * (size_t)src->ndim);
    t->shape = *dims;
    *dims += src->ndim;
    if (src->strides) {
        memcpy(*dims, src->strides, sizeof(int64_t) * (size_t)src->ndim);
        t->strides = *dims;
        *dims += src->ndim;
    }
}

/*
 * The op's argument struct in *out over tensors t[] (an absent tensor's
 * entry is ignored: NULL in the struct), with the scalars of `scalars` (an
 * argument struct of the same argument kind).
 */
static void point_args(const fld_prepared *p, DLTensor *t, const void *scalars, void *out)
{
    DLTensor *tens[NT];
    for (int i = 0; i < NT; i++)
        tens[i] = p->has[i] ? &t[i] : NULL;
    switch (p->kind) {
    case FLD_ARGS_ACTIVATION:
        *(fld_activation_args *)out = (fld_activation_args){tens[0], tens[1]};
        break;
    case FLD_ARGS_RMS_NORM:
        *(fld_rms_norm_args *)out = (fld_rms_norm_args){tens[0], tens[1], tens[2], tens[3],
                                                        ((const fld_rms_norm_args *)scalars)->eps};
        break;
    default: {
        const fld_rotary_embedding_args *a = scalars;
        *(fld_rotary_embedding_args *)out = (fld_rotary_embedding_args){
            tens[0], tens[1], tens[2], a->head_size, tens[3], a->is_neox};
        break;
    }
    }
}

/* The split of tensor i for the span (a rotary query or key: its rank beyond the positions'). */
static int split_of(const fld_prepared *p, int i, const DLTensor *const src[NT])
{
    if (p->kind == FLD_ARGS_ROTARY_EMBEDDING && (i == 1 || i == 2))
        return src[i]->ndim - src[0]->ndim;
    return 1;
}

/* Whether out == x at the same start is the exact aliasing rms_norm allows. */
static bool same_rows(const DLTensor *a, const DLTensor *b)
{
    fld_rows ra, rb;
    fld_tensor_rows(a, &ra);
    fld_tensor_rows(b, &rb);
    return ra.stride == rb.stride || rb.rows <= 1;
}

int fld_prepare(const char *op, const void *args, fld_prepared **out)
{
    if (out)
        *out = NULL;
    if (!op || !out)
        return fld__fail(FLD_EINVAL, "fld_prepare: argument '%s' is NULL", op ? "out" : "op");
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    const int idx = catalog_index(op);
    if (idx < 0 || fld__catalog[idx].args_kind == FLD_ARGS_ATTENTION_BACKEND ||
        fld__catalog[idx].args_kind == FLD_ARGS_ROTARY_EMBEDDING_OUT)
        return not_preparable(op);
    const struct fld_op_schema *schema = &fld__catalog[idx];
    struct fld_call_key key;
    rc = schema->validate(schema->name, args, &key);
    if (rc)
        return rc;

    const DLTensor *src[NT];
    const int n = tensors_of(schema->args_kind, args, src);
    size_t ndims = 0;
    for (int i = 0; i < n; i++)
        if (src[i])
            ndims += (size_t)src[i]->ndim * (src[i]->strides ? 2 : 1);
    fld_prepared *p = calloc(1, sizeof *p + ndims * sizeof(int64_t));
    if (!p)
        return fld__fail(FLD_ENOMEM, "fld_prepare: out of memory preparing op '%s'", op);
    p->idx = (enum fld_catalog_index)idx;
    p->kind = schema->args_kind;
    p->slot = fld__slot(key.device, key.dtype);
    p->ntensors = n;
    p->gen = NO_GENERATION;
    int64_t *dims = p->dims;
    for (int i = 0; i < NT; i++) {
        if (i >= n || !src[i])
            continue;
        copy_tensor(p, i, src[i], &dims);
        const uint64_t span = fld__tensor_span(src[i], split_of(p, i, src));
        p->has[i] = true;
        p->offset[i] = (uintptr_t)src[i]->byte_offset;
        p->end[i] = (uintptr_t)(src[i]->byte_offset + span); /* < 2^63: validated */
        p->align[i] = (uintptr_t)(src[i]->dtype.bits >> 3) - 1;
        p->always_full |= span == 0; /* empty: its data may be anything */
    }
    /* out at x's start with other rows is not the in-place form: the validator decides */
    p->out_may_be_x = p->kind == FLD_ARGS_RMS_NORM && same_rows(src[0], src[1]);
    if (p->kind == FLD_ARGS_ROTARY_EMBEDDING && key.device == FLD_DEV_CPU) {
        p->read_positions = true;
        p->positions_int32 = src[0]->dtype.bits == 32;
        p->tokens = 1;
        for (int i = 0; i < src[0]->ndim; i++)
            p->tokens *= src[0]->shape[i];
        p->max_pos = src[3]->shape[0];
    }
    point_args(p, p->tensors, args, &p->args);
    *out = p;
    return FLD_OK;
}

const char *fld_prepared_op(const fld_prepared *p)
{
    return p ? fld__catalog[p->idx].name : NULL;
}

int fld_prepared_ntensors(const fld_prepared *p)
{
    return p ? p->ntensors : 0;
}

void fld_prepared_free(fld_prepared *p)
{
    free(p);
}

/* ---- dispatching the bound call ------------------------------------------ */

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/*
 * In flight, generation gen did not match: reads the catalog's op and
 * caches it with gen, then the hot path; before initialisation (no op) or
 * during a shutdown (gen 0) the typed path's cold start instead, which
 * initialises and validates.
 */
static __attribute__((noinline)) int resolve(fld_prepared *p, uint64_t gen)
{
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[p->idx], memory_order_acquire);
    if (unlikely(!op || !gen)) {
        p->gen = NO_GENERATION;
        return fld__call_unchecked(p->idx, op, &p->args);
    }
    p->op = op;
    p->fast = &op->fast[p->slot];
    p->gen = gen;
    return fld__dispatch_gen(op, p->slot, &p->args, gen);
}

/* In flight, no direct call: another generation, or the hot path's own misses. */
static __attribute__((noinline)) int run_miss(fld_prepared *p, uint64_t gen)
{
    if (gen != p->gen)
        return resolve(p, gen);
    return fld__dispatch_miss(p->op, p->slot, &p->args, gen);
}

/*
 * The call of the bound pointers: counted in flight, then, while the
 * generation the op was read in holds, the hot path on the op's direct call
 * of the slot (dispatch.h fld__dispatch_gen() without the catalog load and
 * the slot's address), else run_miss().
 */
static inline __attribute__((always_inline)) int run_bound(fld_prepared *p)
{
    uint32_t depth;
    struct fld_inflight_slot *in = fld__call_enter_depth(&depth);
    const uint64_t gen = atomic_load_explicit(&fld__generation, memory_order_acquire);
    const fld_kernel_fn fn =
        likely(gen == p->gen && depth <= FLD_MAX_CALL_DEPTH) ? fld__fast_fn(p->fast, gen) : NULL;
    int rc;
    if (unlikely(depth > FLD_MAX_CALL_DEPTH)) {
        rc = fld__call_too_deep(fld__catalog[p->idx].name);
    } else if (likely(fn != NULL)) {
        rc = fn(&p->args);
        if (unlikely(rc != FLD_OK))
            rc = fld__dispatch_failed(p->op, p->slot, &p->args, fn, rc);
    } else {
        rc = run_miss(p, gen);
    }
    fld__call_leave(in);
    return rc;
}

/* ---- checking new pointers ------------------------------------------------ */

/* Every position in [0, max_pos), read through data (the positions' pointer). */
static bool positions_in_range(const fld_prepared *p, const void *data)
{
    const char *base = (const char *)data + p->offset[0];
    const uint64_t max = (uint64_t)p->max_pos;
    bool bad = false;
    if (p->positions_int32) {
        const int32_t *v = (const int32_t *)(const void *)base;
        for (int64_t i = 0; i < p->tokens; i++)
            bad |= (uint64_t)(int64_t)v[i] >= max;
    } else {
        const int64_t *v = (const int64_t *)(const void *)base;
        for (int64_t i = 0; i < p->tokens; i++)
            bad |= (uint64_t)v[i] >= max;
    }
    return !bad;
}

/* A tensor's byte range under a new data pointer. */
struct range {
    uintptr_t lo, hi;
};

/*
 * Tensor i's range under data in *r, and non-zero when the pointer is
 * doubtful: NULL or a span that wraps (one compare: end = byte_offset + span
 * < 2^63 and non-empty, so data - 1 >= data + end exactly for those) or
 * misaligned.
 */
static inline __attribute__((always_inline)) uintptr_t check(const fld_prepared *p, int i,
                                                             const void *data, struct range *r)
{
    const uintptr_t d = (uintptr_t)data;
    r->lo = d + p->offset[i];
    r->hi = d + p->end[i];
    return (uintptr_t)(d - 1 >= r->hi) | (r->lo & p->align[i]);
}

/* Byte ranges that meet (no branch: almost always false). */
static inline uintptr_t meet(const struct range *a, const struct range *b)
{
    return (uintptr_t)((a->lo < b->hi) & (b->lo < a->hi));
}

/* Each family's doubt about new pointers d[] (in its argument struct's order). */
static inline __attribute__((always_inline)) uintptr_t doubt_activation(const fld_prepared *p,
                                                                        void *const d[NT])
{
    struct range o, i;
    uintptr_t doubt = p->always_full | check(p, 0, d[0], &o) | check(p, 1, d[1], &i);
    return doubt | meet(&o, &i);
}

static inline __attribute__((always_inline)) uintptr_t doubt_rms_norm(const fld_prepared *p,
                                                                      void *const d[NT])
{
    struct range o, i, w = {0, 0};
    uintptr_t doubt = p->always_full | check(p, 0, d[0], &o) | check(p, 1, d[1], &i);
    /* out == x, the in-place form, when the layouts allow it */
    doubt |= meet(&o, &i) & (uintptr_t) !(p->out_may_be_x & (o.lo == i.lo));
    if (p->has[2])
        doubt |= check(p, 2, d[2], &w) | meet(&o, &w);
    if (p->has[3]) {
        struct range r;
        doubt |= check(p, 3, d[3], &r) | meet(&r, &o) | meet(&r, &i) | meet(&r, &w);
    }
    return doubt;
}

static inline __attribute__((always_inline)) uintptr_t doubt_rotary(const fld_prepared *p,
                                                                    void *const d[NT])
{
    struct range pos, q, c;
    uintptr_t doubt =
        p->always_full | check(p, 0, d[0], &pos) | check(p, 1, d[1], &q) | check(p, 3, d[3], &c);
    doubt |= meet(&q, &pos) | meet(&q, &c);
    if (p->has[2]) {
        struct range k;
        doubt |= check(p, 2, d[2], &k) | meet(&k, &q) | meet(&k, &pos) | meet(&k, &c);
    }
    /* The positions are read only through a pointer that passed its checks. */
    if (!doubt && p->read_positions && unlikely(!positions_in_range(p, d[0])))
        doubt = 1;
    return doubt;
}

/* Binds accepted pointers: n of them (an absent tensor's copy is unused). */
static inline __attribute__((always_inline)) void store(fld_prepared *p, void *const d[NT], int n)
{
    for (int i = 0; i < n; i++)
        p->tensors[i].data = d[i];
}

/*
 * New pointers the checks doubted: the op's full validator on copies of the
 * tensors with them (after initialising, as the typed call does first); bound
 * only when it accepts, then run when asked. A refusal is the validator's
 * status and message, and the object stays bound as it was.
 */
static __attribute__((noinline)) int bind_validated(fld_prepared *p, void *const d[NT], bool run)
{
    FLD_CALL_SCOPE();
    const struct fld_op_schema *schema = &fld__catalog[p->idx];
    int rc = fld__ensure_init_from(schema->name);
    if (rc)
        return rc;
    DLTensor t[NT];
    union {
        fld_activation_args act;
        fld_rms_norm_args norm;
        fld_rotary_embedding_args rot;
    } args;
    for (int i = 0; i < NT; i++) {
        t[i] = p->tensors[i];
        t[i].data = i < p->ntensors ? d[i] : NULL;
    }
    point_args(p, t, &p->args, &args);
    struct fld_call_key key;
    rc = schema->validate(schema->name, &args, &key);
    if (rc)
        return rc;
    store(p, d, p->ntensors);
    return run ? run_bound(p) : FLD_OK;
}

/* ---- the entry points ------------------------------------------------------ */

static __attribute__((cold)) int wrong_arguments(const fld_prepared *p, const char *fn);

int fld_prepared_activation(fld_prepared *p, void *out, const void *x)
{
    if (unlikely(!p || p->kind != FLD_ARGS_ACTIVATION))
        return wrong_arguments(p, "fld_prepared_activation");
    void *const d[NT] = {out, (void *)(uintptr_t)x, NULL, NULL};
    if (unlikely(doubt_activation(p, d)))
        return bind_validated(p, d, true);
    store(p, d, 2);
    return run_bound(p);
}

int fld_prepared_rms_norm(fld_prepared *p, void *out, const void *x, const void *weight,
                          void *residual)
{
    if (unlikely(!p || p->kind != FLD_ARGS_RMS_NORM))
        return wrong_arguments(p, "fld_prepared_rms_norm");
    void *const d[NT] = {out, (void *)(uintptr_t)x, (void *)(uintptr_t)weight, residual};
    if (unlikely(doubt_rms_norm(p, d)))
        return bind_validated(p, d, true);
    store(p, d, 4);
    return run_bound(p);
}

int fld_prepared_rotary(fld_prepared *p, const void *positions, void *query, void *key,
                        const void *cos_sin_cache)
{
    if (unlikely(!p || p->kind != FLD_ARGS_ROTARY_EMBEDDING))
        return wrong_arguments(p, "fld_prepared_rotary");
    void *const d[NT] = {(void *)(uintptr_t)positions, query, key,
                         (void *)(uintptr_t)cos_sin_cache};
    if (unlikely(doubt_rotary(p, d)))
        return bind_validated(p, d, true);
    store(p, d, 4);
    return run_bound(p);
}

int fld_prepared_call(fld_prepared *p, void *const data[])
{
    if (unlikely(!p || !data))
        return fld__fail(FLD_EINVAL, "fld_prepared_call: argument '%s' is NULL", p ? "data" : "p");
    switch (p->kind) {
    case FLD_ARGS_ACTIVATION:
        return fld_prepared_activation(p, data[0], data[1]);
    case FLD_ARGS_RMS_NORM:
        return fld_prepared_rms_norm(p, data[0], data[1], data[2], data[3]);
    default:
        return fld_prepared_rotary(p, data[0], data[1], data[2], data[3]);
    }
}

int fld_prepared_bind(fld_prepared *p, void *const data[])
{
    if (unlikely(!p || !data))
        return fld__fail(FLD_EINVAL, "fld_prepared_bind: argument '%s' is NULL", p ? "data" : "p");
    void *d[NT] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < p->ntensors; i++)
        d[i] = data[i];
    uintptr_t doubt;
    switch (p->kind) {
    case FLD_ARGS_ACTIVATION:
        doubt = doubt_activation(p, d);
        break;
    case FLD_ARGS_RMS_NORM:
        doubt = doubt_rms_norm(p, d);
        break;
    default:
        doubt = doubt_rotary(p, d);
        break;
    }
    if (doubt)
        return bind_validated(p, d, false);
    store(p, d, p->ntensors);
    return FLD_OK;
}

/* A run that reads the positions first (rotary on the CPU). */
static __attribute__((noinline)) int run_positions(fld_prepared *p)
{
    if (!positions_in_range(p, p->tensors[0].data)) {
        /* the validator names the position at fault */
        void *const d[NT] = {p->tensors[0].data, p->tensors[1].data, p->tensors[2].data,
                             p->tensors[3].data};
        return bind_validated(p, d, true);
    }
    return run_bound(p);
}

int fld_prepared_run(fld_prepared *p)
{
    if (unlikely(!p))
        return fld__fail(FLD_EINVAL, "fld_prepared_run: argument 'p' is NULL");
    if (unlikely(p->read_positions))
        return run_positions(p);
    return run_bound(p);
}

static __attribute__((cold)) int wrong_arguments(const fld_prepared *p, const char *fn)
{
    if (!p)
        return fld__fail(FLD_EINVAL, "%s: argument 'p' is NULL", fn);
    return fld__fail(FLD_EINVAL, "%s: the prepared call is op '%s', whose arguments are not %s", fn,
                     fld__catalog[p->idx].name,
                     strcmp(fn, "fld_prepared_activation") == 0 ? "(out, x)"
                     : strcmp(fn, "fld_prepared_rms_norm") == 0
                         ? "(out, x, weight, residual)"
                         : "(positions, query, key, cos_sin_cache)");
}
