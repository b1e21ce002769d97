/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vLLM's custom_ops grammar (see custom_ops.h): the reader that takes one
 * item at a time (policy files give each item its own line), the parser of
 * a comma-separated list (the environment, fld_policy_set()), copy, free and
 * the normalised text that fingerprints and reports print.
 *
 * It moved here from policy.c, whose record only holds the parsed value: a
 * grammar belongs with parse.c's, on the level below the policy, and this
 * file needs nothing above it (parse.h's lists, error.h's messages).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>

#include "custom_ops.h"
#include "error.h"
#include "parse.h"

#define CUSTOM_VALID "all, none, +OP, -OP with OP of [A-Za-z0-9_.-]"

static bool is_op_name(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

void fld__custom_ops_reader_init(struct fld_custom_ops_reader *r)
{
    memset(r, 0, sizeof *r);
    r->ops.base_enabled = true;
}

void fld__custom_ops_free(struct fld_custom_ops *c)
{
    if (!c)
        return;
    fld__strlist_free(&c->enabled);
    fld__strlist_free(&c->disabled);
    c->base_enabled = true;
}

int fld__custom_ops_copy(struct fld_custom_ops *dst, const struct fld_custom_ops *src)
{
    struct fld_custom_ops tmp = {src->base_enabled, {false, 0, NULL}, {false, 0, NULL}};
    if (fld__strlist_copy(&tmp.enabled, &src->enabled) != FLD_OK)
        return FLD_ENOMEM;
    if (fld__strlist_copy(&tmp.disabled, &src->disabled) != FLD_OK) {
        fld__strlist_free(&tmp.enabled);
        return FLD_ENOMEM;
    }
    *dst = tmp;
    return FLD_OK;
}

bool fld__custom_ops_is_default(const struct fld_custom_ops *c)
{
    return c->base_enabled && c->enabled.n == 0 && c->disabled.n == 0;
}

/* The reader's lists grow only here, from empty, so their room is implied: full at 0, 1, 2,
 * 4, 8, ... items. */
static int reader_push(struct fld_strlist *l, char *name)
{
    size_t n = l->n;
    if ((n & (n - 1)) == 0) {
        size_t cap = n ? 2 * n : 1;
        char **items = cap > n && cap <= (size_t)-1 / sizeof *items
                           ? realloc(l->items, cap * sizeof *items)
                           : NULL;
        if (!items)
            return FLD_ENOMEM;
        l->items = items;
    }
    l->items[l->n++] = name;
    l->set = true;
    return FLD_OK;
}

/*
 * Appends the item's op to its list unsorted, repeats included: keeping the
 * lists sorted and unique per item was O(n^2). The caller sorts them with
 * fld__strlist_sort_unique() and rules out an op both enabled and disabled
 * with fld__first_clash() (see custom_ops_parse() and config.c's
 * read_custom()).
 */
int fld__custom_ops_reader_add(struct fld_custom_ops_reader *r, const char *what, const char *item)
{
    size_t n = item ? strlen(item) : 0;
    const char *s = fld__trim(item ? item : "", &n);
    if (n == 0)
        return fld__fail(FLD_ECONFIG, "%s: empty item (valid: " CUSTOM_VALID ")", what);
    if ((n == 3 && strncasecmp(s, "all", 3) == 0) || (n == 4 && strncasecmp(s, "none", 4) == 0)) {
        bool all = n == 3;
        /* vLLM refuses both too: which one was meant is anyone's guess. */
        if (all ? r->saw_none : r->saw_all)
            return fld__fail(
                FLD_ECONFIG,
                "%s: 'all' and 'none' together; give one of them (valid: " CUSTOM_VALID ")", what);
        r->saw_all |= all;
        r->saw_none |= !all;
        r->ops.base_enabled = all;
        return FLD_OK;
    }
    if ((s[0] != '+' && s[0] != '-') || !is_op_name(s + 1, n - 1))
        return fld__fail(FLD_ECONFIG, "%s: invalid item '%.*s' (valid: " CUSTOM_VALID ")", what,
                         (int)n, s);
    bool enable = s[0] == '+';
    char *name = strndup(s + 1, n - 1);
    if (!name)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    if (reader_push(enable ? &r->ops.enabled : &r->ops.disabled, name) != FLD_OK) {
        free(name);
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    }
    return FLD_OK;
}

int fld__custom_ops_parse(const char *what, const char *csv, struct fld_custom_ops *out)
{
    struct fld_custom_ops_reader r;
    const char *s = csv ? csv : "", **names = NULL;
    unsigned char *sides = NULL;
    size_t items = 1, done = 0, at, first;
    int rc = FLD_OK;

    fld__custom_ops_reader_init(&r);
    if (!fld__is_blank(s)) {
        for (const char *c = strchr(s, ','); c; c = strchr(c + 1, ','))
            items++;
        if (!(names = calloc(items, sizeof *names)) || !(sides = calloc(items, 1))) {
            rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
            goto out;
        }
        for (;; done++) {
            const char *comma = strchr(s, ',');
            size_t n = comma ? (size_t)(comma - s) : strlen(s);
            size_t en = r.ops.enabled.n, dn = r.ops.disabled.n;
            char *item = strndup(s, n);
            if (!item) {
                rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
                break;
            }
            rc = fld__custom_ops_reader_add(&r, what, item);
            free(item);
            if (rc)
                break;
            if (r.ops.enabled.n > en) {
                names[done] = r.ops.enabled.items[en];
            } else if (r.ops.disabled.n > dn) {
                names[done] = r.ops.disabled.items[dn];
                sides[done] = 1;
            }
            if (!comma) {
                done++;
                break;
            }
            s = comma + 1;
        }
    }
    /* An op both enabled and disabled, first in input order; an error after it would not
     * have been reached by a check at each item, so it wins over rc. */
    if (fld__first_clash(names, sides, done, &at, &first) != FLD_OK)
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    else if (at < done)
        rc = fld__fail(FLD_ECONFIG, "%s: op '%s' is both enabled and disabled ('+%s' and '-%s')",
                       what, names[at], names[at], names[at]);
out:
    free(names);
    free(sides);
    if (rc) {
        fld__custom_ops_free(&r.ops);
        return rc;
    }
    fld__strlist_sort_unique(&r.ops.enabled);
    fld__strlist_sort_unique(&r.ops.disabled);
    *out = r.ops;
    return FLD_OK;
}

/* Appends a then b at *len, as far as size allows; *len counts everything. */
static void append2(char *buf, size_t size, size_t *len, const char *a, const char *b)
{
    bool room = buf && *len < size;
    int n = snprintf(room ? buf + *len : NULL, room ? size - *len : 0, "%s%s", a, b);
    if (n > 0)
        *len += (size_t)n;
}

size_t fld__custom_ops_format(const struct fld_custom_ops *c, char *buf, size_t size)
{
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    append2(buf, size, &len, c->base_enabled ? "all" : "none", "");
    for (size_t i = 0; i < c->enabled.n; i++)
        append2(buf, size, &len, ",+", c->enabled.items[i]);
    for (size_t i = 0; i < c->disabled.n; i++)
        append2(buf, size, &len, ",-", c->disabled.items[i]);
    return len;
}
