/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The effective configuration, field by field: fld_foreach_config_field(),
 * behind `fldispatch config` and the Python package's config(). It reads the
 * calling thread's policy (policy_override.c's fld__policy_effective()), so
 * it sits above the override stack; the fields and their keys are the
 * policy-field table's (policy_table.h), in row order, then the per-op
 * orders, then the manifest.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "error.h"
#include "host.h"
#include "inflight.h"
#include "manifest_record.h"
#include "policy.h"
#include "policy_override.h"
#include "reclaim.h"

/* A growable string; oom remembers a failed allocation. */
struct text {
    char *s;
    size_t len, cap;
    bool oom;
};

static void text_add(struct text *t, const char *s)
{
    size_t n = strlen(s);
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *g = realloc(t->s, cap);
        if (!g) {
            t->oom = true;
            return;
        }
        t->s = g;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n + 1);
    t->len += n;
}

/* Appends what format writes of v (a value or an order). */
static void text_format(struct text *t, size_t (*format)(const void *, char *, size_t),
                        const void *v)
{
    size_t n = format(v, NULL, 0);
    char *buf = malloc(n + 1);
    if (!buf) {
        t->oom = true;
        return;
    }
    format(v, buf, n + 1);
    text_add(t, buf);
    free(buf);
}

/* fld__order_format() in text_format()'s shape. */
static size_t order_format(const void *o, char *buf, size_t size)
{
    return fld__order_format(o, buf, size);
}

/* Calls fn with one field and empties value for the next. */
static int emit(int (*fn)(const fld_config_field *, void *), void *user, const char *key,
                struct text *value, const char *source)
{
    if (value->oom)
        return fld__fail(FLD_ENOMEM, "fld_foreach_config_field: out of memory");
    fld_config_field field = {key, value->s ? value->s : "", source};
    int r = fn(&field, user);
    value->len = 0;
    if (value->s)
        value->s[0] = '\0';
    return r;
}

int fld_foreach_config_field(int (*fn)(const fld_config_field *field, void *user), void *user)
{
    FLD_CALL_SCOPE();
    struct text value = {NULL, 0, 0, false};
    char key[256];
    int r = fld__ensure_init();
    if (r)
        return r;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_config_field: argument 'fn' is NULL");
    /* A copy: fn may change the policy (set, push, pop) while it runs. */
    fld__read_begin();
    struct fld_policy *p = fld__policy_clone(fld__policy_effective());
    fld__read_end();
    if (!p)
        return fld__fail(FLD_ENOMEM, "fld_foreach_config_field: out of memory");

    /* Every field in row order, but the orders (a kind without a format):
     * they follow, one entry each. */
    for (int i = 0; i < FLD_PF_COUNT && !r; i++) {
        enum fld_policy_field f = (enum fld_policy_field)i;
        const struct fld_policy_kind_ops *kind = fld__policy_kind(f);
        if (!kind->format)
            continue;
        text_format(&value, kind->format, fld__policy_value(p, f));
        r = emit(fn, user, fld__policy_row(f)->yaml, &value, p->source[f]);
    }
    /* Orders, one entry each; with none, one entry says where that came from. */
    if (!r && p->per_op.n == 0) {
        text_add(&value, "");
        r = emit(fn, user, fld__policy_row(FLD_PF_PER_OP)->yaml, &value, p->source[FLD_PF_PER_OP]);
    }
    for (size_t i = 0; !r && i < p->per_op.n; i++) {
        const struct fld_order *o = &p->per_op.items[i];
        text_format(&value, order_format, o);
        snprintf(key, sizeof key, "%s.%s", fld__policy_row(FLD_PF_PER_OP)->yaml, o->op);
        r = emit(fn, user, key, &value, o->source[0] ? o->source : p->source[FLD_PF_PER_OP]);
    }
    if (!r && p->manifest) {
        text_add(&value, p->manifest->path ? p->manifest->path : "");
        r = emit(fn, user, "manifest", &value, "VLLM_FL_MANIFEST");
    }
    free(value.s);
    fld__policy_free(p);
    return r;
}
