/*
 * Frozen dispatch: a manifest pins (op, device, dtype) -> impl_id so that
 * every worker of a deployment runs the same kernels. Written by
 * `fldispatch freeze`, loaded from VLLM_FL_MANIFEST:
 *
 *     # fldispatch manifest
 *     version: 1
 *     entries:
 *       - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.cpu}
 *
 * A manifest is immutable once loaded and shared by the policies that
 * reference it (reference-counted). The record and its references are
 * manifest_record.h's, which the policy includes instead of this header:
 * loading (the YAML reader) and checking (the registry, names.h) sit above
 * the policy.
 */
#ifndef FLD_CORE_MANIFEST_H
#define FLD_CORE_MANIFEST_H

#include <stdbool.h>

#include "manifest_record.h"

/* Parses a manifest file; FLD_ECONFIG with "path:line:column: ..." on error. */
int fld__manifest_load(const char *path, struct fld_manifest **out);
const struct fld_manifest_entry *fld__manifest_find(const struct fld_manifest *m, const char *op,
                                                    int device, int dtype);

/*
 * Checks every entry against the registry (host lock held): the impl must be
 * registered for the op and available. strict: FLD_ECONFIG naming
 * "path:line" and the problem; otherwise a WARNING per bad entry and FLD_OK.
 */
int fld__manifest_check(const struct fld_manifest *m, bool strict);

#endif
