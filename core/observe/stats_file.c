/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reader of the counters' JSON files that stats.c writes
 * (VLLM_FL_STATS_FILE, fld_stats_write()), for `fldispatch stats`, which
 * merges the files of a deployment's processes and ranks into one report.
 * Strict: JSON (RFC 8259, config_json.c), the writer's keys and nothing
 * else, each of its type; a message names "path:line:column" of the value
 * at fault.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "error.h"
#include "schema_reader.h"

/* A whole number from 0 to UINT64_MAX written in decimal digits (JSON's form, no sign). */
static int read_count(const struct fld_schema_reader *r, const char *key, const struct fld_ynode *v,
                      uint64_t *out)
{
    const char *s = fld__schema_is_plain(v) ? v->text : "";
    bool digits = *s != '\0' && (s[0] != '0' || s[1] == '\0');
    for (const char *p = s; digits && *p; p++)
        digits = *p >= '0' && *p <= '9';
    if (!digits) {
        /* As written: a string keeps its quotes, so "1" does not read as 1. */
        char shown[96];
        if (v->type == FLD_YNODE_SEQUENCE)
            snprintf(shown, sizeof shown, "an array");
        else if (v->type == FLD_YNODE_MAPPING)
            snprintf(shown, sizeof shown, "an object");
        else if (v->style == FLD_YSTYLE_DOUBLE)
            snprintf(shown, sizeof shown, "the string \"%.80s\"", v->text);
        else
            snprintf(shown, sizeof shown, "%.80s", v->text);
        return fld__schema_fail(r, v, "'%s' must be a whole number from 0 to 2^64-1, got %s", key,
                                shown);
    }
    errno = 0;
    unsigned long long x = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return fld__schema_fail(r, v, "'%s' is %s, above 2^64-1", key, s);
    *out = (uint64_t)x;
    return FLD_OK;
}

/* A JSON string (double-quoted), copied. */
static int read_string(const struct fld_schema_reader *r, const char *key,
                       const struct fld_ynode *v, char **out)
{
    if (v->type != FLD_YNODE_SCALAR || v->style != FLD_YSTYLE_DOUBLE)
        return fld__schema_fail(r, v, "'%s' must be a string", key);
    if (!(*out = strdup(v->text)))
        return fld__fail(FLD_ENOMEM, "%s: out of memory", r->path);
    return FLD_OK;
}

/* The value of key in mapping m, or NULL (an error names it); a key twice or an unknown key is an
 * error. */
static int members(const struct fld_schema_reader *r, const struct fld_ynode *m, const char *what,
                   const char *const *keys, size_t nkeys, const struct fld_ynode **values)
{
    if (m->type != FLD_YNODE_MAPPING)
        return fld__schema_fail(r, m, "%s must be an object", what);
    for (size_t k = 0; k < nkeys; k++)
        values[k] = NULL;
    for (size_t i = 0; i + 1 < m->n; i += 2) {
        const struct fld_ynode *key = m->kids[i];
        size_t k = 0;
        while (k < nkeys && !(key->type == FLD_YNODE_SCALAR && strcmp(key->text, keys[k]) == 0))
            k++;
        if (k == nkeys)
            return fld__schema_fail(r, key, "%s has an unknown key '%s'", what,
                                    key->type == FLD_YNODE_SCALAR ? key->text : "(not a string)");
        if (values[k])
            return fld__schema_fail(r, key, "%s has '%s' twice", what, keys[k]);
        values[k] = m->kids[i + 1];
    }
    for (size_t k = 0; k < nkeys; k++)
        if (!values[k])
            return fld__schema_fail(r, m, "%s has no '%s'", what, keys[k]);
    return FLD_OK;
}

static const char *const file_keys[] = {"pid", "rank", "mode", "entries"};
static const char *const entry_keys[] = {"op",    "impl_id",   "device",   "dtype",
                                         "calls", "fallbacks", "failures", "total_ns"};

static int read_entry(const struct fld_schema_reader *r, const struct fld_ynode *node,
                      struct fld_stats_file_entry *e)
{
    const struct fld_ynode *v[8];
    int rc = members(r, node, "an entry", entry_keys, 8, v);
    if (!rc)
        rc = read_string(r, "op", v[0], &e->op);
    if (!rc)
        rc = read_string(r, "impl_id", v[1], &e->impl_id);
    if (!rc)
        rc = read_string(r, "device", v[2], &e->device);
    if (!rc)
        rc = read_string(r, "dtype", v[3], &e->dtype);
    uint64_t *counts[] = {&e->calls, &e->fallbacks, &e->failures, &e->total_ns};
    for (int k = 0; k < 4 && !rc; k++)
        rc = read_count(r, entry_keys[4 + k], v[4 + k], counts[k]);
    return rc;
}

static int read_root(const struct fld_schema_reader *r, const struct fld_ynode *root,
                     struct fld_stats_file *f)
{
    const struct fld_ynode *v[4];
    int rc = members(r, root, "the document", file_keys, 4, v);
    uint64_t pid = 0;
    if (!rc)
        rc = read_count(r, "pid", v[0], &pid);
    if (rc)
        return rc;
    f->pid = pid;
    f->has_rank = !(fld__schema_is_plain(v[1]) && strcmp(v[1]->text, "null") == 0);
    if (f->has_rank && (rc = read_count(r, "rank", v[1], &f->rank)))
        return rc;
    if (v[2]->type != FLD_YNODE_SCALAR || v[2]->style != FLD_YSTYLE_DOUBLE ||
        (strcmp(v[2]->text, "calls") != 0 && strcmp(v[2]->text, "time") != 0 &&
         strcmp(v[2]->text, "off") != 0))
        return fld__schema_fail(r, v[2], "'mode' must be \"calls\", \"time\" or \"off\"");
    snprintf(f->mode, sizeof f->mode, "%s", v[2]->text);
    const struct fld_ynode *list = v[3];
    if (list->type != FLD_YNODE_SEQUENCE)
        return fld__schema_fail(r, list, "'entries' must be a list");
    f->entries = calloc(list->n ? list->n : 1, sizeof *f->entries);
    if (!f->entries)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", r->path);
    for (size_t i = 0; i < list->n; i++) {
        f->n = i + 1; /* freed by the caller as far as it got */
        if ((rc = read_entry(r, list->kids[i], &f->entries[i])))
            return rc;
    }
    return FLD_OK;
}

int fld__stats_file_read(const char *path, struct fld_stats_file *out)
{
    memset(out, 0, sizeof *out);
    if (!path)
        return fld__fail(FLD_EINVAL, "fld__stats_file_read: argument 'path' is NULL");
    struct fld_schema_reader r = {path};
    struct fld_ynode *root = NULL;
    int rc = fld__json_load(path, path, &root);
    if (!rc && !root)
        rc = fld__schema_fail(&r, NULL, "the file is empty: a counters file is one JSON object");
    if (!rc)
        rc = read_root(&r, root, out);
    fld__yaml_free(root);
    if (rc)
        fld__stats_file_free(out);
    return rc;
}

void fld__stats_file_free(struct fld_stats_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n; i++) {
        free(f->entries[i].op);
        free(f->entries[i].impl_id);
        free(f->entries[i].device);
        free(f->entries[i].dtype);
    }
    free(f->entries);
    memset(f, 0, sizeof *f);
}
