/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Prepared calls (fldispatch.h, "Operators: prepared calls"): a catalog
 * op's arguments validated once and copied, then called again with new data
 * pointers.
 *
 * What a new data pointer can break is known in advance: NULL data, the
 * alignment to the element, a span that wraps past the end of the address
 * space, memory shared between a tensor the op writes and another, and (rotary
 * on the CPU) positions out of the cache's range, since their values are read.
 * fld_prepare() records per tensor what those checks need (its byte_offset,
 * the bytes it spans, its element size); a call runs them, one family's
 * pairs of tensors that must not meet spelled out, in straight-line integer
 * code folded into one "doubt" word, and dispatches in the same function
 * (dispatch.h fld__call_family()).
 *
 * The per-call checks only say "surely fine": anything they doubt (a NULL, a
 * misaligned or wrapping pointer, byte ranges that meet, a position out of
 * range, a template with an empty tensor) sends the call to the op's full
 * validator, which accepts exactly what the typed entry point accepts
 * (interleaved views of one buffer, out == x for rms_norm) and otherwise
 * fails with its own message. So a prepared call and the typed call of the
 * same tensors always agree.
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
struct fld_prepared {
    enum fld_catalog_index idx;
    fld_args_kind kind;
    unsigned slot;        /* the dispatch key, fld__slot(device, dtype) */
    int ntensors;         /* data pointers a call takes */
    bool always_full;     /* a template with an empty tensor: every call is fully validated */
    bool read_positions;  /* rotary on the CPU: the positions' values are checked per call */
    bool positions_int32; /* else int64 */
    bool out_may_be_x;    /* rms_norm: out at x's start is the allowed in-place form */
    bool has[NT];         /* the tensor is part of the call (weight, residual, key may not be) */
    uintptr_t offset[NT]; /* its byte_offset */
    uintptr_t end[NT];    /* byte_offset + the bytes it spans: data + end is past its last byte */
    uintptr_t align[NT];  /* its element size - 1 */
    DLTensor *t[NT];      /* the copies; an absent tensor's is `scratch` */
    int64_t tokens, max_pos;
    union {
        fld_activation_args act;
        fld_rms_norm_args norm;
        fld_rotary_embedding_args rot;
    } args;
    DLTensor tensors[NT];
    DLTensor scratch;
    int64_t dims[]; /* the copies' shape and stride arrays */
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
    p->t[i] = t;
}

/* The argument struct over the copies, with the template's scalars. */
static void point_args(fld_prepared *p, const void *args)
{
    DLTensor *const *t = p->t;
    DLTensor *tens[NT];
    for (int i = 0; i < NT; i++)
        tens[i] = p->has[i] ? t[i] : NULL;
    switch (p->kind) {
    case FLD_ARGS_ACTIVATION:
        p->args.act = (fld_activation_args){tens[0], tens[1]};
        break;
    case FLD_ARGS_RMS_NORM:
        p->args.norm = (fld_rms_norm_args){tens[0], tens[1], tens[2], tens[3],
                                           ((const fld_rms_norm_args *)args)->eps};
        break;
    default: {
        const fld_rotary_embedding_args *a = args;
        p->args.rot = (fld_rotary_embedding_args){tens[0],      tens[1], tens[2],
                                                  a->head_size, tens[3], a->is_neox};
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
    if (idx < 0 || fld__catalog[idx].args_kind == FLD_ARGS_ATTENTION_BACKEND)
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
    int64_t *dims = p->dims;
    for (int i = 0; i < NT; i++) {
        p->t[i] = &p->scratch;
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
    point_args(p, args);
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

/* ---- calling ------------------------------------------------------------ */

/* Every position in [0, max_pos); read through the copy's new data pointer. */
static bool positions_in_range(const fld_prepared *p)
{
    const DLTensor *t = p->t[0];
    const char *base = (const char *)t->data + t->byte_offset;
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
 * Stores data into the copy of tensor i and returns its range in *r, and
 * non-zero when the pointer is doubtful: NULL or a span that wraps (one
 * compare: end = byte_offset + span < 2^63 and non-empty, so data - 1 >=
 * data + end exactly for those) or misaligned.
 */
static inline __attribute__((always_inline)) uintptr_t take(fld_prepared *p, int i,
                                                            const void *data, struct range *r)
{
    const uintptr_t d = (uintptr_t)data;
    p->tensors[i].data = (void *)(uintptr_t)data; /* an absent tensor's slot is unused */
    r->lo = d + p->offset[i];
    r->hi = d + p->end[i];
    return (uintptr_t)(d - 1 >= r->hi) | (r->lo & p->align[i]);
}

/* Byte ranges that meet (no branch: almost always false). */
static inline uintptr_t meet(const struct range *a, const struct range *b)
{
    return (uintptr_t)((a->lo < b->hi) & (b->lo < a->hi));
}

/* The doubt word decides: dispatch, or the full validator first (dispatch.h). */
static inline __attribute__((always_inline)) int finish(fld_prepared *p, uintptr_t doubt)
{
    return fld__call_family(p->idx, doubt == 0, p->slot, &p->args);
}

static __attribute__((cold)) int wrong_family(const fld_prepared *p, const char *fn);

int fld_prepared_activation(fld_prepared *p, void *out, const void *x)
{
    if (__builtin_expect(!p || p->kind != FLD_ARGS_ACTIVATION, 0))
        return wrong_family(p, "fld_prepared_activation");
    struct range o, i;
    uintptr_t doubt = p->always_full | take(p, 0, out, &o) | take(p, 1, x, &i);
    return finish(p, doubt | meet(&o, &i));
}

int fld_prepared_rms_norm(fld_prepared *p, void *out, const void *x, const void *weight,
                          void *residual)
{
    if (__builtin_expect(!p || p->kind != FLD_ARGS_RMS_NORM, 0))
        return wrong_family(p, "fld_prepared_rms_norm");
    struct range o, i, w = {0, 0};
    uintptr_t doubt = p->always_full | take(p, 0, out, &o) | take(p, 1, x, &i);
    /* out == x, the in-place form, when the layouts allow it */
    doubt |= meet(&o, &i) & (uintptr_t) !(p->out_may_be_x & (o.lo == i.lo));
    if (p->has[2])
        doubt |= take(p, 2, weight, &w) | meet(&o, &w);
    if (p->has[3]) {
        struct range r;
        doubt |= take(p, 3, residual, &r) | meet(&r, &o) | meet(&r, &i) | meet(&r, &w);
    }
    return finish(p, doubt);
}

int fld_prepared_rotary(fld_prepared *p, const void *positions, void *query, void *key,
                        const void *cos_sin_cache)
{
    if (__builtin_expect(!p || p->kind != FLD_ARGS_ROTARY_EMBEDDING, 0))
        return wrong_family(p, "fld_prepared_rotary");
    struct range pos, q, c;
    uintptr_t doubt = p->always_full | take(p, 0, positions, &pos) | take(p, 1, query, &q) |
                      take(p, 3, cos_sin_cache, &c);
    doubt |= meet(&q, &pos) | meet(&q, &c);
    if (p->has[2]) {
        struct range k;
        doubt |= take(p, 2, key, &k) | meet(&k, &q) | meet(&k, &pos) | meet(&k, &c);
    }
    /* The positions are read only through a pointer that passed its checks. */
    if (!doubt && p->read_positions && __builtin_expect(!positions_in_range(p), 0))
        doubt = 1;
    return finish(p, doubt);
}

int fld_prepared_call(fld_prepared *p, void *const data[])
{
    if (__builtin_expect(!p || !data, 0))
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

static __attribute__((cold)) int wrong_family(const fld_prepared *p, const char *fn)
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
