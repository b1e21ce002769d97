/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declared op signatures (declarations.c): a plugin's, staged with its
 * registrations (the registry's fld_registry_declare_op() stages them here,
 * fld__registry_commit() publishes them), then kept on their ops until
 * fld_shutdown(). The declarations stand below the registry: they know the
 * ops and the signatures, not the staging registry or its plugin, so a
 * failure comes back as a status and a message for the registry to record.
 * All functions here expect the host lock held.
 */
#ifndef FLD_CORE_DECLARATIONS_H
#define FLD_CORE_DECLARATIONS_H

#include <stddef.h>

struct fld_sig;

/* The signatures a plugin declared, staged until its registrations commit. */
struct fld_decls {
    struct fld_sig **v;
    size_t n, cap;
};

/*
 * Stages op's signature schema, declared by `by` ("plugin 'x' (/path)"),
 * checked against the op's signature in force and those already staged:
 * FLD_OK (staged, or the same again), or FLD_EINVAL / FLD_ENOMEM with the
 * message in err (nothing staged). The messages name fld_registry_declare_op().
 */
int fld__decls_stage(struct fld_decls *d, const char *op, const char *schema, const char *by,
                     char *err, size_t size);
/* Interns the staged signatures' ops ahead of the commit (FLD_ENOMEM, nothing changed). */
int fld__decls_prepare(struct fld_decls *d);
/* Publishes the staged signatures on their ops (cannot fail), frees what is left. */
void fld__decls_commit(struct fld_decls *d);
/* Frees what is staged. */
void fld__decls_discard(struct fld_decls *d);

#endif
