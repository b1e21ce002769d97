/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the value grammars of the environment and of
 * fld_policy_set() / the scoped pushes (core/base/parse.c, core/policy/custom_ops.c).
 *
 * The input is split at NUL bytes into up to FUZZ_PIECES strings. Every
 * piece goes through every grammar on its own (booleans, prefer, name lists,
 * one token, a token list, VLLM_FL_PER_OP, custom_ops, device and dtype
 * names); then the pieces become the policy variables of the environment
 * (piece i is variable i; a missing piece leaves it blank, which reads as
 * unset) for fld__policy_apply_env(); and, with the library initialised
 * (reference kernels only), the scoped pushes, each undone by a pop.
 */
#include "fuzz_policy.h"

#define FUZZ_PIECES 16
#define VALUE_MAX   4096

static const char *const env_vars[] = {
    "VLLM_FL_PER_OP",
    "VLLM_FL_PREFER",
    "VLLM_FL_STRICT",
    "VLLM_FL_PREFER_ENABLED",
    "USE_FLAGGEMS",
    "VLLM_FL_ALLOW_VENDORS",
    "VLLM_FL_DENY_VENDORS",
    "VLLM_FL_FLAGOS_WHITELIST",
    "VLLM_FL_FLAGOS_BLACKLIST",
    "VLLM_FL_OOT_ENABLED",
    "VLLM_FL_OOT_WHITELIST",
    "VLLM_FL_OOT_BLACKLIST",
    "VLLM_FL_CUSTOM_OPS",
};
#define N_ENV (sizeof env_vars / sizeof env_vars[0])

/* Keys of fld__policy_set_field: the key names and, for some, the variable names. */
static const char *const keys[] = {
    "prefer",        "strict",        "enabled",          "use_flaggems",     "allow_vendors",
    "deny_vendors",  "per_op",        "flagos_whitelist", "flagos_blacklist", "oot_enabled",
    "oot_whitelist", "oot_blacklist", "custom_ops",       "VLLM_FL_PER_OP",   "VLLM_FL_CUSTOM_OPS",
    "no_such_key",
};

/*
 * putenv() strings that stay in the environment for the whole run and are
 * rewritten in place: setenv() would keep every old value (glibc never frees
 * them) and grow without bound over millions of inputs.
 */
static char env_strings[N_ENV][64 + VALUE_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_environment();
    for (size_t i = 0; i < N_ENV; i++) {
        snprintf(env_strings[i], sizeof env_strings[i], "%s=", env_vars[i]);
        putenv(env_strings[i]);
    }
    if (fld_init() != FLD_OK) {
        fprintf(stderr, "fuzz: fld_init: %s\n", fld_last_error());
        abort();
    }
    return 0;
}

static void set_env_value(size_t i, const char *value)
{
    size_t name_len = strlen(env_vars[i]) + 1;
    snprintf(env_strings[i] + name_len, sizeof env_strings[i] - name_len, "%s", value);
}

static void failed(int rc, const char *what)
{
    FUZZ_CHECK(rc == FLD_ECONFIG || rc == FLD_ENOMEM, "%s returned %d", what, rc);
    FUZZ_CHECK(fld_last_error()[0] != '\0', "%s: error %d without a message", what, rc);
}

static void grammars(const char *s, size_t index)
{
    int rc;
    bool b;
    int prefer;
    struct fld_strlist list;
    struct fld_token tok;
    struct fld_order order;
    struct fld_orders orders;
    struct fld_custom_ops custom;

    fld__error_clear();
    if ((rc = fld__parse_bool("FUZZ_BOOL", s, &b)) != FLD_OK)
        failed(rc, "fld__parse_bool");
    fld__error_clear();
    if ((rc = fld__parse_prefer("FUZZ_PREFER", s, &prefer)) == FLD_OK)
        FUZZ_CHECK(prefer >= 0 && prefer <= 2, "prefer %d", prefer);
    else
        failed(rc, "fld__parse_prefer");

    fld__error_clear();
    if ((rc = fld__parse_name_list("FUZZ_LIST", s, &list)) == FLD_OK) {
        fuzz_check_strlist(&list, "name list");
        for (size_t i = 0; i < list.n; i++)
            FUZZ_CHECK(!strchr(list.items[i], ','), "list item '%s' holds a comma", list.items[i]);
        struct fld_strlist copy = {0};
        FUZZ_CHECK(fld__strlist_copy(&copy, &list) == FLD_OK, "copy");
        FUZZ_CHECK(fld__strlist_merge(&copy, &list) == FLD_OK, "merge");
        FUZZ_CHECK(copy.n == list.n, "merging a list into its copy changed its length");
        fuzz_check_strlist(&copy, "merged list");
        fld__strlist_free(&copy);
        fld__strlist_free(&list);
    } else {
        failed(rc, "fld__parse_name_list");
    }

    fld__error_clear();
    if ((rc = fld__parse_token("FUZZ_TOKEN", s, &tok)) == FLD_OK) {
        FUZZ_CHECK((tok.arg != NULL) ==
                       (tok.kind == FLD_TOKEN_VENDOR_NAME || tok.kind == FLD_TOKEN_IMPL),
                   "token kind %d with arg %p", (int)tok.kind, (void *)tok.arg);
        free(tok.arg);
    } else {
        failed(rc, "fld__parse_token");
    }

    fld__error_clear();
    if ((rc = fld__parse_token_list("FUZZ_ORDER", "fuzz_op", s, &order)) == FLD_OK) {
        fuzz_check_order(&order);
        fld__order_free(&order);
    } else {
        failed(rc, "fld__parse_token_list");
    }

    fld__error_clear();
    if ((rc = fld__parse_per_op("FUZZ_PER_OP", s, &orders)) == FLD_OK) {
        fuzz_check_orders(&orders);
        struct fld_orders copy = {0, NULL};
        FUZZ_CHECK(fld__orders_copy(&copy, &orders) == FLD_OK, "copy");
        FUZZ_CHECK(fld__orders_merge(&copy, &orders) == FLD_OK, "merge");
        FUZZ_CHECK(copy.n == orders.n, "merging orders into their copy changed their number");
        fuzz_check_orders(&copy);
        fld__orders_free(&copy);
        fld__orders_free(&orders);
    } else {
        failed(rc, "fld__parse_per_op");
    }

    fld__error_clear();
    if ((rc = fld__custom_ops_parse("FUZZ_CUSTOM_OPS", s, &custom)) == FLD_OK) {
        fuzz_check_custom(&custom);
        fld__custom_ops_free(&custom);
    } else {
        failed(rc, "fld__custom_ops_parse");
    }

    int dev;
    DLDataType dt;
    if (fld_device_from_name(s, &dev) == FLD_OK)
        FUZZ_CHECK(fld_device_name(dev) != NULL, "device '%s' parsed to %d, which has no name", s,
                   dev);
    if (fld_dtype_from_name(s, &dt) == FLD_OK)
        FUZZ_CHECK(fld_dtype_name(dt) != NULL, "dtype '%s' parsed to one without a name", s);

    /* One field of a policy by key; on error the policy is unchanged. */
    struct fld_policy *p = fld__policy_new_default();
    FUZZ_CHECK(p != NULL, "out of memory");
    struct fuzz_policy_snapshot before, after;
    fuzz_snapshot(p, &before);
    const char *key = keys[index % (sizeof keys / sizeof keys[0])];
    fld__error_clear();
    if ((rc = fld__policy_set_field(p, key, s, "fuzz")) == FLD_OK) {
        fuzz_check_policy(p);
    } else {
        failed(rc, "fld__policy_set_field");
        fuzz_snapshot(p, &after);
        FUZZ_CHECK(fuzz_snapshot_equal(&before, &after), "failed set of '%s' changed the policy",
                   key);
    }
    fld__policy_free(p);
}

static void scoped(const char *const *piece, size_t n)
{
    int pushed = 0;
    for (size_t i = 0; i < n; i++) {
        int rc;
        switch (i % 5) {
        case 0:
            rc = fld_policy_push_preference(piece[i]);
            break;
        case 1:
            rc = fld_policy_push_allowed_vendors(piece[i]);
            break;
        case 2:
            rc = fld_policy_push_denied_vendors(piece[i]);
            break;
        case 3:
            rc = fld_policy_push_per_op(piece[i]);
            break;
        default:
            rc = fld_policy_push_strict(piece[i][0] & 1);
            break;
        }
        if (rc == FLD_OK) {
            pushed++;
            char line[256];
            fld_policy_describe(line, sizeof line);
        } else {
            failed(rc, "fld_policy_push_*");
        }
    }
    /* A call under the pushed policy picks something, or says why not. */
    const char *impl = NULL;
    int rc = fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &impl);
    FUZZ_CHECK(rc == FLD_OK || rc == FLD_EUNAVAILABLE, "fld_resolve returned %d", rc);
    while (pushed--)
        FUZZ_CHECK(fld_policy_pop() == FLD_OK, "pop of a successful push failed");
    FUZZ_CHECK(fld_policy_pop() == FLD_ESTATE, "pop with nothing pushed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A NUL-terminated copy, so the last piece ends too. */
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    const char *piece[FUZZ_PIECES];
    size_t n = 0;
    for (char *s = text; n < FUZZ_PIECES && s <= text + size; s += strlen(s) + 1)
        piece[n++] = s;

    for (size_t i = 0; i < n; i++)
        grammars(piece[i], i);

    for (size_t i = 0; i < N_ENV; i++)
        set_env_value(i, i < n ? piece[i] : "");
    struct fld_policy *p = fld__policy_new_default();
    FUZZ_CHECK(p != NULL, "out of memory");
    fld__error_clear();
    int rc = fld__policy_apply_env(p);
    if (rc == FLD_OK)
        fuzz_check_policy(p);
    else
        failed(rc, "fld__policy_apply_env");
    fld__policy_free(p);
    for (size_t i = 0; i < N_ENV; i++)
        set_env_value(i, "");

    scoped(piece, n);
    free(text);
    return 0;
}
