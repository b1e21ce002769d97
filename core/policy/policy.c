/* SPDX-License-Identifier: Apache-2.0 */
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
 * custom_ops grammar (custom_ops.c, on the value grammars' level), the
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
#include <fldispatch/internal/tool_api.h>

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

/* The table's rows as data. */
static const struct fld_policy_row rows[FLD_PF_COUNT] = {
#define ROW(id, key, env, yaml, kind, member, partner, word, origin)                               \
    [FLD_PF_##id] = {key, env, yaml, word, FLD_PK_##kind, FLD_PF_##partner, FLD_PO_##origin},
    FLD_POLICY_FIELDS(ROW)
#undef ROW
};

/* "prefer, strict, ..., custom_ops, or their environment variable names". */
#define VALID_KEY(id, key, env, yaml, kind, member, partner, word, origin) key ", "
#define VALID_KEYS                                                         FLD_POLICY_FIELDS(VALID_KEY) "or their environment variable names"

/* The kinds' names, from their list: kind_name_PREFER is "prefer". */
#define KIND_NAME(id, name) static const char kind_name_##id[] = #name;
FLD_POLICY_KINDS(KIND_NAME)
#undef KIND_NAME
/* The same rows for the tool and the Python extension (tool_api.h). */
static const struct fld_tool_policy_field tool_rows[FLD_PF_COUNT] = {
#define TOOL_ROW(id, key, env, yaml, kind, member, partner, word, origin)                          \
    [FLD_PF_##id] = {key,                                                                          \
                     env,                                                                          \
                     yaml,                                                                         \
                     word,                                                                         \
                     kind_name_##kind,                                                             \
                     FLD_PF_##partner,                                                             \
                     FLD_PO_##origin == FLD_PO_UPSTREAM},
    FLD_POLICY_FIELDS(TOOL_ROW)
#undef TOOL_ROW
};

static const char *const prefer_names[] = {"flagos", "vendor", "reference"};

/* ------------------------------------------------------------------------ */
/* The value kinds                                                          */
/* ------------------------------------------------------------------------ */

/* Appends s to buf as far as it fits (NUL-terminated), counting all of it. */
static void format_put(char *buf, size_t size, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (buf && *len + 1 < size) {
        size_t room = size - 1 - *len, k = n < room ? n : room;
        memcpy(buf + *len, s, k);
        buf[*len + k] = '\0';
    }
    *len += n;
}

static void prefer_init(void *v)
{
    *(enum fld_prefer *)v = FLD_PREFER_FLAGOS;
}

static int prefer_parse(const char *what, const char *text, void *v)
{
    int prefer;
    int rc = fld__parse_prefer(what, text, &prefer);
    if (rc == FLD_OK)
        *(enum fld_prefer *)v = (enum fld_prefer)prefer;
    return rc;
}

static size_t prefer_format(const void *v, char *buf, size_t size)
{
    unsigned prefer = *(const enum fld_prefer *)v;
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    format_put(buf, size, &len, prefer_names[prefer < 3 ? prefer : 0]);
    return len;
}

/* A flag is off until set, a switch on until turned off. */
static void flag_init(void *v)
{
    *(bool *)v = false;
}

static void switch_init(void *v)
{
    *(bool *)v = true;
}

static int flag_parse(const char *what, const char *text, void *v)
{
    return fld__parse_flag(what, text, v);
}

static int switch_parse(const char *what, const char *text, void *v)
{
    return fld__parse_switch(what, text, v);
}

static size_t bool_format(const void *v, char *buf, size_t size)
{
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    format_put(buf, size, &len, *(const bool *)v ? "true" : "false");
    return len;
}

static void list_init(void *v)
{
    *(struct fld_strlist *)v = (struct fld_strlist){false, 0, NULL};
}

static int names_parse(const char *what, const char *text, void *v)
{
    return fld__parse_name_list(what, text, v);
}

/* Vendor names compare without case: the lists hold them lowercase. */
static int vendors_parse(const char *what, const char *text, void *v)
{
    int rc = fld__parse_name_list(what, text, v);
    if (rc == FLD_OK)
        fld__strlist_lower(v);
    return rc;
}

static int list_copy(void *dst, const void *src)
{
    return fld__strlist_copy(dst, src);
}

static int list_merge(void *dst, const void *add)
{
    return fld__strlist_merge(dst, add);
}

static bool list_empty(const void *v)
{
    return !((const struct fld_strlist *)v)->set;
}

/* "a,b,c"; "" when unset. */
static size_t list_format(const void *v, char *buf, size_t size)
{
    const struct fld_strlist *l = v;
    size_t len = 0;
    if (buf && size)
        buf[0] = '\0';
    for (size_t i = 0; l->set && i < l->n; i++) {
        if (i)
            format_put(buf, size, &len, ",");
        format_put(buf, size, &len, l->items[i]);
    }
    return len;
}

static void list_free(void *v)
{
    fld__strlist_free(v);
}

static void orders_init(void *v)
{
    *(struct fld_orders *)v = (struct fld_orders){0, NULL};
}

static int orders_parse(const char *what, const char *text, void *v)
{
    return fld__parse_per_op(what, text, v);
}

static int orders_copy(void *dst, const void *src)
{
    return fld__orders_copy(dst, src);
}

static int orders_merge(void *dst, const void *add)
{
    return fld__orders_merge(dst, add);
}

static bool orders_empty(const void *v)
{
    return ((const struct fld_orders *)v)->n == 0;
}

/* Each order carries its own source. */
static void orders_stamp(void *v, const char *source)
{
    struct fld_orders *orders = v;
    for (size_t i = 0; i < orders->n; i++)
        snprintf(orders->items[i].source, sizeof orders->items[i].source, "%s", source);
}

static void orders_free(void *v)
{
    fld__orders_free(v);
}

static void custom_init(void *v)
{
    *(struct fld_custom_ops *)v = (struct fld_custom_ops){.base_enabled = true};
}

static int custom_parse(const char *what, const char *text, void *v)
{
    return fld__custom_ops_parse(what, text, v);
}

static int custom_copy(void *dst, const void *src)
{
    return fld__custom_ops_copy(dst, src);
}

static size_t custom_format(const void *v, char *buf, size_t size)
{
    return fld__custom_ops_format(v, buf, size);
}

static void custom_free(void *v)
{
    fld__custom_ops_free(v);
}

/* The kinds, one row each (FLD_POLICY_KINDS lists them). */
/* clang-format off */
static const struct fld_policy_kind_ops kind_prefer = {
    .name = kind_name_PREFER, .size = sizeof(enum fld_prefer),
    .init = prefer_init, .parse = prefer_parse, .format = prefer_format};
static const struct fld_policy_kind_ops kind_flag = {
    .name = kind_name_FLAG, .size = sizeof(bool),
    .init = flag_init, .parse = flag_parse, .format = bool_format};
static const struct fld_policy_kind_ops kind_switch = {
    .name = kind_name_SWITCH, .size = sizeof(bool),
    .init = switch_init, .parse = switch_parse, .format = bool_format};
static const struct fld_policy_kind_ops kind_names = {
    .name = kind_name_NAMES, .size = sizeof(struct fld_strlist), .names = true,
    .init = list_init, .parse = names_parse, .copy = list_copy, .merge = list_merge,
    .empty = list_empty, .format = list_format, .free = list_free};
static const struct fld_policy_kind_ops kind_vendors = {
    .name = kind_name_VENDORS, .size = sizeof(struct fld_strlist), .names = true,
    .init = list_init, .parse = vendors_parse, .copy = list_copy, .merge = list_merge,
    .empty = list_empty, .format = list_format, .free = list_free};
static const struct fld_policy_kind_ops kind_orders = {
    .name = kind_name_ORDERS, .size = sizeof(struct fld_orders), .names = true,
    .init = orders_init, .parse = orders_parse, .copy = orders_copy, .merge = orders_merge,
    .empty = orders_empty, .stamp = orders_stamp, .free = orders_free};
static const struct fld_policy_kind_ops kind_custom = {
    .name = kind_name_CUSTOM, .size = sizeof(struct fld_custom_ops), .names = true,
    .init = custom_init, .parse = custom_parse, .copy = custom_copy,
    .format = custom_format, .free = custom_free};
/* clang-format on */

#define KIND_ROW(id, name) [FLD_PK_##id] = &kind_##name,
static const struct fld_policy_kind_ops *const kinds[FLD_PK_COUNT] = {FLD_POLICY_KINDS(KIND_ROW)};
#undef KIND_ROW

const struct fld_policy_kind_ops *fld__policy_kind(enum fld_policy_field f)
{
    return kinds[rows[f].kind];
}

/* Each field's member, written by the table. */
#define VALUE_CASE(id, key, env, yaml, kind, member, partner, word, origin)                        \
    case FLD_PF_##id:                                                                              \
        return &p->member;

static void *value_mut(struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
        FLD_POLICY_FIELDS(VALUE_CASE)
    default:
        return NULL;
    }
}

const void *fld__policy_value(const struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
        FLD_POLICY_FIELDS(VALUE_CASE)
    default:
        return NULL;
    }
}

#undef VALUE_CASE

void fld__policy_put_value(struct fld_policy *p, enum fld_policy_field f, void *v)
{
    const struct fld_policy_kind_ops *k = fld__policy_kind(f);
    void *slot = value_mut(p, f);
    if (k->free)
        k->free(slot);
    memcpy(slot, v, k->size);
}

void fld__policy_swap_value(struct fld_policy *a, struct fld_policy *b, enum fld_policy_field f)
{
    union fld_policy_value tmp;
    size_t size = fld__policy_kind(f)->size;
    void *va = value_mut(a, f), *vb = value_mut(b, f);
    memcpy(&tmp, va, size);
    memcpy(va, vb, size);
    memcpy(vb, &tmp, size);
}

int fld__policy_merge_onto(struct fld_policy *delta, const struct fld_policy *base,
                           enum fld_policy_field f)
{
    const struct fld_policy_kind_ops *k = fld__policy_kind(f);
    union fld_policy_value merged;
    if (k->copy(&merged, fld__policy_value(base, f)) != FLD_OK)
        return FLD_ENOMEM;
    if (k->merge(&merged, fld__policy_value(delta, f)) != FLD_OK) {
        k->free(&merged);
        return FLD_ENOMEM;
    }
    fld__policy_put_value(delta, f, &merged);
    return FLD_OK;
}

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

const struct fld_policy_row *fld__policy_row(enum fld_policy_field f)
{
    return (unsigned)f < FLD_PF_COUNT ? &rows[f] : NULL;
}

const struct fld_tool_policy_field *fld__policy_field_row(unsigned index)
{
    return index < FLD_PF_COUNT ? &tool_rows[index] : NULL;
}

const char *fld__policy_field_key(enum fld_policy_field f)
{
    return (unsigned)f < FLD_PF_COUNT ? rows[f].key : NULL;
}

const char *fld__policy_field_env(enum fld_policy_field f)
{
    return (unsigned)f < FLD_PF_COUNT ? rows[f].env : NULL;
}

void fld__policy_set_source(struct fld_policy *p, enum fld_policy_field f, const char *source)
{
    snprintf(p->source[f], sizeof p->source[f], "%s", source);
}

static bool field_by_name(const char *name, enum fld_policy_field *out)
{
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        if (strcmp(name, rows[f].key) == 0 || strcmp(name, rows[f].env) == 0) {
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
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        kinds[rows[f].kind]->init(value_mut(p, (enum fld_policy_field)f));
        fld__policy_set_source(p, (enum fld_policy_field)f, SOURCE_DEFAULT);
    }
    p->serial = next_serial();
    return p;
}

void fld__policy_free(struct fld_policy *p)
{
    if (!p)
        return;
    for (int f = 0; f < FLD_PF_COUNT; f++)
        if (kinds[rows[f].kind]->free)
            kinds[rows[f].kind]->free(value_mut(p, (enum fld_policy_field)f));
    fld__manifest_unref(p->manifest);
    free(p);
}

struct fld_policy *fld__policy_clone(const struct fld_policy *src)
{
    struct fld_policy *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    memcpy(p->source, src->source, sizeof p->source);
    /* Copied into a zeroed record: what is not copied yet frees as empty. */
    for (int i = 0; i < FLD_PF_COUNT; i++) {
        enum fld_policy_field f = (enum fld_policy_field)i;
        const struct fld_policy_kind_ops *k = kinds[rows[f].kind];
        void *dst = value_mut(p, f);
        const void *from = fld__policy_value(src, f);
        if (!k->copy)
            memcpy(dst, from, k->size);
        else if (k->copy(dst, from) != FLD_OK)
            goto fail;
    }
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

/* Each a switch over the members of one type, written by the table. */
#define LIST_CASE(id, key, env, yaml, kind, member, partner, word, origin)                         \
    FLD__PF_IF_LIST_##kind(case FLD_PF_##id : return &p->member;)
#define BOOL_CASE(id, key, env, yaml, kind, member, partner, word, origin)                         \
    FLD__PF_IF_BOOL_##kind(case FLD_PF_##id : return &p->member;)

const struct fld_strlist *fld__policy_list(const struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
        FLD_POLICY_FIELDS(LIST_CASE)
    default:
        return NULL;
    }
}

struct fld_strlist *fld__policy_list_mut(struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
        FLD_POLICY_FIELDS(LIST_CASE)
    default:
        return NULL;
    }
}

/* The boolean (FLAG, SWITCH) member of p that field f is, or NULL. */
static const bool *policy_bool(const struct fld_policy *p, enum fld_policy_field f)
{
    switch (f) {
        FLD_POLICY_FIELDS(BOOL_CASE)
    default:
        return NULL;
    }
}

#undef LIST_CASE
#undef BOOL_CASE

int fld__policy_set_value(struct fld_policy *p, enum fld_policy_field f, const char *what,
                          const char *value, const char *source)
{
    const struct fld_policy_kind_ops *k = kinds[rows[f].kind];
    union fld_policy_value v;
    /* Parsed into a temporary first: on error p must stay as it was. */
    int rc = k->parse(what, value, &v);
    if (rc != FLD_OK)
        return rc;
    if (k->stamp)
        k->stamp(&v, source);
    fld__policy_put_value(p, f, &v);
    fld__policy_set_source(p, f, source);
    return FLD_OK;
}

int fld__policy_set_field(struct fld_policy *p, const char *key, const char *value,
                          const char *source)
{
    enum fld_policy_field f;
    if (!key || !field_by_name(key, &f))
        return fld__fail(FLD_ECONFIG, "unknown policy key '%s' (valid: " VALID_KEYS ")",
                         key ? key : "(null)");
    return fld__policy_set_value(p, f, key, value, source);
}

/* "VLLM_FL_FLAGOS_WHITELIST", or "VLLM_FL_FLAGOS_WHITELIST (set by X)" when
 * a source other than the variable set it. */
static const char *field_label(const struct fld_policy *p, enum fld_policy_field f, char *buf,
                               size_t size)
{
    if (strcmp(p->source[f], rows[f].env) == 0)
        snprintf(buf, size, "%s", rows[f].env);
    else
        snprintf(buf, size, "%s (set by %s)", rows[f].env, p->source[f]);
    return buf;
}

static int check_exclusive(const struct fld_policy *p, enum fld_policy_field white,
                           enum fld_policy_field black)
{
    const struct fld_strlist *w = fld__policy_list(p, white);
    const struct fld_strlist *b = fld__policy_list(p, black);
    if (!w->set || !b->set)
        return FLD_OK;
    char wl[256], bl[256];
    return fld__fail(FLD_ECONFIG, "%s and %s are both set; set only one of them",
                     field_label(p, white, wl, sizeof wl), field_label(p, black, bl, sizeof bl));
}

int fld__policy_check(const struct fld_policy *p)
{
    /* Each pair once: from the row that comes first. */
    int rc = FLD_OK;
    for (int f = 0; f < FLD_PF_COUNT && rc == FLD_OK; f++)
        if (rows[f].partner > f)
            rc = check_exclusive(p, (enum fld_policy_field)f, rows[f].partner);
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
    const struct fld_strlist *w = fld__policy_list(p, white);
    const struct fld_strlist *b = fld__policy_list(p, black);
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

    put(&w, rows[FLD_PF_PREFER].word);
    put(&w, "=");
    put(&w, prefer_names[prefer]);
    /* The switches, in row order: a flag always, a switch when it is off. */
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        const bool *b = policy_bool(p, (enum fld_policy_field)f);
        if (!b || (rows[f].kind == FLD_PK_SWITCH && *b))
            continue;
        put(&w, ";");
        put(&w, rows[f].word);
        put(&w, *b ? "=1" : "=0");
    }
    /* The lists, in row order. They are kept sorted and unique by the
     * parsers, so equal policies print equal strings. */
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        const struct fld_strlist *l = fld__policy_list(p, (enum fld_policy_field)f);
        if (l)
            put_list(&w, rows[f].word, l);
    }
    if (!fld__custom_ops_is_default(&p->custom_ops)) {
        char custom[1024];
        size_t n = fld__custom_ops_format(&p->custom_ops, custom, sizeof custom);
        put(&w, ";");
        put(&w, rows[FLD_PF_CUSTOM_OPS].word);
        put(&w, "=");
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
        put(&w, ";");
        put(&w, rows[FLD_PF_PER_OP].word);
        put(&w, "=");
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
