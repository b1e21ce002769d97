/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared op signatures: fld_registry_declare_op() stages one in the
 * plugin's registry (checked against the op's signature in force and the
 * plugin's own earlier declarations), the commit publishes it on its op,
 * where it stays until fld_shutdown(); the catalog's are read from its table
 * at init. fld_op_signature() and fld_foreach_signature() read them.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "host.h"
#include "inflight.h"
#include "registry.h"
#include "signature.h"

/* The declarer's text of a plugin record: "plugin 'x' (/path)". */
static void decls_declarer(const struct fld_plugin_rec *p, char *buf, size_t size)
{
    if (!p)
        snprintf(buf, size, "the library");
    else
        snprintf(buf, size, "plugin '%s' (%s)", p->name, p->path ? p->path : "?");
}

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

/* The signature op has now: committed, or staged by this registry. */
static const struct fld_sig *current(const struct fld_registry *reg, const char *op)
{
    for (size_t i = 0; i < reg->n_decls; i++)
        if (strcmp(reg->decls[i]->info.op, op) == 0)
            return reg->decls[i];
    struct fld_op_s *o = fld__op_find(op);
    return o ? atomic_load(&o->sig) : NULL;
}

int fld_registry_declare_op(fld_registry *reg, const char *op, const char *schema)
{
    if (!reg)
        return fld__fail(FLD_EINVAL, "fld_registry_declare_op: argument 'reg' is NULL");
    if (!valid_op(op))
        return fld__registry_fail(reg, FLD_EINVAL,
                                  "fld_registry_declare_op: invalid op name '%s' (letters, "
                                  "digits, '_' and '.')",
                                  op ? op : "(null)");
    char by[400], err[1024];
    decls_declarer(reg->plugin, by, sizeof by);
    struct fld_sig *s;
    int rc = fld__sig_parse(op, schema, false, by, &s, err, sizeof err);
    if (rc)
        return fld__registry_fail(reg, rc, "%s (declared by %s)", err, by);
    const struct fld_sig *have = current(reg, op);
    if (have && strcmp(have->info.schema, s->info.schema) != 0) {
        rc = fld__registry_fail(reg, FLD_EINVAL,
                                "op '%s': signature '%s' declared by %s differs from '%s' "
                                "declared by %s",
                                op, s->info.schema, by, have->info.schema, have->info.declared_by);
        fld__sig_free(s);
        return rc;
    }
    if (have) {
        fld__sig_free(s); /* the same again */
        return FLD_OK;
    }
    if (reg->n_decls == reg->cap_decls) {
        size_t cap = reg->cap_decls ? 2 * reg->cap_decls : 4;
        struct fld_sig **v = realloc(reg->decls, cap * sizeof *v);
        if (!v) {
            fld__sig_free(s);
            return fld__registry_fail(reg, FLD_ENOMEM, "out of memory declaring op '%s'", op);
        }
        reg->decls = v;
        reg->cap_decls = cap;
    }
    reg->decls[reg->n_decls++] = s;
    return FLD_OK;
}

int fld__decls_prepare(struct fld_registry *reg)
{
    for (size_t i = 0; i < reg->n_decls; i++)
        if (!fld__op_intern(reg->decls[i]->info.op))
            return FLD_ENOMEM;
    return FLD_OK;
}

void fld__decls_commit(struct fld_registry *reg)
{
    for (size_t i = 0; i < reg->n_decls; i++) {
        struct fld_op_s *op = fld__op_find(reg->decls[i]->info.op);
        struct fld_sig *expected = NULL;
        /* Declarations are checked under the host lock the commit holds: an
         * op has none yet, or the same, which this one need not replace. */
        if (op && atomic_compare_exchange_strong(&op->sig, &expected, reg->decls[i]))
            reg->decls[i] = NULL;
    }
    fld__decls_discard(reg);
}

void fld__decls_discard(struct fld_registry *reg)
{
    for (size_t i = 0; i < reg->n_decls; i++)
        fld__sig_free(reg->decls[i]);
    free(reg->decls);
    reg->decls = NULL;
    reg->n_decls = reg->cap_decls = 0;
}

int fld_op_signature(const char *op, fld_signature_info *info)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!op || !info)
        return fld__fail(FLD_EINVAL, "fld_op_signature: argument '%s' is NULL",
                         op ? "info" : "op");
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
