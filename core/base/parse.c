/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict parsers for the policy's value grammars. The Python system this
 * replaces skipped malformed fragments and read 'false' as true; here every
 * malformed input is FLD_ECONFIG with a message that names the variable or
 * key, quotes the bad fragment and lists what would have been valid.
 *
 * Lists are kept sorted and unique so that fingerprints and lookups need no
 * further normalisation.
 *
 * Every grammar here builds its message from the same few helpers (quote
 * the fragment, list what is valid), so that all of them read alike; each
 * grammar is short.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>

#include "error.h"
#include "parse.h"

#define BOOL_VALID   "1, 0, true, false, yes, no, on, off"
#define SWITCH_VALID "1, 0, true, false (any case)"
#define FLAG_VALID   "0, 1"
#define PREFER_VALID "flagos, vendor, reference"
#define TOKEN_VALID  "flagos, vendor, vendor:NAME, reference, impl:ID"
#define NAME_CHARS   "[A-Za-z0-9_.-]"
#define PER_OP_FORM  "op=token|token;..."

/* ------------------------------------------------------------------------ */
/* Spans                                                                    */
/* ------------------------------------------------------------------------ */

/* A view into the caller's string; never NUL-terminated. */
struct span {
    const char *s;
    size_t n;
};

/* Locale-independent on purpose: names must not depend on LC_CTYPE. */
static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

static struct span span_of(const char *s)
{
    struct span sp = {s ? s : "", s ? strlen(s) : 0};
    return sp;
}

const char *fld__trim(const char *s, size_t *n)
{
    while (*n > 0 && fld__is_space(s[0])) {
        s++;
        (*n)--;
    }
    while (*n > 0 && fld__is_space(s[*n - 1]))
        (*n)--;
    return s;
}

bool fld__is_blank(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    fld__trim(s, &n);
    return n == 0;
}

bool fld__parse_seconds(const char *value, double *out)
{
    size_t n = value ? strlen(value) : 0;
    const char *s = fld__trim(value ? value : "", &n);
    if (n == 0 || n >= 64)
        return false;
    char text[64];
    memcpy(text, s, n);
    text[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end != text + n || !isfinite(v))
        return false;
    *out = v;
    return true;
}

static struct span trim(struct span sp)
{
    sp.s = fld__trim(sp.s, &sp.n);
    return sp;
}

static bool span_ieq(struct span sp, const char *word)
{
    return strlen(word) == sp.n && strncasecmp(sp.s, word, sp.n) == 0;
}

static bool span_is_name(struct span sp)
{
    if (sp.n == 0)
        return false;
    for (size_t i = 0; i < sp.n; i++)
        if (!is_name_char(sp.s[i]))
            return false;
    return true;
}

/* Splits *rest at the first sep: *item gets what comes before it. Returns
 * false when rest held no separator (then *item is all of it). */
static bool split_next(struct span *rest, char sep, struct span *item)
{
    const char *hit = rest->n ? memchr(rest->s, sep, rest->n) : NULL;
    if (!hit) {
        *item = *rest;
        rest->s += rest->n;
        rest->n = 0;
        return false;
    }
    item->s = rest->s;
    item->n = (size_t)(hit - rest->s);
    rest->n -= item->n + 1;
    rest->s = hit + 1;
    return true;
}

static char *span_dup(struct span sp)
{
    char *s = malloc(sp.n + 1);
    if (!s)
        return NULL;
    memcpy(s, sp.s, sp.n);
    s[sp.n] = '\0';
    return s;
}

static int oom(const char *what)
{
    return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
}

/* ------------------------------------------------------------------------ */
/* Scalars                                                                  */
/* ------------------------------------------------------------------------ */

int fld__parse_bool(const char *what, const char *value, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    struct span sp = trim(span_of(value));

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (span_ieq(sp, yes[i])) {
            *out = true;
            return FLD_OK;
        }
        if (span_ieq(sp, no[i])) {
            *out = false;
            return FLD_OK;
        }
    }
    return fld__fail(FLD_ECONFIG, "%s: invalid value '%s' (valid: " BOOL_VALID ")", what,
                     value ? value : "");
}

/*
 * vllm-plugin-FL reads its switches as "true or 1 is on" and its STRICT as
 * "0 or 1"; anything else it turns off, with or without a warning. Reading
 * "yes" as on here would give the opposite of what the same variable does
 * there, so only the words both systems agree on are accepted.
 */
int fld__parse_switch(const char *what, const char *value, bool *out)
{
    struct span sp = trim(span_of(value));
    if (span_ieq(sp, "1") || span_ieq(sp, "true")) {
        *out = true;
        return FLD_OK;
    }
    if (span_ieq(sp, "0") || span_ieq(sp, "false")) {
        *out = false;
        return FLD_OK;
    }
    return fld__fail(FLD_ECONFIG, "%s: invalid value '%s' (valid: " SWITCH_VALID ")", what,
                     value ? value : "");
}

int fld__parse_flag(const char *what, const char *value, bool *out)
{
    struct span sp = trim(span_of(value));
    if (span_ieq(sp, "1") || span_ieq(sp, "0")) {
        *out = sp.s[0] == '1';
        return FLD_OK;
    }
    return fld__fail(FLD_ECONFIG,
                     "%s: invalid value '%s' (valid: " FLAG_VALID
                     "; vllm-plugin-FL reads no other value, and turns 'true' off)",
                     what, value ? value : "");
}

int fld__parse_prefer(const char *what, const char *value, int *out)
{
    static const char *const names[] = {"flagos", "vendor", "reference"};
    struct span sp = trim(span_of(value));

    for (int i = 0; i < 3; i++) {
        if (span_ieq(sp, names[i])) {
            *out = i;
            return FLD_OK;
        }
    }
    return fld__fail(FLD_ECONFIG, "%s: invalid value '%s' (valid: " PREFER_VALID ")", what,
                     value ? value : "");
}

/* ------------------------------------------------------------------------ */
/* String lists                                                             */
/* ------------------------------------------------------------------------ */

static size_t strlist_lower_bound(const struct fld_strlist *l, const char *s, bool *found)
{
    size_t lo = 0, hi = l->n;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(l->items[mid], s);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The capacity to grow to from cap; 0 when the byte size would overflow. */
static size_t grown_cap(size_t cap, size_t item_size)
{
    size_t next = cap ? 2 * cap : 8;
    return next < cap || next > (size_t)-1 / item_size ? 0 : next;
}

int fld__strlist_append(struct fld_strlist *l, size_t *cap, char *s)
{
    if (l->n == *cap) {
        size_t next = grown_cap(*cap, sizeof *l->items);
        char **items = next ? realloc(l->items, next * sizeof *items) : NULL;
        if (!items)
            return FLD_ENOMEM;
        l->items = items;
        *cap = next;
    }
    l->items[l->n++] = s;
    l->set = true;
    return FLD_OK;
}

static int str_ptr_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void fld__strlist_sort_unique(struct fld_strlist *l)
{
    if (l->n < 2)
        return;
    qsort(l->items, l->n, sizeof *l->items, str_ptr_cmp);
    size_t kept = 1;
    for (size_t i = 1; i < l->n; i++) {
        if (strcmp(l->items[i], l->items[kept - 1]) == 0)
            free(l->items[i]);
        else
            l->items[kept++] = l->items[i];
    }
    l->n = kept;
}

void fld__ascii_lower(char *s)
{
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z')
            *s = (char)(*s - 'A' + 'a');
}

void fld__strlist_lower(struct fld_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        fld__ascii_lower(l->items[i]);
    fld__strlist_sort_unique(l);
}

void fld__strlist_free(struct fld_strlist *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
    l->set = false;
}

int fld__strlist_copy(struct fld_strlist *dst, const struct fld_strlist *src)
{
    struct fld_strlist tmp = {src->set, 0, NULL};
    if (src->n) {
        tmp.items = calloc(src->n, sizeof *tmp.items);
        if (!tmp.items)
            return FLD_ENOMEM;
        for (; tmp.n < src->n; tmp.n++) {
            tmp.items[tmp.n] = strdup(src->items[tmp.n]);
            if (!tmp.items[tmp.n]) {
                fld__strlist_free(&tmp);
                return FLD_ENOMEM;
            }
        }
    }
    *dst = tmp;
    return FLD_OK;
}

bool fld__strlist_has(const struct fld_strlist *l, const char *s)
{
    if (!l || !l->set || !s)
        return false;
    bool found;
    strlist_lower_bound(l, s, &found);
    return found;
}

/* Both lists are sorted and unique, so this is one linear merge. */
int fld__strlist_merge(struct fld_strlist *dst, const struct fld_strlist *add)
{
    /* An unset list adds nothing; it must not turn dst into a set, empty
     * list (which, for an allow list, would allow nothing). */
    if (!add->set)
        return FLD_OK;
    /* Copies of what dst lacks first, so that dst is untouched when memory runs out. */
    char **fresh = add->n ? malloc(add->n * sizeof *fresh) : NULL, **items = NULL;
    size_t n_fresh = 0, i = 0;
    if (add->n && !fresh)
        return FLD_ENOMEM;
    for (size_t j = 0; j < add->n; j++) {
        int c = -1;
        while (i < dst->n && (c = strcmp(dst->items[i], add->items[j])) < 0)
            i++;
        if (i < dst->n && c == 0)
            continue;
        if (!(fresh[n_fresh] = strdup(add->items[j])))
            goto fail;
        n_fresh++;
    }
    if (dst->n + n_fresh && !(items = malloc((dst->n + n_fresh) * sizeof *items)))
        goto fail;
    size_t n = 0, k = 0;
    for (i = 0; i < dst->n || k < n_fresh;) {
        if (k == n_fresh || (i < dst->n && strcmp(dst->items[i], fresh[k]) < 0))
            items[n++] = dst->items[i++];
        else
            items[n++] = fresh[k++];
    }
    free(fresh);
    free(dst->items);
    dst->items = items;
    dst->n = n;
    dst->set = true;
    return FLD_OK;
fail:
    for (size_t f = 0; f < n_fresh; f++)
        free(fresh[f]);
    free(fresh);
    return FLD_ENOMEM;
}

/* Whether sp holds only commas and whitespace (at least one comma). */
static bool separators_only(struct span sp)
{
    bool comma = false;
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.s[i] == ',')
            comma = true;
        else if (sp.s[i] != ' ' && sp.s[i] != '\t')
            return false;
    }
    return comma;
}

int fld__parse_name_list(const char *what, const char *value, struct fld_strlist *out)
{
    struct fld_strlist list = {false, 0, NULL};
    struct span rest = span_of(value), item;
    size_t cap = 0;
    char *name;
    int rc = FLD_OK;

    if (trim(rest).n == 0 || separators_only(rest))
        goto done; /* as vllm-plugin-FL, which drops empty items: no list */
    list.set = true;
    for (bool more = true; more;) {
        more = split_next(&rest, ',', &item);
        item = trim(item);
        if (item.n == 0) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s: empty item in '%s' (expected comma-separated names of " NAME_CHARS
                           ")",
                           what, value);
            goto fail;
        }
        if (!span_is_name(item)) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s: invalid name '%.*s' in '%s' (names use only " NAME_CHARS ")", what,
                           (int)item.n, item.s, value);
            goto fail;
        }
        if (!(name = span_dup(item)) || fld__strlist_append(&list, &cap, name) != FLD_OK) {
            free(name);
            rc = oom(what);
            goto fail;
        }
    }
    fld__strlist_sort_unique(&list);
done:
    *out = list;
    return FLD_OK;
fail:
    fld__strlist_free(&list);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Tokens and orders                                                        */
/* ------------------------------------------------------------------------ */

const char *fld__token_kind_name(enum fld_token_kind k)
{
    switch (k) {
    case FLD_TOKEN_FLAGOS:
        return "flagos";
    case FLD_TOKEN_VENDOR:
    case FLD_TOKEN_VENDOR_NAME:
        return "vendor";
    case FLD_TOKEN_REFERENCE:
        return "reference";
    case FLD_TOKEN_IMPL:
        return "impl";
    }
    return "?";
}

/* Formats " for op 'x'" into a small buffer, or nothing without an op. */
static const char *for_op(const char *op, char *buf, size_t size)
{
    if (!op)
        return "";
    snprintf(buf, size, " for op '%s'", op);
    return buf;
}

static int parse_token_span(const char *what, const char *op, struct span sp, struct fld_token *out)
{
    char opbuf[160];
    struct span head = sp, arg = {NULL, 0};
    bool has_arg = false;
    const char *colon = sp.n ? memchr(sp.s, ':', sp.n) : NULL;

    if (colon) {
        head.n = (size_t)(colon - sp.s);
        arg.s = colon + 1;
        arg.n = sp.n - head.n - 1;
        has_arg = true;
    }
    out->arg = NULL;
    if (!has_arg) {
        if (span_ieq(head, "flagos"))
            out->kind = FLD_TOKEN_FLAGOS;
        else if (span_ieq(head, "vendor"))
            out->kind = FLD_TOKEN_VENDOR;
        else if (span_ieq(head, "reference"))
            out->kind = FLD_TOKEN_REFERENCE;
        else
            goto invalid;
        return FLD_OK;
    }
    if (span_ieq(head, "vendor")) {
        if (!span_is_name(arg))
            return fld__fail(
                FLD_ECONFIG,
                "%s: invalid vendor name '%.*s' in token '%.*s'%s (names use only " NAME_CHARS ")",
                what, (int)arg.n, arg.s, (int)sp.n, sp.s, for_op(op, opbuf, sizeof opbuf));
        out->kind = FLD_TOKEN_VENDOR_NAME;
    } else if (span_ieq(head, "impl")) {
        /* KIND.NAME, or KIND.NAME@PLUGIN for the record of one plugin when
         * several plugins registered that impl_id for the op. */
        struct span id = arg, plugin = {NULL, 0};
        const char *at = arg.n ? memchr(arg.s, '@', arg.n) : NULL;
        if (at) {
            id.n = (size_t)(at - arg.s);
            plugin.s = at + 1;
            plugin.n = arg.n - id.n - 1;
        }
        const char *dot = id.n ? memchr(id.s, '.', id.n) : NULL;
        if (!span_is_name(id) || !dot || dot == id.s || id.s[id.n - 1] == '.' ||
            (at && !span_is_name(plugin)))
            return fld__fail(FLD_ECONFIG,
                             "%s: invalid impl id '%.*s' in token '%.*s'%s (expected KIND.NAME "
                             "or KIND.NAME@PLUGIN of " NAME_CHARS
                             ", e.g. impl:vendor.cuda or impl:vendor.cuda@cuda)",
                             what, (int)arg.n, arg.s, (int)sp.n, sp.s,
                             for_op(op, opbuf, sizeof opbuf));
        out->kind = FLD_TOKEN_IMPL;
    } else {
        goto invalid;
    }
    out->arg = span_dup(arg);
    if (!out->arg)
        return oom(what);
    /* Vendor names are compared without case, as users type them. */
    if (out->kind == FLD_TOKEN_VENDOR_NAME)
        fld__ascii_lower(out->arg);
    return FLD_OK;

invalid:
    return fld__fail(FLD_ECONFIG, "%s: invalid token '%.*s'%s (valid: " TOKEN_VALID ")", what,
                     (int)sp.n, sp.s, for_op(op, opbuf, sizeof opbuf));
}

int fld__parse_token(const char *what, const char *text, struct fld_token *out)
{
    return parse_token_span(what, NULL, trim(span_of(text)), out);
}

int fld__order_append_token(struct fld_order *o, struct fld_token *tok)
{
    if (o->n == o->cap) {
        size_t next = grown_cap(o->cap, sizeof *o->tokens);
        struct fld_token *grown = next ? realloc(o->tokens, next * sizeof *grown) : NULL;
        if (!grown) {
            free(tok->arg);
            tok->arg = NULL;
            return FLD_ENOMEM;
        }
        o->tokens = grown;
        o->cap = next;
    }
    o->tokens[o->n++] = *tok;
    return FLD_OK;
}

/* A token and its place in the order, sorted to bring repeats together. */
struct placed_token {
    const struct fld_token *tok;
    size_t at;
};

static int placed_token_cmp(const void *pa, const void *pb)
{
    const struct placed_token *a = pa, *b = pb;
    if (a->tok->kind != b->tok->kind)
        return a->tok->kind < b->tok->kind ? -1 : 1;
    int c = strcmp(a->tok->arg ? a->tok->arg : "", b->tok->arg ? b->tok->arg : "");
    if (c)
        return c;
    return a->at < b->at ? -1 : a->at > b->at;
}

int fld__order_finish(const char *what, const char *op, struct fld_order *o)
{
    char opbuf[160];
    size_t n = o->n, kept = 0;
    if (n < 2)
        return FLD_OK;
    struct placed_token *byval = malloc(n * sizeof *byval);
    bool *repeat = calloc(n, sizeof *repeat);
    if (!byval || !repeat) {
        free(byval);
        free(repeat);
        return oom(what);
    }
    for (size_t i = 0; i < n; i++)
        byval[i] = (struct placed_token){&o->tokens[i], i};
    qsort(byval, n, sizeof *byval, placed_token_cmp);
    /* Equal tokens are adjacent, the first occurrence first. */
    for (size_t i = 1; i < n; i++) {
        const struct fld_token *a = byval[i - 1].tok, *b = byval[i].tok;
        if (a->kind == b->kind && strcmp(a->arg ? a->arg : "", b->arg ? b->arg : "") == 0)
            repeat[byval[i].at] = true;
    }
    free(byval);
    for (size_t i = 0; i < n; i++)
        kept += !repeat[i];
    if (kept > FLD_ORDER_MAX_TOKENS) {
        free(repeat);
        return fld__fail(FLD_ECONFIG,
                         "%s: the order%s has %zu different tokens, more than the %d an order "
                         "may have",
                         what, for_op(op, opbuf, sizeof opbuf), kept, FLD_ORDER_MAX_TOKENS);
    }
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (repeat[i])
            free(o->tokens[i].arg);
        else
            o->tokens[w++] = o->tokens[i];
    }
    o->n = w;
    free(repeat);
    return FLD_OK;
}

void fld__order_free(struct fld_order *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++)
        free(o->tokens[i].arg);
    free(o->tokens);
    free(o->op);
    o->tokens = NULL;
    o->op = NULL;
    o->n = 0;
    o->cap = 0;
    o->source[0] = '\0';
}

/* The token list of one order; op (may be NULL) only names it in messages. */
static int parse_order_span(const char *what, const char *op, struct span text,
                            struct fld_order *out)
{
    char opbuf[160];
    struct fld_order order = {.op = NULL};
    struct span rest = text, item;
    int rc;

    if (trim(text).n == 0) {
        rc = fld__fail(FLD_ECONFIG,
                       "%s: empty order%s (expected token|token with tokens " TOKEN_VALID ")", what,
                       for_op(op, opbuf, sizeof opbuf));
        goto fail;
    }
    for (bool more = true; more;) {
        more = split_next(&rest, '|', &item);
        item = trim(item);
        if (item.n == 0) {
            rc = fld__fail(
                FLD_ECONFIG,
                "%s: empty token in order '%.*s'%s (expected token|token with tokens " TOKEN_VALID
                ")",
                what, (int)text.n, text.s, for_op(op, opbuf, sizeof opbuf));
            goto fail;
        }
        struct fld_token tok;
        rc = parse_token_span(what, op, item, &tok);
        if (rc != FLD_OK)
            goto fail;
        if (fld__order_append_token(&order, &tok) != FLD_OK) {
            rc = oom(what);
            goto fail;
        }
    }
    if ((rc = fld__order_finish(what, op, &order)) != FLD_OK)
        goto fail;
    if (op) {
        order.op = strdup(op);
        if (!order.op) {
            rc = oom(what);
            goto fail;
        }
    }
    *out = order;
    return FLD_OK;
fail:
    fld__order_free(&order);
    return rc;
}

int fld__parse_token_list(const char *what, const char *op, const char *text, struct fld_order *out)
{
    return parse_order_span(what, op, span_of(text), out);
}

void fld__orders_free(struct fld_orders *o)
{
    if (!o)
        return;
    for (size_t i = 0; i < o->n; i++)
        fld__order_free(&o->items[i]);
    free(o->items);
    o->items = NULL;
    o->n = 0;
}

static size_t orders_lower_bound(const struct fld_orders *o, const char *op, bool *found)
{
    size_t lo = 0, hi = o->n;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(o->items[mid].op, op);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int fld__orders_append(struct fld_orders *o, size_t *cap, struct fld_order *order)
{
    if (o->n == *cap) {
        size_t next = grown_cap(*cap, sizeof *o->items);
        struct fld_order *items = next ? realloc(o->items, next * sizeof *items) : NULL;
        if (!items)
            return FLD_ENOMEM;
        o->items = items;
        *cap = next;
    }
    o->items[o->n++] = *order;
    return FLD_OK;
}

static int order_op_cmp(const void *a, const void *b)
{
    return strcmp(((const struct fld_order *)a)->op, ((const struct fld_order *)b)->op);
}

void fld__orders_sort(struct fld_orders *o)
{
    if (o->n > 1)
        qsort(o->items, o->n, sizeof *o->items, order_op_cmp);
}

static int order_copy(struct fld_order *dst, const struct fld_order *src)
{
    struct fld_order tmp = {.op = NULL};
    if (src->op && !(tmp.op = strdup(src->op)))
        goto fail;
    if (src->n) {
        tmp.tokens = calloc(src->n, sizeof *tmp.tokens);
        if (!tmp.tokens)
            goto fail;
        tmp.cap = src->n;
        for (; tmp.n < src->n; tmp.n++) {
            tmp.tokens[tmp.n].kind = src->tokens[tmp.n].kind;
            if (src->tokens[tmp.n].arg && !(tmp.tokens[tmp.n].arg = strdup(src->tokens[tmp.n].arg)))
                goto fail;
        }
    }
    memcpy(tmp.source, src->source, sizeof tmp.source);
    *dst = tmp;
    return FLD_OK;
fail:
    fld__order_free(&tmp);
    return FLD_ENOMEM;
}

int fld__orders_copy(struct fld_orders *dst, const struct fld_orders *src)
{
    struct fld_orders tmp = {0, NULL};
    if (src->n) {
        tmp.items = calloc(src->n, sizeof *tmp.items);
        if (!tmp.items)
            return FLD_ENOMEM;
        for (; tmp.n < src->n; tmp.n++) {
            if (order_copy(&tmp.items[tmp.n], &src->items[tmp.n]) != FLD_OK) {
                fld__orders_free(&tmp);
                return FLD_ENOMEM;
            }
        }
    }
    *dst = tmp;
    return FLD_OK;
}

/* Both sets are sorted by op and unique, so this is one linear merge. */
int fld__orders_merge(struct fld_orders *dst, const struct fld_orders *add)
{
    /* Copied first, so that dst is untouched when memory runs out. */
    struct fld_orders fresh;
    struct fld_order *items = NULL;
    if (fld__orders_copy(&fresh, add) != FLD_OK)
        return FLD_ENOMEM;
    if (dst->n + fresh.n && !(items = malloc((dst->n + fresh.n) * sizeof *items))) {
        fld__orders_free(&fresh);
        return FLD_ENOMEM;
    }
    size_t i = 0, j = 0, n = 0;
    while (i < dst->n || j < fresh.n) {
        int c = i == dst->n ? 1 : j == fresh.n ? -1 : strcmp(dst->items[i].op, fresh.items[j].op);
        if (c < 0) {
            items[n++] = dst->items[i++];
        } else {
            if (c == 0) /* replaced by add's order for the same op */
                fld__order_free(&dst->items[i++]);
            items[n++] = fresh.items[j++];
        }
    }
    free(fresh.items);
    free(dst->items);
    dst->items = items;
    dst->n = n;
    return FLD_OK;
}

struct named {
    const char *name;
    size_t index;
    unsigned char side;
};

static int named_cmp(const void *a, const void *b)
{
    const struct named *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->index < y->index ? -1 : x->index > y->index;
}

int fld__first_clash(const char *const *names, const unsigned char *sides, size_t n, size_t *at,
                     size_t *earlier)
{
    struct named *v = n ? malloc(n * sizeof *v) : NULL;
    size_t m = 0;
    *at = *earlier = n;
    if (n && !v)
        return FLD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (names[i])
            v[m++] = (struct named){names[i], i, sides ? sides[i] : 0};
    if (m > 1)
        qsort(v, m, sizeof *v, named_cmp);
    /* Each run of one name is in input order: its first item is the earliest, and the first
     * later item that clashes with anything before it clashes with that one. */
    for (size_t i = 0, j; i < m; i = j) {
        for (j = i + 1; j < m && strcmp(v[j].name, v[i].name) == 0; j++)
            ;
        for (size_t k = i + 1; k < j; k++) {
            if (!sides || v[k].side != v[i].side) {
                if (v[k].index < *at) {
                    *at = v[k].index;
                    *earlier = v[i].index;
                }
                break;
            }
        }
    }
    free(v);
    return FLD_OK;
}

const struct fld_order *fld__orders_find(const struct fld_orders *o, const char *op)
{
    if (!o || !op)
        return NULL;
    bool found;
    size_t at = orders_lower_bound(o, op, &found);
    return found ? &o->items[at] : NULL;
}

/*
 * The first op of spec given twice, checked once all fragments are read (or
 * reading stopped at an error) rather than fragment by fragment, which was
 * O(n^2). Fragment k made orders->items[k]; pending is the op of the fragment
 * that failed after its name was checked. The message is the one a check at
 * the repeat would have given: an error in a later fragment would not have
 * been reached, so the repeat wins over rc; otherwise rc stands.
 */
static int per_op_repeat(const char *what, const char *spec, const struct fld_orders *orders,
                         const char *pending, int rc)
{
    size_t n = orders->n + (pending != NULL), at, earlier;
    const char **names = n ? malloc(n * sizeof *names) : NULL;
    if (n && !names)
        return oom(what);
    for (size_t i = 0; i < orders->n; i++)
        names[i] = orders->items[i].op;
    if (pending)
        names[orders->n] = pending;
    int crc = fld__first_clash(names, NULL, n, &at, &earlier);
    if (crc == FLD_OK && at < n) {
        struct span rest = span_of(spec), frag = rest;
        for (size_t k = 0; k <= at; k++)
            split_next(&rest, ';', &frag);
        frag = trim(frag);
        rc = fld__fail(FLD_ECONFIG, "%s: op '%s' is given more than once (again in '%.*s')", what,
                       names[at], (int)frag.n, frag.s);
    } else if (crc != FLD_OK) {
        rc = oom(what);
    }
    free(names);
    return rc;
}

int fld__parse_per_op(const char *what, const char *spec, struct fld_orders *out)
{
    struct fld_orders orders = {0, NULL};
    struct fld_order order = {.op = NULL};
    struct span rest = span_of(spec), frag;
    size_t cap = 0;
    char *op = NULL;
    int rc = FLD_OK;

    if (trim(rest).n == 0)
        goto done;
    for (bool more = true; more;) {
        more = split_next(&rest, ';', &frag);
        frag = trim(frag);
        if (frag.n == 0) {
            /* A single trailing ';' is tolerated ("a=b;"); any other empty
             * fragment is most likely a typo that would hide an order. */
            if (!more && orders.n > 0)
                break;
            rc = fld__fail(FLD_ECONFIG, "%s: empty fragment in '%s' (expected " PER_OP_FORM ")",
                           what, spec);
            goto fail;
        }
        struct span op_span, order_span = frag;
        if (!split_next(&order_span, '=', &op_span)) {
            rc = fld__fail(FLD_ECONFIG, "%s: fragment '%.*s' has no '=' (expected " PER_OP_FORM ")",
                           what, (int)frag.n, frag.s);
            goto fail;
        }
        op_span = trim(op_span);
        if (op_span.n == 0) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s: fragment '%.*s' has an empty op name (expected " PER_OP_FORM ")",
                           what, (int)frag.n, frag.s);
            goto fail;
        }
        if (!span_is_name(op_span)) {
            rc = fld__fail(
                FLD_ECONFIG,
                "%s: invalid op name '%.*s' in fragment '%.*s' (names use only " NAME_CHARS ")",
                what, (int)op_span.n, op_span.s, (int)frag.n, frag.s);
            goto fail;
        }
        op = span_dup(op_span);
        if (!op) {
            rc = oom(what);
            goto fail;
        }
        /* A repeated op is found by per_op_repeat(), once. */
        if (trim(order_span).n == 0) {
            rc = fld__fail(
                FLD_ECONFIG,
                "%s: fragment '%.*s' has an empty order for op '%s' (expected " PER_OP_FORM ")",
                what, (int)frag.n, frag.s, op);
            goto fail;
        }
        rc = parse_order_span(what, op, order_span, &order);
        if (rc != FLD_OK)
            goto fail;
        free(op);
        op = NULL;
        if (fld__orders_append(&orders, &cap, &order) != FLD_OK) {
            rc = oom(what);
            goto fail;
        }
        order = (struct fld_order){.op = NULL};
    }
    if ((rc = per_op_repeat(what, spec, &orders, NULL, FLD_OK)) != FLD_OK)
        goto out;
    fld__orders_sort(&orders);
done:
    *out = orders;
    return FLD_OK;
fail:
    rc = per_op_repeat(what, spec, &orders, op, rc);
out:
    free(op);
    fld__order_free(&order);
    fld__orders_free(&orders);
    return rc;
}

size_t fld__order_format(const struct fld_order *o, char *buf, size_t size)
{
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    for (size_t i = 0; o && i < o->n; i++) {
        const struct fld_token *t = &o->tokens[i];
        int n = snprintf(buf ? buf + (len < size ? len : size) : NULL,
                         buf && len < size ? size - len : 0, "%s%s%s%s", i ? "|" : "",
                         fld__token_kind_name(t->kind), t->arg ? ":" : "", t->arg ? t->arg : "");
        if (n > 0)
            len += (size_t)n;
    }
    return len;
}
