/*
 * The selection policy: built-in defaults, the environment, fld_policy_set(),
 * the filters selection asks, the fingerprint behind fld_policy_describe(),
 * and the thread-local stack of scoped overrides.
 *
 * Published policies are immutable (see policy.h): every change here builds
 * a clone, edits it, and hands it to fld__policy_publish(). Override
 * policies belong to the thread that pushed them and are freed on pop or
 * thread exit; only that thread ever reads them.
 *
 * Why one file of about 1,100 lines: the record's clone/edit/publish, the
 * filters and the fingerprint all depend on the record's private layout,
 * which is known here only. Two parts could leave without that: the
 * custom_ops grammar (a value grammar, for parse.c's floor) and the
 * override stack; both are listed as the next cuts in core/README.md.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>

#include "config_internal.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "manager.h"
#include "manifest.h"
#include "policy.h"
#include "reclaim.h"

#define SOURCE_DEFAULT  "default"
#define SOURCE_SET      "fld_policy_set"
#define SOURCE_OVERRIDE "scoped override"

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

_Atomic unsigned fld__override_threads;

/* ---- the global policy ----------------------------------------------------- */

static _Atomic(struct fld_policy *) global_policy;

const struct fld_policy *fld__policy_global(void)
{
    return atomic_load_explicit(&global_policy, memory_order_acquire);
}

const struct fld_policy *fld__policy_effective(void)
{
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed)) {
        const struct fld_policy *top = fld__policy_override_top();
        if (top)
            return top;
    }
    return fld__policy_global();
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

static void set_source(struct fld_policy *p, enum fld_policy_field f, const char *source)
{
    snprintf(p->source[f], sizeof p->source[f], "%s", source);
}

static void set_orders_source(struct fld_orders *orders, const char *source)
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

static bool is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r' && *s != '\f' && *s != '\v')
            return false;
    return true;
}

/* ------------------------------------------------------------------------ */
/* custom_ops: vLLM's enable/disable grammar                                */
/* ------------------------------------------------------------------------ */

#define CUSTOM_VALID "all, none, +OP, -OP with OP of [A-Za-z0-9_.-]"

static bool is_space_char(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_op_name(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

void fld__custom_ops_reader_init(struct fld_custom_ops_reader *r)
{
    memset(r, 0, sizeof *r);
    r->ops.base_enabled = true;
}

void fld__custom_ops_free(struct fld_custom_ops *c)
{
    if (!c)
        return;
    fld__strlist_free(&c->enabled);
    fld__strlist_free(&c->disabled);
    c->base_enabled = true;
}

int fld__custom_ops_copy(struct fld_custom_ops *dst, const struct fld_custom_ops *src)
{
    struct fld_custom_ops tmp = {src->base_enabled, {false, 0, NULL}, {false, 0, NULL}};
    if (fld__strlist_copy(&tmp.enabled, &src->enabled) != FLD_OK)
        return FLD_ENOMEM;
    if (fld__strlist_copy(&tmp.disabled, &src->disabled) != FLD_OK) {
        fld__strlist_free(&tmp.enabled);
        return FLD_ENOMEM;
    }
    *dst = tmp;
    return FLD_OK;
}

bool fld__custom_ops_is_default(const struct fld_custom_ops *c)
{
    return c->base_enabled && c->enabled.n == 0 && c->disabled.n == 0;
}

/* The reader's lists grow only here, from empty, so their room is implied: full at 0, 1, 2,
 * 4, 8, ... items. */
static int reader_push(struct fld_strlist *l, char *name)
{
    size_t n = l->n;
    if ((n & (n - 1)) == 0) {
        size_t cap = n ? 2 * n : 1;
        char **items = cap > n && cap <= (size_t)-1 / sizeof *items
                           ? realloc(l->items, cap * sizeof *items)
                           : NULL;
        if (!items)
            return FLD_ENOMEM;
        l->items = items;
    }
    l->items[l->n++] = name;
    l->set = true;
    return FLD_OK;
}

/*
 * Appends the item's op to its list unsorted, repeats included: keeping the
 * lists sorted and unique per item was O(n^2). The caller sorts them with
 * fld__strlist_sort_unique() and rules out an op both enabled and disabled
 * with fld__first_clash() (see custom_ops_parse() and config.c's
 * read_custom()).
 */
int fld__custom_ops_reader_add(struct fld_custom_ops_reader *r, const char *what, const char *item)
{
    const char *s = item ? item : "";
    size_t n = strlen(s);
    while (n && is_space_char(*s)) {
        s++;
        n--;
    }
    while (n && is_space_char(s[n - 1]))
        n--;
    if (n == 0)
        return fld__fail(FLD_ECONFIG, "%s: empty item (valid: " CUSTOM_VALID ")", what);
    if ((n == 3 && strncasecmp(s, "all", 3) == 0) || (n == 4 && strncasecmp(s, "none", 4) == 0)) {
        bool all = n == 3;
        /* vLLM refuses both too: which one was meant is anyone's guess. */
        if (all ? r->saw_none : r->saw_all)
            return fld__fail(
                FLD_ECONFIG,
                "%s: 'all' and 'none' together; give one of them (valid: " CUSTOM_VALID ")", what);
        r->saw_all |= all;
        r->saw_none |= !all;
        r->ops.base_enabled = all;
        return FLD_OK;
    }
    if ((s[0] != '+' && s[0] != '-') || !is_op_name(s + 1, n - 1))
        return fld__fail(FLD_ECONFIG, "%s: invalid item '%.*s' (valid: " CUSTOM_VALID ")", what,
                         (int)n, s);
    bool enable = s[0] == '+';
    char *name = strndup(s + 1, n - 1);
    if (!name)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    if (reader_push(enable ? &r->ops.enabled : &r->ops.disabled, name) != FLD_OK) {
        free(name);
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    }
    return FLD_OK;
}

int fld__custom_ops_parse(const char *what, const char *csv, struct fld_custom_ops *out)
{
    struct fld_custom_ops_reader r;
    const char *s = csv ? csv : "", **names = NULL;
    unsigned char *sides = NULL;
    size_t items = 1, done = 0, at, first;
    int rc = FLD_OK;

    fld__custom_ops_reader_init(&r);
    if (!is_blank(s)) {
        for (const char *c = strchr(s, ','); c; c = strchr(c + 1, ','))
            items++;
        if (!(names = calloc(items, sizeof *names)) || !(sides = calloc(items, 1))) {
            rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
            goto out;
        }
        for (;; done++) {
            const char *comma = strchr(s, ',');
            size_t n = comma ? (size_t)(comma - s) : strlen(s);
            size_t en = r.ops.enabled.n, dn = r.ops.disabled.n;
            char *item = strndup(s, n);
            if (!item) {
                rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
                break;
            }
            rc = fld__custom_ops_reader_add(&r, what, item);
            free(item);
            if (rc)
                break;
            if (r.ops.enabled.n > en) {
                names[done] = r.ops.enabled.items[en];
            } else if (r.ops.disabled.n > dn) {
                names[done] = r.ops.disabled.items[dn];
                sides[done] = 1;
            }
            if (!comma) {
                done++;
                break;
            }
            s = comma + 1;
        }
    }
    /* An op both enabled and disabled, first in input order; an error after it would not
     * have been reached by a check at each item, so it wins over rc. */
    if (fld__first_clash(names, sides, done, &at, &first) != FLD_OK)
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    else if (at < done)
        rc = fld__fail(FLD_ECONFIG, "%s: op '%s' is both enabled and disabled ('+%s' and '-%s')",
                       what, names[at], names[at], names[at]);
out:
    free(names);
    free(sides);
    if (rc) {
        fld__custom_ops_free(&r.ops);
        return rc;
    }
    fld__strlist_sort_unique(&r.ops.enabled);
    fld__strlist_sort_unique(&r.ops.disabled);
    *out = r.ops;
    return FLD_OK;
}

/* Appends a then b at *len, as far as size allows; *len counts everything. */
static void append2(char *buf, size_t size, size_t *len, const char *a, const char *b)
{
    bool room = buf && *len < size;
    int n = snprintf(room ? buf + *len : NULL, room ? size - *len : 0, "%s%s", a, b);
    if (n > 0)
        *len += (size_t)n;
}

size_t fld__custom_ops_format(const struct fld_custom_ops *c, char *buf, size_t size)
{
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    append2(buf, size, &len, c->base_enabled ? "all" : "none", "");
    for (size_t i = 0; i < c->enabled.n; i++)
        append2(buf, size, &len, ",+", c->enabled.items[i]);
    for (size_t i = 0; i < c->disabled.n; i++)
        append2(buf, size, &len, ",-", c->disabled.items[i]);
    return len;
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
        set_source(p, (enum fld_policy_field)f, SOURCE_DEFAULT);
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
        set_orders_source(&orders, source);
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
    set_source(p, f, source);
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

/*
 * vLLM names the plain-PyTorch variant of an op BASE_native; as in
 * vllm-plugin-FL, it follows BASE's per-op order unless it has its own.
 */
static const struct fld_order *native_base_order(const struct fld_policy *p, const char *op)
{
    static const char suffix[] = "_native";
    size_t n = strlen(op), k = sizeof suffix - 1;
    char base[256];
    if (n <= k || n - k >= sizeof base || strcmp(op + n - k, suffix) != 0)
        return NULL;
    memcpy(base, op, n - k);
    base[n - k] = '\0';
    return fld__orders_find(&p->per_op, base);
}

const struct fld_order *fld__policy_order_for(const struct fld_policy *p, const char *op,
                                              const char **source)
{
    const struct fld_order *o = fld__orders_find(&p->per_op, op);
    if (!o && p->per_op.n)
        o = native_base_order(p, op);
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
/* Scoped overrides                                                         */
/* ------------------------------------------------------------------------ */

struct override_stack {
    struct fld_policy **items;
    size_t n, cap;
};

static _Thread_local struct override_stack *tls_stack;
static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;
static int stack_key_status = -1;

/* Runs at thread exit when the thread still had a stack. */
static void stack_destroy(void *arg)
{
    struct override_stack *s = arg;
    if (s->n > 0) {
        fld__manager_tls_flush();
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
static int push_policy(const char *what, struct fld_policy *p)
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

/* A clone of the calling thread's effective policy, to be edited and pushed. */
static int begin_push(const char *what, struct fld_policy **out)
{
    fld__read_begin(); /* the global policy may be replaced meanwhile */
    *out = fld__policy_clone(fld__policy_effective());
    fld__read_end();
    if (!*out)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    return FLD_OK;
}

int fld_policy_push_preference(const char *kind)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_preference";
    struct fld_policy *p;
    int prefer;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if (!kind)
        return fld__fail(FLD_EINVAL, "%s: argument 'kind' is NULL", what);
    if ((rc = fld__parse_prefer(what, kind, &prefer)) != FLD_OK)
        return rc;
    if ((rc = begin_push(what, &p)) != FLD_OK)
        return rc;
    p->prefer = (enum fld_prefer)prefer;
    set_source(p, FLD_PF_PREFER, SOURCE_OVERRIDE);
    return push_policy(what, p);
}

int fld_policy_push_strict(bool strict)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_strict";
    struct fld_policy *p;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if ((rc = begin_push(what, &p)) != FLD_OK)
        return rc;
    /* As fld_policy_set: a strict override needs a manifest that holds strictly. */
    if (strict && p->manifest) {
        fld__lock();
        rc = fld__manifest_check(p->manifest, true);
        fld__unlock();
        if (rc != FLD_OK) {
            fld__error_prefix("%s", what);
            fld__policy_free(p);
            return rc;
        }
    }
    p->strict = strict;
    set_source(p, FLD_PF_STRICT, SOURCE_OVERRIDE);
    return push_policy(what, p);
}

int fld_policy_push_allowed_vendors(const char *csv)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_allowed_vendors";
    struct fld_strlist list;
    struct fld_policy *p;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if ((rc = fld__parse_name_list(what, csv, &list)) != FLD_OK)
        return rc;
    fld__strlist_lower(&list);
    if ((rc = begin_push(what, &p)) != FLD_OK) {
        fld__strlist_free(&list);
        return rc;
    }
    fld__strlist_free(&p->allow_vendors);
    p->allow_vendors = list;
    set_source(p, FLD_PF_ALLOW_VENDORS, SOURCE_OVERRIDE);
    return push_policy(what, p);
}

int fld_policy_push_denied_vendors(const char *csv)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_denied_vendors";
    struct fld_strlist list;
    struct fld_policy *p = NULL;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if ((rc = fld__parse_name_list(what, csv, &list)) != FLD_OK)
        return rc;
    fld__strlist_lower(&list);
    if ((rc = begin_push(what, &p)) != FLD_OK)
        goto fail;
    if (fld__strlist_merge(&p->deny_vendors, &list) != FLD_OK) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto fail;
    }
    fld__strlist_free(&list);
    if (p->deny_vendors.set)
        set_source(p, FLD_PF_DENY_VENDORS, SOURCE_OVERRIDE);
    return push_policy(what, p);
fail:
    fld__strlist_free(&list);
    fld__policy_free(p);
    return rc;
}

int fld_policy_push_per_op(const char *spec)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_push_per_op";
    struct fld_orders orders;
    struct fld_policy *p = NULL;
    int rc = fld__ensure_init();
    if (rc != FLD_OK)
        return rc;
    if ((rc = fld__parse_per_op(what, spec, &orders)) != FLD_OK)
        return rc;
    set_orders_source(&orders, SOURCE_OVERRIDE);
    if ((rc = begin_push(what, &p)) != FLD_OK)
        goto fail;
    if (fld__orders_merge(&p->per_op, &orders) != FLD_OK) {
        rc = fld__fail(FLD_ENOMEM, "%s: out of memory", what);
        goto fail;
    }
    fld__orders_free(&orders);
    if (p->per_op.n)
        set_source(p, FLD_PF_PER_OP, SOURCE_OVERRIDE);
    return push_policy(what, p);
fail:
    fld__orders_free(&orders);
    fld__policy_free(p);
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
    fld__manager_tls_flush();
    fld__policy_free(top);
    return FLD_OK;
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
