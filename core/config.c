/*
 * Policy files (see config.h for the precedence of the layers, and
 * layers.c for their assembly): the strict schema of YAML policy files,
 * VLLM_FL_OP_CONFIG's file, fld_policy_load_file() and the
 * effective-configuration report behind `fldispatch config`.
 *
 * A file is read in two steps: the whole document is checked and converted
 * into a `struct layer` first, and only a layer without a single error is
 * committed onto a policy. That is what makes "nothing is ever half-applied"
 * hold without undo code.
 *
 * Why one file of about 870 lines: the schema of a policy file is one walk
 * over one document (keys, their values, the file:line:column of each
 * error); the layer assembly already left for layers.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>

#include "config.h"
#include "config_internal.h"
#include "custom_ops.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "manifest.h"
#include "names.h"
#include "policy.h"
#include "reclaim.h"

#define BOOL_WORDS "true, false, yes, no, on, off"
#define YAML_KEYS                                                                                  \
    "prefer, strict, allow_vendors, deny_vendors, flagos_whitelist, flagos_blacklist, "            \
    "oot_whitelist, oot_blacklist, op_backends, custom_ops, enabled, use_flaggems, oot_enabled, "  \
    "external_enabled, external_whitelist, external_blacklist"
#define ORDER_FORM "a sequence of tokens or an \"a|b\" string"
#define TOKENS     "flagos, vendor, vendor:NAME, reference, impl:ID"
#define OP_CONFIG  "VLLM_FL_OP_CONFIG"
#define ACTION_KEY "action"

enum value_kind { VK_PREFER, VK_BOOL, VK_LIST, VK_ORDERS, VK_CUSTOM };

struct yaml_key {
    const char *name;
    enum fld_policy_field field;
    enum value_kind kind;
};

static const struct yaml_key yaml_keys[] = {
    {"prefer", FLD_PF_PREFER, VK_PREFER},
    {"strict", FLD_PF_STRICT, VK_BOOL},
    {"allow_vendors", FLD_PF_ALLOW_VENDORS, VK_LIST},
    {"deny_vendors", FLD_PF_DENY_VENDORS, VK_LIST},
    {"flagos_whitelist", FLD_PF_FLAGOS_WHITELIST, VK_LIST},
    {"flagos_blacklist", FLD_PF_FLAGOS_BLACKLIST, VK_LIST},
    {"oot_whitelist", FLD_PF_OOT_WHITELIST, VK_LIST},
    {"oot_blacklist", FLD_PF_OOT_BLACKLIST, VK_LIST},
    {"op_backends", FLD_PF_PER_OP, VK_ORDERS},
    {"custom_ops", FLD_PF_CUSTOM_OPS, VK_CUSTOM},
    /* Not in the Python system's files, but without them VLLM_FL_CONFIG (a
     * complete override) could not express these fields at all. */
    {"enabled", FLD_PF_ENABLED, VK_BOOL},
    {"use_flaggems", FLD_PF_USE_FLAGGEMS, VK_BOOL},
    {"oot_enabled", FLD_PF_OOT_ENABLED, VK_BOOL},
    /* fldispatch's own: plugins built outside this project. */
    {"external_enabled", FLD_PF_EXTERNAL_ENABLED, VK_BOOL},
    {"external_whitelist", FLD_PF_EXTERNAL_WHITELIST, VK_LIST},
    {"external_blacklist", FLD_PF_EXTERNAL_BLACKLIST, VK_LIST},
};
#define N_YAML_KEYS (sizeof yaml_keys / sizeof yaml_keys[0])

/* White- and blacklist pairs: one of each pair per layer. */
static const enum fld_policy_field list_pairs[][2] = {
    {FLD_PF_FLAGOS_WHITELIST, FLD_PF_FLAGOS_BLACKLIST},
    {FLD_PF_OOT_WHITELIST, FLD_PF_OOT_BLACKLIST},
    {FLD_PF_EXTERNAL_WHITELIST, FLD_PF_EXTERNAL_BLACKLIST},
};

/* Locale-independent on purpose, like parse.c. */
static bool is_name(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static const char *key_name(enum fld_policy_field f)
{
    for (size_t i = 0; i < N_YAML_KEYS; i++)
        if (yaml_keys[i].field == f)
            return yaml_keys[i].name;
    return fld__policy_field_key(f);
}

/* ------------------------------------------------------------------------ */
/* Reading a policy document into a layer                                   */
/* ------------------------------------------------------------------------ */

/* One file's settings, complete and checked before anything is applied. */
struct layer {
    const char *label;
    bool has[FLD_PF_COUNT];
    unsigned line[FLD_PF_COUNT], column[FLD_PF_COUNT]; /* of each key */
    int prefer;
    bool bools[FLD_PF_COUNT];
    struct fld_strlist lists[FLD_PF_COUNT];
    struct fld_orders orders; /* each with its "label:line" source */
    struct fld_custom_ops custom;
};

static void layer_free(struct layer *l)
{
    for (int f = 0; f < FLD_PF_COUNT; f++)
        fld__strlist_free(&l->lists[f]);
    fld__orders_free(&l->orders);
    fld__custom_ops_free(&l->custom);
}

/* "label:line:column: key" — the `what` handed to the grammar parsers. */
static const char *where(char *buf, size_t size, const char *label, const struct fld_ynode *n,
                         const char *key)
{
    snprintf(buf, size, "%s:%u:%u: %s", label, n->line, n->column, key);
    return buf;
}

static int oom(const char *label)
{
    return fld__fail(FLD_ENOMEM, "%s: out of memory", label);
}

static bool is_plain(const struct fld_ynode *n)
{
    return n->type == FLD_YNODE_SCALAR && n->style == FLD_YSTYLE_PLAIN && !n->tag_str;
}

static bool is_null(const struct fld_ynode *n)
{
    const char *t = n->text;
    return is_plain(n) && !n->tag_bool &&
           (!*t || strcmp(t, "~") == 0 || strcmp(t, "null") == 0 || strcmp(t, "Null") == 0 ||
            strcmp(t, "NULL") == 0);
}

/* 1 true, 0 false, -1 not a boolean word. */
static int bool_word(const char *t)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(t, yes[i]) == 0)
            return 1;
        if (strcasecmp(t, no[i]) == 0)
            return 0;
    }
    return -1;
}

static int read_bool(const char *label, const char *key, const struct fld_ynode *n, bool *out)
{
    char desc[256];
    if (n->type == FLD_YNODE_SCALAR && (is_plain(n) || n->tag_bool)) {
        int b = bool_word(n->text);
        if (b >= 0) {
            *out = b == 1;
            return FLD_OK;
        }
    }
    /* The Python system took bool() of whatever was there, so 'false' was
     * true. A quoted word is a string here, and an error. */
    const char *hint = n->type == FLD_YNODE_SCALAR && !is_plain(n) && bool_word(n->text) >= 0
                           ? "; remove the quotes"
                           : "";
    return fld__fail(FLD_ECONFIG,
                     "%s:%u:%u: %s: expected a YAML boolean, not %s%s (valid: " BOOL_WORDS
                     ", unquoted, any case)",
                     label, n->line, n->column, key, fld__ynode_describe(n, desc, sizeof desc),
                     hint);
}

/* A scalar that is a string: not null, not an unquoted boolean, not a collection. */
static int read_string(const char *label, const char *key, const struct fld_ynode *n,
                       const char *expected, const char **out)
{
    char desc[256];
    if (n->type == FLD_YNODE_SCALAR && !is_null(n) && !n->tag_bool &&
        !(is_plain(n) && bool_word(n->text) >= 0)) {
        *out = n->text;
        return FLD_OK;
    }
    return fld__fail(FLD_ECONFIG, "%s:%u:%u: %s: expected %s, not %s", label, n->line, n->column,
                     key, expected, fld__ynode_describe(n, desc, sizeof desc));
}

static int read_prefer(const char *label, const char *key, const struct fld_ynode *n, int *out)
{
    char what[512];
    const char *text;
    int rc = read_string(label, key, n, "one of flagos, vendor, reference", &text);
    if (rc)
        return rc;
    return fld__parse_prefer(where(what, sizeof what, label, n, key), text, out);
}

static int read_list(const char *label, const char *key, const struct fld_ynode *n,
                     struct fld_strlist *out)
{
    static const char form[] = "a sequence of names or a comma-separated string";
    char what[512], desc[256];
    struct fld_strlist list = {false, 0, NULL};
    size_t cap = 0;
    const char *text;
    int rc;

    if (n->type == FLD_YNODE_SCALAR) {
        if ((rc = read_string(label, key, n, form, &text)) != FLD_OK)
            return rc;
        return fld__parse_name_list(where(what, sizeof what, label, n, key), text, out);
    }
    if (n->type != FLD_YNODE_SEQUENCE)
        return fld__fail(FLD_ECONFIG, "%s:%u:%u: %s: expected %s, not %s", label, n->line,
                         n->column, key, form, fld__ynode_describe(n, desc, sizeof desc));
    /* An empty sequence is an unset list, as an empty string is: an allow
     * list that allows nothing is never what `[]` meant. */
    for (size_t i = 0; i < n->n; i++) {
        const struct fld_ynode *item = n->kids[i];
        struct fld_strlist one;
        if ((rc = read_string(label, key, item, "a name", &text)) != FLD_OK)
            goto fail;
        where(what, sizeof what, label, item, key);
        if (strchr(text, ',')) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s: item '%s' holds a comma (in a sequence, give one name per item)",
                           what, text);
            goto fail;
        }
        if ((rc = fld__parse_name_list(what, text, &one)) != FLD_OK)
            goto fail;
        if (!one.set) {
            rc = fld__fail(FLD_ECONFIG, "%s: empty item (names use only [A-Za-z0-9_.-])", what);
            goto fail;
        }
        /* One name (no comma): moved into list, which is sorted once at the end. */
        if (fld__strlist_append(&list, &cap, one.items[0]) != FLD_OK) {
            fld__strlist_free(&one);
            rc = oom(label);
            goto fail;
        }
        free(one.items);
    }
    fld__strlist_sort_unique(&list);
    *out = list;
    return FLD_OK;
fail:
    fld__strlist_free(&list);
    return rc;
}

/* The order of one op from a sequence of tokens; errors point at the item. */
static int read_token_sequence(const char *label, const char *key, const char *op,
                               const struct fld_ynode *n, struct fld_order *out)
{
    char what[512];
    struct fld_order order = {.op = NULL};
    const char *text;
    int rc;

    if (n->n == 0) {
        rc = fld__fail(FLD_ECONFIG, "%s: empty order (valid: %s with tokens " TOKENS ")",
                       where(what, sizeof what, label, n, key), ORDER_FORM);
        goto fail;
    }
    for (size_t i = 0; i < n->n; i++) {
        const struct fld_ynode *item = n->kids[i];
        struct fld_token tok;
        if ((rc = read_string(label, key, item, "a token (" TOKENS ")", &text)) != FLD_OK)
            goto fail;
        where(what, sizeof what, label, item, key);
        if ((rc = fld__parse_token(what, text, &tok)) != FLD_OK)
            goto fail;
        if (fld__order_append_token(&order, &tok) != FLD_OK) {
            rc = oom(label);
            goto fail;
        }
    }
    if ((rc = fld__order_finish(where(what, sizeof what, label, n, key), op, &order)) != FLD_OK)
        goto fail;
    if (!(order.op = strdup(op))) {
        rc = oom(label);
        goto fail;
    }
    *out = order;
    return FLD_OK;
fail:
    fld__order_free(&order);
    return rc;
}

/* Appends one order (ownership taken, also on failure) to a set being read. */
static int orders_add(struct fld_orders *orders, size_t *cap, struct fld_order *order,
                      const char *label)
{
    if (fld__orders_append(orders, cap, order) == FLD_OK)
        return FLD_OK;
    fld__order_free(order);
    return oom(label);
}

/*
 * The first key of map (its index in kids) equal to an earlier key, and in
 * *first the index of the first such earlier key; map->n for both when no key
 * repeats. Found once, by sorting, before the keys are read in order: a check
 * against every earlier key at each key was O(n^2).
 */
static int repeated_key(const char *label, const struct fld_ynode *map, size_t *dup, size_t *first)
{
    size_t keys = map->n / 2, at, earlier;
    const char **names = keys ? malloc(keys * sizeof *names) : NULL;
    if (keys && !names)
        return oom(label);
    for (size_t i = 0; i < keys; i++) {
        const struct fld_ynode *k = map->kids[2 * i];
        names[i] = k->type == FLD_YNODE_SCALAR ? k->text : NULL;
    }
    int rc = fld__first_clash(names, NULL, keys, &at, &earlier);
    free(names);
    if (rc)
        return oom(label);
    *dup = at < keys ? 2 * at : map->n;
    *first = at < keys ? 2 * earlier : map->n;
    return FLD_OK;
}

static int read_orders(const char *label, const struct fld_ynode *n, struct fld_orders *out)
{
    char what[512], desc[256], keybuf[256];
    struct fld_orders orders = {0, NULL};
    size_t cap = 0, dup, first;
    int rc;

    if (n->type != FLD_YNODE_MAPPING)
        return fld__fail(FLD_ECONFIG,
                         "%s:%u:%u: op_backends: expected a mapping of op names to orders "
                         "(e.g. rms_norm: [vendor, reference]), not %s",
                         label, n->line, n->column, fld__ynode_describe(n, desc, sizeof desc));
    if ((rc = repeated_key(label, n, &dup, &first)) != FLD_OK)
        return rc;
    for (size_t i = 0; i + 1 < n->n; i += 2) {
        const struct fld_ynode *k = n->kids[i], *v = n->kids[i + 1];
        const char *op;
        struct fld_order order;
        if ((rc = read_string(label, "op_backends", k, "an op name", &op)) != FLD_OK)
            goto fail;
        if (!is_name(op)) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s:%u:%u: op_backends: invalid op name '%s' (names use only "
                           "[A-Za-z0-9_.-])",
                           label, k->line, k->column, op);
            goto fail;
        }
        if (i == dup) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s:%u:%u: op_backends: duplicate key '%s' (first at line %u)", label,
                           k->line, k->column, op, n->kids[first]->line);
            goto fail;
        }
        snprintf(keybuf, sizeof keybuf, "op_backends.%s", op);
        if (v->type == FLD_YNODE_SEQUENCE) {
            rc = read_token_sequence(label, keybuf, op, v, &order);
        } else if (v->type == FLD_YNODE_SCALAR && !is_null(v) && !v->tag_bool &&
                   !(is_plain(v) && bool_word(v->text) >= 0)) {
            rc = fld__parse_token_list(where(what, sizeof what, label, v, keybuf), op, v->text,
                                       &order);
        } else {
            rc = fld__fail(FLD_ECONFIG, "%s: expected %s (tokens " TOKENS "), not %s",
                           where(what, sizeof what, label, v, keybuf), ORDER_FORM,
                           fld__ynode_describe(v, desc, sizeof desc));
        }
        if (rc)
            goto fail;
        snprintf(order.source, sizeof order.source, "%s:%u", label, k->line);
        if ((rc = orders_add(&orders, &cap, &order, label)) != FLD_OK)
            goto fail;
    }
    fld__orders_sort(&orders);
    *out = orders;
    return FLD_OK;
fail:
    fld__orders_free(&orders);
    return rc;
}

/*
 * An op both enabled and disabled is looked for once the items are read (or
 * reading stopped at an error): the reader appends names unsorted, so that a
 * long list costs O(n log n), not O(n^2). The first such item in input order
 * is reported, as a check at each item would have done; an error at a later
 * item would not have been reached.
 */
static int read_custom(const char *label, const struct fld_ynode *n, struct fld_custom_ops *out)
{
    static const char form[] = "a sequence of all, none, +OP, -OP or a comma-separated string";
    struct fld_custom_ops_reader r;
    char what[512];
    const char *text, **names = NULL;
    unsigned char *sides = NULL;
    size_t done, at, first;
    int rc = FLD_OK;

    fld__custom_ops_reader_init(&r);
    if (n->type == FLD_YNODE_SCALAR) {
        if ((rc = read_string(label, "custom_ops", n, form, &text)) != FLD_OK)
            return rc;
        return fld__custom_ops_parse(where(what, sizeof what, label, n, "custom_ops"), text, out);
    }
    if (n->type != FLD_YNODE_SEQUENCE) {
        char desc[256];
        return fld__fail(FLD_ECONFIG, "%s:%u:%u: custom_ops: expected %s, not %s", label, n->line,
                         n->column, form, fld__ynode_describe(n, desc, sizeof desc));
    }
    if (n->n && (!(names = calloc(n->n, sizeof *names)) || !(sides = calloc(n->n, 1)))) {
        rc = oom(label);
        goto fail;
    }
    for (done = 0; done < n->n; done++) {
        const struct fld_ynode *item = n->kids[done];
        size_t en = r.ops.enabled.n, dn = r.ops.disabled.n;
        if ((rc = read_string(label, "custom_ops", item, "all, none, +OP or -OP", &text)) != FLD_OK)
            break;
        rc = fld__custom_ops_reader_add(&r, where(what, sizeof what, label, item, "custom_ops"),
                                        text);
        if (rc)
            break;
        if (r.ops.enabled.n > en) {
            names[done] = r.ops.enabled.items[en];
        } else if (r.ops.disabled.n > dn) {
            names[done] = r.ops.disabled.items[dn];
            sides[done] = 1;
        }
    }
    if (fld__first_clash(names, sides, done, &at, &first) != FLD_OK) {
        rc = oom(label);
        goto fail;
    }
    if (at < done) {
        rc = fld__fail(FLD_ECONFIG, "%s: op '%s' is both enabled and disabled ('+%s' and '-%s')",
                       where(what, sizeof what, label, n->kids[at], "custom_ops"), names[at],
                       names[at], names[at]);
        goto fail;
    }
    if (rc)
        goto fail;
    fld__strlist_sort_unique(&r.ops.enabled);
    fld__strlist_sort_unique(&r.ops.disabled);
    free(names);
    free(sides);
    *out = r.ops;
    return FLD_OK;
fail:
    free(names);
    free(sides);
    fld__custom_ops_free(&r.ops);
    return rc;
}

/*
 * vllm-plugin-FL's policy files may carry `action: NAME` (e.g. auto_tune), a
 * directive for its tooling that its dispatch never reads. Accepted so that
 * such a file loads unchanged, and ignored with a WARNING; any other unknown
 * key stays an error. *seen_line: the line of an earlier `action` (0: none).
 */
static int read_action(const char *label, const struct fld_ynode *k, const struct fld_ynode *v,
                       unsigned *seen_line)
{
    const char *text;
    int rc;
    if (*seen_line)
        return fld__fail(FLD_ECONFIG, "%s:%u:%u: duplicate key '" ACTION_KEY "' (first at line %u)",
                         label, k->line, k->column, *seen_line);
    if ((rc = read_string(label, ACTION_KEY, v, "a name (vllm-plugin-FL tooling directive)",
                          &text)) != FLD_OK)
        return rc;
    *seen_line = k->line;
    fld__log(FLD_LOG_WARNING,
             "%s:%u:%u: " ACTION_KEY ": '%s' is a directive for vllm-plugin-FL's tooling; "
             "fldispatch ignores it",
             label, k->line, k->column, text);
    return FLD_OK;
}

static int read_layer(const char *label, const struct fld_ynode *root, struct layer *l)
{
    char desc[256];
    unsigned action_line = 0;
    int rc;

    memset(l, 0, sizeof *l);
    l->label = label;
    l->custom.base_enabled = true;
    if (!root || is_null(root))
        return fld__fail(FLD_ECONFIG,
                         "%s:%u:%u: empty %s (expected a mapping of policy keys; valid keys: "
                         "" YAML_KEYS ")",
                         label, root ? root->line : 1, root ? root->column : 1,
                         root ? "document" : "file");
    if (root->type != FLD_YNODE_MAPPING)
        return fld__fail(
            FLD_ECONFIG,
            "%s:%u:%u: expected a mapping of policy keys, not %s (valid keys: " YAML_KEYS ")",
            label, root->line, root->column, fld__ynode_describe(root, desc, sizeof desc));
    for (size_t i = 0; i + 1 < root->n; i += 2) {
        const struct fld_ynode *k = root->kids[i], *v = root->kids[i + 1];
        const struct yaml_key *key = NULL;
        if (k->type != FLD_YNODE_SCALAR || is_null(k))
            return fld__fail(FLD_ECONFIG,
                             "%s:%u:%u: a key must be a string, not %s (valid: " YAML_KEYS ")",
                             label, k->line, k->column, fld__ynode_describe(k, desc, sizeof desc));
        for (size_t j = 0; j < N_YAML_KEYS && !key; j++)
            if (strcmp(k->text, yaml_keys[j].name) == 0)
                key = &yaml_keys[j];
        if (!key && strcmp(k->text, ACTION_KEY) == 0) {
            if ((rc = read_action(label, k, v, &action_line)) != FLD_OK)
                return rc;
            continue;
        }
        if (!key)
            return fld__fail(FLD_ECONFIG, "%s:%u:%u: unknown key '%s' (valid: " YAML_KEYS ")",
                             label, k->line, k->column, k->text);
        enum fld_policy_field f = key->field;
        if (l->has[f])
            return fld__fail(FLD_ECONFIG, "%s:%u:%u: duplicate key '%s' (first at line %u)", label,
                             k->line, k->column, key->name, l->line[f]);
        switch (key->kind) {
        case VK_PREFER:
            rc = read_prefer(label, key->name, v, &l->prefer);
            break;
        case VK_BOOL:
            rc = read_bool(label, key->name, v, &l->bools[f]);
            break;
        case VK_LIST:
            rc = read_list(label, key->name, v, &l->lists[f]);
            if (rc == FLD_OK && (f == FLD_PF_ALLOW_VENDORS || f == FLD_PF_DENY_VENDORS))
                fld__strlist_lower(&l->lists[f]);
            break;
        case VK_ORDERS:
            rc = read_orders(label, v, &l->orders);
            break;
        case VK_CUSTOM:
            rc = read_custom(label, v, &l->custom);
            break;
        default:
            rc = FLD_ECONFIG;
        }
        if (rc)
            return rc;
        l->has[f] = true;
        l->line[f] = k->line;
        l->column[f] = k->column;
    }
    for (size_t i = 0; i < sizeof list_pairs / sizeof list_pairs[0]; i++) {
        enum fld_policy_field a = list_pairs[i][0], b = list_pairs[i][1];
        if (!l->has[a] || !l->has[b])
            continue;
        enum fld_policy_field later = l->line[a] > l->line[b] ? a : b;
        enum fld_policy_field other = later == a ? b : a;
        return fld__fail(
            FLD_ECONFIG, "%s:%u:%u: %s and %s (line %u) are both set; set only one of them", label,
            l->line[later], l->column[later], key_name(later), key_name(other), l->line[other]);
    }
    return FLD_OK;
}

/* Moves a checked layer onto p. p is untouched when this fails (memory). */
static int layer_commit(struct fld_policy *p, struct layer *l)
{
    struct fld_orders merged = {0, NULL};
    if (l->has[FLD_PF_PER_OP]) {
        if (fld__orders_copy(&merged, &p->per_op) != FLD_OK ||
            fld__orders_merge(&merged, &l->orders) != FLD_OK) {
            fld__orders_free(&merged);
            return oom(l->label);
        }
    }
    /* Nothing below can fail. */
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        if (!l->has[f])
            continue;
        if (f == FLD_PF_PREFER) {
            p->prefer = (enum fld_prefer)l->prefer;
        } else if (fld__policy_bool_field(p, f)) {
            *fld__policy_bool_field(p, f) = l->bools[f];
        } else if (fld__policy_list_field(p, f)) {
            fld__strlist_free(fld__policy_list_field(p, f));
            *fld__policy_list_field(p, f) = l->lists[f];
            l->lists[f] = (struct fld_strlist){false, 0, NULL};
        } else if (f == FLD_PF_PER_OP) {
            /* Per op: the file's orders replace those of the same ops only. */
            fld__orders_free(&p->per_op);
            p->per_op = merged;
        } else if (f == FLD_PF_CUSTOM_OPS) {
            fld__custom_ops_free(&p->custom_ops);
            p->custom_ops = l->custom;
            memset(&l->custom, 0, sizeof l->custom);
        }
        snprintf(p->source[f], FLD_SOURCE_LEN, "%s:%u", l->label, l->line[f]);
    }
    /* A list set here replaces its pair from a lower layer: the platform
     * file's flagos_blacklist must not make a whitelist set here an error. */
    for (size_t i = 0; i < sizeof list_pairs / sizeof list_pairs[0]; i++) {
        for (int side = 0; side < 2; side++) {
            enum fld_policy_field set = list_pairs[i][side], other = list_pairs[i][!side];
            if (l->has[set] && !l->has[other] && fld__policy_list_field(p, other)->set) {
                fld__strlist_free(fld__policy_list_field(p, other));
                snprintf(p->source[other], FLD_SOURCE_LEN, "cleared by %s:%u", l->label,
                         l->line[set]);
            }
        }
    }
    return FLD_OK;
}

int fld__config_apply_file(struct fld_policy *p, const char *path, const char *label)
{
    struct fld_ynode *root = NULL;
    struct layer l;
    if (!label)
        label = path;
    int rc = fld__yaml_load(path, label, &root);
    if (rc)
        return rc;
    rc = read_layer(label, root, &l);
    fld__yaml_free(root);
    if (rc == FLD_OK)
        rc = layer_commit(p, &l);
    layer_free(&l);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* VLLM_FL_OP_CONFIG                                                        */
/* ------------------------------------------------------------------------ */

#define OP_CONFIG_FORM                                                                             \
    "a JSON object of op names to tokens, e.g. {\"rms_norm\": \"vendor|reference\"}"

static int read_op_config(const char *path, const struct fld_ynode *root, struct fld_orders *out)
{
    char what[512], desc[256];
    struct fld_orders orders = {0, NULL};
    size_t cap = 0, dup, first;
    int rc;

    if (!root)
        return fld__fail(FLD_ECONFIG, "%s:1:1: empty file (expected " OP_CONFIG_FORM ")", path);
    if (root->type != FLD_YNODE_MAPPING)
        return fld__fail(FLD_ECONFIG, "%s:%u:%u: expected " OP_CONFIG_FORM ", not %s", path,
                         root->line, root->column, fld__json_describe(root, desc, sizeof desc));
    if ((rc = repeated_key(path, root, &dup, &first)) != FLD_OK)
        return rc;
    for (size_t i = 0; i + 1 < root->n; i += 2) {
        const struct fld_ynode *k = root->kids[i], *v = root->kids[i + 1];
        struct fld_order order;
        if (!is_name(k->text)) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s:%u:%u: invalid op name '%s' (names use only [A-Za-z0-9_.-])", path,
                           k->line, k->column, k->text);
            goto fail;
        }
        if (i == dup) {
            rc = fld__fail(FLD_ECONFIG, "%s:%u:%u: duplicate key '%s' (first at line %u)", path,
                           k->line, k->column, k->text, root->kids[first]->line);
            goto fail;
        }
        if (v->type != FLD_YNODE_SCALAR || v->style != FLD_YSTYLE_DOUBLE) {
            rc = fld__fail(FLD_ECONFIG,
                           "%s:%u:%u: the value of '%s' must be a JSON string of tokens "
                           "(\"vendor\" or \"vendor|reference\"; tokens " TOKENS "), not %s",
                           path, v->line, v->column, k->text,
                           fld__json_describe(v, desc, sizeof desc));
            goto fail;
        }
        snprintf(what, sizeof what, "%s:%u:%u", path, v->line, v->column);
        if ((rc = fld__parse_token_list(what, k->text, v->text, &order)) != FLD_OK)
            goto fail;
        snprintf(order.source, sizeof order.source, OP_CONFIG " (%s:%u)", path, k->line);
        if ((rc = orders_add(&orders, &cap, &order, path)) != FLD_OK)
            goto fail;
    }
    fld__orders_sort(&orders);
    *out = orders;
    return FLD_OK;
fail:
    fld__orders_free(&orders);
    return rc;
}

int fld__op_config_apply(struct fld_policy *p, const char *path)
{
    struct fld_ynode *root = NULL;
    struct fld_orders orders = {0, NULL};
    int rc = fld__json_load(path, path, &root);
    if (rc == FLD_OK)
        rc = read_op_config(path, root, &orders);
    fld__yaml_free(root);
    if (rc) {
        fld__error_prefix(OP_CONFIG);
        return rc;
    }
    /* The file's orders are the per-op orders, as in vllm-plugin-FL: the
     * orders of VLLM_FL_PER_OP and op_backends are replaced, not merged. An
     * empty object sets nothing (vllm-plugin-FL skips an empty mapping too). */
    if (orders.n == 0)
        return FLD_OK;
    fld__orders_free(&p->per_op);
    p->per_op = orders;
    snprintf(p->source[FLD_PF_PER_OP], FLD_SOURCE_LEN, "%s", OP_CONFIG);
    return FLD_OK;
}

int fld_policy_load_file(const char *path)
{
    FLD_CALL_SCOPE();
    static const char what[] = "fld_policy_load_file";
    struct fld_policy *p;
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!path || !*path)
        return fld__fail(FLD_EINVAL, "%s: argument 'path' is %s", what, path ? "empty" : "NULL");
    if (!(p = fld__policy_new_default()))
        return fld__fail(FLD_ENOMEM, "%s: out of memory", what);
    /* Parsed outside the lock: calls keep running on the old policy. */
    rc = fld__config_apply_file(p, path, path);
    if (rc == FLD_OK)
        rc = fld__policy_check(p);
    if (rc) {
        fld__error_prefix("%s", what);
        fld__policy_free(p);
        return rc;
    }
    fld__lock();
    rc = fld__policy_refuse_if_frozen(what);
    if (rc == FLD_OK && (rc = fld__names_check_policy(p)) != FLD_OK)
        fld__error_prefix("%s", what);
    if (rc == FLD_OK)
        fld__policy_publish(p);
    else
        fld__policy_free(p);
    fld__unlock();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The effective configuration, field by field                              */
/* ------------------------------------------------------------------------ */

/* A growable string; oom remembers a failed allocation. */
struct text {
    char *s;
    size_t len, cap;
    bool oom;
};

static void text_add(struct text *t, const char *s)
{
    size_t n = strlen(s);
    if (t->oom)
        return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *g = realloc(t->s, cap);
        if (!g) {
            t->oom = true;
            return;
        }
        t->s = g;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n + 1);
    t->len += n;
}

static void text_list(struct text *t, const struct fld_strlist *l)
{
    text_add(t, "");
    for (size_t i = 0; l->set && i < l->n; i++) {
        if (i)
            text_add(t, ",");
        text_add(t, l->items[i]);
    }
}

/* Calls fn with one field and empties value for the next. */
static int emit(int (*fn)(const fld_config_field *, void *), void *user, const char *key,
                struct text *value, const char *source)
{
    if (value->oom)
        return fld__fail(FLD_ENOMEM, "fld_foreach_config_field: out of memory");
    fld_config_field field = {key, value->s ? value->s : "", source};
    int r = fn(&field, user);
    value->len = 0;
    if (value->s)
        value->s[0] = '\0';
    return r;
}

int fld_foreach_config_field(int (*fn)(const fld_config_field *field, void *user), void *user)
{
    FLD_CALL_SCOPE();
    static const char *const prefer_names[] = {"flagos", "vendor", "reference"};
    static const enum fld_policy_field order[] = {
        FLD_PF_PREFER,
        FLD_PF_STRICT,
        FLD_PF_ENABLED,
        FLD_PF_USE_FLAGGEMS,
        FLD_PF_ALLOW_VENDORS,
        FLD_PF_DENY_VENDORS,
        FLD_PF_FLAGOS_WHITELIST,
        FLD_PF_FLAGOS_BLACKLIST,
        FLD_PF_OOT_ENABLED,
        FLD_PF_OOT_WHITELIST,
        FLD_PF_OOT_BLACKLIST,
        FLD_PF_EXTERNAL_ENABLED,
        FLD_PF_EXTERNAL_WHITELIST,
        FLD_PF_EXTERNAL_BLACKLIST,
        FLD_PF_CUSTOM_OPS,
    };
    struct text value = {NULL, 0, 0, false};
    char key[256];
    int r = fld__ensure_init();
    if (r)
        return r;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_config_field: argument 'fn' is NULL");
    /* A copy: fn may change the policy (set, push, pop) while it runs. */
    fld__read_begin();
    struct fld_policy *p = fld__policy_clone(fld__policy_effective());
    fld__read_end();
    if (!p)
        return fld__fail(FLD_ENOMEM, "fld_foreach_config_field: out of memory");
    struct fld_policy *mut = p; /* for the accessors; nothing is written */

    for (size_t i = 0; i < sizeof order / sizeof order[0] && !r; i++) {
        enum fld_policy_field f = order[i];
        if (f == FLD_PF_PREFER) {
            text_add(&value, prefer_names[(unsigned)p->prefer < 3 ? p->prefer : 0]);
        } else if (fld__policy_bool_field(mut, f)) {
            text_add(&value, *fld__policy_bool_field(mut, f) ? "true" : "false");
        } else if (fld__policy_list_field(mut, f)) {
            text_list(&value, fld__policy_list_field(mut, f));
        } else {
            size_t n = fld__custom_ops_format(&p->custom_ops, NULL, 0);
            char *buf = malloc(n + 1);
            if (!buf) {
                value.oom = true;
            } else {
                fld__custom_ops_format(&p->custom_ops, buf, n + 1);
                text_add(&value, buf);
                free(buf);
            }
        }
        r = emit(fn, user, key_name(f), &value, p->source[f]);
    }
    /* Orders, one entry each; with none, one entry says where that came from. */
    if (!r && p->per_op.n == 0) {
        text_add(&value, "");
        r = emit(fn, user, "op_backends", &value, p->source[FLD_PF_PER_OP]);
    }
    for (size_t i = 0; !r && i < p->per_op.n; i++) {
        const struct fld_order *o = &p->per_op.items[i];
        size_t n = fld__order_format(o, NULL, 0);
        char *buf = malloc(n + 1);
        if (!buf) {
            value.oom = true;
        } else {
            fld__order_format(o, buf, n + 1);
            text_add(&value, buf);
            free(buf);
        }
        snprintf(key, sizeof key, "op_backends.%s", o->op);
        r = emit(fn, user, key, &value, o->source[0] ? o->source : p->source[FLD_PF_PER_OP]);
    }
    if (!r && p->manifest) {
        text_add(&value, p->manifest->path ? p->manifest->path : "");
        r = emit(fn, user, "manifest", &value, "VLLM_FL_MANIFEST");
    }
    free(value.s);
    fld__policy_free(p);
    return r;
}
