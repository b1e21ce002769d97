/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy-field table: one row per field of the selection policy. Every
 * list and switch over the fields (their enum, key and variable names, the
 * YAML schema, default, free, clone, parse, the exclusive white/black pairs,
 * the fingerprint, the `fldispatch config` report, the Python package's key
 * lists) is an expansion of this table or a loop over the enum it makes.
 *
 * A new policy variable is one row here plus its meaning: the member of
 * struct fld_policy (policy.h) the row names, and the code that reads it.
 *
 * Columns of X(id, key, env, yaml, kind, member, partner, word, origin):
 *   id       FLD_PF_<id>, the field's index
 *   key      fld_policy_set()'s key and the report's key
 *   env      the environment variable that sets it (policy_sources.c reads it)
 *   yaml     its key in a YAML policy file (config.c)
 *   kind     its grammar and storage, FLD_PK_<kind>:
 *              PREFER   one of flagos, vendor, reference  enum fld_prefer
 *              FLAG     1/0, true/false (VLLM_FL_STRICT) bool, default false
 *              SWITCH   a boolean word                     bool, default true
 *              NAMES    a list of op names                 struct fld_strlist
 *              VENDORS  a list of vendor names, lowercased struct fld_strlist
 *              ORDERS   per-op token orders                struct fld_orders
 *              CUSTOM   vLLM's custom_ops list             struct fld_custom_ops
 *   member   the member of struct fld_policy that holds it
 *   partner  the field it excludes (a whitelist's blacklist and back), or NONE
 *   word     its word in fld_policy_describe()'s text
 *   origin   UPSTREAM: vllm-plugin-FL's policy files know the YAML key;
 *            OWN: fldispatch's (listed after the others in messages)
 *
 * The row order is the order of the report and of the fingerprint's
 * switches and lists; the orders (ORDERS) are reported last, one entry per op.
 */
#ifndef FLD_CORE_POLICY_TABLE_H
#define FLD_CORE_POLICY_TABLE_H

/* clang-format off */
#define FLD_POLICY_FIELDS(X)                                                                        \
    X(PREFER, "prefer", "VLLM_FL_PREFER", "prefer", PREFER, prefer, NONE, "prefer", UPSTREAM)      \
    X(STRICT, "strict", "VLLM_FL_STRICT", "strict", FLAG, strict, NONE, "strict", UPSTREAM)        \
    X(ENABLED, "enabled", "VLLM_FL_PREFER_ENABLED", "enabled", SWITCH, enabled, NONE, "enabled",   \
      OWN)                                                                                          \
    X(USE_FLAGGEMS, "use_flaggems", "USE_FLAGGEMS", "use_flaggems", SWITCH, use_flaggems, NONE,    \
      "flaggems", OWN)                                                                              \
    X(ALLOW_VENDORS, "allow_vendors", "VLLM_FL_ALLOW_VENDORS", "allow_vendors", VENDORS,           \
      allow_vendors, NONE, "allow", UPSTREAM)                                                       \
    X(DENY_VENDORS, "deny_vendors", "VLLM_FL_DENY_VENDORS", "deny_vendors", VENDORS, deny_vendors, \
      NONE, "deny", UPSTREAM)                                                                       \
    X(FLAGOS_WHITELIST, "flagos_whitelist", "VLLM_FL_FLAGOS_WHITELIST", "flagos_whitelist", NAMES, \
      flagos_whitelist, FLAGOS_BLACKLIST, "flagos_white", UPSTREAM)                                 \
    X(FLAGOS_BLACKLIST, "flagos_blacklist", "VLLM_FL_FLAGOS_BLACKLIST", "flagos_blacklist", NAMES, \
      flagos_blacklist, FLAGOS_WHITELIST, "flagos_black", UPSTREAM)                                 \
    X(OOT_ENABLED, "oot_enabled", "VLLM_FL_OOT_ENABLED", "oot_enabled", SWITCH, oot_enabled, NONE, \
      "oot", OWN)                                                                                   \
    X(OOT_WHITELIST, "oot_whitelist", "VLLM_FL_OOT_WHITELIST", "oot_whitelist", NAMES,             \
      oot_whitelist, OOT_BLACKLIST, "oot_white", UPSTREAM)                                          \
    X(OOT_BLACKLIST, "oot_blacklist", "VLLM_FL_OOT_BLACKLIST", "oot_blacklist", NAMES,             \
      oot_blacklist, OOT_WHITELIST, "oot_black", UPSTREAM)                                          \
    X(EXTERNAL_ENABLED, "external_enabled", "VLLM_FL_EXTERNAL_ENABLED", "external_enabled",        \
      SWITCH, external_enabled, NONE, "external", OWN)                                              \
    X(EXTERNAL_WHITELIST, "external_whitelist", "VLLM_FL_EXTERNAL_WHITELIST",                      \
      "external_whitelist", NAMES, external_whitelist, EXTERNAL_BLACKLIST, "external_white", OWN)   \
    X(EXTERNAL_BLACKLIST, "external_blacklist", "VLLM_FL_EXTERNAL_BLACKLIST",                      \
      "external_blacklist", NAMES, external_blacklist, EXTERNAL_WHITELIST, "external_black", OWN)   \
    X(PER_OP, "per_op", "VLLM_FL_PER_OP", "op_backends", ORDERS, per_op, NONE, "per", UPSTREAM)    \
    X(CUSTOM_OPS, "custom_ops", "VLLM_FL_CUSTOM_OPS", "custom_ops", CUSTOM, custom_ops, NONE,      \
      "custom", UPSTREAM)
/* clang-format on */

/* The field indexes, in row order. */
enum fld_policy_field {
#define FLD__PF_ENUM(id, key, env, yaml, kind, member, partner, word, origin) FLD_PF_##id,
    FLD_POLICY_FIELDS(FLD__PF_ENUM)
#undef FLD__PF_ENUM
        FLD_PF_COUNT,
    FLD_PF_NONE = -1 /* the partner of a field that has none */
};

/*
 * The value kinds, X(id, name): FLD_PK_<id>, and <name> its word in the
 * tool rows. Each kind is a row of policy.c's kind table (its storage:
 * default, text grammar, copy, merge, report text, free) and of config.c's
 * YAML readers; both are expansions of this list, so a kind that lacks
 * either does not compile.
 */
#define FLD_POLICY_KINDS(X)                                                                        \
    X(PREFER, prefer)                                                                              \
    X(FLAG, flag)                                                                                  \
    X(SWITCH, switch)                                                                              \
    X(NAMES, names)                                                                                \
    X(VENDORS, vendors)                                                                            \
    X(ORDERS, orders)                                                                              \
    X(CUSTOM, custom)

enum fld_policy_kind {
#define FLD__PK_ENUM(id, name) FLD_PK_##id,
    FLD_POLICY_KINDS(FLD__PK_ENUM)
#undef FLD__PK_ENUM
        FLD_PK_COUNT
};

enum fld_policy_origin { FLD_PO_UPSTREAM, FLD_PO_OWN };

/*
 * Storage selectors for expansions: FLD__PF_IF_BOOL_<kind>(x) is x when
 * that kind is stored as a bool, else nothing; likewise for a name list.
 * They let one expansion of the table write a switch over the members of
 * one type (policy.c's accessors).
 */
#define FLD__PF_IF_BOOL_PREFER(x)
#define FLD__PF_IF_BOOL_FLAG(x)   x
#define FLD__PF_IF_BOOL_SWITCH(x) x
#define FLD__PF_IF_BOOL_NAMES(x)
#define FLD__PF_IF_BOOL_VENDORS(x)
#define FLD__PF_IF_BOOL_ORDERS(x)
#define FLD__PF_IF_BOOL_CUSTOM(x)
#define FLD__PF_IF_LIST_PREFER(x)
#define FLD__PF_IF_LIST_FLAG(x)
#define FLD__PF_IF_LIST_SWITCH(x)
#define FLD__PF_IF_LIST_NAMES(x)   x
#define FLD__PF_IF_LIST_VENDORS(x) x
#define FLD__PF_IF_LIST_ORDERS(x)
#define FLD__PF_IF_LIST_CUSTOM(x)

/* One row as data (policy.c holds the array, fld__policy_row() reads it). */
struct fld_policy_row {
    const char *key, *env, *yaml, *word;
    enum fld_policy_kind kind;
    enum fld_policy_field partner;
    enum fld_policy_origin origin;
};

/* Row f of the table, or NULL when f is not a field. */
const struct fld_policy_row *fld__policy_row(enum fld_policy_field f);

/* The rows for the tool and the Python extension: fld__policy_field_row()
 * (include/fldispatch/internal/tool_api.h), with the kinds' names. */

#endif
