/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The run of a chain with fallback: the candidates in order, a decline
 * (FLD_EUNSUPPORTED) passes to the next, a failure is remembered on the
 * chain (non-strict) and logged, strict mode returns the winner's own
 * error; the first use of an implementation is announced in the log, and a
 * chain whose first candidate served a call opens the hot path
 * (enable_fast()). Counting and tracing (stats.h) wrap each call while on.
 */
#include <stdio.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "chain.h"
#include "devices.h"
#include "error.h"
#include "host.h"
#include "log.h"
#include "names.h"
#include "registry.h"
#include "stats.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* The binding's argument record of the binding call this thread is making,
 * if any: plugin implementations decline it (run_plugin_impl()). */
static _Thread_local const void *tls_binding_args;

const void *fld__binding_args_swap(const void *args)
{
    const void *outer = tls_binding_args;
    tls_binding_args = args;
    return outer;
}

/* A plugin kernel, unless args is a binding's own record, which it cannot read. */
static inline int run_plugin_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                                  const void *args)
{
    if (unlikely(args == tls_binding_args && args))
        return fld__fail(FLD_EUNSUPPORTED,
                         "%s: '%s' is a C implementation (plugin '%s') and the call came from a "
                         "language binding with its own arguments, which it cannot read (an op "
                         "called from a binding runs on C kernels only through its argument "
                         "struct)",
                         op->name, r->impl_id, r->plugin ? r->plugin->name : "?");
    return r->fn(args);
}

/* One candidate of a chain: a plugin kernel, or a binding's kernel with its context. */
static inline int run_impl(const struct fld_op_s *op, const struct fld_impl_rec *r,
                           const void *args)
{
    return r->fn ? run_plugin_impl(op, r, args) : r->binding_fn(r->binding_ctx, args);
}

/* What ran (stats.h), on while VLLM_FL_STATS, VLLM_FL_TRACE or fld_stats_enable() ask. */
struct observed {
    struct fld_stats_cell *last;   /* the cell of the last implementation called */
    struct fld_stats_cell *failed; /* one that failed; a fallback if another runs */
};

/*
 * One call of r, counted and timed as flags ask: the previous failed
 * implementation, if any, fell back to this one.
 */
__attribute__((noinline)) static int call_observed(const struct fld_op_s *op,
                                                   struct fld_impl_rec *r, unsigned slot, int dev,
                                                   int dt, const void *args, unsigned flags,
                                                   struct observed *ob)
{
    struct fld_stats_cell *cell = fld__stats_cell(r, fld__slot_key(slot), dev, dt);
    if (ob->failed) {
        if (flags & FLD_STATS_FLAG_COUNT)
            fld__stats_fallback(ob->failed);
        ob->failed = NULL;
    }
    ob->last = cell;
    const bool timed = flags & (FLD_STATS_FLAG_TIME | FLD_STATS_FLAG_TRACE);
    uint64_t start = timed ? fld__stats_now() : 0;
    int rc = run_impl(op, r, args);
    uint64_t end = timed ? fld__stats_now() : 0;
    if (cell) {
        if (flags & FLD_STATS_FLAG_COUNT)
            fld__stats_count(cell, rc, end - start);
        if (flags & FLD_STATS_FLAG_TRACE)
            fld__trace_call(cell, start, end, rc);
    }
    return rc;
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
    /* Counting and tracing need every call on the chain path: no direct one. */
    if (atomic_load_explicit(&fld__stats_flags, memory_order_relaxed))
        return;
    struct fld_fast_call *f = fld__fast_at(op, slot);
    const fld_kernel_fn fn = c->impls[0]->fn;
    if (atomic_load_explicit(&f->generation, memory_order_relaxed) == c->generation &&
        atomic_load_explicit(&f->fn, memory_order_relaxed) == fn)
        return;
    fld__lock();
    if (atomic_load(fld__chain_at(op, slot)) == c &&
        c->generation == atomic_load(&fld__generation)) {
        atomic_store(&f->fn, fn);
        atomic_store_explicit(&f->generation, c->generation, memory_order_release);
        if (atomic_load(&c->failed) & 1u)
            atomic_store(&f->fn, NULL);
    }
    fld__unlock();
}

/* Logs the first use of impls[i] through chain c, then lets the hot path in. */
static void note_served(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    uint64_t bit = 1ull << i;
    if (!(atomic_load_explicit(&c->announced, memory_order_relaxed) & bit) &&
        !(atomic_fetch_or(&c->announced, bit) & bit)) {
        struct fld_impl_rec *r = c->impls[i];
        const struct fld_impl_rec *prev = atomic_exchange(fld__served_at(op, slot), r);
        int dev, dt;
        fld__slot_dev_dt(slot, &dev, &dt);
        char what[128];
        describe_impl(r, what, sizeof what);
        if (i > 0 && atomic_load(&c->failed))
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) fallback to '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(r), what);
        else if (!prev)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) using '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(r), what);
        else if (prev != r)
            fld__log(FLD_LOG_INFO, "Op '%s' (%s, %s) switched from '%s' to '%s' (%s)", op->name,
                     fld__device_label(dev), fld__dtype_label(dt), fld__impl_name(prev),
                     fld__impl_name(r), what);
    }
    if (i == 0 && c->global && !c->buckets && c->impls[0]->fn && !c->impls[0]->supports &&
        !(atomic_load(&c->failed) & 1u))
        enable_fast(op, slot, c);
}

/* impls[i] of c failed: remembered; if it is the one called directly, no
 * longer (the fast path only ever calls impls[0]). */
static void mark_failed(struct fld_op_s *op, unsigned slot, struct fld_chain *c, uint32_t i)
{
    atomic_fetch_or(&c->failed, 1ull << i);
    if (i == 0 && c->global)
        atomic_store(&fld__fast_at(op, slot)->fn, NULL); /* a newer chain's: it is enabled again */
}

static int no_candidate(struct fld_op_s *op, unsigned slot)
{
    int dev, dt;
    fld__slot_dev_dt(slot, &dev, &dt);
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
                     op->name, fld__device_label(dev), fld__dtype_label(dt),
                     others ? ": none supports it" : "", listed ? why : "none registered",
                     op->name);
}

/*
 * Runs chain c from candidate `start`. If first_rc is not FLD_OK, candidate
 * start - 1 already ran (the hot path) and failed with first_rc.
 */
int fld__run_chain(struct fld_op_s *op, unsigned slot, struct fld_chain *c, const void *args,
                   uint32_t start, int first_rc)
{
    int dev, dt;
    fld__slot_dev_dt(slot, &dev, &dt);
    int last_rc = FLD_OK;
    const struct fld_impl_rec *last_failed = NULL;
    char last_msg[512] = "";
    /* The last decliner's own explanation, if it gave one (e.g. "no sparse
     * MLA attention backend on ascend"), for the message when all decline. */
    char decline_msg[512] = "";
    const struct fld_impl_rec *last_decliner = NULL;
    uint32_t tried = 0, skipped_failed = 0;
    /* One load when off: the counting is out of line. */
    const unsigned stats = atomic_load_explicit(&fld__stats_flags, memory_order_relaxed);
    struct observed ob = {NULL, NULL};

    if (first_rc == FLD_EUNSUPPORTED) {
        /* Declined on the direct path, where its reason cannot be told from a
         * message left by an earlier call: ask it again below with the
         * message cleared (a decline leaves the outputs untouched). */
        start--;
        first_rc = FLD_OK;
    }
    if (first_rc != FLD_OK) {
        struct fld_impl_rec *r = c->impls[start - 1];
        if (unlikely(stats & FLD_STATS_FLAG_COUNT)) {
            /* It ran on the direct path, which counting closes: a call that
             * raced the switch. */
            ob.last = fld__stats_cell(r, fld__slot_key(slot), dev, dt);
            if (ob.last)
                fld__stats_count(ob.last, first_rc, 0);
            ob.failed = c->strict ? NULL : ob.last;
        }
        if (c->strict) {
            return first_rc;
        } else {
            mark_failed(op, slot, c, start - 1);
            fld__error_copy(last_msg, sizeof last_msg);
            fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                     fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt),
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
        int rc = likely(!stats) ? run_impl(op, r, args)
                                : call_observed(op, r, slot, dev, dt, args, stats, &ob);
        if (rc == FLD_OK) {
            note_served(op, slot, c, i);
            return FLD_OK;
        }
        if (rc == FLD_EUNSUPPORTED) {
            fld__log(FLD_LOG_DEBUG, "Implementation '%s' declined op '%s' (%s, %s)",
                     fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt));
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
        if (unlikely(stats))
            ob.failed = ob.last;
        fld__error_copy(last_msg, sizeof last_msg);
        fld__log(FLD_LOG_WARNING, "Implementation '%s' failed for op '%s' (%s, %s): %s%s%s",
                 fld__impl_name(r), op->name, fld__device_label(dev), fld__dtype_label(dt),
                 fld_strerror(rc), last_msg[0] ? ": " : "", last_msg);
        last_rc = rc;
        last_failed = r;
        tried++;
    }
    if (tried)
        return fld__fail(FLD_EIMPL,
                         "all %u implementation(s) of op '%s' (%s, %s) that ran failed; last error "
                         "from '%s': %s%s%s",
                         tried, op->name, fld__device_label(dev), fld__dtype_label(dt),
                         fld__impl_name(last_failed), fld_strerror(last_rc),
                         last_msg[0] ? ": " : "", last_msg);
    if (skipped_failed)
        return fld__fail(FLD_EIMPL,
                         "every implementation of op '%s' (%s, %s) that accepts these arguments "
                         "has failed earlier; they are retried after a policy or registry change "
                         "or fld_clear_failures()",
                         op->name, fld__device_label(dev), fld__dtype_label(dt));
    return fld__fail(FLD_EUNAVAILABLE,
                     "no implementation of op '%s' (%s, %s) accepts these arguments (%u "
                     "candidate(s) declined)%s%s%s%s",
                     op->name, fld__device_label(dev), fld__dtype_label(dt), c->n,
                     last_decliner ? "; '" : "", last_decliner ? fld__impl_name(last_decliner) : "",
                     last_decliner ? "' said: " : "", last_decliner ? decline_msg : "");
}

/* The trace's record of a chain just built (its candidates, in order). */
__attribute__((noinline, cold)) void
fld__trace_chain_built(const struct fld_op_s *op, unsigned slot, const struct fld_chain *c)
{
    int dev, dt;
    fld__slot_dev_dt(slot, &dev, &dt);
    const char *ids[64];
    size_t n = c->n < 64 ? c->n : 64;
    for (size_t i = 0; i < n; i++)
        ids[i] = fld__impl_name(c->impls[i]);
    fld__trace_chain(op->name, dev, dt, ids, n);
}
