/*
 * The op manager: selection, the cache of resolved chains and dispatch.
 *
 * A chain is the ordered candidate list of one (op, device, dtype) under one
 * policy, built under the host lock by build_chain() and then immutable
 * except for two atomics: which candidates failed (non-strict fallback
 * memory) and which were announced in the log.
 *
 * Global-policy chains live in op->slots[] and are valid while their
 * generation equals fld__generation; any registry or policy change bumps the
 * generation, so stale chains (and their failure memory) are rebuilt on next
 * use. Threads use a chain without the lock inside a reader section
 * (reclaim.h); a replaced chain is retired and freed once no section can
 * hold it.
 *
 * Once a chain's first candidate has served a call (and has no supports()
 * predicate and has not failed), op->fast[slot] lets the hot path call it
 * directly: load generation, load the slot's fast generation, compare, load
 * fn, call — no lock, no write, no chain. A call that overlaps a policy
 * change may be served under the old or the new policy; one that starts
 * after the change returned sees it (its generation differs until the slot
 * is rebuilt).
 *
 * Threads with a scoped policy override use a small thread-local cache keyed
 * by the override's policy serial; those chains belong to the thread.
 *
 * Why one file of about 1,000 lines: selection, the chain cache and the
 * hot path share the chain record and its two atomics, and the fast slot is
 * only safe read against the rebuild that writes it. It still reads bottom
 * up (entry points last); core/README.md lists reordering it top-down as
 * the next step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "manager.h"
#include "manifest.h"
#include "policy.h"
#include "reclaim.h"
#include "registry.h"

#define MAX_CHAIN   64
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

struct fld_chain {
    uint64_t generation;
    uint64_t policy_serial;
    bool strict;
    bool global;                /* in op->slots[] (else a thread's override chain) */
    _Atomic uint64_t failed;    /* bit i: impls[i] failed (non-strict memory) */
    _Atomic uint64_t announced; /* bit i: "using" line logged for impls[i] */
    struct fld_chain *tls_next; /* thread-local retire list */
    uint32_t n;
    struct fld_impl_rec *impls[];
};

/* ---- selection ---------------------------------------------------------- */

struct rejection {
    struct fld_impl_rec *impl;
    char reason[256];
};

struct selection {
    struct fld_impl_rec *order[MAX_CHAIN];
    size_t n;
    struct rejection *rejected; /* optional (explain) */
    size_t n_rejected, cap_rejected;
    char order_text[256];
    const char *order_source;
    char manifest_source[FLD_SOURCE_LEN + 32];
};

static const char *device_label(int dev)
{
    return dev == FLD_DEV_ANY ? "any device" : fld_device_name(fld__device_type_of(dev));
}

static const char *dtype_label(int dt)
{
    static const char *names[] = {"f32", "f16", "bf16", "any dtype"};
    return names[dt];
}

static void reject(struct selection *sel, struct fld_impl_rec *impl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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
        return strcmp(impl->impl_id, t->arg) == 0;
    }
    return false;
}

/* Whether the policy and the machine let impl serve (dev, dt); else a reason. */
static bool passes_filters(const struct fld_policy *pol, struct fld_impl_rec *impl, int dev, int dt,
                           struct selection *sel)
{
    char why[200];
    const char *name = impl->op->name;
    if (dev != FLD_DEV_ANY && !(impl->devices & (1u << dev))) {
        reject(sel, impl, "does not support device %s", device_label(dev));
        return false;
    }
    if (dt != FLD_DT_ANY && !(impl->dtypes & (1u << dt))) {
        reject(sel, impl, "does not support dtype %s", dtype_label(dt));
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

/*
 * Frozen dispatch: the manifest's impl for (op, dev, dt) goes first, even if
 * the token order would not pick it. If it is missing or cannot serve,
 * strict mode leaves no candidate (the call fails naming the manifest) and
 * otherwise the normal order stands, with a WARNING.
 */
static void apply_manifest(struct fld_op_s *op, int dev, int dt, const struct fld_policy *pol,
                           struct selection *sel)
{
    const struct fld_manifest_entry *e = fld__manifest_find(pol->manifest, op->name, dev, dt);
    if (!e)
        return;
    snprintf(sel->manifest_source, sizeof sel->manifest_source, "manifest %s:%d",
             pol->manifest->path, e->line);
    struct fld_impl_rec *pinned = NULL;
    for (size_t i = 0; i < op->n_impls; i++)
        if (strcmp(op->impls[i]->impl_id, e->impl_id) == 0)
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
                 e->impl_id, op->name, device_label(dev), dtype_label(dt), why,
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
    size_t at = sel->n;
    for (size_t i = 0; i < sel->n; i++)
        if (sel->order[i] == pinned)
            at = i;
    if (at == sel->n && sel->n == MAX_CHAIN)
        at = sel->n - 1; /* full: the last candidate makes room */
    else if (at == sel->n)
        sel->n++;
    memmove(&sel->order[1], &sel->order[0], at * sizeof sel->order[0]);
    sel->order[0] = pinned;
}

/* Builds the ordered candidates of op for (dev, dt) under pol. Host lock held. */
static void select_candidates(struct fld_op_s *op, int dev, int dt, const struct fld_policy *pol,
                              struct selection *sel)
{
    struct fld_impl_rec *survivors[MAX_CHAIN];
    bool placed[MAX_CHAIN] = {false};
    size_t n_surv = 0;
    sel->n = 0;
    for (size_t i = 0; i < op->n_impls; i++) {
        struct fld_impl_rec *impl = op->impls[i];
        if (!passes_filters(pol, impl, dev, dt, sel))
            continue;
        if (n_surv == MAX_CHAIN) {
            reject(sel, impl, "more than %d candidates; ignored", MAX_CHAIN);
            continue;
        }
        survivors[n_surv++] = impl; /* in ascending impl_id order */
    }
    const struct fld_order *order = fld__policy_order_for(pol, op->name, &sel->order_source);
    fld__order_format(order, sel->order_text, sizeof sel->order_text);
    for (size_t t = 0; t < order->n; t++) {
        size_t first = sel->n;
        for (size_t i = 0; i < n_surv; i++) {
            if (placed[i] || !token_matches(&order->tokens[t], survivors[i]))
                continue;
            /* Insert by descending priority; equal priorities keep impl_id order. */
            size_t k = sel->n;
            while (k > first && sel->order[k - 1]->priority < survivors[i]->priority) {
                sel->order[k] = sel->order[k - 1];
                k--;
            }
            sel->order[k] = survivors[i];
            sel->n++;
            placed[i] = true;
        }
    }
    for (size_t i = 0; i < n_surv; i++)
        if (!placed[i])
            reject(sel, survivors[i], "matches no token of the order '%s'", sel->order_text);
    if (pol->manifest)
        apply_manifest(op, dev, dt, pol, sel);
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

static void chain_free(void *p)
{
    free(p);
}

static struct fld_chain *build_chain(struct fld_op_s *op, int dev, int dt,
                                     const struct fld_policy *pol, uint64_t generation)
{
    struct selection sel = {0};
    select_candidates(op, dev, dt, pol, &sel);
    struct fld_chain *c = chain_new(&sel, pol, generation);
    if (c && fld__dispatch_debug()) {
        if (c->n)
            fld__log(FLD_LOG_DEBUG, "[DISPATCH] Op '%s' (%s, %s) -> '%s' (kind=%s%s%s) order %s",
                     op->name, device_label(dev), dtype_label(dt), c->impls[0]->impl_id,
                     fld__kind_token(c->impls[0]->kind), c->impls[0]->vendor ? ", vendor=" : "",
                     c->impls[0]->vendor ? c->impls[0]->vendor : "", sel.order_text);
        else
            fld__log(FLD_LOG_DEBUG, "[DISPATCH] Op '%s' (%s, %s) -> no candidate (order %s)",
                     op->name, device_label(dev), dtype_label(dt), sel.order_text);
    }
    return c;
}

/* ---- dispatch ----------------------------------------------------------- */

static void slot_key(unsigned slot, int *dev, int *dt)
{
    *dev = (int)slot / (FLD_NDTYPES + 1);
    *dt = (int)slot % (FLD_NDTYPES + 1);
}

static void describe_impl(const struct fld_impl_rec *r, char *buf, size_t size)
{
    snprintf(buf, size, "kind=%s%s%s", fld__kind_token(r->kind), r->vendor ? ", vendor=" : "",
             r->vendor ? r->vendor : "");
}

/*
 * Lets the hot path call c's first candidate directly, if c is still the
 * slot's chain of the current generation. A failure of that candidate
 * recorded meanwhile must win (mark_failed sets the bit, then clears fn):
 * the bit is checked again after fn is stored, so either this or that clear
 * comes last (both sequentially consistent: keep them so).
 */
static void enable_fast(struct fld_op_s *op, unsigned slot, struct fld_chain *c)
{
    struct fld_fast_call *f = &op->fast[slot];
    const fld_kernel_fn fn = c->impls[0]->fn;
    if (atomic_load_explicit(&f->generation, memory_order_relaxed) == c->generation &&
        atomic_load_explicit(&f->fn, memory_order_relaxed) == fn)
        return;
    fld__lock();
    if (atomic_load(&op->slots[slot]) == c && c->generation == atomic_load(&fld__generation)) {
        atomic_store(&f->fn, fn);
        atomic_store_explicit(&f->generation, c->generation, memory_order_release);
        if (atomic_load(&c->failed) & 1u)
            atomic_store(&f->fn, NULL);
    }
    fld__unlock();
}

/* impls[i] of c failed: remembered; if it is the one called directly, no
 * longer (the fast path only ever calls impls[0]). */
static void mark_failed(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    atomic_fetch_or(&c->failed, 1ull << i);
    if (i == 0 && c->global)
        atomic_store(&op->fast[slot].fn, NULL); /* a newer chain's: it is enabled again */
}

/* Logs the first use of impls[i] through chain c, then lets the hot path in. */
static void note_served(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    uint64_t bit = 1ull << i;
    if (!(atomic_load_explicit(&c->announced, memory_order_relaxed) & bit) &&
        !(atomic_fetch_or(&c->announced, bit) & bit)) {
        struct fld_impl_rec *r = c->impls[i];
        const struct fld_impl_rec *prev = atomic_exchange(&op->last_served[slot], r);
        int dev, dt;
        slot_key(slot, &dev, &dt);
        char what[128];
        describe_impl(r, what, sizeof what);
        if (i > 0 && atomic_load(&c->failed))
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) fallback to '%s' (%s)", op->name,
                     device_label(dev), dtype_label(dt), r->impl_id, what);
        else if (!prev)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) using '%s' (%s)", op->name, device_label(dev),
                     dtype_label(dt), r->impl_id, what);
        else if (prev != r)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) switched from '%s' to '%s' (%s)", op->name,
                     device_label(dev), dtype_label(dt), prev->impl_id, r->impl_id, what);
    }
    if (i == 0 && c->global && !c->impls[0]->supports && !(atomic_load(&c->failed) & 1u))
        enable_fast(op, slot, c);
}

static int no_candidate(struct fld_op_s *op, unsigned slot)
{
    int dev, dt;
    slot_key(slot, &dev, &dt);
    /* Say why each implementation that declares this device and dtype was
     * dropped (unavailable, with the plugin's reason; or the policy), so a
     * call on a device whose plugin cannot run names the cause. */
    char why[768] = "";
    size_t len = 0, listed = 0, others = 0;
    fld_resolution *res = NULL;
    DLDataType dtype = {kDLFloat, 32, 1};
    if (dt == FLD_DT_F16)
        dtype = (DLDataType){kDLFloat, 16, 1};
    else if (dt == FLD_DT_BF16)
        dtype = (DLDataType){kDLBfloat, 16, 1};
    int dev_type = dev == FLD_DEV_ANY ? FLD_DEVICE_CPU : fld__device_type_of(dev);
    if (fld_explain(op->name, dev_type, dtype, &res) == FLD_OK) {
        /* First pass: those that declare (dev, dt); when there are none,
         * the second lists what every registered one does support. */
        for (int pass = 0; pass < 2 && !listed; pass++) {
            for (size_t i = 0; i < res->n_rejected; i++) {
                const fld_rejection *r = &res->rejected[i];
                bool declares = strncmp(r->reason, "does not support ", 17) != 0;
                if (declares != (pass == 0))
                    continue;
                if (len < sizeof why)
                    len += (size_t)snprintf(why + len, sizeof why - len, "%s%s: %s",
                                            listed++ ? "; " : "", r->impl_id, r->reason);
            }
            if (!listed)
                others = 1;
        }
        fld_resolution_free(res);
    }
    return fld__fail(FLD_EUNAVAILABLE,
                     "no available implementation for op '%s' (%s, %s)%s: %s (run 'fldispatch "
                     "resolve %s' for details)",
                     op->name, device_label(dev), dtype_label(dt),
                     others ? ": none supports it" : "", listed ? why : "none registered",
                     op->name);
}

/*
 * Runs chain c from candidate `start`. If first_rc is not FLD_OK, candidate
 * start - 1 already ran (the hot path) and failed with first_rc.
 */
static int run_chain(struct fld_op_s *op, unsigned slot, struct fld_chain *c, const void *args,
                     uint32_t start, int first_rc)
{
    int dev, dt;
    slot_key(slot, &dev, &dt);
    int last_rc = FLD_OK;
    const struct fld_impl_rec *last_failed = NULL;
    char last_msg[512] = "";
    /* The last decliner's own explanation, if it gave one (e.g. "no sparse
     * MLA attention backend on ascend"), for the message when all decline. */
    char decline_msg[512] = "";
    const struct fld_impl_rec *last_decliner = NULL;
    uint32_t tried = 0, skipped_failed = 0;

    if (first_rc == FLD_EUNSUPPORTED) {
        /* Declined on the direct path, where its reason cannot be told from a
         * message left by an earlier call: ask it again below with the
         * message cleared (a decline leaves the outputs untouched). */
        start--;
        first_rc = FLD_OK;
    }
    if (first_rc != FLD_OK) {
        struct fld_impl_rec *r = c->impls[start - 1];
        if (c->strict) {
            return first_rc;
        } else {
            mark_failed(op, slot, c, start - 1);
            fld__error_copy(last_msg, sizeof last_msg);
            fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                     r->impl_id, op->name, device_label(dev), dtype_label(dt),
                     fld_strerror(first_rc), last_msg[0] ? ": " : "", last_msg);
            last_rc = first_rc;
            last_failed = r;
            tried++;
        }
    }
    if (c->n == 0)
        return no_candidate(op, slot);

    for (uint32_t i = start; i < c->n; i++) {
        if (atomic_load_explicit(&c->failed, memory_order_relaxed) & (1ull << i)) {
            skipped_failed++;
            continue;
        }
        struct fld_impl_rec *r = c->impls[i];
        if (r->supports && !r->supports(args))
            continue;
        /* Whatever message follows a failure is then the impl's own. */
        fld__error_clear();
        int rc = r->fn(args);
        if (rc == FLD_OK) {
            note_served(op, slot, c, i);
            return FLD_OK;
        }
        if (rc == FLD_EUNSUPPORTED) {
            fld__log(FLD_LOG_DEBUG, "Implementation '%s' declined op '%s' (%s, %s)", r->impl_id,
                     op->name, device_label(dev), dtype_label(dt));
            if (fld_last_error()[0]) {
                fld__error_copy(decline_msg, sizeof decline_msg);
                last_decliner = r;
                fld__error_clear();
            }
            continue;
        }
        if (c->strict)
            return rc; /* the winner's own status and message, unchanged */
        mark_failed(op, slot, c, i);
        fld__error_copy(last_msg, sizeof last_msg);
        fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                 r->impl_id, op->name, device_label(dev), dtype_label(dt), fld_strerror(rc),
                 last_msg[0] ? ": " : "", last_msg);
        last_rc = rc;
        last_failed = r;
        tried++;
    }
    if (tried)
        return fld__fail(FLD_EIMPL,
                         "all %u implementation(s) of op '%s' (%s, %s) that ran failed; last error "
                         "from '%s': %s%s%s",
                         tried, op->name, device_label(dev), dtype_label(dt), last_failed->impl_id,
                         fld_strerror(last_rc), last_msg[0] ? ": " : "", last_msg);
    if (skipped_failed)
        return fld__fail(FLD_EIMPL,
                         "every implementation of op '%s' (%s, %s) that accepts these arguments "
                         "has failed earlier; they are retried after a policy or registry change "
                         "or fld_clear_failures()",
                         op->name, device_label(dev), dtype_label(dt));
    return fld__fail(FLD_EUNAVAILABLE,
                     "no implementation of op '%s' (%s, %s) accepts these arguments (%u "
                     "candidate(s) declined)%s%s%s%s",
                     op->name, device_label(dev), dtype_label(dt), c->n, last_decliner ? "; '" : "",
                     last_decliner ? last_decliner->impl_id : "", last_decliner ? "' said: " : "",
                     last_decliner ? decline_msg : "");
}

/* The global chain of (op, slot), rebuilt under the lock when stale. */
static struct fld_chain *global_chain(struct fld_op_s *op, unsigned slot)
{
    fld__lock();
    uint64_t gen = atomic_load(&fld__generation);
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (!c || c->generation != gen) {
        int dev, dt;
        slot_key(slot, &dev, &dt);
        struct fld_chain *fresh = build_chain(op, dev, dt, fld__policy_global(), gen);
        if (fresh) {
            fresh->global = true;
            atomic_store_explicit(&op->slots[slot], fresh, memory_order_release);
            if (c)
                fld__retire(c, chain_free);
        }
        c = fresh;
    }
    fld__unlock();
    return c;
}

/* ---- thread-local chains for scoped overrides --------------------------- */

#define TLS_CACHE_SIZE 64

struct tls_entry {
    const struct fld_op_s *op;
    unsigned slot;
    uint64_t serial;
    uint64_t generation;
    struct fld_chain *chain;
};

static _Thread_local struct tls_entry tls_cache[TLS_CACHE_SIZE];
static _Thread_local struct fld_chain *tls_retired;
static _Thread_local int tls_depth;

static void tls_free_retired(void)
{
    while (tls_retired) {
        struct fld_chain *c = tls_retired;
        tls_retired = c->tls_next;
        free(c);
    }
}

void fld__manager_tls_flush(void)
{
    for (int i = 0; i < TLS_CACHE_SIZE; i++) {
        if (tls_cache[i].chain) {
            tls_cache[i].chain->tls_next = tls_retired;
            tls_retired = tls_cache[i].chain;
        }
        memset(&tls_cache[i], 0, sizeof tls_cache[i]);
    }
    if (tls_depth == 0)
        tls_free_retired();
}

static int dispatch_override(struct fld_op_s *op, unsigned slot, const void *args,
                             const struct fld_policy *pol)
{
    uint64_t gen = atomic_load_explicit(&fld__generation, memory_order_acquire);
    struct tls_entry *e = &tls_cache[(((uintptr_t)op >> 4) * 31 + slot) % TLS_CACHE_SIZE];
    if (e->op != op || e->slot != slot || e->serial != pol->serial || e->generation != gen ||
        !e->chain) {
        int dev, dt;
        slot_key(slot, &dev, &dt);
        fld__lock();
        gen = atomic_load(&fld__generation);
        struct fld_chain *c = build_chain(op, dev, dt, pol, gen);
        fld__unlock();
        if (!c)
            return fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
        if (e->chain) {
            e->chain->tls_next = tls_retired;
            tls_retired = e->chain;
        }
        *e = (struct tls_entry){op, slot, pol->serial, gen, c};
    }
    tls_depth++;
    int rc = run_chain(op, slot, e->chain, args, 0, FLD_OK);
    if (--tls_depth == 0)
        tls_free_retired();
    return rc;
}

/* ---- the call path ------------------------------------------------------ */

/*
 * Everything the hot path does not cover. A valid cached chain is still used
 * without the lock (its first candidate has a supports() predicate, or has
 * failed, or this is the first call through it); the lock is taken only to
 * build a chain. The chain is held inside a reader section.
 */
__attribute__((noinline)) static int dispatch_slow(struct fld_op_s *op, unsigned slot,
                                                   const void *args)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (!c || c->generation != atomic_load(&fld__generation))
        c = global_chain(op, slot);
    int rc = c ? run_chain(op, slot, c, args, 0, FLD_OK)
               : fld__fail(FLD_ENOMEM, "out of memory resolving op '%s'", op->name);
    fld__read_end();
    return rc;
}

/* The directly called fn (the first candidate) failed with rc: continue its
 * chain, or start again if the chain changed meanwhile. */
__attribute__((noinline, cold)) static int fast_failed(struct fld_op_s *op, unsigned slot,
                                                       const void *args, fld_kernel_fn fn, int rc)
{
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (c && c->generation == atomic_load(&fld__generation) && c->n && c->impls[0]->fn == fn)
        rc = run_chain(op, slot, c, args, 1, rc);
    else
        rc = dispatch_slow(op, slot, args);
    fld__read_end();
    return rc;
}

__attribute__((noinline, cold)) static int dispatch_overridden(struct fld_op_s *op, unsigned slot,
                                                               const void *args)
{
    const struct fld_policy *top = fld__policy_override_top();
    if (top)
        return dispatch_override(op, slot, args, top);
    return dispatch_slow(op, slot, args);
}

/*
 * The hot path. Kept tiny so that it inlines into each entry point: every
 * slow case is a call to a non-inlined function.
 */
static inline __attribute__((always_inline)) int dispatch(struct fld_op_s *op, unsigned slot,
                                                          const void *args)
{
    uint64_t gen = atomic_load_explicit(&fld__generation, memory_order_acquire);
    if (unlikely(atomic_load_explicit(&fld__override_threads, memory_order_relaxed)))
        return dispatch_overridden(op, slot, args);
    struct fld_fast_call *f = &op->fast[slot];
    fld_kernel_fn fn;
    if (likely(atomic_load_explicit(&f->generation, memory_order_acquire) == gen &&
               (fn = atomic_load_explicit(&f->fn, memory_order_relaxed)))) {
        int rc = fn(args);
        if (likely(rc == FLD_OK))
            return FLD_OK;
        return fast_failed(op, slot, args, fn, rc);
    }
    return dispatch_slow(op, slot, args);
}

__attribute__((noinline, cold)) static int null_args(const struct fld_op_s *op)
{
    return fld__fail(FLD_EINVAL, "%s: argument 'args' is NULL", op->name);
}

static inline int call_validated(struct fld_op_s *op, const void *args)
{
    if (unlikely(!args))
        return null_args(op);
    struct fld_call_key key;
    int rc = op->schema->validate(op->name, args, &key);
    if (unlikely(rc))
        return rc;
    return dispatch(op, fld__slot(key.device, key.dtype), args);
}

/* A typed call before initialisation, or while fld_shutdown() waits. */
__attribute__((noinline, cold)) static int call_catalog_cold(enum fld_catalog_index idx,
                                                             const void *args)
{
    int rc = fld__ensure_init_from(fld__catalog[idx].name);
    if (rc)
        return rc;
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    if (!op)
        return fld__fail(FLD_ESTATE, "%s: the library was shut down during the call",
                         fld__catalog[idx].name);
    return call_validated(op, args);
}

/*
 * The typed entry points. The call counts as in flight (inflight.h) from
 * before its op is read: fld_shutdown() unpublishes the catalog entries
 * first, then waits for such counts.
 */
int fld__call_catalog(enum fld_catalog_index idx, const void *args)
{
    struct fld_inflight_slot *in = fld__call_enter();
    struct fld_op_s *op = atomic_load_explicit(&fld__catalog_ops[idx], memory_order_acquire);
    int rc = likely(op != NULL) ? call_validated(op, args) : call_catalog_cold(idx, args);
    fld__call_leave(in);
    return rc;
}

__attribute__((noinline, cold)) static int null_handle(void)
{
    return fld__fail(FLD_EINVAL, "fld_call: argument 'op' is NULL");
}

/* fld__generation is 0 only while uninitialised or shutting down. */
__attribute__((noinline, cold)) static int closed_handle(const char *fn)
{
    return fld__fail(FLD_ESTATE,
                     "%s: the library is shut down or shutting down (fld_op handles are invalid "
                     "after fld_shutdown(); look them up again)",
                     fn);
}

static inline bool library_open(void)
{
    return atomic_load_explicit(&fld__generation, memory_order_acquire) != 0;
}

/* An op's call, its thread already counted in flight and the library open. */
static inline int call_op(struct fld_op_s *op, const void *args)
{
    if (op->schema)
        return call_validated(op, args);
    return dispatch(op, fld__slot(FLD_DEV_ANY, FLD_DT_ANY), args);
}

int fld_call(fld_op handle, const void *args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (unlikely(!op))
        return null_handle();
    struct fld_inflight_slot *in = fld__call_enter();
    int rc = likely(library_open()) ? call_op(op, args) : closed_handle("fld_call");
    fld__call_leave(in);
    return rc;
}

int fld_call_by_name(const char *name, const void *args)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name)
        return fld__fail(FLD_EINVAL, "fld_call_by_name: argument 'name' is NULL");
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        return fld__fail(FLD_ENOTFOUND, "no op named '%s'", name);
    return call_op(op, args); /* counted in flight by the scope above; initialised, so open */
}

/* Out of line: key_from() runs on fld_call_on()'s path. */
static __attribute__((cold, noinline)) int unknown_device_type(int device_type)
{
    return fld__fail(FLD_EINVAL, "unknown device type %d (valid: %s)", device_type,
                     fld__device_text(FLD_DEVICE_TEXT_CODES));
}

static int key_from(int device_type, DLDataType dtype, int *dev, int *dt)
{
    *dev = fld__device_index(device_type);
    if (*dev < 0)
        return unknown_device_type(device_type);
    if (dtype.code == 0 && dtype.bits == 0 && dtype.lanes == 0) {
        *dt = FLD_DT_ANY;
        return FLD_OK;
    }
    *dt = fld__dtype_index(dtype);
    if (*dt < 0)
        return fld__fail(FLD_EINVAL,
                         "unsupported dtype (code %d, bits %d, lanes %d; valid: f32, "
                         "f16, bf16)",
                         dtype.code, dtype.bits, dtype.lanes);
    return FLD_OK;
}

int fld_call_on(fld_op handle, int device_type, DLDataType dtype, const void *args)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op)
        return fld__fail(FLD_EINVAL, "fld_call_on: argument 'op' is NULL");
    FLD_CALL_SCOPE();
    if (unlikely(!library_open()))
        return closed_handle("fld_call_on");
    if (op->schema)
        return call_validated(op, args);
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    return dispatch(op, fld__slot(dev, dt), args);
}

/* ---- resolve, explain, failures ----------------------------------------- */

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

/* fld_explain() once the public function has checked its arguments. */
static int explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    *out = NULL;
    int dev, dt;
    int rc = key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    struct fld_op_s *op = fld__op_find(name);
    if (!op)
        return fld__fail(FLD_ENOTFOUND,
                         "no op named '%s' (not in the catalog and no plugin "
                         "registered it)",
                         name);
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
    select_candidates(op, dev, dt, fld__policy_effective(), &sel);
    /* order_source points into the policy, which a change may free once the
     * lock is released: copied now. */
    res->order_source = strdup(sel.order_source ? sel.order_source : "");
    fld__unlock();
    res->op = op->name;
    res->device_type = device_type;
    res->dtype = dtype;
    for (size_t i = 0; i < sel.n; i++)
        res->candidates[res->n_candidates++] = sel.order[i]->impl_id;
    res->selected = sel.n ? sel.order[0]->impl_id : NULL;
    for (size_t i = 0; i < sel.n_rejected; i++) {
        res->rejected[i].impl_id = sel.rejected[i].impl->impl_id;
        res->rejected[i].reason = strdup(sel.rejected[i].reason);
        res->n_rejected++;
        if (!res->rejected[i].reason)
            rc = FLD_ENOMEM;
    }
    res->order = strdup(sel.order_text);
    free(sel.rejected);
    if (rc || !res->order || !res->order_source) {
        fld_resolution_free(res);
        return fld__fail(FLD_ENOMEM, "out of memory");
    }
    *out = res;
    return FLD_OK;
}

int fld_explain(const char *name, int device_type, DLDataType dtype, fld_resolution **out)
{
    FLD_CALL_SCOPE();
    if (out)
        *out = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !out)
        return fld__fail(FLD_EINVAL, "fld_explain: argument '%s' is NULL", name ? "out" : "op");
    return explain(name, device_type, dtype, out);
}

int fld_resolve(const char *name, int device_type, DLDataType dtype, const char **impl_id)
{
    FLD_CALL_SCOPE();
    if (impl_id)
        *impl_id = NULL;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!name || !impl_id)
        return fld__fail(FLD_EINVAL, "fld_resolve: argument '%s' is NULL", name ? "impl_id" : "op");
    fld_resolution *res;
    rc = explain(name, device_type, dtype, &res);
    if (rc)
        return rc;
    if (!res->selected) {
        char detail[700] = "";
        size_t len = 0;
        for (size_t i = 0; i < res->n_rejected && len < sizeof detail; i++)
            len += (size_t)snprintf(detail + len, sizeof detail - len, "%s%s: %s", i ? "; " : "",
                                    res->rejected[i].impl_id, res->rejected[i].reason);
        rc = fld__fail(FLD_EUNAVAILABLE, "no available implementation for op '%s' on %s/%s%s%s",
                       name, fld_device_name(device_type), fld_dtype_name(dtype),
                       res->n_rejected ? "; registered: " : " (none registered)", detail);
    } else {
        *impl_id = res->selected;
    }
    fld_resolution_free(res);
    return rc;
}

static void clear_op_failures(struct fld_op_s *op, void *user)
{
    for (unsigned s = 0; s < FLD_NSLOTS; s++) {
        struct fld_chain *c = atomic_load(&op->slots[s]);
        if (c)
            atomic_store(&c->failed, 0);
    }
}

int fld_clear_failures(const char *name)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    fld__lock();
    if (name) {
        struct fld_op_s *op = fld__op_find(name);
        if (!op) {
            fld__unlock();
            return fld__fail(FLD_ENOTFOUND, "no op named '%s'", name);
        }
        clear_op_failures(op, NULL);
    } else {
        fld__op_foreach(clear_op_failures, NULL);
    }
    fld__unlock();
    fld__manager_tls_flush();
    return FLD_OK;
}

static void drop_op_chains(struct fld_op_s *op, void *user)
{
    for (unsigned s = 0; s < FLD_NSLOTS; s++) {
        free(atomic_exchange(&op->slots[s], NULL));
        atomic_store(&op->last_served[s], NULL);
        atomic_store(&op->fast[s].fn, NULL);
        atomic_store(&op->fast[s].generation, 0);
    }
}

void fld__manager_shutdown(void)
{
    fld__op_foreach(drop_op_chains, NULL);
    fld__manager_tls_flush();
}
