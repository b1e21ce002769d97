/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lifetime of a loaded manifest (see manifest_record.h): references
 * shared by the policies that hold it, and the freeing of its entries.
 * Reading and checking manifests stay in manifest.c; this part is what the
 * policy record needs, without the levels manifest.c stands on.
 */
#include <stdlib.h>

#include "manifest_record.h"

static void free_entries(struct fld_manifest_entry *entries, size_t n)
{
    for (size_t i = 0; entries && i < n; i++) {
        free(entries[i].op);
        free(entries[i].impl_id);
    }
    free(entries);
}

void fld__manifest_free(struct fld_manifest *m)
{
    if (!m)
        return;
    free_entries(m->entries, m->n);
    free(m->path);
    free(m);
}

struct fld_manifest *fld__manifest_ref(struct fld_manifest *m)
{
    if (m)
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    return m;
}

void fld__manifest_unref(struct fld_manifest *m)
{
    if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
        fld__manifest_free(m);
}
