/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The top level: init, reload, shutdown, and what a forked child redoes above
 * the base level. Each starts or stops the levels below in order (log, ops,
 * the reference kernels' records, discovery, platform and policy, names,
 * manifest) and keeps the library's state machine. Nothing below includes
 * this file; the levels reach it by one call, the lazy fld_init() of host.h's
 * fld__ensure_init_from(), and by two hooks it sets at its first
 * initialisation: what a forked child redoes (host.c runs it) and dispatch's
 * flush of a thread's caches when an override leaves it (policy_override.c
 * runs it, so the override stack need not include dispatch.h). The host lock,
 * the generation counter and the ready flag are the base level's (host.c).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "discovery.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "policy_sources.h"
#include "log.h"
#include "dispatch.h"
#include "dispatch_override.h"
#include "manifest.h"
#include "names.h"
#include "ops.h"
#include "parse.h"
#include "platform.h"
#include "policy.h"
#include "policy_override.h"
#include "reclaim.h"
#include "registry.h"
#include "stats.h"

/* fld_shutdown()'s wait for calls in flight (VLLM_FL_SHUTDOWN_TIMEOUT), in seconds. */
#define FLD_SHUTDOWN_DEFAULT_TIMEOUT 10.0
#define FLD_SHUTDOWN_MAX_TIMEOUT     3600.0

/* CLOSING: fld_shutdown() waits for the calls in flight; the state is intact,
 * but no new call may start (closing_from says what it was before). */
enum init_state { STATE_UNINIT, STATE_READY, STATE_FAILED, STATE_CLOSING };

static _Atomic int state = STATE_UNINIT;
static int init_status;  /* the remembered init failure */
static int closing_from; /* the state fld_shutdown() found, while CLOSING */
static char init_message[1024];

/*
 * The change this thread is making ("fld_init", "fld_reload",
 * "fld_shutdown"), NULL when none. Every way back in from the middle of one
 * (plugin code, a device hook, the log callback) is refused earlier
 * (reentry.h); this is the last line, should a callout be missed: a nested
 * change on the same thread would run inside the recursive host lock and
 * free or replace what the outer one is using.
 */
static _Thread_local const char *changing;

static int nested_change(const char *fn)
{
    return fld__fail(FLD_ESTATE,
                     "%s: called during %s() on the same thread (from code the library called "
                     "out to); nothing was done",
                     fn, changing);
}

static void set_state(enum init_state st)
{
    atomic_store(&state, st);
    atomic_store(&fld__ready, st == STATE_READY);
}

/* Undoes the gates fld_shutdown() closed: the library is as before it began. */
static void reopen_after_closing(void)
{
    if (closing_from == STATE_READY)
        fld__ops_reopen();
    fld__bump_generation();
    set_state((enum init_state)closing_from);
}

/* A forked child (host.c's atfork handler, after the base level's). */
static void after_fork_child(void)
{
    /* A shutdown waiting in the parent has no thread here: the child goes on
     * with the state as it was. */
    if (atomic_load(&state) == STATE_CLOSING)
        reopen_after_closing();
    atomic_store(&fld__override_threads, fld__policy_override_top() ? 1u : 0u);
    fld__stats_after_fork(); /* the child counts its own calls */
    if (atomic_load(&state) == STATE_READY) {
        fld__registry_forget_availability();
        fld__bump_generation();
    }
}

/*
 * Decides the platform and builds the policy of all sources against the
 * current registry; checks the manifest. Nothing is applied: on error *out
 * is NULL and the message names the variable or file:line. Host lock held.
 */
static int build_configuration(struct fld_platform *plat, struct fld_policy **out,
                               bool check_manifest)
{
    *out = NULL;
    int rc = fld__platform_detect(plat);
    if (rc)
        return rc;
    struct fld_policy *p;
    rc = fld__policy_build(plat, &p);
    if (rc)
        return rc;
    if (check_manifest && p->manifest) {
        rc = fld__manifest_check(p->manifest, p->strict);
        if (rc) {
            fld__policy_free(p);
            return rc;
        }
    }
    *out = p;
    return FLD_OK;
}

/*
 * The names the configuration mentions and the VLLM_FL_* variables, against
 * what is registered now (after discovery): WARNINGs, or FLD_ECONFIG when p
 * is strict. Host lock held.
 */
static int check_names_now(const struct fld_policy *p)
{
    int rc = fld__names_check_environment(p->strict);
    if (rc == FLD_OK)
        rc = fld__names_check_policy(p);
    return rc;
}

/* Set by a binding that registers implementations of its own: the check
 * waits for fld_binding_check_names() (binding.h). */
static atomic_bool names_deferred;

static int check_names(const struct fld_policy *p)
{
    return atomic_load(&names_deferred) ? FLD_OK : check_names_now(p);
}

void fld_binding_defer_name_check(void)
{
    atomic_store(&names_deferred, true);
}

int fld_binding_check_names(void)
{
    if (!atomic_load(&names_deferred))
        return FLD_OK;
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    fld__lock();
    if (atomic_load(&names_deferred)) {
        rc = check_names_now(fld__policy_global());
        if (rc == FLD_OK)
            atomic_store(&names_deferred, false);
    }
    fld__unlock();
    return rc;
}

/* What the files and the environment say now: the platform detected and the
 * manifest checked as init does. On error nothing changes. */
int fld_policy_reset(void)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    fld__lock();
    struct fld_platform plat;
    struct fld_policy *p;
    rc = build_configuration(&plat, &p, true);
    if (rc == FLD_OK && (rc = check_names(p)) != FLD_OK) {
        fld__policy_free(p);
        p = NULL;
    }
    if (rc == FLD_OK) {
        fld__platform_set_current(&plat);
        fld__policy_publish(p);
    }
    fld__unlock();
    return rc;
}

static int register_reference(fld_registry *reg)
{
    for (int i = 0; i < FLD_CAT_COUNT; i++) {
        const struct fld_op_schema *s = &fld__catalog[i];
        const fld_impl impl = {
            .op = s->name,
            .impl_id = "reference.c",
            .kind = FLD_KIND_REFERENCE,
            .priority = FLD_PRIORITY_REFERENCE,
            .devices = s->reference_devices,
            .dtypes = s->reference_dtypes,
            .fn = s->reference,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor reference_plugin = {
    FLD_PLUGIN_MAGIC,        FLD_PLUGIN_ABI_MAJOR,
    FLD_PLUGIN_ABI_MINOR,    sizeof(fld_plugin_descriptor),
    FLD_PLUGIN_FLAG_IN_TREE, "reference",
    FLD_VERSION_STRING,      FLD_VERSION_STRING,
    register_reference};

static void count_impls(struct fld_op_s *op, void *user)
{
    size_t *counts = user;
    if (op->n_impls)
        counts[0]++;
    counts[1] += op->n_impls;
}

static int fail_init(int rc)
{
    init_status = rc;
    fld__error_copy(init_message, sizeof init_message);
    set_state(STATE_FAILED);
    return rc; /* returned, and remembered for every later call: not logged twice */
}

/* Host lock held. On failure nothing stays: no ops, plugins or policy. */
static int initialise_locked(void)
{
    fld__host_on_fork_child(after_fork_child);
    /* Before any override can exist: every push initialises first. */
    fld__policy_on_override_pop(fld__dispatch_tls_flush);
    struct fld_log_env log_env;
    struct fld_stats_env stats_env;
    int rc = fld__log_read_env(&log_env);
    if (!rc)
        rc = fld__stats_read_env(&stats_env);
    if (rc)
        return fail_init(rc);
    fld__log_commit_env(&log_env);
    fld__stats_commit_env(&stats_env, false);
    rc = fld__ops_init(fld__catalog);
    if (!rc)
        rc = fld__load_plugin_descriptor(&reference_plugin, "(built-in)", NULL);
    struct fld_platform plat;
    struct fld_policy *policy = NULL;
    if (!rc) {
        fld__discover_plugins();
        rc = build_configuration(&plat, &policy, true);
        if (!rc && (rc = check_names(policy)) != FLD_OK) {
            fld__policy_free(policy);
            policy = NULL;
        }
    }
    if (rc) {
        /* Typed calls must see an uninitialised library, and a later
         * fld_reload() must start from nothing. */
        char message[sizeof init_message];
        fld__error_copy(message, sizeof message);
        fld__dispatch_shutdown();
        fld__registry_shutdown();
        fld__ops_shutdown();
        fld__discovery_shutdown();
        fld__fail(rc, "%s", message);
        return fail_init(rc);
    }
    fld__platform_set_current(&plat);
    fld__policy_publish(policy);
    fld__bump_generation();
    set_state(STATE_READY);
    size_t counts[2] = {0, 0}, n_plugins = 0;
    fld__op_foreach(count_impls, counts);
    for (struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next)
        n_plugins += p->status == FLD_PLUGIN_LOADED;
    fld__log(FLD_LOG_INFO,
             "fldispatch initialized on platform '%s' (%s): %zu ops with %zu implementations from "
             "%zu plugins",
             plat.name, plat.detected_by, counts[0], counts[1], n_plugins);
    return FLD_OK;
}

static int shutting_down(const char *fn)
{
    return fld__fail(FLD_ESTATE,
                     "%s: fld_shutdown() is in progress on another thread (it waits for the calls "
                     "in flight; call again once it has returned)",
                     fn);
}

/* fld_init() on behalf of the entry point fn. */
static int init_as(const char *fn)
{
    if (atomic_load_explicit(&fld__callout_threads, memory_order_relaxed)) {
        int rc = fld__callout_refuse(fn);
        if (rc)
            return rc;
    }
    if (atomic_load_explicit(&state, memory_order_acquire) == STATE_READY)
        return FLD_OK;
    if (changing)
        return nested_change(fn);
    /* Refused without the lock: threads that call in a loop while a shutdown
     * waits would otherwise queue on it, and one left waiting behind the
     * others still counts as inside a call. */
    if (atomic_load_explicit(&state, memory_order_acquire) == STATE_CLOSING)
        return shutting_down(fn);
    fld__lock();
    int rc = FLD_OK;
    switch (atomic_load(&state)) {
    case STATE_READY:
        break;
    case STATE_FAILED:
        rc = fld__fail(init_status, "%s", init_message);
        break;
    case STATE_CLOSING:
        rc = shutting_down(fn);
        break;
    default:
        changing = "fld_init";
        rc = initialise_locked();
        changing = NULL;
    }
    fld__unlock();
    return rc;
}

int fld__init_from(const char *fn)
{
    return init_as(fn);
}

int fld_init(void)
{
    return init_as("fld_init");
}

static int reload_locked(void);

int fld_reload(void)
{
    int rc = fld__callout_refuse("fld_reload");
    if (rc)
        return rc;
    if (changing)
        return nested_change("fld_reload");
    fld__lock();
    changing = "fld_reload";
    rc = reload_locked();
    changing = NULL;
    fld__unlock();
    return rc;
}

/* fld_reload() with the host lock held; returns with it held. */
static int reload_locked(void)
{
    int rc;
    if (atomic_load(&state) == STATE_CLOSING)
        return shutting_down("fld_reload");
    if (atomic_load(&state) != STATE_READY) {
        set_state(STATE_UNINIT);
        rc = initialise_locked();
        if (rc == FLD_OK)
            fld__log_reset_override();
        return rc;
    }
    /* Everything is read and checked before anything changes. */
    struct fld_log_env log_env;
    struct fld_stats_env stats_env = {0};
    struct fld_platform plat;
    struct fld_policy *policy = NULL;
    rc = fld__log_read_env(&log_env);
    if (!rc)
        rc = fld__stats_read_env(&stats_env);
    if (!rc)
        rc = build_configuration(&plat, &policy, false);
    if (rc) {
        fld__stats_env_free(&stats_env);
        fld__error_prefix("fld_reload: configuration kept as it was");
        return rc;
    }
    /* New plugin files only (loaded ones stay), before the manifest check so
     * that a manifest may pin an impl of a plugin added since the last load. */
    fld__discover_plugins();
    rc = check_names(policy);
    if (rc == FLD_OK && policy->manifest)
        rc = fld__manifest_check(policy->manifest, policy->strict);
    if (rc) {
        fld__policy_free(policy);
        fld__stats_env_free(&stats_env);
        fld__error_prefix("fld_reload: policy kept as it was (plugins found by the rescan stay "
                          "loaded)");
        return rc;
    }
    fld__log_reset_override();
    fld__log_commit_env(&log_env);
    fld__stats_commit_env(&stats_env, true);
    fld__platform_set_current(&plat);
    fld__policy_publish(policy);
    fld__bump_generation();
    return FLD_OK;
}

/* VLLM_FL_SHUTDOWN_TIMEOUT: seconds fld_shutdown() waits for calls in flight. */
static int shutdown_timeout(double *out)
{
    *out = FLD_SHUTDOWN_DEFAULT_TIMEOUT;
    const char *v = getenv("VLLM_FL_SHUTDOWN_TIMEOUT");
    if (!v || !v[strspn(v, " \t")])
        return FLD_OK; /* set but blank counts as unset */
    double t;
    if (!fld__parse_seconds(v, &t) || !(t >= 0 && t <= FLD_SHUTDOWN_MAX_TIMEOUT))
        return fld__fail(
            FLD_ECONFIG,
            "fld_shutdown: VLLM_FL_SHUTDOWN_TIMEOUT: invalid value '%s' (seconds, from "
            "0 to %g); nothing was released",
            v, FLD_SHUTDOWN_MAX_TIMEOUT);
    *out = t;
    return FLD_OK;
}

static int shut_down(double timeout);

int fld_shutdown(void)
{
    int rc = fld__callout_refuse("fld_shutdown");
    if (rc)
        return rc;
    /* It would wait for itself: a kernel, a supports() predicate, a callback
     * of fld_foreach_* or a log callback is calling. */
    if (fld__inflight_mine())
        return fld__fail(FLD_ESTATE, "fld_shutdown: called from inside a library call on this "
                                     "thread (a kernel or a callback); nothing was released");
    if (changing)
        return nested_change("fld_shutdown");
    double timeout;
    if ((rc = shutdown_timeout(&timeout)) != FLD_OK)
        return rc;
    changing = "fld_shutdown";
    rc = shut_down(timeout);
    changing = NULL;
    return rc;
}

/* fld_shutdown() once its checks passed. */
static int shut_down(double timeout)
{
    fld__lock();
    int from = atomic_load(&state);
    if (from == STATE_UNINIT) {
        fld__unlock();
        return FLD_OK;
    }
    if (from == STATE_CLOSING) {
        fld__unlock();
        return fld__fail(FLD_ESTATE, "fld_shutdown: another thread is shutting the library down");
    }
    /* Close the gates every call passes (inflight.h), then wait without the
     * lock: a call in flight may need it to finish. */
    closing_from = from;
    set_state(STATE_CLOSING);
    fld__ops_close();
    atomic_store(&fld__generation, 0);
    fld__unlock();
    int barrier_err = 0;
    unsigned busy = fld__inflight_wait(timeout, &barrier_err);
    static _Atomic bool barrier_said;
    if (barrier_err && !atomic_exchange(&barrier_said, true))
        fld__log(FLD_LOG_DEBUG,
                 "fld_shutdown: membarrier(2) is not available (%s); pausing "
                 "20 ms instead",
                 strerror(barrier_err));
    fld__lock();
    if (busy) {
        reopen_after_closing();
        fld__unlock();
        fld__log(FLD_LOG_WARNING,
                 "fld_shutdown: %u thread(s) still inside library calls after %g s; nothing "
                 "was released",
                 busy, timeout);
        return fld__fail(FLD_ESTATE,
                         "fld_shutdown: %u thread(s) still inside library calls after %g s "
                         "(VLLM_FL_SHUTDOWN_TIMEOUT); nothing was released and the library stays "
                         "initialised",
                         busy, timeout);
    }
    fld__bump_generation(); /* no chain is valid any more */
    atomic_store(&fld__generation, 0);
    fld__dispatch_shutdown();
    fld__registry_shutdown();
    fld__ops_shutdown();
    fld__discovery_shutdown();
    fld__policy_unpublish();
    fld__platform_shutdown();
    fld__reclaim_all();
    fld__log_reset_override();
    fld__log_shutdown();
    set_state(STATE_UNINIT);
    fld__unlock();
    return FLD_OK;
}
