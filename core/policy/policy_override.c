/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calling thread's policy: the thread-local stack of scoped overrides
 * (fld__policy_push(), fld_policy_pop()), the effective policy it gives
 * (the innermost override, else the global policy), and the entry points
 * that read that policy (fld_policy_describe(), fld_oot_op_enabled()).
 *
 * Override policies belong to the thread that pushed them and are freed on
 * pop or thread exit; only that thread ever reads them. The public pushes
 * (fld_policy_push_*()) build the policy they push in policy_fields.c, the
 * level above, from a clone of the effective policy.
 *
 * It sits above policy.c, which knows nothing of it: it checks a manifest
 * on a strict push (manifest.h, above the policy), and it must not include
 * dispatch (dispatch.h, above it). Dispatch caches choices per thread; when
 * an override leaves, those caches are stale, so the pop runs a hook that
 * the top level sets (lifecycle.c sets fld__dispatch_tls_flush() at its
 * first initialisation), as host.c runs lifecycle.c's fork hook. Every push
 * initialises the library first, so the hook is set before any override
 * exists.
 *
 * The override stack's reads that dispatch takes on its hot path
 * (fld__override_threads, fld__policy_override_top(), fld__policy_effective())
 * are declared in policy.h, next to the global policy they stand in for;
 * they are defined here.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include <fldispatch/fldispatch.h>

#include "error.h"
#include "host.h"
#include "inflight.h"
#include "names.h"
#include "policy.h"
#include "policy_override.h"
#include "reclaim.h"

_Atomic unsigned fld__override_threads;

const struct fld_policy *fld__policy_effective(void)
{
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed)) {
        const struct fld_policy *top = fld__policy_override_top();
        if (top)
            return top;
    }
    return fld__policy_global();
}

struct override_stack {
    struct fld_policy **items;
    size_t n, cap;
};

static _Thread_local struct override_stack *tls_stack;
static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;
static int stack_key_status = -1;

/* What runs when a thread's override leaves it (pop, thread exit): dispatch's
 * flush of the thread's chain caches, set by lifecycle.c. Atomic: the thread
 * that pops is seldom the one that initialised (the ready flag's acquire,
 * which every push passes, orders the store before any push); a forked child
 * keeps it. */
static void (*_Atomic override_pop_hook)(void);

void fld__policy_on_override_pop(void (*fn)(void))
{
    atomic_store(&override_pop_hook, fn);
}

static void run_override_pop_hook(void)
{
    void (*hook)(void) = atomic_load(&override_pop_hook);
    if (hook)
        hook();
}

/* Runs at thread exit when the thread still had a stack. */
static void stack_destroy(void *arg)
{
    struct override_stack *s = arg;
    if (s->n > 0) {
        run_override_pop_hook();
        atomic_fetch_sub(&fld__override_threads, 1u);
    }
    for (size_t i = 0; i < s->n; i++)
        fld__policy_free(s->items[i]);
    free(s->items);
    free(s);
    tls_stack = NULL;
}

static void make_stack_key(void)
{
    stack_key_status = pthread_key_create(&stack_key, stack_destroy);
}

static struct override_stack *get_stack(void)
{
    if (tls_stack)
        return tls_stack;
    pthread_once(&stack_key_once, make_stack_key);
    if (stack_key_status != 0)
        return NULL;
    struct override_stack *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    if (pthread_setspecific(stack_key, s) != 0) {
        free(s);
        return NULL;
    }
    tls_stack = s;
    return s;
}

const struct fld_policy *fld__policy_override_top(void)
{
    struct override_stack *s = tls_stack;
    return s && s->n ? s->items[s->n - 1] : NULL;
}

/* Takes ownership of p in every case. */
int fld__policy_push(const char *what, struct fld_policy *p)
{
    struct override_stack *s = get_stack();
    if (!s)
        goto nomem;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 4;
        struct fld_policy **items = realloc(s->items, cap * sizeof *items);
        if (!items)
            goto nomem;
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = p;
    if (s->n == 1)
        atomic_fetch_add(&fld__override_threads, 1u);
    return FLD_OK;
nomem:
    fld__policy_free(p);
    return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
}

int fld__policy_check_pushed_names(const char *what, struct fld_policy *pushed, bool strict)
{
    pushed->strict = strict;
    fld__lock();
    int rc = fld__names_check_policy(pushed);
    fld__unlock();
    if (rc != FLD_OK)
        fld__error_prefix("%s", what);
    return rc;
}

/* Needs no initialised library: undoing a push must work whatever happened
 * to the global state since (a failed reload, a shutdown). */
int fld_policy_pop(void)
{
    struct override_stack *s = tls_stack;
    if (!s || s->n == 0)
        return fld__fail(FLD_ESTATE, "fld_policy_pop: no scoped override is pushed on this thread");
    struct fld_policy *top = s->items[--s->n];
    if (s->n == 0)
        atomic_fetch_sub(&fld__override_threads, 1u);
    /* The thread's caches may hold choices made under top. */
    run_override_pop_hook();
    fld__policy_free(top);
    return FLD_OK;
}

size_t fld_policy_depth(void)
{
    struct override_stack *s = tls_stack;
    return s ? s->n : 0;
}

/* Needs no initialised library either, for the same reason as the pop. */
int fld_policy_pop_to(size_t depth)
{
    struct override_stack *s = tls_stack;
    if (!s || s->n <= depth)
        return FLD_OK;
    size_t n = s->n;
    s->n = depth;
    if (depth == 0)
        atomic_fetch_sub(&fld__override_threads, 1u);
    run_override_pop_hook();
    for (size_t i = depth; i < n; i++)
        fld__policy_free(s->items[i]);
    return FLD_OK;
}

size_t fld_policy_describe(char *buf, size_t size)
{
    FLD_CALL_SCOPE();
    if (fld__ensure_init() != FLD_OK) {
        if (buf && size)
            buf[0] = '\0';
        return 0;
    }
    fld__read_begin();
    size_t n = fld__policy_fingerprint(fld__policy_effective(), buf, size);
    fld__read_end();
    return n;
}

bool fld_oot_op_enabled(const char *op)
{
    FLD_CALL_SCOPE();
    if (fld__ensure_init() != FLD_OK)
        return false;
    if (!op) {
        fld__fail(FLD_EINVAL, "fld_oot_op_enabled: argument 'op' is NULL");
        return false;
    }
    fld__read_begin();
    const struct fld_policy *p = fld__policy_effective();
    bool on = p->enabled && p->oot_enabled && fld__policy_oot_allows_op(p, op, NULL, 0);
    fld__read_end();
    return on;
}
