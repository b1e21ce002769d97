/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Names checked against the registry and the environment (see names.h).
 *
 * Closeness is the optimal-string-alignment edit distance (insertions,
 * deletions, substitutions and swaps of neighbours each cost 1), ignoring
 * case, with a limit that grows with the name: 1 + length/4, at most 3.
 * "rms_nrom" is one swap from "rms_norm"; "copy_" is close to nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "error.h"
#include "log.h"
#include "names.h"
#include "ops.h"
#include "policy.h"
#include "registry.h"
#include "variables.h"

extern char **environ;

#define MAX_SUGGESTIONS 2

/* ------------------------------------------------------------------------ */
/* Closeness                                                                */
/* ------------------------------------------------------------------------ */

static char lower_char(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The distance of a and b, or limit + 1 when it is larger than limit. */
static size_t distance(const char *a, const char *b, size_t limit)
{
    size_t n = strlen(a), m = strlen(b);
    if ((n > m ? n - m : m - n) > limit || n > 127 || m > 127)
        return limit + 1;
    /* Three rows of the table: i - 2, i - 1, i. */
    size_t rows[3][128];
    for (size_t j = 0; j <= m; j++)
        rows[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t *cur = rows[i % 3], *prev = rows[(i + 2) % 3], *prev2 = rows[(i + 1) % 3];
        size_t best = cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t cost = lower_char(a[i - 1]) != lower_char(b[j - 1]);
            size_t d = prev[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (prev[j - 1] + cost < d)
                d = prev[j - 1] + cost;
            if (i > 1 && j > 1 && lower_char(a[i - 1]) == lower_char(b[j - 2]) &&
                lower_char(a[i - 2]) == lower_char(b[j - 1]) && prev2[j - 2] + 1 < d)
                d = prev2[j - 2] + 1;
            cur[j] = d;
            if (d < best)
                best = d;
        }
        if (best > limit)
            return limit + 1;
    }
    size_t d = rows[n % 3][m];
    return d > limit ? limit + 1 : d;
}

static size_t limit_for(const char *name)
{
    size_t limit = 1 + strlen(name) / 4;
    return limit > 3 ? 3 : limit;
}

/* The closest candidates of name (at most MAX_SUGGESTIONS), best first. */
struct closest {
    const char *name;
    size_t limit;
    const char *best[MAX_SUGGESTIONS];
    size_t dist[MAX_SUGGESTIONS];
    size_t n;
};

static void closest_init(struct closest *c, const char *name)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    c->limit = limit_for(name);
}

static void closest_add(struct closest *c, const char *candidate)
{
    if (!candidate || strcmp(candidate, c->name) == 0)
        return;
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->best[i], candidate) == 0)
            return;
    size_t d = distance(c->name, candidate, c->limit);
    if (d > c->limit)
        return;
    size_t at = c->n;
    while (at > 0 && c->dist[at - 1] > d)
        at--;
    if (at >= MAX_SUGGESTIONS)
        return;
    size_t keep = c->n < MAX_SUGGESTIONS ? c->n : MAX_SUGGESTIONS - 1;
    for (size_t i = keep; i > at; i--) {
        c->best[i] = c->best[i - 1];
        c->dist[i] = c->dist[i - 1];
    }
    c->best[at] = candidate;
    c->dist[at] = d;
    if (c->n < MAX_SUGGESTIONS)
        c->n++;
}

static const char *closest_text(const struct closest *c, char *buf, size_t size)
{
    if (!size)
        return buf;
    buf[0] = '\0';
    /* A second name only when it is as close as the first. */
    if (c->n > 1 && c->dist[1] == c->dist[0])
        snprintf(buf, size, "; did you mean '%s' or '%s'?", c->best[0], c->best[1]);
    else if (c->n > 0)
        snprintf(buf, size, "; did you mean '%s'?", c->best[0]);
    return buf;
}

const char *fld__did_you_mean(const char *name, const char *const *candidates, size_t n, char *buf,
                              size_t size)
{
    struct closest c;
    closest_init(&c, name ? name : "");
    for (size_t i = 0; i < n; i++)
        closest_add(&c, candidates[i]);
    return closest_text(&c, buf, size);
}

/* ------------------------------------------------------------------------ */
/* What is registered                                                       */
/* ------------------------------------------------------------------------ */

struct known {
    struct fld_op_s **ops;
    size_t n_ops, cap_ops;
    char **vendors; /* lowercase, unique */
    size_t n_vendors, cap_vendors;
    bool oom;
};

static bool grow(void **items, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return true;
    size_t next = *cap ? 2 * *cap : 16;
    void *g = realloc(*items, next * size);
    if (!g)
        return false;
    *items = g;
    *cap = next;
    return true;
}

static void add_vendor(struct known *k, const char *vendor)
{
    for (size_t i = 0; i < k->n_vendors; i++)
        if (strcasecmp(k->vendors[i], vendor) == 0)
            return;
    char *copy = strdup(vendor);
    if (!copy || !grow((void **)&k->vendors, &k->cap_vendors, k->n_vendors, sizeof *k->vendors)) {
        free(copy);
        k->oom = true;
        return;
    }
    fld__ascii_lower(copy);
    k->vendors[k->n_vendors++] = copy;
}

static void collect(struct fld_op_s *op, void *user)
{
    struct known *k = user;
    if (k->oom)
        return;
    if (!grow((void **)&k->ops, &k->cap_ops, k->n_ops, sizeof *k->ops)) {
        k->oom = true;
        return;
    }
    k->ops[k->n_ops++] = op;
    for (size_t i = 0; i < op->n_impls; i++)
        if (op->impls[i]->kind == FLD_KIND_VENDOR && op->impls[i]->vendor)
            add_vendor(k, op->impls[i]->vendor);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void known_free(struct known *k)
{
    for (size_t i = 0; i < k->n_vendors; i++)
        free(k->vendors[i]);
    free(k->vendors);
    free(k->ops);
}

static struct fld_op_s *known_op(const struct known *k, const char *name)
{
    for (size_t i = 0; i < k->n_ops; i++)
        if (strcmp(k->ops[i]->name, name) == 0)
            return k->ops[i];
    return NULL;
}

static bool known_vendor(const struct known *k, const char *vendor)
{
    for (size_t i = 0; i < k->n_vendors; i++)
        if (strcasecmp(k->vendors[i], vendor) == 0)
            return true;
    return false;
}

static const char *suggest_op(const struct known *k, const char *name, char *buf, size_t size)
{
    struct closest c;
    closest_init(&c, name);
    for (size_t i = 0; i < k->n_ops; i++)
        closest_add(&c, k->ops[i]->name);
    return closest_text(&c, buf, size);
}

const char *fld__did_you_mean_op(const char *name, char *buf, size_t size)
{
    struct known k = {0};
    fld__op_foreach(collect, &k);
    const char *text = suggest_op(&k, name, buf, size);
    known_free(&k);
    return text;
}

static const char *vendor_list(const struct known *k, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < k->n_vendors && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", k->vendors[i]);
    return k->n_vendors ? buf : "none";
}

/* ------------------------------------------------------------------------ */
/* Reporting                                                                */
/* ------------------------------------------------------------------------ */

/*
 * Each check lists its first MAX_LISTED unknown names, one WARNING each, and
 * then one line with the count of the rest: a policy or environment with
 * thousands of them (a generated VLLM_FL_PER_OP, a large YAML file) must not
 * flood the log. Strict mode stops at the first, which is the error.
 */
#define MAX_LISTED 5

struct report {
    bool strict;
    int rc;
    size_t listed;   /* WARNING lines written */
    size_t unlisted; /* unknown names past MAX_LISTED, only counted */
};

/* Whether the next unknown name gets its line; counts it when it does not.
 * Called before a name's suggestions are computed, which cost a scan. */
static bool report_wanted(struct report *r)
{
    if (r->rc != FLD_OK)
        return false; /* strict: the first one is the error */
    if (r->strict || r->listed < MAX_LISTED)
        return true;
    r->unlisted++;
    return false;
}

/* The closing line of a check that left names unlisted. */
static void report_summary(const struct report *r, const char *what)
{
    if (r->unlisted)
        fld__log(FLD_LOG_WARNING, "... and %zu more unknown %s (only the first %d are listed)",
                 r->unlisted, what, MAX_LISTED);
}

static void report(struct report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void report(struct report *r, const char *fmt, ...)
{
    char msg[1024];
    if (!report_wanted(r))
        return;
    r->listed++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->strict)
        r->rc = fld__fail(FLD_ECONFIG, "%s (strict mode: unknown names are errors)", msg);
    else
        fld__log(FLD_LOG_WARNING, "%s", msg);
}

/* "VLLM_FL_ALLOW_VENDORS", or "/etc/p.yaml:4 (allow_vendors)" for a file. */
static const char *field_where(const struct fld_policy *p, enum fld_policy_field f, char *buf,
                               size_t size)
{
    const char *env = fld__policy_field_env(f);
    if (strcmp(p->source[f], env) == 0)
        snprintf(buf, size, "%s", env);
    else
        snprintf(buf, size, "%s (%s)", p->source[f], fld__policy_field_key(f));
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The policy's names                                                       */
/* ------------------------------------------------------------------------ */

static void check_order(struct report *r, const struct known *k, const struct fld_policy *p,
                        const struct fld_order *o)
{
    char hint[160], list[512];
    const char *source = o->source[0] ? o->source : p->source[FLD_PF_PER_OP];
    struct fld_op_s *op = known_op(k, o->op);
    if (!op && report_wanted(r))
        report(r, "%s: order of op '%s': no op named '%s' is registered%s", source, o->op, o->op,
               suggest_op(k, o->op, hint, sizeof hint));
    for (size_t t = 0; t < o->n; t++) {
        const struct fld_token *tok = &o->tokens[t];
        if (tok->kind == FLD_TOKEN_VENDOR_NAME && !known_vendor(k, tok->arg) && report_wanted(r)) {
            report(r,
                   "%s: order of op '%s': token 'vendor:%s' names no registered vendor%s "
                   "(registered vendors: %s)",
                   source, o->op, tok->arg,
                   fld__did_you_mean(tok->arg, (const char *const *)k->vendors, k->n_vendors, hint,
                                     sizeof hint),
                   vendor_list(k, list, sizeof list));
        } else if (tok->kind == FLD_TOKEN_IMPL && op) {
            bool found = false;
            for (size_t i = 0; i < op->n_impls && !found; i++)
                found = fld__impl_named(op->impls[i], tok->arg);
            if (found || !report_wanted(r))
                continue;
            struct closest c;
            closest_init(&c, tok->arg);
            for (size_t i = 0; i < op->n_impls; i++)
                closest_add(&c, op->impls[i]->impl_id);
            report(r, "%s: order of op '%s': token 'impl:%s' names no implementation of op '%s'%s",
                   source, o->op, tok->arg, o->op, closest_text(&c, hint, sizeof hint));
        }
    }
}

static void check_vendors(struct report *r, const struct known *k, const struct fld_policy *p,
                          enum fld_policy_field f)
{
    char where[FLD_SOURCE_LEN + 64], hint[160], list[512];
    const struct fld_strlist *l = fld__policy_list(p, f);
    for (size_t i = 0; l->set && i < l->n; i++) {
        if (known_vendor(k, l->items[i]) || !report_wanted(r))
            continue;
        report(r, "%s: no vendor named '%s' is registered%s (registered vendors: %s)",
               field_where(p, f, where, sizeof where), l->items[i],
               fld__did_you_mean(l->items[i], (const char *const *)k->vendors, k->n_vendors, hint,
                                 sizeof hint),
               vendor_list(k, list, sizeof list));
    }
}

/* An op list; foreign lists report only names close to a known op. */
static void check_op_list(struct report *r, const struct known *k, const struct fld_policy *p,
                          enum fld_policy_field f, bool foreign)
{
    char where[FLD_SOURCE_LEN + 64], hint[160];
    const struct fld_strlist *l = fld__policy_list(p, f);
    for (size_t i = 0; l->set && i < l->n; i++) {
        if (known_op(k, l->items[i]))
            continue;
        if (!foreign && !report_wanted(r))
            continue;
        suggest_op(k, l->items[i], hint, sizeof hint);
        if (foreign && (!hint[0] || !report_wanted(r)))
            continue;
        report(r, "%s: no op named '%s' is registered%s", field_where(p, f, where, sizeof where),
               l->items[i], hint);
    }
}

static void check_custom_ops(struct report *r, const struct known *k, const struct fld_policy *p)
{
    char where[FLD_SOURCE_LEN + 64], hint[160];
    const struct fld_strlist *lists[2] = {&p->custom_ops.enabled, &p->custom_ops.disabled};
    for (int side = 0; side < 2; side++) {
        for (size_t i = 0; i < lists[side]->n; i++) {
            const char *op = lists[side]->items[i];
            if (known_op(k, op) || !report_wanted(r))
                continue;
            report(r, "%s: '%c%s': no op named '%s' is registered%s",
                   field_where(p, FLD_PF_CUSTOM_OPS, where, sizeof where), side ? '-' : '+', op, op,
                   suggest_op(k, op, hint, sizeof hint));
        }
    }
}

int fld__names_check_policy(const struct fld_policy *p)
{
    struct known k = {0};
    struct report r = {.strict = p->strict, .rc = FLD_OK};
    fld__op_foreach(collect, &k);
    if (k.n_vendors > 1)
        qsort(k.vendors, k.n_vendors, sizeof *k.vendors, str_cmp);
    if (k.oom) {
        known_free(&k);
        return fld__fail(FLD_ENOMEM, "out of memory checking the policy's names");
    }
    for (size_t i = 0; i < p->per_op.n; i++)
        check_order(&r, &k, p, &p->per_op.items[i]);
    check_vendors(&r, &k, p, FLD_PF_ALLOW_VENDORS);
    check_vendors(&r, &k, p, FLD_PF_DENY_VENDORS);
    check_op_list(&r, &k, p, FLD_PF_EXTERNAL_WHITELIST, false);
    check_op_list(&r, &k, p, FLD_PF_EXTERNAL_BLACKLIST, false);
    check_op_list(&r, &k, p, FLD_PF_FLAGOS_WHITELIST, true);
    check_op_list(&r, &k, p, FLD_PF_FLAGOS_BLACKLIST, true);
    check_op_list(&r, &k, p, FLD_PF_OOT_WHITELIST, true);
    check_op_list(&r, &k, p, FLD_PF_OOT_BLACKLIST, true);
    check_custom_ops(&r, &k, p);
    known_free(&k);
    report_summary(&r, "names in the policy");
    return r.rc;
}

/* ------------------------------------------------------------------------ */
/* The environment                                                          */
/* ------------------------------------------------------------------------ */

/* The variables fldispatch reads besides the policy fields' (variables.h). */
static const char *const own_variables[] = {
#define FLD__VARIABLE_NAME(name, ...) name,
    FLD_VARIABLES(FLD__VARIABLE_NAME)
#undef FLD__VARIABLE_NAME
};

static const struct fld_tool_variable variable_rows[] = {
#define FLD__VARIABLE_ROW(name, reader, use, compile) {name, #reader, #use, #compile},
    FLD_VARIABLES(FLD__VARIABLE_ROW)
#undef FLD__VARIABLE_ROW
};

const struct fld_tool_variable *fld__variable_row(unsigned index)
{
    return index < sizeof variable_rows / sizeof variable_rows[0] ? &variable_rows[index] : NULL;
}

/* Variables vllm-plugin-FL reads and this library does not. */
static const struct {
    const char *name, *note;
} upstream_variables[] = {
#define FLD__UPSTREAM_ROW(name, note) {name, note},
    FLD_UPSTREAM_VARIABLES(FLD__UPSTREAM_ROW)
#undef FLD__UPSTREAM_ROW
};

#define PREFIX     "VLLM_FL_"
#define PREFIX_LEN (sizeof PREFIX - 1)

static bool plugin_namespace(const char *name, size_t len)
{
    for (const struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next) {
        size_t n = p->name ? strlen(p->name) : 0;
        if (n && len > PREFIX_LEN + n + 1 && strncasecmp(name + PREFIX_LEN, p->name, n) == 0 &&
            name[PREFIX_LEN + n] == '_')
            return true;
    }
    return false;
}

int fld__names_check_environment(bool strict)
{
    struct report r = {.strict = strict, .rc = FLD_OK};
    const char *known[FLD_PF_COUNT + sizeof own_variables / sizeof own_variables[0]];
    size_t n_known = 0;
    for (int f = 0; f < FLD_PF_COUNT; f++)
        known[n_known++] = fld__policy_field_env((enum fld_policy_field)f);
    for (size_t i = 0; i < sizeof own_variables / sizeof own_variables[0]; i++)
        known[n_known++] = own_variables[i];

    for (char **e = environ; e && *e && r.rc == FLD_OK; e++) {
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        char name[256], hint[200];
        if (len <= PREFIX_LEN || len >= sizeof name || strncmp(*e, PREFIX, PREFIX_LEN) != 0)
            continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        bool found = false;
        for (size_t i = 0; i < n_known && !found; i++)
            found = strcmp(known[i], name) == 0;
        if (found || plugin_namespace(name, len) || !report_wanted(&r))
            continue;
        const char *note = NULL;
        for (size_t i = 0; i < sizeof upstream_variables / sizeof upstream_variables[0]; i++)
            if (strcmp(upstream_variables[i].name, name) == 0)
                note = upstream_variables[i].note;
        if (note) {
            report(&r,
                   "%s is read by vllm-plugin-FL, not by fldispatch: it has no effect here (%s)",
                   name, note);
            continue;
        }
        /* Compared without the common prefix, so that the limit fits the part that differs. */
        struct closest c;
        closest_init(&c, name + PREFIX_LEN);
        for (size_t i = 0; i < n_known; i++)
            if (strncmp(known[i], PREFIX, PREFIX_LEN) == 0)
                closest_add(&c, known[i] + PREFIX_LEN);
        hint[0] = '\0';
        if (c.n == 1)
            snprintf(hint, sizeof hint, "; did you mean '" PREFIX "%s'?", c.best[0]);
        else if (c.n > 1)
            snprintf(hint, sizeof hint, "; did you mean '" PREFIX "%s' or '" PREFIX "%s'?",
                     c.best[0], c.best[1]);
        report(&r,
               "unknown variable %s: neither fldispatch nor a plugin found here reads it%s "
               "(plugins read " PREFIX "<PLUGIN>_*; see docs/configuration.md)",
               name, hint);
    }
    report_summary(&r, PREFIX "* variables");
    return r.rc;
}
