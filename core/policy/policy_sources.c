/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy of the process, assembled from its sources in one place (the
 * precedence is config.h's): built-in defaults (policy.c), the platform file
 * (config.c reads it), the environment (every policy variable and
 * VLLM_FL_OP_CONFIG are read here), or VLLM_FL_CONFIG's file instead of both;
 * then VLLM_FL_MANIFEST. "Where is VLLM_FL_X read" for the policy's
 * variables has its answer in this file; the names of the fields' variables
 * are the policy-field table's (policy_table.h).
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <fldispatch/fldispatch.h>

#include "config.h"
#include "policy_sources.h"
#include "error.h"
#include "log.h"
#include "manifest.h"
#include "parse.h"
#include "pathvar.h"
#include "plugin_file.h"
#include "policy.h"

#define OP_CONFIG "VLLM_FL_OP_CONFIG"

/* A white- or blacklist set by the environment replaces its pair from a
 * lower source (a platform file's flagos_blacklist must not turn
 * VLLM_FL_FLAGOS_WHITELIST into an error); both set here stays an error. */
static void drop_replaced_pair(struct fld_policy *p, const bool *from_env,
                               enum fld_policy_field white, enum fld_policy_field black)
{
    for (int side = 0; side < 2; side++) {
        enum fld_policy_field set = side ? black : white, other = side ? white : black;
        struct fld_strlist *l = fld__policy_list_mut(p, other);
        if (from_env[set] && !from_env[other] && l->set) {
            fld__strlist_free(l);
            snprintf(p->source[other], sizeof p->source[other], "cleared by %s",
                     fld__policy_field_env(set));
        }
    }
}

/* The environment source (config.h). */
int fld__policy_apply_env(struct fld_policy *p)
{
    bool from_env[FLD_PF_COUNT] = {false};
    int rc;
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        /* Not path variables, so plain getenv (secure_getenv is for those). A
         * blank value reads as unset: `VAR= cmd` is how shells clear one. */
        const char *value = getenv(fld__policy_field_env(f));
        if (!value || fld__is_blank(value))
            continue;
        /* Each variable replaces its field, VLLM_FL_PER_OP included: it
         * replaces the platform file's op_backends as a whole, as in
         * vllm-plugin-FL. */
        rc = fld__policy_set_field(p, fld__policy_field_env(f), value, fld__policy_field_env(f));
        if (rc != FLD_OK)
            return rc;
        from_env[f] = true;
    }
    /* A path (pathvar.h); applied after VLLM_FL_PER_OP, which it beats. */
    const char *op_config = fld__path_variable("VLLM_FL_OP_CONFIG");
    if (op_config && (rc = fld__op_config_apply(p, op_config)) != FLD_OK)
        return rc;
    for (int f = 0; f < FLD_PF_COUNT; f++) /* each exclusive pair once */
        if (fld__policy_row(f)->partner > f)
            drop_replaced_pair(p, from_env, f, fld__policy_row(f)->partner);
    return fld__policy_check(p);
}

/* One WARNING naming every policy variable that VLLM_FL_CONFIG overrides. */
static void warn_ignored_env(const char *config)
{
    char names[1024];
    size_t len = 0;
    names[0] = '\0';
    for (int f = 0; f <= FLD_PF_COUNT; f++) {
        const char *name = f < FLD_PF_COUNT ? fld__policy_field_env(f) : OP_CONFIG;
        const char *v = f < FLD_PF_COUNT ? getenv(name) : secure_getenv(name);
        if (!v || fld__is_blank(v))
            continue;
        int n = snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", name);
        if (n > 0)
            len = len + (size_t)n < sizeof names ? len + (size_t)n : sizeof names - 1;
    }
    if (len)
        fld__log(FLD_LOG_WARNING,
                 "VLLM_FL_CONFIG=%s is a complete override of the policy: ignoring %s", config,
                 names);
}

/*
 * A platform file steers every process that finds it. One that others could
 * have changed (writable by others, owned by another user, in a directory
 * others may write) is skipped with a warning, by the rule a plugin file is
 * judged by (plugin_file.c); false then. A path that is not a regular file
 * is left to the reader, which refuses it by name.
 */
static bool platform_file_trusted(const struct fld_platform *plat)
{
    struct stat st;
    char why[PATH_MAX + 128];
    if (stat(plat->config_file, &st) != 0 || !S_ISREG(st.st_mode) ||
        fld__plugin_check_file(plat->config_file, &st, why, sizeof why))
        return true;
    fld__log(FLD_LOG_WARNING,
             "platform file %s of '%s' skipped: %s (its settings do not apply; make it writable "
             "by its owner only)",
             plat->config_file, plat->name, why);
    return false;
}

int fld__policy_build(struct fld_platform *plat, struct fld_policy **out)
{
    struct fld_policy *p;
    const char *config, *manifest;
    int rc;

    *out = NULL;
    if (!(p = fld__policy_new_default()))
        return fld__fail(FLD_ENOMEM, "out of memory building the policy");
    if ((config = fld__path_variable("VLLM_FL_CONFIG")) != NULL) {
        if ((rc = fld__config_apply_file(p, config, config)) != FLD_OK) {
            fld__error_prefix("VLLM_FL_CONFIG");
            goto fail;
        }
        warn_ignored_env(config);
        /* Not read, so not claimed: the platform file is not in use. */
        if (plat)
            plat->config_file[0] = '\0';
    } else {
        /* Not read, so not claimed either. */
        if (plat && plat->config_file[0] && !platform_file_trusted(plat))
            plat->config_file[0] = '\0';
        if (plat && plat->config_file[0]) {
            rc = fld__config_apply_file(p, plat->config_file, plat->config_file);
            if (rc) {
                fld__error_prefix("platform file of '%s'", plat->name);
                goto fail;
            }
        }
        if ((rc = fld__policy_apply_env(p)) != FLD_OK)
            goto fail;
    }
    if ((manifest = fld__path_variable("VLLM_FL_MANIFEST")) != NULL) {
        if ((rc = fld__manifest_load(manifest, &p->manifest)) != FLD_OK) {
            fld__error_prefix("VLLM_FL_MANIFEST");
            goto fail;
        }
    }
    if ((rc = fld__policy_check(p)) != FLD_OK)
        goto fail;
    *out = p;
    return FLD_OK;
fail:
    fld__policy_free(p);
    return rc;
}
