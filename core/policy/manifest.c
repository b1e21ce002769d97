/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Frozen-dispatch manifests (see manifest.h): a strict YAML reader, the
 * lookup used when chains are built, and the check against the registry.
 * The record's references and freeing are manifest_record.c's.
 *
 * The reader parses with the policy files' event-based tree loader
 * (config_yaml.c) rather than libyaml's document loader: the file is read
 * whole under a size cap without blocking on FIFOs, nesting is limited (the
 * scanner is quadratic in flow depth, and this runs under the host lock),
 * anchors, aliases and tags are refused, and reader errors (bad UTF-8) get a
 * line:column. The tree is then walked against a fixed schema, so every
 * error can point at the node at fault (1-based line and column).
 */
#include "manifest.h"
#include "names.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"
#include "dtypes.h"
#include "error.h"
#include "log.h"
#include "ops.h"
#include "registry.h"
#include "schema_reader.h"

#define TOP_KEYS      "version, entries"
#define ENTRY_KEYS    "op, device, dtype, impl, rows"
#define REQUIRED_KEYS "op, device, dtype, impl"

enum entry_key { KEY_OP, KEY_DEVICE, KEY_DTYPE, KEY_IMPL, KEY_ROWS, KEY_COUNT };
static const char *const entry_keys[KEY_COUNT] = {"op", "device", "dtype", "impl", "rows"};

static const char *node_kind(const struct fld_ynode *n)
{
    switch (n->type) {
    case FLD_YNODE_SCALAR:
        return "a scalar";
    case FLD_YNODE_SEQUENCE:
        return "a sequence";
    case FLD_YNODE_MAPPING:
        return "a mapping";
    default:
        return "nothing";
    }
}

/* A plain untagged scalar that YAML reads as null: empty, "~" or "null". */
static bool is_null(const struct fld_ynode *n)
{
    if (!fld__schema_is_plain(n))
        return false;
    const char *s = n->text;
    return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
           strcmp(s, "NULL") == 0;
}

/* A non-empty string value, or an error naming key. (The tree has no embedded NULs.) */
static int string_value(const struct fld_schema_reader *r, const char *key,
                        const struct fld_ynode *v)
{
    if (v->type != FLD_YNODE_SCALAR)
        return fld__schema_fail(r, v, "key '%s' must be a string, got %s", key, node_kind(v));
    if (is_null(v))
        return fld__schema_fail(r, v, "key '%s' must be a string, got null", key);
    /* !!str says what an untagged value means anyway; any other tag says it is not one. */
    if (v->tag_bool)
        return fld__schema_fail(r, v, "key '%s' must be a string, got a !!bool value '%s'", key,
                                v->text);
    if (!*v->text)
        return fld__schema_fail(r, v, "key '%s' must not be empty", key);
    return FLD_OK;
}

static int name_index(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* The manifest names devices by their names in the device table, without aliases. */
static const char *device_name(int dev)
{
    return fld__devices[dev].name;
}

static const char *dtype_name(int dt)
{
    return fld__dtype_word(dt);
}

/* FLD_DT_* index of a dtype word of the table, FLD_DT_ANY for "any", or -1. */
static int dtype_index(const char *s)
{
    for (int i = 0; i < FLD_NDTYPES; i++)
        if (strcmp(s, fld__dtypes[i].name) == 0)
            return i;
    return strcmp(s, "any") == 0 ? FLD_DT_ANY : -1;
}

static int device_index(const char *s)
{
    for (int i = 0; i < FLD_NDEVICES; i++)
        if (strcmp(device_name(i), s) == 0)
            return i;
    return -1;
}

/*
 * A mapping key as a string; an error unless it is a non-null scalar (YAML
 * allows sequences and mappings as keys; this schema does not).
 */
static int pair_key(const struct fld_schema_reader *r, const struct fld_ynode *key)
{
    if (key->type != FLD_YNODE_SCALAR || is_null(key))
        return fld__schema_fail(r, key, "mapping keys must be strings");
    return FLD_OK;
}

/* The largest row count a bucket may name (18 digits); "LO-" has no upper end. */
#define ROWS_MAX INT64_C(999999999999999999)

/* A row count of a bucket: decimal digits, 1 to ROWS_MAX; -1 otherwise, -2 when only too large. */
static int64_t row_count(const char *s, size_t len)
{
    if (len == 0)
        return -1;
    int64_t v = 0;
    bool big = false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (big || v > (ROWS_MAX - (s[i] - '0')) / 10)
            big = true;
        else
            v = v * 10 + (s[i] - '0');
    }
    return big ? -2 : v >= 1 ? v : -1;
}

/*
 * A bucket "LO-HI", "LO-" (no upper end) or "N" (LO = HI = N), 1-based row
 * counts (the product of a call's leading dims; rotary: its tokens).
 */
static int parse_rows(const struct fld_schema_reader *r, const struct fld_ynode *v,
                      struct fld_manifest_entry *e)
{
    if (v->type != FLD_YNODE_SCALAR || is_null(v) || v->tag_bool)
        return fld__schema_fail(
            r, v, "key 'rows' must be a row range such as '1-16', '17-512' or '513-', got %s",
            is_null(v)    ? "null"
            : v->tag_bool ? "a !!bool value"
                          : node_kind(v));
    const char *text = v->text, *dash = strchr(text, '-');
    size_t lo_len = dash ? (size_t)(dash - text) : strlen(text);
    int64_t lo = row_count(text, lo_len), hi = lo;
    if (dash)
        hi = dash[1] ? row_count(dash + 1, strlen(dash + 1)) : INT64_MAX;
    if (lo == -1 || hi == -1)
        return fld__schema_fail(
            r, v,
            "invalid rows '%s': expected LO-HI, LO- or N with whole row counts from 1 "
            "(e.g. '1-16', '513-')",
            text);
    if (lo < 0 || hi < 0)
        return fld__schema_fail(r, v,
                                "invalid rows '%s': a row count is at most %" PRId64
                                " (write 'LO-' for a range without an upper end)",
                                text, ROWS_MAX);
    if (hi < lo)
        return fld__schema_fail(
            r, v, "invalid rows '%s': the range ends (%" PRId64 ") before it starts (%" PRId64 ")",
            text, hi, lo);
    e->rows_lo = lo;
    e->rows_hi = hi;
    return FLD_OK;
}

static int parse_entry(const struct fld_schema_reader *r, const struct fld_ynode *node,
                       struct fld_manifest_entry *e)
{
    if (node->type != FLD_YNODE_MAPPING)
        return fld__schema_fail(r, node,
                                "each entry must be a mapping with keys " REQUIRED_KEYS ", got %s",
                                node_kind(node));
    const struct fld_ynode *seen[KEY_COUNT] = {NULL};
    for (size_t i = 0; i + 1 < node->n; i += 2) {
        const struct fld_ynode *k = node->kids[i], *v = node->kids[i + 1];
        int rc = pair_key(r, k);
        if (rc)
            return rc;
        int idx = name_index(entry_keys, KEY_COUNT, k->text);
        if (idx < 0)
            return fld__schema_fail(r, k, "unknown key '%s' in entry (valid: " ENTRY_KEYS ")",
                                    k->text);
        if (seen[idx])
            return fld__schema_fail(r, k, "duplicate key '%s' (first at line %u)", k->text,
                                    seen[idx]->line);
        seen[idx] = k;
        if (idx == KEY_ROWS) {
            if ((rc = parse_rows(r, v, e)) != FLD_OK)
                return rc;
            continue;
        }
        rc = string_value(r, k->text, v);
        if (rc)
            return rc;
        const char *text = v->text;
        switch (idx) {
        case KEY_OP:
        case KEY_IMPL: {
            char *copy = strdup(text);
            if (!copy)
                return fld__fail(FLD_ENOMEM, "%s: out of memory", r->path);
            if (idx == KEY_OP) {
                e->op = copy;
            } else {
                e->impl_id = copy;
                e->impl_column = (int)v->column;
            }
            break;
        }
        case KEY_DEVICE:
            e->device = device_index(text);
            if (e->device < 0)
                return fld__schema_fail(r, v, "invalid device '%s' (valid: %s)", text,
                                        fld__device_text(FLD_DEVICE_TEXT_NAMES));
            break;
        case KEY_DTYPE:
            e->dtype = dtype_index(text);
            if (e->dtype < 0)
                return fld__schema_fail(
                    r, v, "invalid dtype '%s' (valid: " FLD_DTYPE_NAMES_TEXT ")", text);
            break;
        }
    }
    for (int i = 0; i < KEY_COUNT; i++)
        if (!seen[i] && i != KEY_ROWS)
            return fld__schema_fail(
                r, node, "entry is missing key '%s' (required: " REQUIRED_KEYS ")", entry_keys[i]);
    e->line = (int)node->line;
    return FLD_OK;
}

static int entry_cmp(const struct fld_manifest_entry *a, const struct fld_manifest_entry *b)
{
    int c = strcmp(a->op, b->op);
    if (c)
        return c;
    if (a->device != b->device)
        return a->device < b->device ? -1 : 1;
    if (a->dtype != b->dtype)
        return a->dtype < b->dtype ? -1 : 1;
    return 0;
}

/* The key, then the bucket's start (the entry without rows, 0, first). */
static int bucket_cmp(const struct fld_manifest_entry *a, const struct fld_manifest_entry *b)
{
    int c = entry_cmp(a, b);
    if (c)
        return c;
    return (a->rows_lo > b->rows_lo) - (a->rows_lo < b->rows_lo);
}

/* "rows 1-16", "rows 513-", "rows 8" into buf; "" for an entry without rows. */
static const char *rows_text(const struct fld_manifest_entry *e, char *buf, size_t size)
{
    if (!e->rows_lo)
        snprintf(buf, size, "%s", "");
    else if (e->rows_hi == INT64_MAX)
        snprintf(buf, size, "rows %" PRId64 "-", e->rows_lo);
    else if (e->rows_hi == e->rows_lo)
        snprintf(buf, size, "rows %" PRId64, e->rows_lo);
    else
        snprintf(buf, size, "rows %" PRId64 "-%" PRId64, e->rows_lo, e->rows_hi);
    return buf;
}

/* An entry while reading, with its mapping for messages. */
struct parsed_entry {
    struct fld_manifest_entry e;
    const struct fld_ynode *node;
    const struct fld_ynode *rows; /* the 'rows' value, NULL without one */
    size_t index;                 /* position in the file */
};

/* By key, then by position so the first occurrence leads. */
static int parsed_cmp(const void *pa, const void *pb)
{
    const struct parsed_entry *a = pa, *b = pb;
    int c = bucket_cmp(&a->e, &b->e);
    if (c)
        return c;
    return (a->index > b->index) - (a->index < b->index);
}

static int parse_entries(const struct fld_schema_reader *r, const struct fld_ynode *seq,
                         struct fld_manifest *m)
{
    if (seq->type != FLD_YNODE_SEQUENCE)
        return fld__schema_fail(
            r, seq, "key 'entries' must be a sequence of mappings (use [] for none), got %s",
            is_null(seq) ? "null" : node_kind(seq));
    size_t n = seq->n;
    if (n == 0)
        return FLD_OK;
    struct parsed_entry *parsed = calloc(n, sizeof *parsed);
    struct fld_manifest_entry *entries = calloc(n, sizeof *entries);
    int rc = FLD_OK;
    if (!parsed || !entries) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", r->path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        parsed[i].index = i;
        parsed[i].node = seq->kids[i];
        rc = parse_entry(r, seq->kids[i], &parsed[i].e);
        if (rc)
            goto done;
        const struct fld_ynode *node = seq->kids[i];
        for (size_t k = 0; k + 1 < node->n; k += 2)
            if (strcmp(node->kids[k]->text, "rows") == 0)
                parsed[i].rows = node->kids[k + 1];
    }
    /* Sorted, so that fld__manifest_find can bisect. */
    qsort(parsed, n, sizeof *parsed, parsed_cmp);
    size_t buckets = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fld_manifest_entry *e = &parsed[i].e, *prev = i ? &parsed[i - 1].e : NULL;
        bool same_key = prev && entry_cmp(prev, e) == 0;
        buckets = same_key ? buckets : 0;
        if (e->rows_lo && ++buckets > FLD_MAX_BUCKETS) {
            rc = fld__schema_fail(
                r, parsed[i].rows,
                "too many row buckets for (%s, %s, %s): at most %d per op, device and dtype", e->op,
                device_name(e->device), fld__dtype_word(e->dtype), FLD_MAX_BUCKETS);
            goto done;
        }
        if (!same_key)
            continue;
        if (!e->rows_lo) {
            rc = fld__schema_fail(r, parsed[i].node,
                                  "duplicate entry for (%s, %s, %s); first at line %d", e->op,
                                  device_name(e->device), fld__dtype_word(e->dtype), prev->line);
            goto done;
        }
        /* Sorted by start: a bucket overlaps only if it starts inside the one before. */
        if (prev->rows_lo && e->rows_lo <= prev->rows_hi) {
            char a[48], b[48];
            const struct parsed_entry *later =
                parsed[i].index > parsed[i - 1].index ? &parsed[i] : &parsed[i - 1];
            const struct parsed_entry *earlier = later == &parsed[i] ? &parsed[i - 1] : &parsed[i];
            rc = fld__schema_fail(
                r, later->rows, "%s overlaps %s of the entry at line %d for (%s, %s, %s)",
                rows_text(&later->e, a, sizeof a), rows_text(&earlier->e, b, sizeof b),
                earlier->e.line, e->op, device_name(e->device), fld__dtype_word(e->dtype));
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        entries[i] = parsed[i].e;
        parsed[i].e.op = parsed[i].e.impl_id = NULL;
    }
    m->entries = entries;
    m->n = n;
    entries = NULL;

done:
    for (size_t i = 0; parsed && i < n; i++) {
        free(parsed[i].e.op);
        free(parsed[i].e.impl_id);
    }
    free(parsed);
    free(entries);
    return rc;
}

static int check_version(const struct fld_schema_reader *r, const struct fld_ynode *v)
{
    if (v->type != FLD_YNODE_SCALAR || is_null(v))
        return fld__schema_fail(r, v, "key 'version' must be an integer, got %s (valid: 1)",
                                is_null(v) ? "null" : node_kind(v));
    /* A tag makes "1" something else than the integer 1, as it does in a policy file. */
    if (v->tag_str || v->tag_bool)
        return fld__schema_fail(
            r, v, "key 'version' must be an integer, got the %s value '%s' (valid: 1)",
            v->tag_str ? "!!str" : "!!bool", v->text);
    if (v->style != FLD_YSTYLE_PLAIN)
        return fld__schema_fail(
            r, v, "key 'version' must be an integer, got the string '%s' (valid: 1)", v->text);
    if (strcmp(v->text, "1") != 0)
        return fld__schema_fail(r, v, "unsupported manifest version '%s' (valid: 1)", v->text);
    return FLD_OK;
}

static int parse_root(const struct fld_schema_reader *r, const struct fld_ynode *root,
                      struct fld_manifest *m)
{
    if (!root)
        return fld__schema_fail(r, NULL, "empty manifest: expected a mapping with keys " TOP_KEYS);
    if (root->type != FLD_YNODE_MAPPING)
        return fld__schema_fail(r, root,
                                "the manifest must be a mapping with keys " TOP_KEYS ", got %s",
                                node_kind(root));
    const struct fld_ynode *version_key = NULL, *entries_key = NULL, *entries = NULL;
    for (size_t i = 0; i + 1 < root->n; i += 2) {
        const struct fld_ynode *k = root->kids[i], *v = root->kids[i + 1];
        int rc = pair_key(r, k);
        if (rc)
            return rc;
        const struct fld_ynode **slot;
        if (strcmp(k->text, "version") == 0)
            slot = &version_key;
        else if (strcmp(k->text, "entries") == 0)
            slot = &entries_key;
        else
            return fld__schema_fail(r, k, "unknown key '%s' (valid: " TOP_KEYS ")", k->text);
        if (*slot)
            return fld__schema_fail(r, k, "duplicate key '%s' (first at line %u)", k->text,
                                    (*slot)->line);
        *slot = k;
        if (slot == &version_key) {
            if ((rc = check_version(r, v)) != FLD_OK)
                return rc;
        } else {
            entries = v;
        }
    }
    if (!version_key)
        return fld__schema_fail(r, root, "missing key 'version' (required: " TOP_KEYS ")");
    if (!entries_key)
        return fld__schema_fail(r, root, "missing key 'entries' (required: " TOP_KEYS ")");
    return parse_entries(r, entries, m);
}

static int read_manifest(const char *path, char **data, size_t *len)
{
    int err;
    switch (fld__read_regular_file(path, FLD_YAML_MAX_FILE_SIZE, data, len, &err)) {
    case FLD_READ_OK:
        return FLD_OK;
    case FLD_READ_OPEN:
        return fld__fail(FLD_ECONFIG, "%s: cannot open: %s", path, strerror(err));
    case FLD_READ_NOT_REGULAR:
        return fld__fail(FLD_ECONFIG, "%s: not a regular file", path);
    case FLD_READ_TOO_LARGE:
        return fld__fail(FLD_ECONFIG, "%s: cannot read: larger than %u bytes", path,
                         FLD_YAML_MAX_FILE_SIZE);
    case FLD_READ_IO:
        return fld__fail(FLD_ECONFIG, "%s: cannot read: %s", path, strerror(err));
    case FLD_READ_NOMEM:
    default:
        return fld__fail(FLD_ENOMEM, "%s: out of memory while reading the manifest", path);
    }
}

int fld__manifest_load(const char *path, struct fld_manifest **out)
{
    *out = NULL;
    if (!path || !*path)
        return fld__fail(FLD_ECONFIG, "manifest path is empty");
    char *data = NULL;
    size_t len = 0;
    struct fld_ynode *root = NULL;
    struct fld_manifest *m = NULL;
    int rc = read_manifest(path, &data, &len);
    if (rc)
        return rc;
    rc = fld__yaml_parse(data, len, path, "more than one YAML document (a manifest is one mapping)",
                         &root);
    free(data);
    if (rc)
        return rc;
    m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    atomic_init(&m->refs, 1);
    const struct fld_schema_reader r = {path};
    rc = parse_root(&r, root, m);

done:
    fld__yaml_free(root);
    if (rc) {
        fld__manifest_free(m);
        return rc;
    }
    *out = m;
    return FLD_OK;
}

/*
 * The entries of one key: bisected to the first (they are sorted by key,
 * then by bucket start) and counted. NULL when the key has none.
 */
static const struct fld_manifest_entry *key_group(const struct fld_manifest *m, const char *op,
                                                  int device, int dtype, size_t *count)
{
    const struct fld_manifest_entry key = {.op = (char *)op, .device = device, .dtype = dtype};
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (entry_cmp(&m->entries[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t end = lo;
    while (end < m->n && entry_cmp(&m->entries[end], &key) == 0)
        end++;
    *count = end - lo;
    return end > lo ? &m->entries[lo] : NULL;
}

/*
 * The group of entries that decides (op, device, dtype): the dtype's own,
 * or, when it has none at all (bucketed or not), those of dtype "any".
 */
static const struct fld_manifest_entry *deciding_group(const struct fld_manifest *m, const char *op,
                                                       int device, int dtype, size_t *count)
{
    *count = 0;
    if (!m || !op || m->n == 0)
        return NULL;
    const struct fld_manifest_entry *g = key_group(m, op, device, dtype, count);
    if (!g && dtype != FLD_DT_ANY)
        g = key_group(m, op, device, FLD_DT_ANY, count);
    return g;
}

/* An entry with dtype "any" pins every dtype of its (op, device) that has no entry of its own. */
const struct fld_manifest_entry *fld__manifest_find(const struct fld_manifest *m, const char *op,
                                                    int device, int dtype, int64_t rows)
{
    size_t n;
    const struct fld_manifest_entry *g = deciding_group(m, op, device, dtype, &n);
    const struct fld_manifest_entry *whole = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!g[i].rows_lo)
            whole = &g[i];
        else if (rows >= g[i].rows_lo && rows <= g[i].rows_hi)
            return &g[i];
    }
    return whole;
}

int fld__manifest_buckets(const struct fld_manifest *m, const char *op, int device, int dtype,
                          int64_t lo[FLD_MAX_BUCKETS], int64_t hi[FLD_MAX_BUCKETS])
{
    size_t n;
    const struct fld_manifest_entry *g = deciding_group(m, op, device, dtype, &n);
    int k = 0;
    for (size_t i = 0; i < n && k < FLD_MAX_BUCKETS; i++) {
        if (!g[i].rows_lo)
            continue;
        lo[k] = g[i].rows_lo;
        hi[k] = g[i].rows_hi;
        k++;
    }
    return k;
}

const char *fld__manifest_rows_text(const struct fld_manifest_entry *e, char *buf, size_t size)
{
    return rows_text(e, buf, size);
}

static const char *mask_names(uint32_t mask, const char *(*name)(int), int n, char *buf,
                              size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!(mask & (1u << i)))
            continue;
        int w = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name(i));
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
    }
    if (!used)
        snprintf(buf, size, "none");
    return buf;
}

/* Whether e can be honoured; else the problem, completing "impl 'x' for op (dev, dt) ...". */
static bool entry_usable(const struct fld_manifest_entry *e, char *why, size_t size)
{
    char list[64];
    struct fld_op_s *op = fld__op_find(e->op);
    struct fld_impl_rec *impl = NULL;
    for (size_t i = 0; op && i < op->n_impls && !impl; i++)
        if (fld__impl_named(op->impls[i], e->impl_id))
            impl = op->impls[i];
    if (!impl) {
        char hint[160];
        if (op) {
            const char *ids[64];
            size_t n = 0;
            for (size_t i = 0; i < op->n_impls && n < 64; i++)
                ids[n++] = op->impls[i]->impl_id;
            snprintf(why, size, "is not registered for op '%s'%s", e->op,
                     fld__did_you_mean(e->impl_id, ids, n, hint, sizeof hint));
        } else {
            snprintf(why, size, "is not registered (no op named '%s'%s)", e->op,
                     fld__did_you_mean_op(e->op, hint, sizeof hint));
        }
        return false;
    }
    if (!(impl->devices & (1u << e->device))) {
        snprintf(why, size, "does not support device %s (it declares %s)", device_name(e->device),
                 mask_names(impl->devices, device_name, FLD_NDEVICES, list, sizeof list));
        return false;
    }
    if (e->dtype != FLD_DT_ANY && !(impl->dtypes & (1u << e->dtype))) {
        snprintf(why, size, "does not support dtype %s (it declares %s)", fld__dtype_word(e->dtype),
                 mask_names(impl->dtypes, dtype_name, FLD_NDTYPES, list, sizeof list));
        return false;
    }
    const char *reason = "";
    if (!fld__impl_available(impl, &reason)) {
        snprintf(why, size, "is unavailable: %s", reason);
        return false;
    }
    return true;
}

static int by_line(const void *pa, const void *pb)
{
    const struct fld_manifest_entry *a = *(const struct fld_manifest_entry *const *)pa;
    const struct fld_manifest_entry *b = *(const struct fld_manifest_entry *const *)pb;
    return (a->line > b->line) - (a->line < b->line);
}

int fld__manifest_check(const struct fld_manifest *m, bool strict)
{
    if (!m || m->n == 0)
        return FLD_OK;
    /* Entries are sorted by key; problems are reported in file order. */
    const struct fld_manifest_entry **order = malloc(m->n * sizeof *order);
    if (!order)
        return fld__fail(FLD_ENOMEM, "VLLM_FL_MANIFEST: %s: out of memory", m->path);
    for (size_t i = 0; i < m->n; i++)
        order[i] = &m->entries[i];
    qsort(order, m->n, sizeof *order, by_line);

    /* As names.c does: the first MANIFEST_LISTED problems get a line each,
     * the rest one line with their count. */
    enum { MANIFEST_LISTED = 5 };
    size_t listed = 0, unlisted = 0;
    int rc = FLD_OK;
    for (size_t i = 0; i < m->n && rc == FLD_OK; i++) {
        const struct fld_manifest_entry *e = order[i];
        char why[256], rows[48];
        if (entry_usable(e, why, sizeof why))
            continue;
        rows_text(e, rows, sizeof rows);
        if (!strict && listed++ >= MANIFEST_LISTED)
            unlisted++;
        else if (strict)
            rc = fld__fail(FLD_ECONFIG,
                           "VLLM_FL_MANIFEST: %s:%d:%d: impl '%s' for %s (%s, %s%s%s) %s", m->path,
                           e->line, e->impl_column, e->impl_id, e->op, device_name(e->device),
                           fld__dtype_word(e->dtype), rows[0] ? ", " : "", rows, why);
        else
            fld__log(FLD_LOG_WARNING,
                     "VLLM_FL_MANIFEST: %s:%d:%d: impl '%s' for %s (%s, %s%s%s) %s; the entry is "
                     "ignored and %s resolves by the policy",
                     m->path, e->line, e->impl_column, e->impl_id, e->op, device_name(e->device),
                     fld__dtype_word(e->dtype), rows[0] ? ", " : "", rows, why, e->op);
    }
    if (unlisted)
        fld__log(
            FLD_LOG_WARNING,
            "VLLM_FL_MANIFEST: %s: ... and %zu more manifest entries that cannot be used (only "
            "the first %d are listed); they are ignored",
            m->path, unlisted, (int)MANIFEST_LISTED);
    free(order);
    return rc;
}
