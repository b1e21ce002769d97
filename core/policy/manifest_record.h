/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A loaded manifest as a value: its pinned entries, its path, and the
 * reference count that lets the policies holding it share it (a clone of a
 * policy takes a reference, not a copy; see policy.h's manifest member).
 *
 * Split from manifest.h so that the policy record can hold, share, free
 * and print a manifest without including manifest.h: reading a manifest
 * (config_tree.h's YAML tree) and checking it against the registry
 * (names.h, which reads policies) sit above the policy, and including them
 * from policy.c closed a cycle of modules. This header includes nothing of
 * the library; manifest.h includes it, so the readers of manifest.h see the
 * same record.
 */
#ifndef FLD_CORE_MANIFEST_RECORD_H
#define FLD_CORE_MANIFEST_RECORD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct fld_manifest_entry {
    char *op;
    int device; /* FLD_DEV_* */
    int dtype;  /* FLD_DT_* (FLD_DT_ANY allowed) */
    char *impl_id;
    int line;
    int impl_column; /* of the impl value, for messages */
    /* The row bucket: calls whose row count lies in [rows_lo, rows_hi]
     * (rows_hi INT64_MAX: no upper end). rows_lo 0: every row count, the
     * entry without a 'rows' key. */
    int64_t rows_lo, rows_hi;
};

/* Immutable once loaded (fld__manifest_load(), manifest.h), except refs. */
struct fld_manifest {
    _Atomic int refs;
    char *path;
    size_t n;
    struct fld_manifest_entry *entries; /* sorted by (op, device, dtype, rows_lo) */
};

/* Takes a reference (m may be NULL) and returns m. */
struct fld_manifest *fld__manifest_ref(struct fld_manifest *m);
/* Drops a reference (m may be NULL); the last one frees the manifest. */
void fld__manifest_unref(struct fld_manifest *m);
/* Frees m, its entries and its path whatever its count: for a manifest
 * still being loaded, that no one else holds. */
void fld__manifest_free(struct fld_manifest *m);

#endif
