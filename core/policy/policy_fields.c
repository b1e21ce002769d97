/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy fields changed as one: fld_policy_set_fields() for the global
 * policy; fld_policy_push_fields(), the one-field pushes
 * (fld_policy_push_preference() and its siblings, each one field through
 * the same path) and fld_policy_push_file() for a scoped override of the
 * calling thread. All or nothing, and the names they bring are checked
 * against the registry as the environment's are (a WARNING, or FLD_ECONFIG
 * when the resulting policy is strict).
 *
 * Each change is parsed into a "delta": a policy of built-in defaults whose
 * given fields carry the change's source. The delta validates every value
 * (fld__policy_set_field()) before anything is touched, is what the names
 * check looks at (only the names this change brings), and is then moved
 * field by field onto the base: the global policy, the thread's effective
 * policy, or built-in defaults for a whole policy.
 */
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "config.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "manifest.h"
#include "manifest_record.h"
#include "policy.h"
#include "policy_override.h"
#include "reclaim.h"

#define SOURCE_SET      "fld_policy_set_fields"
#define SOURCE_OVERRIDE "scoped override"

/* The delta of n (key, value) pairs; FLD_ECONFIG naming the key at fault. */
static int build_delta(const char *what, size_t n, const char *const keys[],
                       const char *const values[], const char *source, struct fld_policy **out)
{
    *out = NULL;
    if (n && (!keys || !values))
        return fld__fail(FLD_EINVAL, "%s: argument '%s' is NULL", what, keys ? "values" : "keys");
    struct fld_policy *delta = fld__policy_new_default();
    if (!delta)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    for (size_t i = 0; i < n; i++) {
        int rc = fld__policy_set_field(delta, keys[i], values[i], source);
        if (rc != FLD_OK) {
            fld__error_prefix("%s: field %zu", what, i);
            fld__policy_free(delta);
            return rc;
        }
    }
    *out = delta;
    return FLD_OK;
}

/*
 * Moves the fields delta's sources mark as `source` onto base. add: the
 * deny list grows and per-op orders replace only the ops they name (the
 * scoped push semantics), and a field such a merge leaves empty keeps its
 * source (nothing was set); otherwise every given field replaces its own.
 */
static int overlay(struct fld_policy *base, struct fld_policy *delta, const char *source, bool add)
{
    for (int i = 0; i < FLD_PF_COUNT; i++) {
        enum fld_policy_field f = (enum fld_policy_field)i;
        if (strcmp(delta->source[f], source) != 0)
            continue;
        const struct fld_policy_kind_ops *kind = fld__policy_kind(f);
        bool merge = add && (f == FLD_PF_DENY_VENDORS || fld__policy_row(f)->kind == FLD_PK_ORDERS);
        if (merge && fld__policy_merge_onto(delta, base, f) != FLD_OK)
            return FLD_ENOMEM;
        fld__policy_swap_value(base, delta, f);
        if (!merge || !kind->empty(fld__policy_value(base, f)))
            fld__policy_set_source(base, f, source);
    }
    return FLD_OK;
}

/* The names delta brings, under the strictness base will have once delta
 * is laid over it; before overlay(), which moves delta's values out. */
static int check_names(const char *what, const struct fld_policy *base, struct fld_policy *delta,
                       const char *source)
{
    bool names = false;
    for (int f = 0; f < FLD_PF_COUNT; f++)
        names |= fld__policy_kind(f)->names && strcmp(delta->source[f], source) == 0;
    if (!names) /* nothing to look up */
        return FLD_OK;
    bool strict = strcmp(delta->source[FLD_PF_STRICT], source) == 0 ? delta->strict : base->strict;
    return fld__policy_check_pushed_names(what, delta, strict);
}

/* The checks of a finished policy: cross-field rules, a strict policy's
 * manifest. */
static int check_result(const char *what, const struct fld_policy *p)
{
    int rc = fld__policy_check(p);
    if (rc == FLD_OK && p->strict && p->manifest) {
        fld__lock();
        rc = fld__manifest_check(p->manifest, true);
        fld__unlock();
    }
    if (rc != FLD_OK)
        fld__error_prefix("%s", what);
    return rc;
}

/* What both entry points do first: initialise, check the flags, read the fields. */
static int start_fields(const char *what, unsigned flags, size_t n, const char *const keys[],
                        const char *const values[], const char *source, struct fld_policy **delta)
{
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if (flags & ~FLD_POLICY_WHOLE)
        return fld__fail(FLD_EINVAL, "%s: unknown flags 0x%x", what, flags & ~FLD_POLICY_WHOLE);
    return build_delta(what, n, keys, values, source, delta);
}

int fld_policy_set_fields(unsigned flags, size_t n, const char *const keys[],
                          const char *const values[])
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_set_fields";
    struct fld_policy *delta = NULL, *p = NULL;
    int rc = start_fields(what, flags, n, keys, values, SOURCE_SET, &delta);
    if (rc != FLD_OK)
        return rc;
    fld__lock();
    if ((rc = fld__policy_refuse_if_frozen(what)) != FLD_OK)
        goto out;
    p = flags & FLD_POLICY_WHOLE ? fld__policy_new_default()
                                 : fld__policy_clone(fld__policy_global());
    if (!p) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    if ((rc = check_names(what, p, delta, SOURCE_SET)) != FLD_OK)
        goto out;
    if (overlay(p, delta, SOURCE_SET, false) != FLD_OK) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto out;
    }
    if ((rc = check_result(what, p)) != FLD_OK)
        goto out;
    fld__policy_publish(p);
    p = NULL;
out:
    fld__unlock();
    fld__policy_free(p);
    fld__policy_free(delta);
    return rc;
}

/* The base of a scoped push: a clone of the thread's effective policy, or
 * built-in defaults that keep its manifest (a whole policy does not lift
 * frozen dispatch). */
static struct fld_policy *push_base(bool whole)
{
    fld__read_begin(); /* the global policy may be replaced meanwhile */
    const struct fld_policy *effective = fld__policy_effective();
    struct fld_policy *p = whole ? fld__policy_new_default() : fld__policy_clone(effective);
    if (p && whole && effective->manifest)
        p->manifest = fld__manifest_ref(effective->manifest);
    fld__read_end();
    return p;
}

/* Pushes base (the thread's effective policy, or defaults when whole)
 * with delta laid over it; takes delta. */
static int push_delta(const char *what, bool whole, struct fld_policy *delta)
{
    int rc;
    struct fld_policy *p = push_base(whole);
    if (!p) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto fail;
    }
    if ((rc = check_names(what, p, delta, SOURCE_OVERRIDE)) != FLD_OK)
        goto fail;
    if (overlay(p, delta, SOURCE_OVERRIDE, !whole) != FLD_OK) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto fail;
    }
    if ((rc = check_result(what, p)) != FLD_OK)
        goto fail;
    fld__policy_free(delta);
    return fld__policy_push(what, p);
fail:
    fld__policy_free(p);
    fld__policy_free(delta);
    return rc;
}

int fld_policy_push_fields(unsigned flags, size_t n, const char *const keys[],
                           const char *const values[])
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_fields";
    struct fld_policy *delta = NULL;
    int rc = start_fields(what, flags, n, keys, values, SOURCE_OVERRIDE, &delta);
    if (rc != FLD_OK)
        return rc;
    return push_delta(what, flags & FLD_POLICY_WHOLE, delta);
}

/* The one-field pushes: field f from text in its grammar, what naming the
 * entry point in every message. */
static int push_field(const char *what, enum fld_policy_field f, const char *value)
{
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    struct fld_policy *delta = fld__policy_new_default();
    if (!delta)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    if ((rc = fld__policy_set_value(delta, f, what, value, SOURCE_OVERRIDE)) != FLD_OK) {
        fld__policy_free(delta);
        return rc;
    }
    return push_delta(what, false, delta);
}

int fld_policy_push_preference(const char *kind)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_preference";
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if (!kind)
        return fld__fail(FLD_EINVAL, "%s: argument 'kind' is NULL", what);
    return push_field(what, FLD_PF_PREFER, kind);
}

int fld_policy_push_strict(bool strict)
{
    FLD_CALL_SCOPE();
    /* A strict override needs a manifest that holds strictly, as
     * fld_policy_set()'s does: push_delta() checks the result. */
    return push_field("fld_policy_push_strict", FLD_PF_STRICT, strict ? "1" : "0");
}

int fld_policy_push_allowed_vendors(const char *csv)
{
    FLD_CALL_SCOPE();
    return push_field("fld_policy_push_allowed_vendors", FLD_PF_ALLOW_VENDORS, csv);
}

int fld_policy_push_denied_vendors(const char *csv)
{
    FLD_CALL_SCOPE();
    return push_field("fld_policy_push_denied_vendors", FLD_PF_DENY_VENDORS, csv);
}

int fld_policy_push_per_op(const char *spec)
{
    FLD_CALL_SCOPE();
    return push_field("fld_policy_push_per_op", FLD_PF_PER_OP, spec);
}

int fld_policy_push_file(const char *path)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_file";
    struct fld_policy *p = NULL;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if (!path || !*path)
        return fld__fail(FLD_EINVAL, "%s: argument 'path' is %s", what, path ? "empty" : "NULL");
    if (!(p = push_base(true)))
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    /* The file's own sources ("path:line") mark what it sets; the names
     * check looks at all of it, as fld_policy_load_file()'s does. */
    rc = fld__config_apply_file(p, path, path);
    if (rc != FLD_OK)
        fld__error_prefix("%s", what);
    else if ((rc = check_result(what, p)) == FLD_OK)
        rc = fld__policy_check_pushed_names(what, p, p->strict);
    if (rc != FLD_OK) {
        fld__policy_free(p);
        return rc;
    }
    return fld__policy_push(what, p);
}
