/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vLLM's custom_ops grammar, one of the policy's value grammars (the others
 * are parse.h's): "all" or "none" sets the base (default: all enabled), then
 * "+op" enables and "-op" disables single ops. A disabled op is served by
 * reference implementations only.
 *
 * It sits on the value grammars' level, next to parse.c, and includes only
 * parse.h: the policy record (policy.h) holds a struct fld_custom_ops, and
 * the policy files' reader (config.c) reads one item by item, so neither has
 * to include the other to share the grammar.
 */
#ifndef FLD_CORE_CUSTOM_OPS_H
#define FLD_CORE_CUSTOM_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "parse.h"

struct fld_custom_ops {
    bool base_enabled;           /* true unless "none" */
    struct fld_strlist enabled;  /* "+op" */
    struct fld_strlist disabled; /* "-op" */
};

/* A list being read item by item, so that each error can point at its item. */
struct fld_custom_ops_reader {
    struct fld_custom_ops ops;
    bool saw_all, saw_none;
};

/* Starts at the default: every op enabled, no +/- items. */
void fld__custom_ops_reader_init(struct fld_custom_ops_reader *r);
/* One item: "all", "none", "+op" or "-op" (trimmed). FLD_ECONFIG naming
 * what and the item; r keeps what it read before. The reader's lists are
 * unsorted: the caller sorts them once and checks +op/-op conflicts. */
int fld__custom_ops_reader_add(struct fld_custom_ops_reader *r, const char *what, const char *item);
/* A comma-separated list into *out; NULL or blank gives the default. */
int fld__custom_ops_parse(const char *what, const char *csv, struct fld_custom_ops *out);
void fld__custom_ops_free(struct fld_custom_ops *c);
int fld__custom_ops_copy(struct fld_custom_ops *dst, const struct fld_custom_ops *src);
bool fld__custom_ops_is_default(const struct fld_custom_ops *c);
/* The normalised list: "all" or "none", then "+op"s, then "-op"s, comma-separated.
 * Returns the full length. */
size_t fld__custom_ops_format(const struct fld_custom_ops *c, char *buf, size_t size);

#endif
