/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A schema reader: what walks a configuration document's tree
 * (config_tree.h) against a fixed schema and words each error at the node
 * at fault, "path:line:column: message". The manifest's reader (manifest.c)
 * and the counters files' reader (stats_file.c) share it.
 */
#ifndef FLD_CORE_SCHEMA_READER_H
#define FLD_CORE_SCHEMA_READER_H

#include <stdbool.h>

#include "config_tree.h"

struct fld_schema_reader {
    const char *path; /* the file read, named in every message */
};

/*
 * FLD_ECONFIG with "path:line:column: message" of node n (NULL: the start
 * of the file), the message formatted from fmt (at most 511 bytes of it).
 */
int fld__schema_fail(const struct fld_schema_reader *r, const struct fld_ynode *n, const char *fmt,
                     ...) __attribute__((format(printf, 3, 4)));

/* A plain (unquoted, untagged) scalar: what YAML may read as null, a boolean or a number. */
bool fld__schema_is_plain(const struct fld_ynode *n);

#endif
