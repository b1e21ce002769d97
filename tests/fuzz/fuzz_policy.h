/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Properties of parsed policy values, checked by the parser fuzzers after
 * every successful parse (yaml, env, opconfig), and a snapshot of a policy
 * for "on error the policy is unchanged".
 *
 *   - lists are sorted and unique, with no empty item (the fingerprint and
 *     the lookups rely on it);
 *   - per-op orders are sorted by op and unique, each non-empty, with no
 *     repeated token;
 *   - a per-op order and a custom_ops value print in their environment
 *     grammar, and what they print parses back to the same value.
 */
#ifndef FLD_FUZZ_POLICY_H
#define FLD_FUZZ_POLICY_H

#include "config.h"
#include "config_tree.h"
#include "custom_ops.h"
#include "error.h"
#include "policy_sources.h"
#include "parse.h"
#include "policy.h"

#include "fuzz_common.h"

static inline void fuzz_check_strlist(const struct fld_strlist *l, const char *what)
{
    if (!l->set) {
        FUZZ_CHECK(l->n == 0, "%s: unset list with %zu items", what, l->n);
        return;
    }
    for (size_t i = 0; i < l->n; i++) {
        FUZZ_CHECK(l->items[i] && l->items[i][0], "%s: empty item %zu", what, i);
        if (i)
            FUZZ_CHECK(strcmp(l->items[i - 1], l->items[i]) < 0,
                       "%s: items '%s' and '%s' out of order or repeated", what, l->items[i - 1],
                       l->items[i]);
    }
}

/* The order printed, as a malloc'd string. */
static inline char *fuzz_order_text(const struct fld_order *o)
{
    size_t n = fld__order_format(o, NULL, 0);
    char *s = malloc(n + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    FUZZ_CHECK(fld__order_format(o, s, n + 1) == n, "fld__order_format: length changed");
    return s;
}

static inline void fuzz_check_order(const struct fld_order *o)
{
    FUZZ_CHECK(o->op && o->op[0], "order without an op name");
    FUZZ_CHECK(o->n > 0, "op '%s': empty order", o->op);
    for (size_t i = 0; i < o->n; i++)
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(!(o->tokens[i].kind == o->tokens[j].kind &&
                         (o->tokens[i].arg == NULL) == (o->tokens[j].arg == NULL) &&
                         (!o->tokens[i].arg || strcmp(o->tokens[i].arg, o->tokens[j].arg) == 0)),
                       "op '%s': token %zu repeats token %zu", o->op, i, j);
    char *text = fuzz_order_text(o);
    struct fld_order again;
    int rc = fld__parse_token_list("fuzz round trip", o->op, text, &again);
    FUZZ_CHECK(rc == FLD_OK, "op '%s': its printed order '%s' does not parse back", o->op, text);
    char *text2 = fuzz_order_text(&again);
    FUZZ_CHECK(strcmp(text, text2) == 0 && again.n == o->n,
               "op '%s': order '%s' parses back as '%s'", o->op, text, text2);
    free(text2);
    free(text);
    fld__order_free(&again);
}

static inline void fuzz_check_orders(const struct fld_orders *o)
{
    for (size_t i = 0; i < o->n; i++) {
        fuzz_check_order(&o->items[i]);
        if (i)
            FUZZ_CHECK(strcmp(o->items[i - 1].op, o->items[i].op) < 0,
                       "orders of '%s' and '%s' out of order or repeated", o->items[i - 1].op,
                       o->items[i].op);
        FUZZ_CHECK(fld__orders_find(o, o->items[i].op) == &o->items[i],
                   "fld__orders_find does not find '%s'", o->items[i].op);
    }
}

static inline char *fuzz_custom_text(const struct fld_custom_ops *c)
{
    size_t n = fld__custom_ops_format(c, NULL, 0);
    char *s = malloc(n + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    FUZZ_CHECK(fld__custom_ops_format(c, s, n + 1) == n, "fld__custom_ops_format: length changed");
    return s;
}

static inline void fuzz_check_custom(const struct fld_custom_ops *c)
{
    fuzz_check_strlist(&c->enabled, "custom_ops +ops");
    fuzz_check_strlist(&c->disabled, "custom_ops -ops");
    for (size_t i = 0; i < c->enabled.n; i++)
        FUZZ_CHECK(!fld__strlist_has(&c->disabled, c->enabled.items[i]),
                   "custom_ops: '%s' both enabled and disabled", c->enabled.items[i]);
    char *text = fuzz_custom_text(c);
    struct fld_custom_ops again;
    int rc = fld__custom_ops_parse("fuzz round trip", text, &again);
    FUZZ_CHECK(rc == FLD_OK, "custom_ops '%s' does not parse back", text);
    char *text2 = fuzz_custom_text(&again);
    FUZZ_CHECK(strcmp(text, text2) == 0 && again.base_enabled == c->base_enabled,
               "custom_ops '%s' parses back as '%s'", text, text2);
    free(text2);
    free(text);
    fld__custom_ops_free(&again);
}

static inline void fuzz_check_policy(struct fld_policy *p)
{
    FUZZ_CHECK((unsigned)p->prefer <= FLD_PREFER_REFERENCE, "prefer %d", (int)p->prefer);
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        const struct fld_strlist *l = fld__policy_list(p, (enum fld_policy_field)f);
        if (l)
            fuzz_check_strlist(l, fld__policy_field_key((enum fld_policy_field)f));
    }
    fuzz_check_orders(&p->per_op);
    fuzz_check_custom(&p->custom_ops);
    for (int f = 0; f < FLD_PF_COUNT; f++)
        FUZZ_CHECK(memchr(p->source[f], '\0', FLD_SOURCE_LEN) != NULL, "source %d unterminated", f);
    char small[16];
    size_t n = fld__policy_fingerprint(p, small, sizeof small);
    char *full = malloc(n + 1);
    FUZZ_CHECK(full != NULL, "out of memory");
    FUZZ_CHECK(fld__policy_fingerprint(p, full, n + 1) == n, "fingerprint length changed");
    FUZZ_CHECK(strlen(full) == n, "fingerprint of %zu bytes printed as %zu", n, strlen(full));
    free(full);
}

/* Enough of a policy to tell whether a failed parse changed it. */
struct fuzz_policy_snapshot {
    char fingerprint[512];
    char source[FLD_PF_COUNT][FLD_SOURCE_LEN];
};

static inline void fuzz_snapshot(const struct fld_policy *p, struct fuzz_policy_snapshot *s)
{
    memset(s, 0, sizeof *s);
    fld__policy_fingerprint(p, s->fingerprint, sizeof s->fingerprint);
    memcpy(s->source, p->source, sizeof s->source);
}

static inline bool fuzz_snapshot_equal(const struct fuzz_policy_snapshot *a,
                                       const struct fuzz_policy_snapshot *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

#endif
