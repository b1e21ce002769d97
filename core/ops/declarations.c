/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared op signatures: fld_registry_declare_op() (registry.c) stages one
 * with the plugin's registrations (checked against the op's signature in
 * force and the plugin's own earlier declarations), the registry's commit
 * publishes it on its op, where it stays until fld_shutdown(); the catalog's
 * are read from its table at init. fld_op_signature() and
 * fld_foreach_signature() read them. Below the registry (declarations.h).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "declarations.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "ops.h"
#include "signature.h"

static bool valid_op(const char *s)
{
    if (!s || !*s || strlen(s) > 96)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.'))
            return false;
    }
    return true;
}

/* The signature op has now: committed, or staged in d. */
static const struct fld_sig *current(const struct fld_decls *d, const char *op)
{
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->v[i]->info.op, op) == 0)
            return d->v[i];
    struct fld_op_s *o = fld__op_find(op);
    return o ? atomic_load(&o->sig) : NULL;
}

int fld__decls_stage(struct fld_decls *d, const char *op, const char *schema, const char *by,
                     char *err, size_t size)
{
    if (!valid_op(op)) {
        snprintf(err, size,
                 "fld_registry_declare_op: invalid op name '%s' (letters, digits, '_' and '.')",
                 op ? op : "(null)");
        return FLD_EINVAL;
    }
    char why[1024];
    struct fld_sig *s;
    int rc = fld__sig_parse(op, schema, false, by, &s, why, sizeof why);
    if (rc) {
        snprintf(err, size, "%s (declared by %s)", why, by);
        return rc;
    }
    const struct fld_sig *have = current(d, op);
    if (have && strcmp(have->info.schema, s->info.schema) != 0) {
        snprintf(err, size,
                 "op '%s': signature '%s' declared by %s differs from '%s' declared by %s", op,
                 s->info.schema, by, have->info.schema, have->info.declared_by);
        fld__sig_free(s);
        return FLD_EINVAL;
    }
    if (have) {
        fld__sig_free(s); /* the same again */
        return FLD_OK;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        struct fld_sig **v = realloc(d->v, cap * sizeof *v);
        if (!v) {
            fld__sig_free(s);
            snprintf(err, size, "out of memory declaring op '%s'", op);
            return FLD_ENOMEM;
        }
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n++] = s;
    return FLD_OK;
}

int fld__decls_prepare(struct fld_decls *d)
{
    for (size_t i = 0; i < d->n; i++)
        if (!fld__op_intern(d->v[i]->info.op))
            return FLD_ENOMEM;
    return FLD_OK;
}

void fld__decls_commit(struct fld_decls *d)
{
    for (size_t i = 0; i < d->n; i++) {
        struct fld_op_s *op = fld__op_find(d->v[i]->info.op);
        struct fld_sig *expected = NULL;
        /* Declarations are checked under the host lock the commit holds: an
         * op has none yet, or the same, which this one need not replace. */
        if (op && atomic_compare_exchange_strong(&op->sig, &expected, d->v[i]))
            d->v[i] = NULL;
    }
    fld__decls_discard(d);
}

void fld__decls_discard(struct fld_decls *d)
{
    for (size_t i = 0; i < d->n; i++)
        fld__sig_free(d->v[i]);
    free(d->v);
    d->v = NULL;
    d->n = d->cap = 0;
}

int fld_op_signature(const char *op, fld_signature_info *info)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!op || !info)
        return fld__fail(FLD_EINVAL, "fld_op_signature: argument '%s' is NULL", op ? "info" : "op");
    struct fld_op_s *o = fld__op_find(op);
    const struct fld_sig *s = o ? atomic_load(&o->sig) : NULL;
    if (!s)
        return fld__fail(FLD_ENOTFOUND, "op '%s' has no signature (%s)", op,
                         o ? "its implementations were registered without a declaration"
                           : "no such op");
    *info = s->info;
    return FLD_OK;
}

struct collect {
    const struct fld_sig **v;
    size_t n, cap;
    bool nomem;
};

static void collect_one(struct fld_op_s *op, void *user)
{
    struct collect *c = user;
    const struct fld_sig *s = atomic_load(&op->sig);
    if (!s || s->info.catalog || c->nomem)
        return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        const struct fld_sig **v = realloc(c->v, cap * sizeof *v);
        if (!v) {
            c->nomem = true;
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = s;
}

int fld_foreach_signature(int (*fn)(const fld_signature_info *info, void *user), void *user)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_signature: argument 'fn' is NULL");
    struct collect c = {0};
    fld__lock();
    fld__op_foreach(collect_one, &c);
    fld__unlock();
    if (c.nomem) {
        free(c.v);
        return fld__fail(FLD_ENOMEM, "fld_foreach_signature: out of memory");
    }
    for (int i = 0; i < FLD_CAT_COUNT && rc == 0; i++) {
        struct fld_op_s *op = fld__op_find(fld__catalog[i].name);
        const struct fld_sig *s = op ? atomic_load(&op->sig) : NULL;
        if (s)
            rc = fn(&s->info, user);
    }
    for (size_t i = 0; i < c.n && rc == 0; i++)
        rc = fn(&c.v[i]->info, user);
    free(c.v);
    return rc;
}
