/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Selection: the ordered candidates of an op for one (device, dtype) under
 * one policy, and the reason each other implementation was left out.
 *
 * An implementation is a candidate when it declares the device and dtype,
 * passes the policy's filters (kill switch, per-op and vendor lists, flagos
 * and external-plugin switches: policy.c answers) and is available
 * (registry.c asks its plugin once). The candidates are ordered by the
 * policy's tokens for the op, by descending priority within a token; a
 * frozen-dispatch manifest (manifest.c) then puts its pinned implementation
 * first (when the pin cannot serve, strict mode leaves no candidate). The
 * result is either a chain, which dispatch caches and runs (chain_cache.c, chain_run.c), or
 * a resolution with every rejection's reason, for fld_explain() and
 * fld_resolve().
 *
 * Why its own file: selection runs only under the host lock, when a chain
 * is built or explained, never on the cached call path; what it shares with
 * dispatch is the chain record and two entry points (select.h). It reads
 * top-down: the two entry points, then the order, then the filters.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "host.h"
#include "log.h"
#include "manifest.h"
#include "policy.h"
#include "registry.h"
#include "select.h"

/*
 * The most candidates a chain keeps: its failed and announced bits are one
 * uint64_t each. Every candidate is ranked first (token order, then
 * priority); only those ranked past this are left out, with a WARNING when
 * a chain is built and a rejection in fld_explain(). A fallback that deep is
 * never reached in practice; the limit is in fldispatch.h and the user guide.
 */
#define MAX_CHAIN 64

struct rejection {
    struct fld_impl_rec *impl;
    char reason[256];
};

struct selection {
    struct fld_impl_rec **order; /* ranked candidates; room for every impl of the op */
    size_t n;
    size_t n_ranked;            /* before the cut to MAX_CHAIN: n_ranked - n were left out */
    struct rejection *rejected; /* optional (explain) */
    size_t n_rejected, cap_rejected;
    char order_text[256];
    const char *order_source;
    char manifest_source[FLD_SOURCE_LEN + 80];
};

/* Every static function, in the order they appear: the order, then the filters. */
static int select_candidates(struct fld_op_s *op, int dev, int dt, int64_t rows,
                             const struct fld_policy *pol, struct selection *sel);
static int by_priority(const void *a, const void *b);
static bool token_matches(const struct fld_token *t, const struct fld_impl_rec *impl);
static void apply_manifest(struct fld_op_s *op, int dev, int dt, int64_t rows,
                           const struct fld_policy *pol, struct selection *sel);
static struct fld_chain *chain_new(const struct selection *sel, const struct fld_policy *pol,
                                   uint64_t generation);
static bool passes_filters(const struct fld_policy *pol, struct fld_impl_rec *impl, int dev, int dt,
                           struct selection *sel);
static void reject(struct selection *sel, struct fld_impl_rec *impl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the two products: a chain, a resolution ---------------------------- */

/* A chain from the selection; VLLM_FL_DISPATCH_DEBUG logs its choice. */
struct fld_chain *fld__select_chain(struct fld_op_s *op, int dev, int dt, int64_t rows,
                                    const struct fld_policy *pol, uint64_t generation)
{
    struct selection sel = {0};
    if (select_candidates(op, dev, dt, rows, pol, &sel) != FLD_OK)
        return NULL;
    struct fld_chain *c = chain_new(&sel, pol, generation);
    if (c && sel.n_ranked > sel.n)
        fld__log(FLD_LOG_WARNING,
                 "op '%s' (%s, %s) has %zu candidates; a chain keeps the first %d by order and "
                 "priority (the last of them '%s'), so %zu lower-ranked ones are never tried "
                 "(fld_explain and 'fldispatch resolve' list them)",
                 op->name, fld__device_label(dev), fld__dtype_label(dt), sel.n_ranked, MAX_CHAIN,
                 fld__impl_name(sel.order[sel.n - 1]), sel.n_ranked - sel.n);
    free(sel.order);
    if (c && fld__dispatch_debug()) {
        if (c->n)
            fld__log(FLD_LOG_DEBUG, "[DISPATCH] Op '%s' (%s, %s) -> '%s' (kind=%s%s%s) order %s",
                     op->name, fld__device_label(dev), fld__dtype_label(dt),
                     fld__impl_name(c->impls[0]), fld__kind_token(c->impls[0]->kind),
                     c->impls[0]->vendor ? ", vendor=" : "",
                     c->impls[0]->vendor ? c->impls[0]->vendor : "", sel.order_text);
        else
            fld__log(FLD_LOG_DEBUG, "[DISPATCH] Op '%s' (%s, %s) -> no candidate (order %s)",
                     op->name, fld__device_label(dev), fld__dtype_label(dt), sel.order_text);
    }
    return c;
}

/* fld_explain() once explain.c has checked its arguments and found op. */
int fld__select_explain(struct fld_op_s *op, int dev, int dt, int64_t rows, int device_type,
                        DLDataType dtype, fld_resolution **out)
{
    int rc = FLD_OK;
    fld_resolution *res = calloc(1, sizeof *res);
    if (!res)
        return fld__fail(FLD_ENOMEM, "out of memory");
    fld__lock();
    struct selection sel = {0};
    sel.cap_rejected = op->n_impls;
    sel.rejected = calloc(op->n_impls ? op->n_impls : 1, sizeof *sel.rejected);
    res->candidates = calloc(op->n_impls ? op->n_impls : 1, sizeof *res->candidates);
    res->rejected = calloc(op->n_impls ? op->n_impls : 1, sizeof *res->rejected);
    if (!sel.rejected || !res->candidates || !res->rejected) {
        fld__unlock();
        free(sel.rejected);
        fld_resolution_free(res);
        return fld__fail(FLD_ENOMEM, "out of memory");
    }
    if (select_candidates(op, dev, dt, rows, fld__policy_effective(), &sel) != FLD_OK) {
        fld__unlock();
        free(sel.rejected);
        fld_resolution_free(res);
        return fld__fail(FLD_ENOMEM, "out of memory");
    }
    /* order_source points into the policy, which a change may free once the
     * lock is released: copied now. */
    res->order_source = strdup(sel.order_source ? sel.order_source : "");
    fld__unlock();
    res->op = op->name;
    res->device_type = device_type;
    res->dtype = dtype;
    for (size_t i = 0; i < sel.n; i++)
        res->candidates[res->n_candidates++] = fld__impl_name(sel.order[i]);
    res->selected = sel.n ? fld__impl_name(sel.order[0]) : NULL;
    for (size_t i = 0; i < sel.n_rejected; i++) {
        res->rejected[i].impl_id = fld__impl_name(sel.rejected[i].impl);
        res->rejected[i].reason = strdup(sel.rejected[i].reason);
        res->n_rejected++;
        if (!res->rejected[i].reason)
            rc = FLD_ENOMEM;
    }
    res->order = strdup(sel.order_text);
    free(sel.rejected);
    free(sel.order);
    if (rc || !res->order || !res->order_source) {
        fld_resolution_free(res);
        return fld__fail(FLD_ENOMEM, "out of memory");
    }
    *out = res;
    return FLD_OK;
}

void fld_resolution_free(fld_resolution *res)
{
    if (!res)
        return;
    for (size_t i = 0; i < res->n_rejected; i++)
        free((char *)res->rejected[i].reason);
    free(res->rejected);
    free(res->candidates);
    free((char *)res->order);
    free((char *)res->order_source);
    free(res);
}

/* ---- the order ---------------------------------------------------------- */

/*
 * Builds the ordered candidates of op for (dev, dt) under pol: every impl
 * that passes the filters is ranked, then the chain keeps the first
 * MAX_CHAIN. Host lock held. FLD_ENOMEM (nothing logged or set) when the
 * working arrays cannot be allocated; else sel->order is the caller's to free.
 */
static int select_candidates(struct fld_op_s *op, int dev, int dt, int64_t rows,
                             const struct fld_policy *pol, struct selection *sel)
{
    const size_t cap = op->n_impls ? op->n_impls : 1;
    struct fld_impl_rec **survivors = malloc(cap * sizeof *survivors);
    bool *placed = calloc(cap, sizeof *placed);
    sel->order = malloc(cap * sizeof *sel->order);
    sel->n = 0;
    if (!survivors || !placed || !sel->order) {
        free(survivors);
        free(placed);
        free(sel->order);
        sel->order = NULL;
        return FLD_ENOMEM;
    }
    size_t n_surv = 0, n_placed = 0;
    for (size_t i = 0; i < op->n_impls; i++)
        if (passes_filters(pol, op->impls[i], dev, dt, sel))
            survivors[n_surv++] = op->impls[i]; /* in ascending impl_id order */
    const struct fld_order *order = fld__policy_order_for(pol, op->name, &sel->order_source);
    fld__order_format(order, sel->order_text, sizeof sel->order_text);
    for (size_t t = 0; t < order->n && n_placed < n_surv; t++) {
        size_t first = sel->n;
        for (size_t i = 0; i < n_surv; i++) {
            if (placed[i] || !token_matches(&order->tokens[t], survivors[i]))
                continue;
            sel->order[sel->n++] = survivors[i];
            placed[i] = true;
            n_placed++;
        }
        /* Descending priority; equal priorities by ascending impl_id; one impl_id
         * of several plugins: out-of-tree before in-tree, then by plugin name. */
        qsort(sel->order + first, sel->n - first, sizeof *sel->order, by_priority);
    }
    for (size_t i = 0; i < n_surv; i++)
        if (!placed[i])
            reject(sel, survivors[i], "matches no token of the order '%s'", sel->order_text);
    free(survivors);
    free(placed);
    if (pol->manifest)
        apply_manifest(op, dev, dt, rows, pol, sel);
    sel->n_ranked = sel->n;
    if (sel->n > MAX_CHAIN) {
        for (size_t i = MAX_CHAIN; i < sel->n; i++)
            reject(sel, sel->order[i],
                   "ranked %zu of %zu candidates; a chain keeps the first %d, so it is never tried",
                   i + 1, sel->n, MAX_CHAIN);
        sel->n = MAX_CHAIN;
    }
    return FLD_OK;
}

static int by_priority(const void *a, const void *b)
{
    const struct fld_impl_rec *x = *(struct fld_impl_rec *const *)a;
    const struct fld_impl_rec *y = *(struct fld_impl_rec *const *)b;
    if (x->priority != y->priority)
        return x->priority > y->priority ? -1 : 1;
    int d = strcmp(x->impl_id, y->impl_id);
    if (d || x->plugin == y->plugin || !x->plugin || !y->plugin)
        return d;
    /* The same impl_id from two plugins: a vendor's own package (out of
     * tree) goes before the in-tree plugin of that vendor. */
    if (x->plugin->in_tree != y->plugin->in_tree)
        return x->plugin->in_tree ? 1 : -1;
    return strcmp(x->plugin->name, y->plugin->name);
}

static bool token_matches(const struct fld_token *t, const struct fld_impl_rec *impl)
{
    switch (t->kind) {
    case FLD_TOKEN_FLAGOS:
        return impl->kind == FLD_KIND_DEFAULT;
    case FLD_TOKEN_VENDOR:
        return impl->kind == FLD_KIND_VENDOR;
    case FLD_TOKEN_VENDOR_NAME:
        return impl->kind == FLD_KIND_VENDOR && impl->vendor &&
               strcasecmp(impl->vendor, t->arg) == 0;
    case FLD_TOKEN_REFERENCE:
        return impl->kind == FLD_KIND_REFERENCE;
    case FLD_TOKEN_IMPL:
        return fld__impl_named(impl, t->arg);
    }
    return false;
}

/*
 * Frozen dispatch: the manifest's impl for (op, dev, dt) goes first, even if
 * the token order would not pick it. If it is missing or cannot serve,
 * strict mode leaves no candidate (the call fails naming the manifest) and
 * otherwise the normal order stands, with a WARNING.
 */
static void apply_manifest(struct fld_op_s *op, int dev, int dt, int64_t rows,
                           const struct fld_policy *pol, struct selection *sel)
{
    const struct fld_manifest_entry *e = fld__manifest_find(pol->manifest, op->name, dev, dt, rows);
    if (!e)
        return;
    char bucket[48];
    fld__manifest_rows_text(e, bucket, sizeof bucket);
    snprintf(sel->manifest_source, sizeof sel->manifest_source, "manifest %s:%d%s%s%s",
             pol->manifest->path, e->line, bucket[0] ? " (" : "", bucket, bucket[0] ? ")" : "");
    struct fld_impl_rec *pinned = NULL;
    for (size_t i = 0; i < op->n_impls; i++)
        if (fld__impl_named(op->impls[i], e->impl_id) &&
            (!pinned || by_priority(&op->impls[i], &pinned) < 0))
            pinned = op->impls[i];
    /* The pin overrides the token order, never the policy's hard filters
     * (kill switch, vendor lists, custom_ops, external plugins) or availability. */
    const char *why = NULL;
    char filtered[sizeof((struct rejection *)0)->reason + 32];
    struct rejection scratch_rejection;
    struct selection scratch = {.rejected = &scratch_rejection, .cap_rejected = 1};
    if (!pinned) {
        why = "is not registered";
    } else if (!passes_filters(pol, pinned, dev, dt, &scratch)) {
        snprintf(filtered, sizeof filtered, "is excluded: %s", scratch_rejection.reason);
        why = filtered;
    }
    if (why) {
        /* fld__manifest_check() already warned once at init/reload. */
        fld__log(FLD_LOG_DEBUG, "%s: impl '%s' for op '%s' (%s, %s) %s; %s", sel->manifest_source,
                 e->impl_id, op->name, fld__device_label(dev), fld__dtype_label(dt), why,
                 pol->strict ? "strict mode: no implementation will run"
                             : "resolving normally instead");
        if (pol->strict) {
            for (size_t i = 0; i < sel->n; i++)
                reject(sel, sel->order[i], "%s pins '%s', which %s (strict)", sel->manifest_source,
                       e->impl_id, why);
            sel->n = 0;
            snprintf(sel->order_text, sizeof sel->order_text, "impl:%s", e->impl_id);
            sel->order_source = sel->manifest_source;
        }
        return;
    }
    char rest[sizeof sel->order_text];
    memcpy(rest, sel->order_text, sizeof rest);
    snprintf(sel->order_text, sizeof sel->order_text, "impl:%s (then %s)", e->impl_id, rest);
    sel->order_source = sel->manifest_source;
    /* sel->order has room for every impl of the op, and pinned passed the
     * filters: it is among the ranked, or it matched no token. */
    size_t at = sel->n;
    for (size_t i = 0; i < sel->n; i++)
        if (sel->order[i] == pinned)
            at = i;
    if (at == sel->n)
        sel->n++;
    memmove(&sel->order[1], &sel->order[0], at * sizeof sel->order[0]);
    sel->order[0] = pinned;
}

static struct fld_chain *chain_new(const struct selection *sel, const struct fld_policy *pol,
                                   uint64_t generation)
{
    struct fld_chain *c = calloc(1, sizeof *c + sel->n * sizeof c->impls[0]);
    if (!c)
        return NULL;
    c->generation = generation;
    c->policy_serial = pol->serial;
    c->strict = pol->strict;
    c->n = (uint32_t)sel->n;
    memcpy(c->impls, sel->order, sel->n * sizeof c->impls[0]);
    return c;
}

/* ---- the filters -------------------------------------------------------- */

/* Whether the policy and the machine let impl serve (dev, dt); else a reason. */
static bool passes_filters(const struct fld_policy *pol, struct fld_impl_rec *impl, int dev, int dt,
                           struct selection *sel)
{
    char why[200];
    const char *name = impl->op->name;
    if (dev != FLD_DEV_ANY && !(impl->devices & (1u << dev))) {
        reject(sel, impl, "does not support device %s", fld__device_label(dev));
        return false;
    }
    if (dt != FLD_DT_ANY && !(impl->dtypes & (1u << dt))) {
        reject(sel, impl, "does not support dtype %s", fld__dtype_label(dt));
        return false;
    }
    if (!pol->enabled && impl->kind != FLD_KIND_REFERENCE) {
        reject(sel, impl, "dispatch disabled by %s: reference implementations only",
               pol->source[FLD_PF_ENABLED]);
        return false;
    }
    if (impl->kind != FLD_KIND_REFERENCE && !fld__policy_op_enabled(pol, name, why, sizeof why)) {
        reject(sel, impl, "%s: reference implementations only", why);
        return false;
    }
    if (impl->kind == FLD_KIND_VENDOR &&
        !fld__policy_vendor_allowed(pol, impl->vendor, why, sizeof why)) {
        reject(sel, impl, "%s", why);
        return false;
    }
    if (impl->kind == FLD_KIND_DEFAULT) {
        if (!pol->use_flaggems) {
            reject(sel, impl, "flagos disabled by %s", pol->source[FLD_PF_USE_FLAGGEMS]);
            return false;
        }
        if (!fld__policy_flagos_allows_op(pol, name, why, sizeof why)) {
            reject(sel, impl, "%s", why);
            return false;
        }
    }
    if (impl->plugin && !impl->plugin->in_tree) {
        if (!pol->external_enabled) {
            reject(sel, impl, "external (out-of-tree) plugins disabled by %s",
                   pol->source[FLD_PF_EXTERNAL_ENABLED]);
            return false;
        }
        if (!fld__policy_external_allows_op(pol, name, why, sizeof why)) {
            reject(sel, impl, "%s", why);
            return false;
        }
    }
    const char *reason;
    if (!fld__impl_available(impl, &reason)) {
        reject(sel, impl, "unavailable: %s", reason);
        return false;
    }
    return true;
}

static void reject(struct selection *sel, struct fld_impl_rec *impl, const char *fmt, ...)
{
    if (!sel->rejected)
        return;
    if (sel->n_rejected == sel->cap_rejected)
        return; /* sized to the op's impl count up front */
    struct rejection *r = &sel->rejected[sel->n_rejected++];
    r->impl = impl;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
}
