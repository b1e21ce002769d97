/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frozen dispatch: a manifest pins (op, device, dtype) -> impl_id so that
 * every worker of a deployment runs the same kernels. Written by
 * `fldispatch freeze`, loaded from VLLM_FL_MANIFEST:
 *
 *     # fldispatch manifest
 *     version: 1
 *     entries:
 *       - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.cpu}
 *       - {op: silu_and_mul, device: cpu, dtype: f32, rows: 1-16, impl: vendor.cpu}
 *       - {op: silu_and_mul, device: cpu, dtype: f32, rows: 17-, impl: reference.c}
 *
 * An entry with 'rows' (a row bucket, written by `fldispatch tune`) pins
 * the calls whose row count lies in its range; the buckets of one key must
 * not overlap, and rows that no bucket covers resolve by the key's entry
 * without rows, else by the policy.
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
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#include "manifest_record.h"

/* Parses a manifest file; FLD_ECONFIG with "path:line:column: ..." on error. */
int fld__manifest_load(const char *path, struct fld_manifest **out);
/*
 * The entry that pins (op, device, dtype) for a call of `rows` rows: the
 * bucket holding rows, else the entry without rows; NULL when none does.
 * rows 0 (unknown, or a call outside every bucket) finds only the latter.
 */
const struct fld_manifest_entry *fld__manifest_find(const struct fld_manifest *m, const char *op,
                                                    int device, int dtype, int64_t rows);
/* The row buckets of (op, device, dtype) in ascending order; their count (0: none). */
int fld__manifest_buckets(const struct fld_manifest *m, const char *op, int device, int dtype,
                          int64_t lo[FLD_MAX_BUCKETS], int64_t hi[FLD_MAX_BUCKETS]);
/* "rows 1-16", "rows 513-", "rows 8"; "" for an entry without rows. */
const char *fld__manifest_rows_text(const struct fld_manifest_entry *e, char *buf, size_t size);

/*
 * Checks every entry against the registry (host lock held): the impl must be
 * registered for the op and available. strict: FLD_ECONFIG naming
 * "path:line" and the problem; otherwise a WARNING per bad entry and FLD_OK.
 */
int fld__manifest_check(const struct fld_manifest *m, bool strict);

#endif
