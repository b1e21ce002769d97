/*
 * The selection policy's record: built-in defaults, clone and free, setting
 * a field by key (the environment, the files, fld_policy_set()), the
 * cross-field checks, the filters selection asks, the fingerprint behind
 * fld_policy_describe(), and the global policy's publication.
 *
 * Published policies are immutable (see policy.h): every change here builds
 * a clone, edits it, and hands it to fld__policy_publish().
 *
 * What left this file, so that the record includes nothing above it: the
 * custom_ops grammar (custom_ops.c, on the value grammars' floor), the
 * thread-local override stack and the entry points that read the calling
 * thread's policy (policy_override.c, above this file), and the manifest's
 * loading and checking (the record holds a manifest through
 * manifest_record.h only: its references and its path).
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "custom_ops.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "manifest_record.h"
#include "parse.h"
#include "policy.h"
#include "reclaim.h"

#define SOURCE_DEFAULT "default"
#define SOURCE_SET     "fld_policy_set"

static const char *const field_keys[FLD_PF_COUNT] = {
    [FLD_PF_PREFER] = "prefer",
    [FLD_PF_STRICT] = "strict",
    [FLD_PF_ENABLED] = "enabled",
    [FLD_PF_USE_FLAGGEMS] = "use_flaggems",
    [FLD_PF_ALLOW_VENDORS] = "allow_vendors",
    [FLD_PF_DENY_VENDORS] = "deny_vendors",
    [FLD_PF_PER_OP] = "per_op",
    [FLD_PF_FLAGOS_WHITELIST] = "flagos_whitelist",
    [FLD_PF_FLAGOS_BLACKLIST] = "flagos_blacklist",
    [FLD_PF_OOT_ENABLED] = "oot_enabled",
    [FLD_PF_OOT_WHITELIST] = "oot_whitelist",
    [FLD_PF_OOT_BLACKLIST] = "oot_blacklist",
    [FLD_PF_EXTERNAL_ENABLED] = "external_enabled",
    [FLD_PF_EXTERNAL_WHITELIST] = "external_whitelist",
    [FLD_PF_EXTERNAL_BLACKLIST] = "external_blacklist",
    [FLD_PF_CUSTOM_OPS] = "custom_ops",
};

static const char *const field_envs[FLD_PF_COUNT] = {
    [FLD_PF_PREFER] = "VLLM_FL_PREFER",
    [FLD_PF_STRICT] = "VLLM_FL_STRICT",
    [FLD_PF_ENABLED] = "VLLM_FL_PREFER_ENABLED",
    [FLD_PF_USE_FLAGGEMS] = "USE_FLAGGEMS",
    [FLD_PF_ALLOW_VENDORS] = "VLLM_FL_ALLOW_VENDORS",
    [FLD_PF_DENY_VENDORS] = "VLLM_FL_DENY_VENDORS",
    [FLD_PF_PER_OP] = "VLLM_FL_PER_OP",
    [FLD_PF_FLAGOS_WHITELIST] = "VLLM_FL_FLAGOS_WHITELIST",
    [FLD_PF_FLAGOS_BLACKLIST] = "VLLM_FL_FLAGOS_BLACKLIST",
    [FLD_PF_OOT_ENABLED] = "VLLM_FL_OOT_ENABLED",
    [FLD_PF_OOT_WHITELIST] = "VLLM_FL_OOT_WHITELIST",
    [FLD_PF_OOT_BLACKLIST] = "VLLM_FL_OOT_BLACKLIST",
    [FLD_PF_EXTERNAL_ENABLED] = "VLLM_FL_EXTERNAL_ENABLED",
    [FLD_PF_EXTERNAL_WHITELIST] = "VLLM_FL_EXTERNAL_WHITELIST",
    [FLD_PF_EXTERNAL_BLACKLIST] = "VLLM_FL_EXTERNAL_BLACKLIST",
    [FLD_PF_CUSTOM_OPS] = "VLLM_FL_CUSTOM_OPS",
};

#define VALID_KEYS                                                                                 \
    "prefer, strict, enabled, use_flaggems, allow_vendors, deny_vendors, per_op, "                 \
    "flagos_whitelist, flagos_blacklist, oot_enabled, oot_whitelist, oot_blacklist, "              \
    "external_enabled, external_whitelist, external_blacklist, custom_ops, or their environment "  \
    "variable names"

static const char *const prefer_names[] = {"flagos", "vendor", "reference"};

/* The default orders by prefer; selection reads them without copying. */
static struct fld_token tokens_flagos_first[] = {
    {FLD_TOKEN_FLAGOS, NULL}, {FLD_TOKEN_VENDOR, NULL}, {FLD_TOKEN_REFERENCE, NULL}};
static struct fld_token tokens_vendor_first[] = {
    {FLD_TOKEN_VENDOR, NULL}, {FLD_TOKEN_FLAGOS, NULL}, {FLD_TOKEN_REFERENCE, NULL}};
static struct fld_token tokens_reference_first[] = {
    {FLD_TOKEN_REFERENCE, NULL}, {FLD_TOKEN_FLAGOS, NULL}, {FLD_TOKEN_VENDOR, NULL}};
static const struct fld_order default_orders[] = {
    [FLD_PREFER_FLAGOS] = {.n = 3, .tokens = tokens_flagos_first},
    [FLD_PREFER_VENDOR] = {.n = 3, .tokens = tokens_vendor_first},
    [FLD_PREFER_REFERENCE] = {.n = 3, .tokens = tokens_reference_first},
};

/* Starts at 1 so that 0 can mean "no policy" in caches keyed by serial. */
static _Atomic uint64_t last_serial;

/* ---- the global policy ----------------------------------------------------- */

static _Atomic(struct fld_policy *) global_policy;

const struct fld_policy *fld__policy_global(void)
{
    return atomic_load_explicit(&global_policy, memory_order_acquire);
}

static void policy_free_cb(void *p)
{
    fld__policy_free(p);
}

void fld__policy_publish(struct fld_policy *p)
{
    fld__lock();
    struct fld_policy *old = atomic_exchange(&global_policy, p);
    if (old)
        fld__retire(old, policy_free_cb);
    /* Changes are rare: free now what no reader holds (the policy and chains
     * replaced by earlier changes) instead of waiting for the retire list to
     * reach its scan threshold. */
    fld__reclaim();
    if (atomic_load(&fld__ready))
        fld__bump_generation();
    fld__unlock();
}

void fld__policy_unpublish(void)
{
    struct fld_policy *p = atomic_exchange(&global_policy, NULL);
    if (p)
        fld__policy_free(p);
}

static uint64_t next_serial(void)
{
    return atomic_fetch_add(&last_serial, 1) + 1;
}

const char *fld__policy_field_key(enum fld_policy_field f)
{
    return (unsigned)f < FLD_PF_COUNT ? field_keys[f] : NULL;
}

const char *fld__policy_field_env(enum fld_policy_field f)
{
    return (unsigned)f < FLD_PF_COUNT ? field_envs[f] : NULL;
}

void fld__policy_set_source(struct fld_policy *p, enum fld_policy_field f, const char *source)
{
    snprintf(p->source[f], sizeof p->source[f], "%s", source);
}

void fld__policy_set_orders_source(struct fld_orders *orders, const char *source)
{
    for (size_t i = 0; i < orders->n; i++)
        snprintf(orders->items[i].source, sizeof orders->items[i].source, "%s", source);
}

static bool field_by_name(const char *name, enum fld_policy_field *out)
{
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        if (strcmp(name, field_keys[f]) == 0 || strcmp(name, field_envs[f]) == 0) {
            *out = (enum fld_policy_field)f;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Life cycle                                                               */
/* ------------------------------------------------------------------------ */

struct fld_policy *fld__policy_new_default(void)
{
    struct fld_policy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->prefer = FLD_PREFER_FLAGOS;
    p->strict = false;
    p->enabled = true;
    p->use_flaggems = true;
    p->oot_enabled = true;
    p->external_enabled = true;
    p->custom_ops.base_enabled = true;
    for (int f = 0; f < FLD_PF_COUNT; f++)
        fld__policy_set_source(p, (enum fld_policy_field)f, SOURCE_DEFAULT);
    p->serial = next_serial();
    return p;
}

void fld__policy_free(struct fld_policy *p)
{
    if (!p)
        return;
    fld__strlist_free(&p->allow_vendors);
    fld__strlist_free(&p->deny_vendors);
    fld__strlist_free(&p->flagos_whitelist);
    fld__strlist_free(&p->flagos_blacklist);
    fld__strlist_free(&p->oot_whitelist);
    fld__strlist_free(&p->oot_blacklist);
    fld__strlist_free(&p->external_whitelist);
    fld__strlist_free(&p->external_blacklist);
    fld__orders_free(&p->per_op);
    fld__custom_ops_free(&p->custom_ops);
    fld__manifest_unref(p->manifest);
    free(p);
}

struct fld_policy *fld__policy_clone(const struct fld_policy *src)
{
    struct fld_policy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->prefer = src->prefer;
    p->strict = src->strict;
    p->enabled = src->enabled;
    p->use_flaggems = src->use_flaggems;
    p->oot_enabled = src->oot_enabled;
    p->external_enabled = src->external_enabled;
    memcpy(p->source, src->source, sizeof p->source);
    if (fld__strlist_copy(&p->allow_vendors, &src->allow_vendors) != FLD_OK ||
        fld__strlist_copy(&p->deny_vendors, &src->deny_vendors) != FLD_OK ||
        fld__strlist_copy(&p->flagos_whitelist, &src->flagos_whitelist) != FLD_OK ||
        fld__strlist_copy(&p->flagos_blacklist, &src->flagos_blacklist) != FLD_OK ||
        fld__strlist_copy(&p->oot_whitelist, &src->oot_whitelist) != FLD_OK ||
        fld__strlist_copy(&p->oot_blacklist, &src->oot_blacklist) != FLD_OK ||
        fld__strlist_copy(&p->external_whitelist, &src->external_whitelist) != FLD_OK ||
        fld__strlist_copy(&p->external_blacklist, &src->external_blacklist) != FLD_OK ||
        fld__orders_copy(&p->per_op, &src->per_op) != FLD_OK ||
        fld__custom_ops_copy(&p->custom_ops, &src->custom_ops) != FLD_OK)
        goto fail;
    /* Shared and immutable: the clone holds a reference, not a copy. */
    if (src->manifest)
        p->manifest = fld__manifest_ref(src->manifest);
    p->serial = next_serial();
    return p;
fail:
    fld__policy_free(p);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Setting fields                                                           */
/* ------------------------------------------------------------------------ */

struct fld_strlist *fld__policy_list_field(struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
    case FLD_PF_ALLOW_VENDORS:
        return &p->allow_vendors;
    case FLD_PF_DENY_VENDORS:
        return &p->deny_vendors;
    case FLD_PF_FLAGOS_WHITELIST:
        return &p->flagos_whitelist;
    case FLD_PF_FLAGOS_BLACKLIST:
        return &p->flagos_blacklist;
    case FLD_PF_OOT_WHITELIST:
        return &p->oot_whitelist;
    case FLD_PF_OOT_BLACKLIST:
        return &p->oot_blacklist;
    case FLD_PF_EXTERNAL_WHITELIST:
        return &p->external_whitelist;
    case FLD_PF_EXTERNAL_BLACKLIST:
        return &p->external_blacklist;
    default:
        return NULL;
    }
}

bool *fld__policy_bool_field(struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
    case FLD_PF_STRICT:
        return &p->strict;
    case FLD_PF_ENABLED:
        return &p->enabled;
    case FLD_PF_USE_FLAGGEMS:
        return &p->use_flaggems;
    case FLD_PF_OOT_ENABLED:
        return &p->oot_enabled;
    case FLD_PF_EXTERNAL_ENABLED:
        return &p->external_enabled;
    default:
        return NULL;
    }
}

int fld__policy_set_field(struct fld_policy *p, const char *key, const char *value,
                          const char *source)
{
    enum fld_policy_field f;
    int rc;

    if (!key || !field_by_name(key, &f))
        return fld__fail(FLD_ECONFIG, "unknown policy key '%s' (valid: " VALID_KEYS ")",
                         key ? key : "(null)");
    /* Parse into temporaries first: on error p must stay as it was. */
    if (f == FLD_PF_PREFER) {
        int prefer;
        if ((rc = fld__parse_prefer(key, value, &prefer)) != FLD_OK)
            return rc;
        p->prefer = (enum fld_prefer)prefer;
    } else if (f == FLD_PF_PER_OP) {
        struct fld_orders orders;
        if ((rc = fld__parse_per_op(key, value, &orders)) != FLD_OK)
            return rc;
        fld__policy_set_orders_source(&orders, source);
        fld__orders_free(&p->per_op);
        p->per_op = orders;
    } else if (f == FLD_PF_CUSTOM_OPS) {
        struct fld_custom_ops ops;
        if ((rc = fld__custom_ops_parse(key, value, &ops)) != FLD_OK)
            return rc;
        fld__custom_ops_free(&p->custom_ops);
        p->custom_ops = ops;
    } else if (fld__policy_bool_field(p, f)) {
        bool b;
        rc = f == FLD_PF_STRICT ? fld__parse_flag(key, value, &b)
                                : fld__parse_switch(key, value, &b);
        if (rc != FLD_OK)
            return rc;
        *fld__policy_bool_field(p, f) = b;
    } else {
        struct fld_strlist list;
        if ((rc = fld__parse_name_list(key, value, &list)) != FLD_OK)
            return rc;
        if (f == FLD_PF_ALLOW_VENDORS || f == FLD_PF_DENY_VENDORS)
            fld__strlist_lower(&list);
        struct fld_strlist *dst = fld__policy_list_field(p, f);
        fld__strlist_free(dst);
        *dst = list;
    }
    fld__policy_set_source(p, f, source);
    return FLD_OK;
}

/* "VLLM_FL_FLAGOS_WHITELIST", or "VLLM_FL_FLAGOS_WHITELIST (set by X)" when
 * a source other than the variable set it. */
static const char *field_label(const struct fld_policy *p, enum fld_policy_field f, char *buf,
                               size_t size)
{
    if (strcmp(p->source[f], field_envs[f]) == 0)
        snprintf(buf, size, "%s", field_envs[f]);
    else
        snprintf(buf, size, "%s (set by %s)", field_envs[f], p->source[f]);
    return buf;
}

static int check_exclusive(const struct fld_policy *p, enum fld_policy_field white,
                           enum fld_policy_field black)
{
    const struct fld_strlist *w = fld__policy_list_field((struct fld_policy *)p, white);
    const struct fld_strlist *b = fld__policy_list_field((struct fld_policy *)p, black);
    if (!w->set || !b->set)
        return FLD_OK;
    char wl[256], bl[256];
    return fld__fail(FLD_ECONFIG, "%s and %s are both set; set only one of them",
                     field_label(p, white, wl, sizeof wl), field_label(p, black, bl, sizeof bl));
}

int fld__policy_check(const struct fld_policy *p)
{
    int rc = check_exclusive(p, FLD_PF_FLAGOS_WHITELIST, FLD_PF_FLAGOS_BLACKLIST);
    if (rc == FLD_OK)
        rc = check_exclusive(p, FLD_PF_OOT_WHITELIST, FLD_PF_OOT_BLACKLIST);
    if (rc == FLD_OK)
        rc = check_exclusive(p, FLD_PF_EXTERNAL_WHITELIST, FLD_PF_EXTERNAL_BLACKLIST);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* What selection asks                                                      */
/* ------------------------------------------------------------------------ */

const struct fld_order *fld__policy_order_for(const struct fld_policy *p, const char *op,
                                              const char **source)
{
    /* Only the op's own order: as in vllm-plugin-FL, no op inherits another's
     * (rms_norm_native does not follow rms_norm's). */
    const struct fld_order *o = fld__orders_find(&p->per_op, op);
    if (o) {
        if (source)
            *source = o->source[0] ? o->source : p->source[FLD_PF_PER_OP];
        return o;
    }
    /* The default order follows prefer, so prefer's source explains it. */
    if (source)
        *source = p->source[FLD_PF_PREFER];
    unsigned idx = (unsigned)p->prefer < 3 ? (unsigned)p->prefer : FLD_PREFER_FLAGOS;
    return &default_orders[idx];
}

static void set_why(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_why(char *why, size_t why_size, const char *fmt, ...)
{
    if (!why || !why_size)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_size, fmt, ap);
    va_end(ap);
}

bool fld__policy_vendor_allowed(const struct fld_policy *p, const char *vendor, char *why,
                                size_t why_size)
{
    if (!vendor) {
        set_why(why, why_size, "vendor implementation without a vendor name");
        return false;
    }
    /* The lists hold lowercase names: compare the vendor's lowercase form. */
    char lower[128];
    snprintf(lower, sizeof lower, "%s", vendor);
    fld__ascii_lower(lower);
    /* Deny is checked first so that a vendor in both lists reads as denied. */
    if (fld__strlist_has(&p->deny_vendors, lower)) {
        set_why(why, why_size, "vendor '%s' denied by %s", vendor, p->source[FLD_PF_DENY_VENDORS]);
        return false;
    }
    if (p->allow_vendors.set && !fld__strlist_has(&p->allow_vendors, lower)) {
        set_why(why, why_size, "vendor '%s' not in allow list (%s)", vendor,
                p->source[FLD_PF_ALLOW_VENDORS]);
        return false;
    }
    return true;
}

static bool list_allows_op(const struct fld_policy *p, const char *what,
                           enum fld_policy_field white, enum fld_policy_field black, const char *op,
                           char *why, size_t why_size)
{
    const struct fld_strlist *w = fld__policy_list_field((struct fld_policy *)p, white);
    const struct fld_strlist *b = fld__policy_list_field((struct fld_policy *)p, black);
    if (w->set) {
        if (fld__strlist_has(w, op))
            return true;
        set_why(why, why_size, "op '%s' not in %s whitelist (%s)", op, what, p->source[white]);
        return false;
    }
    if (b->set && fld__strlist_has(b, op)) {
        set_why(why, why_size, "op '%s' in %s blacklist (%s)", op, what, p->source[black]);
        return false;
    }
    return true;
}

bool fld__policy_op_enabled(const struct fld_policy *p, const char *op, char *why, size_t why_size)
{
    const struct fld_custom_ops *c = &p->custom_ops;
    if (fld__strlist_has(&c->disabled, op) ||
        (!c->base_enabled && !fld__strlist_has(&c->enabled, op))) {
        set_why(why, why_size, "op '%s' disabled by custom_ops (%s)", op,
                p->source[FLD_PF_CUSTOM_OPS]);
        return false;
    }
    return true;
}

bool fld__policy_flagos_allows_op(const struct fld_policy *p, const char *op, char *why,
                                  size_t why_size)
{
    return list_allows_op(p, "flagos", FLD_PF_FLAGOS_WHITELIST, FLD_PF_FLAGOS_BLACKLIST, op, why,
                          why_size);
}

bool fld__policy_oot_allows_op(const struct fld_policy *p, const char *op, char *why,
                               size_t why_size)
{
    return list_allows_op(p, "oot", FLD_PF_OOT_WHITELIST, FLD_PF_OOT_BLACKLIST, op, why, why_size);
}

bool fld__policy_external_allows_op(const struct fld_policy *p, const char *op, char *why,
                                    size_t why_size)
{
    return list_allows_op(p, "external-plugin", FLD_PF_EXTERNAL_WHITELIST,
                          FLD_PF_EXTERNAL_BLACKLIST, op, why, why_size);
}

/* ------------------------------------------------------------------------ */
/* Fingerprint                                                              */
/* ------------------------------------------------------------------------ */

/* Appends into a fixed buffer, counting what would not fit. */
struct writer {
    char *buf;
    size_t size, len;
};

static void put(struct writer *w, const char *s)
{
    size_t n = strlen(s);
    if (w->buf && w->len + 1 < w->size) {
        size_t room = w->size - 1 - w->len;
        memcpy(w->buf + w->len, s, n < room ? n : room);
    }
    w->len += n;
}

static void put_list(struct writer *w, const char *name, const struct fld_strlist *l)
{
    if (!l->set)
        return;
    put(w, ";");
    put(w, name);
    put(w, "=");
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            put(w, ",");
        put(w, l->items[i]);
    }
}

size_t fld__policy_fingerprint(const struct fld_policy *p, char *buf, size_t size)
{
    struct writer w = {buf, size, 0};
    unsigned prefer = (unsigned)p->prefer < 3 ? (unsigned)p->prefer : 0;

    put(&w, "prefer=");
    put(&w, prefer_names[prefer]);
    put(&w, p->strict ? ";strict=1" : ";strict=0");
    if (!p->enabled)
        put(&w, ";enabled=0");
    if (!p->use_flaggems)
        put(&w, ";flaggems=0");
    if (!p->oot_enabled)
        put(&w, ";oot=0");
    if (!p->external_enabled)
        put(&w, ";external=0");
    /* Lists are kept sorted and unique by the parsers, so equal policies
     * print equal strings. */
    put_list(&w, "allow", &p->allow_vendors);
    put_list(&w, "deny", &p->deny_vendors);
    put_list(&w, "flagos_white", &p->flagos_whitelist);
    put_list(&w, "flagos_black", &p->flagos_blacklist);
    put_list(&w, "oot_white", &p->oot_whitelist);
    put_list(&w, "oot_black", &p->oot_blacklist);
    put_list(&w, "external_white", &p->external_whitelist);
    put_list(&w, "external_black", &p->external_blacklist);
    if (!fld__custom_ops_is_default(&p->custom_ops)) {
        char custom[1024];
        size_t n = fld__custom_ops_format(&p->custom_ops, custom, sizeof custom);
        put(&w, ";custom=");
        if (n < sizeof custom) {
            put(&w, custom);
        } else {
            char *big = malloc(n + 1);
            if (big) {
                fld__custom_ops_format(&p->custom_ops, big, n + 1);
                put(&w, big);
                free(big);
            }
        }
    }
    if (p->manifest) {
        put(&w, ";manifest=");
        put(&w, p->manifest->path ? p->manifest->path : "");
    }
    if (p->per_op.n) {
        put(&w, ";per=");
        for (size_t i = 0; i < p->per_op.n; i++) {
            const struct fld_order *o = &p->per_op.items[i];
            if (i)
                put(&w, ";");
            put(&w, o->op);
            put(&w, "=");
            for (size_t t = 0; t < o->n; t++) {
                if (t)
                    put(&w, "|");
                put(&w, fld__token_kind_name(o->tokens[t].kind));
                if (o->tokens[t].arg) {
                    put(&w, ":");
                    put(&w, o->tokens[t].arg);
                }
            }
        }
    }
    if (buf && size)
        buf[w.len < size ? w.len : size - 1] = '\0';
    return w.len;
}

/* ------------------------------------------------------------------------ */
/* The global policy                                                        */
/* ------------------------------------------------------------------------ */

/*
 * Frozen dispatch (VLLM_FL_MANIFEST) fixes the implementations of a
 * deployment, and the global policy with them, as vllm-plugin-FL's frozen
 * dispatch does: a change would move the filters the pins pass through.
 * fld_reload() and fld_policy_reset() re-read the deployment's own
 * configuration (the manifest included) and stay allowed. Host lock held.
 */
int fld__policy_refuse_if_frozen(const char *what)
{
    const struct fld_policy *global = fld__policy_global();
    if (!global || !global->manifest)
        return FLD_OK;
    return fld__fail(FLD_ESTATE,
                     "%s: dispatch is frozen by VLLM_FL_MANIFEST=%s: the global policy cannot "
                     "change (fld_reload() or fld_policy_reset() re-read the configuration; "
                     "scoped overrides still apply to their thread)",
                     what, global->manifest->path ? global->manifest->path : "");
}

int fld_policy_set(const char *key, const char *value)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if (!key)
        return fld__fail(FLD_EINVAL, "fld_policy_set: argument 'key' is NULL");
    fld__lock();
    if ((rc = fld__policy_refuse_if_frozen("fld_policy_set")) != FLD_OK)
        goto out;
    struct fld_policy *p = fld__policy_clone(fld__policy_global());
    if (!p) {
        rc = fld__fail(FLD_ENOMEM, "fld_policy_set: out of memory");
        goto out;
    }
    rc = fld__policy_set_field(p, key, value, SOURCE_SET);
    if (rc == FLD_OK)
        rc = fld__policy_check(p);
    if (rc == FLD_OK)
        fld__policy_publish(p);
    else
        fld__policy_free(p);
out:
    fld__unlock();
    return rc;
}

/* fld_policy_reset() is lifecycle.c's: it detects the platform and checks the
 * manifest as init does. */
