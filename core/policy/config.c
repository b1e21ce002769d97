/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy files, the policy-file schema only (config.h): YAML policy files
 * read against the keys of the policy-field table (policy_table.h),
 * VLLM_FL_OP_CONFIG's JSON file, and fld_policy_load_file(). The sources and
 * their precedence are policy_sources.c's; the report of the effective
 * configuration is config_report.c's.
 *
 * A file is read in two steps: the whole document is checked and converted
 * into a `struct policy_source` first, and only a source without a single error is
 * committed onto a policy. That is what makes "nothing is ever half-applied"
 * hold without undo code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <fldispatch/fldispatch.h>

#include "config.h"
#include "config_tree.h"
#include "custom_ops.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "log.h"
#include "names.h"
#include "policy.h"

#define BOOL_WORDS "true, false, yes, no, on, off"
#define ORDER_FORM "a sequence of tokens or an \"a|b\" string"
#define TOKENS     "flagos, vendor, vendor:NAME, reference, impl:ID"
#define OP_CONFIG  "VLLM_FL_OP_CONFIG"
#define ACTION_KEY "action"

/* The valid keys of a policy file, from the field table: vllm-plugin-FL's
 * first, then fldispatch's own (without them VLLM_FL_CONFIG, a complete
 * override, could not express those fields at all). Each key is preceded
 * by ", "; yaml_keys_text() skips the first. */
#define YAML_KEY_UPSTREAM(yaml) ", " yaml
#define YAML_KEY_OWN(yaml)
#define OWN_KEY_UPSTREAM(yaml)
#define OWN_KEY_OWN(yaml) ", " yaml
#define UPSTREAM_KEY(id, key, env, yaml, kind, member, partner, word, origin)                      \
    YAML_KEY_##origin(yaml)
#define OWN_KEY(id, key, env, yaml, kind, member, partner, word, origin) OWN_KEY_##origin(yaml)
static const char yaml_keys_list[] = FLD_POLICY_FIELDS(UPSTREAM_KEY) FLD_POLICY_FIELDS(OWN_KEY);
#define YAML_KEYS (yaml_keys_list + 2)

/* The field whose YAML key is name, or FLD_PF_NONE. */
static enum fld_policy_field yaml_field(const char *name)
{
    for (int f = 0; f < FLD_PF_COUNT; f++)
        if (strcmp(name, fld__policy_row(f)->yaml) == 0)
            return (enum fld_policy_field)f;
    return FLD_PF_NONE;
}

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
    return fld__policy_row(f)->yaml;
}

/* ------------------------------------------------------------------------ */
/* Reading a policy document into a source                                  */
/* ------------------------------------------------------------------------ */

/* One file's settings, complete and checked before anything is applied. */
struct policy_source {
    const char *label;
    bool has[FLD_PF_COUNT];
    unsigned line[FLD_PF_COUNT], column[FLD_PF_COUNT]; /* of each key */
    /* The values of the keys the file has (orders each with its
     * "label:line" source); the others are defaults, never applied. */
    struct fld_policy *values;
};

static void source_free(struct policy_source *l)
{
    fld__policy_free(l->values);
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

static int read_prefer(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    char what[512];
    const char *text;
    int prefer;
    int rc = read_string(label, key, n, "one of flagos, vendor, reference", &text);
    if (rc == FLD_OK)
        rc = fld__parse_prefer(where(what, sizeof what, label, n, key), text, &prefer);
    if (rc == FLD_OK)
        *(enum fld_prefer *)out = (enum fld_prefer)prefer;
    return rc;
}

/* A flag and a switch take the same YAML booleans. */
static int read_flag(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    return read_bool(label, key, n, out);
}

static int read_switch(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    return read_bool(label, key, n, out);
}

static int read_names(const char *label, const char *key, const struct fld_ynode *n, void *out)
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
    *(struct fld_strlist *)out = list;
    return FLD_OK;
fail:
    fld__strlist_free(&list);
    return rc;
}

/* Vendor names compare without case: the lists hold them lowercase. */
static int read_vendors(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    int rc = read_names(label, key, n, out);
    if (rc == FLD_OK)
        fld__strlist_lower(out);
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

static int read_orders(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    char what[512], desc[256], keybuf[256];
    struct fld_orders orders = {0, NULL};
    size_t cap = 0, dup, first;
    int rc;

    (void)key; /* op_backends: the messages spell it */
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
    *(struct fld_orders *)out = orders;
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
static int read_custom(const char *label, const char *key, const struct fld_ynode *n, void *out)
{
    static const char form[] = "a sequence of all, none, +OP, -OP or a comma-separated string";
    struct fld_custom_ops_reader r;
    char what[512];
    const char *text, **names = NULL;
    unsigned char *sides = NULL;
    size_t done, at, first;
    int rc = FLD_OK;

    (void)key; /* custom_ops: the messages spell it */
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
    *(struct fld_custom_ops *)out = r.ops;
    return FLD_OK;
fail:
    free(names);
    free(sides);
    fld__custom_ops_free(&r.ops);
    return rc;
}

/* The YAML grammar of each value kind (FLD_POLICY_KINDS), into a value of
 * that kind (a temporary: written only on success). */
typedef int (*yaml_reader)(const char *label, const char *key, const struct fld_ynode *n,
                           void *out);
#define READER(id, name) [FLD_PK_##id] = read_##name,
static const yaml_reader readers[FLD_PK_COUNT] = {FLD_POLICY_KINDS(READER)};
#undef READER

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

static int read_source(const char *label, const struct fld_ynode *root, struct policy_source *l)
{
    char desc[256];
    unsigned action_line = 0;
    int rc;

    memset(l, 0, sizeof *l);
    l->label = label;
    if (!(l->values = fld__policy_new_default()))
        return oom(label);
    if (!root || is_null(root))
        return fld__fail(FLD_ECONFIG,
                         "%s:%u:%u: empty %s (expected a mapping of policy keys; valid keys: %s)",
                         label, root ? root->line : 1, root ? root->column : 1,
                         root ? "document" : "file", YAML_KEYS);
    if (root->type != FLD_YNODE_MAPPING)
        return fld__fail(FLD_ECONFIG,
                         "%s:%u:%u: expected a mapping of policy keys, not %s (valid keys: %s)",
                         label, root->line, root->column,
                         fld__ynode_describe(root, desc, sizeof desc), YAML_KEYS);
    for (size_t i = 0; i + 1 < root->n; i += 2) {
        const struct fld_ynode *k = root->kids[i], *v = root->kids[i + 1];
        if (k->type != FLD_YNODE_SCALAR || is_null(k))
            return fld__fail(FLD_ECONFIG, "%s:%u:%u: a key must be a string, not %s (valid: %s)",
                             label, k->line, k->column, fld__ynode_describe(k, desc, sizeof desc),
                             YAML_KEYS);
        enum fld_policy_field f = yaml_field(k->text);
        if (f == FLD_PF_NONE && strcmp(k->text, ACTION_KEY) == 0) {
            if ((rc = read_action(label, k, v, &action_line)) != FLD_OK)
                return rc;
            continue;
        }
        if (f == FLD_PF_NONE) {
            const char *keys[FLD_PF_COUNT + 1];
            for (int j = 0; j < FLD_PF_COUNT; j++)
                keys[j] = fld__policy_row(j)->yaml;
            keys[FLD_PF_COUNT] = ACTION_KEY;
            char hint[256];
            fld__did_you_mean(k->text, keys, FLD_PF_COUNT + 1, hint, sizeof hint);
            return fld__fail(FLD_ECONFIG, "%s:%u:%u: unknown key '%s'%s (valid: %s)", label,
                             k->line, k->column, k->text, hint, YAML_KEYS);
        }
        const char *name = key_name(f);
        if (l->has[f])
            return fld__fail(FLD_ECONFIG, "%s:%u:%u: duplicate key '%s' (first at line %u)", label,
                             k->line, k->column, name, l->line[f]);
        union fld_policy_value value;
        if ((rc = readers[fld__policy_row(f)->kind](label, name, v, &value)) != FLD_OK)
            return rc;
        fld__policy_put_value(l->values, f, &value);
        l->has[f] = true;
        l->line[f] = k->line;
        l->column[f] = k->column;
    }
    for (int i = 0; i < FLD_PF_COUNT; i++) {
        enum fld_policy_field a = (enum fld_policy_field)i, b = fld__policy_row(a)->partner;
        if (b <= a || !l->has[a] || !l->has[b]) /* each exclusive pair once */
            continue;
        enum fld_policy_field later = l->line[a] > l->line[b] ? a : b;
        enum fld_policy_field other = later == a ? b : a;
        return fld__fail(
            FLD_ECONFIG, "%s:%u:%u: %s and %s (line %u) are both set; set only one of them", label,
            l->line[later], l->column[later], key_name(later), key_name(other), l->line[other]);
    }
    return FLD_OK;
}

/* Moves a checked source onto p. p is untouched when this fails (memory). */
static int source_commit(struct fld_policy *p, struct policy_source *l)
{
    /* Per op: the file's orders replace those of the same ops only. Merged
     * first, so that nothing below can fail. */
    for (int f = 0; f < FLD_PF_COUNT; f++)
        if (l->has[f] && fld__policy_row(f)->kind == FLD_PK_ORDERS &&
            fld__policy_merge_onto(l->values, p, f) != FLD_OK)
            return oom(l->label);
    for (int f = 0; f < FLD_PF_COUNT; f++) {
        if (!l->has[f])
            continue;
        fld__policy_swap_value(p, l->values, f);
        snprintf(p->source[f], FLD_SOURCE_LEN, "%s:%u", l->label, l->line[f]);
    }
    /* A list set here replaces its pair from a lower source: the platform
     * file's flagos_blacklist must not make a whitelist set here an error. */
    for (int i = 0; i < FLD_PF_COUNT; i++) {
        enum fld_policy_field set = (enum fld_policy_field)i, other = fld__policy_row(set)->partner;
        if (other != FLD_PF_NONE) {
            if (l->has[set] && !l->has[other] && fld__policy_list(p, other)->set) {
                fld__strlist_free(fld__policy_list_mut(p, other));
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
    struct policy_source l;
    if (!label)
        label = path;
    int rc = fld__yaml_load(path, label, &root);
    if (rc)
        return rc;
    rc = read_source(label, root, &l);
    fld__yaml_free(root);
    if (rc == FLD_OK)
        rc = source_commit(p, &l);
    source_free(&l);
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
