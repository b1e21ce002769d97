/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Binding implementations (include/fldispatch/binding.h): what a language
 * binding in the host process registers, a plugin record per binding
 * package, filled all-or-nothing through the same staging registry as a
 * plugin's register_builtins. The call side (fld_binding_call()) is in
 * binding_call.c, beside the files of dispatch.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/binding.h>

#include "error.h"
#include "host.h"
#include "inflight.h"
#include "policy.h"
#include "registry.h"

static _Atomic bool claims_modules;

void fld_binding_claim_module_names(void)
{
    atomic_store(&claims_modules, true);
}

bool fld__binding_claims_modules(void)
{
    return atomic_load(&claims_modules);
}

static bool valid_plugin_name(const char *s)
{
    if (!s || !*s || strlen(s) > 128)
        return false;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static struct fld_plugin_rec *plugin_named(const char *name)
{
    for (struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next)
        if (strcmp(p->name, name) == 0)
            return p;
    return NULL;
}

/*
 * The binding plugin record `name` of origin, created when missing (*created
 * then true); FLD_ESTATE when the name belongs to a plugin file or another
 * origin. Host lock held.
 */
static int binding_plugin(const char *name, const char *version, const char *origin,
                          struct fld_plugin_rec **out, bool *created)
{
    *created = false;
    struct fld_plugin_rec *p = plugin_named(name);
    if (p) {
        if (!p->binding || strcmp(p->path, origin) != 0)
            return fld__fail(
                FLD_ESTATE,
                "plugin name '%s' is taken by %s (%s): a binding plugin needs a name of "
                "its own",
                name, p->binding ? "another binding plugin" : "a plugin file", p->path);
        *out = p;
        return FLD_OK;
    }
    p = fld__plugin_new(name, origin);
    if (!p)
        return fld__fail(FLD_ENOMEM, "out of memory recording plugin '%s'", name);
    char *v = strdup(version ? version : "");
    if (!v)
        return fld__fail(FLD_ENOMEM, "out of memory recording plugin '%s'", name);
    free(p->version);
    p->version = v;
    p->binding = true;
    p->in_tree = false;
    p->abi_major = FLD_PLUGIN_ABI_MAJOR;
    p->abi_minor = FLD_PLUGIN_ABI_MINOR;
    p->status = FLD_PLUGIN_REJECTED; /* until something registers */
    *out = p;
    *created = true;
    return FLD_OK;
}

static int check_plugin_args(const char *fn, const char *plugin, const char *origin)
{
    if (!plugin || !origin)
        return fld__fail(FLD_EINVAL, "%s: argument '%s' is NULL", fn, plugin ? "origin" : "plugin");
    if (!valid_plugin_name(plugin))
        return fld__fail(FLD_EINVAL,
                         "%s: invalid plugin name '%s' (letters, digits, '_', '.' and '-', at "
                         "most 128)",
                         fn, plugin);
    return FLD_OK;
}

/*
 * Commits what reg staged when rc is FLD_OK; otherwise (or when the commit
 * fails) discards it, marks a plugin record created for this call rejected,
 * and returns the failure naming the plugin. Under the host lock.
 */
static int commit_or_reject(struct fld_registry *reg, int rc, struct fld_plugin_rec *p,
                            bool created, const char *plugin)
{
    if (rc == FLD_OK)
        rc = fld__registry_commit(reg);
    if (rc == FLD_OK)
        return FLD_OK;
    char why[1200];
    snprintf(why, sizeof why, "plugin '%s': %s", plugin,
             reg->first_error != FLD_OK ? reg->error : fld_last_error());
    fld__registry_discard(reg);
    if (created)
        fld__plugin_set_status(p, FLD_PLUGIN_REJECTED, "%s", why);
    return fld__fail(rc, "%s", why);
}

int fld_binding_register(const char *plugin, const char *version, const char *origin,
                         const fld_binding_impl *impls, size_t n)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if ((rc = check_plugin_args("fld_binding_register", plugin, origin)) != FLD_OK)
        return rc;
    if (n && !impls)
        return fld__fail(FLD_EINVAL, "fld_binding_register: argument 'impls' is NULL");
    fld__lock();
    if (n && fld__policy_global()->manifest) {
        char what[256];
        snprintf(what, sizeof what, "registering implementation '%s' of op '%s' (plugin '%s')",
                 impls[0].impl_id ? impls[0].impl_id : "", impls[0].op ? impls[0].op : "(null)",
                 plugin);
        rc = fld__policy_refuse_if_frozen(what);
        if (rc) {
            fld__unlock();
            return rc;
        }
    }
    struct fld_plugin_rec *p;
    bool created;
    if ((rc = binding_plugin(plugin, version, origin, &p, &created)) != FLD_OK) {
        fld__unlock();
        return rc;
    }
    struct fld_registry reg;
    fld__registry_begin(&reg, p);
    for (size_t i = 0; i < n && rc == FLD_OK; i++) {
        const fld_binding_impl *h = &impls[i];
        const fld_impl base = {
            .op = h->op,
            .impl_id = h->impl_id,
            .kind = h->kind,
            .vendor = h->vendor,
            .priority = h->priority,
            .devices = h->devices,
            .dtypes = h->dtypes,
        };
        rc = fld__registry_register_binding(&reg, &base, h->fn, h->ctx, h->unavailable_reason);
    }
    if ((rc = commit_or_reject(&reg, rc, p, created, plugin)) != FLD_OK) {
        fld__unlock();
        return rc;
    }
    fld__plugin_set_status(p, FLD_PLUGIN_LOADED, "%s", "");
    fld__unlock();
    return FLD_OK;
}

int fld_binding_declare(const char *plugin, const char *version, const char *origin, const char *op,
                        const char *schema)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if ((rc = check_plugin_args("fld_binding_declare", plugin, origin)) != FLD_OK)
        return rc;
    fld__lock();
    struct fld_plugin_rec *p;
    bool created;
    if ((rc = binding_plugin(plugin, version, origin, &p, &created)) != FLD_OK) {
        fld__unlock();
        return rc;
    }
    struct fld_registry reg;
    fld__registry_begin(&reg, p);
    rc = fld_registry_declare_op(&reg, op, schema);
    if ((rc = commit_or_reject(&reg, rc, p, created, plugin)) != FLD_OK) {
        fld__unlock();
        return rc;
    }
    if (created)
        fld__plugin_set_status(p, FLD_PLUGIN_LOADED, "%s", "");
    fld__unlock();
    return FLD_OK;
}

int fld_binding_reject(const char *plugin, const char *version, const char *origin,
                       const char *reason)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if ((rc = check_plugin_args("fld_binding_reject", plugin, origin)) != FLD_OK)
        return rc;
    fld__lock();
    struct fld_plugin_rec *p;
    bool created;
    rc = binding_plugin(plugin, version, origin, &p, &created);
    if (rc == FLD_OK && !created && p->status == FLD_PLUGIN_LOADED)
        rc = fld__fail(FLD_ESTATE,
                       "fld_binding_reject: plugin '%s' has registered implementations already; "
                       "they stay",
                       plugin);
    if (rc == FLD_OK)
        fld__plugin_set_status(p, FLD_PLUGIN_REJECTED, "%s",
                               reason && *reason ? reason : "rejected by its host");
    fld__unlock();
    return rc;
}
