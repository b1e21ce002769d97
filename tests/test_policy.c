/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy: environment variables and their grammars, fld_policy_set and
 * fld_policy_reset, scoped overrides, fingerprints, and the policy's effect
 * on selection (through an in-process plugin registering "test_op").
 *
 * Every test forks (CK_FORK), so each starts with a fresh library; the
 * fixture clears the policy variables and points VLLM_FL_PLUGIN_DIR at an
 * empty directory so the real plugins stay out.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/env.h"
#include "util/harness.h"
#include <fldispatch/plugin.h>

#define DEFAULT_DESCRIPTION "prefer=flagos;strict=0"

static char plugin_dir[64];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(plugin_dir, "/tmp/fld-test-policy-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(plugin_dir));
    setenv("VLLM_FL_PLUGIN_DIR", plugin_dir, 1);
    /* The cpu platform file only restates the defaults; auto-detection on a
     * machine with an accelerator would bring in that platform's file. */
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    /* Warnings of failed loads etc. are not what these tests look at. */
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
}

static void teardown(void)
{
    rmdir(plugin_dir);
}

/* The calling thread's effective policy, as a string. */
static const char *describe(void)
{
    static _Thread_local char buf[1024];
    size_t n = fld_policy_describe(buf, sizeof buf);
    ck_assert_uint_lt(n, sizeof buf);
    ck_assert_uint_eq(n, strlen(buf));
    return buf;
}

#define assert_error_has(s)                                                                        \
    ck_assert_msg(strstr(fld_last_error(), (s)) != NULL, "'%s' not in last error: %s", (s),        \
                  fld_last_error())

/* ------------------------------------------------------------------------ */
/* A plugin for selection tests: test_op with one impl of each kind.        */
/* ------------------------------------------------------------------------ */

static int ok_fn(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int register_test_impls(fld_registry *reg)
{
    static const fld_impl impls[] = {
        {"test_op", "default.flagos", FLD_KIND_DEFAULT, NULL, FLD_PRIORITY_DEFAULT,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
        {"test_op", "vendor.amd", FLD_KIND_VENDOR, "amd", FLD_PRIORITY_VENDOR, FLD_DEVICE_MASK_CPU,
         FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
        {"test_op", "vendor.intel", FLD_KIND_VENDOR, "intel", FLD_PRIORITY_VENDOR,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
        {"test_op", "reference.test", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, ok_fn, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        int rc = fld_registry_register(reg, &impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor test_plugin = {FLD_PLUGIN_MAGIC,
                                                  FLD_PLUGIN_ABI_MAJOR,
                                                  FLD_PLUGIN_ABI_MINOR,
                                                  sizeof(fld_plugin_descriptor),
                                                  0,
                                                  "testpol",
                                                  "1.0",
                                                  FLD_VERSION_STRING,
                                                  register_test_impls};

static void register_test_plugin(void)
{
    int rc = fld_register_plugin(&test_plugin);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin: %d %s", rc, fld_last_error());
}

/* The winning impl_id of test_op on CPU, or NULL when none qualifies. */
static const char *winner(void)
{
    const char *id = NULL;
    int rc = fld_resolve("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &id);
    if (rc == FLD_EUNAVAILABLE)
        return NULL;
    ck_assert_msg(rc == FLD_OK, "fld_resolve: %d %s", rc, fld_last_error());
    ck_assert_ptr_nonnull(id);
    return id;
}

#define assert_winner(expected)                                                                    \
    do {                                                                                           \
        const char *w_ = winner();                                                                 \
        const char *e_ = (expected);                                                               \
        ck_assert_msg(e_ ? (w_ && strcmp(w_, e_) == 0) : w_ == NULL,                               \
                      "winner is %s, expected %s (policy %s)", w_ ? w_ : "none", e_ ? e_ : "none", \
                      describe());                                                                 \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Defaults and the environment                                             */
/* ------------------------------------------------------------------------ */

START_TEST(test_defaults)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);

    /* Truncation: NUL-terminated, full length returned. */
    char small[8];
    memset(small, 'x', sizeof small);
    ck_assert_uint_eq(fld_policy_describe(small, sizeof small), strlen(DEFAULT_DESCRIPTION));
    ck_assert_str_eq(small, "prefer=");
    ck_assert_uint_eq(fld_policy_describe(NULL, 0), strlen(DEFAULT_DESCRIPTION));
}
END_TEST

struct env_case {
    const char *var;
    const char *value;
    const char *expected; /* fld_policy_describe() afterwards */
};

static const struct env_case valid_env[] = {
    {"VLLM_FL_PREFER", "vendor", "prefer=vendor;strict=0"},
    {"VLLM_FL_PREFER", " Reference ", "prefer=reference;strict=0"},
    {"VLLM_FL_PREFER", "FLAGOS", "prefer=flagos;strict=0"},
    /* VLLM_FL_STRICT takes 0 or 1 only, as vllm-plugin-FL reads it. */
    {"VLLM_FL_STRICT", "1", "prefer=flagos;strict=1"},
    {"VLLM_FL_STRICT", " 1 ", "prefer=flagos;strict=1"},
    {"VLLM_FL_STRICT", "0", "prefer=flagos;strict=0"},
    /* Switches: 1/true and 0/false, any case. */
    {"VLLM_FL_PREFER_ENABLED", "false", "prefer=flagos;strict=0;enabled=0"},
    {"VLLM_FL_PREFER_ENABLED", "0", "prefer=flagos;strict=0;enabled=0"},
    {"VLLM_FL_PREFER_ENABLED", "FALSE", "prefer=flagos;strict=0;enabled=0"},
    {"VLLM_FL_PREFER_ENABLED", "True", DEFAULT_DESCRIPTION},
    {"VLLM_FL_PREFER_ENABLED", "true", DEFAULT_DESCRIPTION},
    {"USE_FLAGGEMS", "false", "prefer=flagos;strict=0;flaggems=0"},
    {"USE_FLAGGEMS", "0", "prefer=flagos;strict=0;flaggems=0"},
    {"USE_FLAGGEMS", "1", DEFAULT_DESCRIPTION},
    {"VLLM_FL_OOT_ENABLED", "false", "prefer=flagos;strict=0;oot=0"},
    {"VLLM_FL_OOT_ENABLED", "0", "prefer=flagos;strict=0;oot=0"},
    {"VLLM_FL_EXTERNAL_ENABLED", "False", "prefer=flagos;strict=0;external=0"},
    /* Set but blank counts as unset, as for every variable here (vllm-plugin-FL turns these
     * switches off: listed in the user guide's differences). */
    {"VLLM_FL_PREFER_ENABLED", "", DEFAULT_DESCRIPTION},
    {"USE_FLAGGEMS", " ", DEFAULT_DESCRIPTION},
    {"VLLM_FL_OOT_ENABLED", "", DEFAULT_DESCRIPTION},
    {"VLLM_FL_STRICT", "", DEFAULT_DESCRIPTION},
    {"VLLM_FL_ALLOW_VENDORS", "cuda, amd", "prefer=flagos;strict=0;allow=amd,cuda"},
    /* Vendor names compare without case: kept lowercase. */
    {"VLLM_FL_DENY_VENDORS", "AMD,Intel", "prefer=flagos;strict=0;deny=amd,intel"},
    {"VLLM_FL_DENY_VENDORS", "AMD,amd", "prefer=flagos;strict=0;deny=amd"},
    {"VLLM_FL_DENY_VENDORS", "intel,amd,intel", "prefer=flagos;strict=0;deny=amd,intel"},
    {"VLLM_FL_DENY_VENDORS", "", DEFAULT_DESCRIPTION},
    {"VLLM_FL_ALLOW_VENDORS", "   ", DEFAULT_DESCRIPTION},
    {"VLLM_FL_FLAGOS_WHITELIST", "silu_and_mul,rms_norm",
     "prefer=flagos;strict=0;flagos_white=rms_norm,silu_and_mul"},
    {"VLLM_FL_FLAGOS_BLACKLIST", "rms_norm", "prefer=flagos;strict=0;flagos_black=rms_norm"},
    {"VLLM_FL_OOT_WHITELIST", "rms_norm", "prefer=flagos;strict=0;oot_white=rms_norm"},
    {"VLLM_FL_OOT_BLACKLIST", "a.b-c_d", "prefer=flagos;strict=0;oot_black=a.b-c_d"},
    {"VLLM_FL_EXTERNAL_WHITELIST", "rms_norm", "prefer=flagos;strict=0;external_white=rms_norm"},
    {"VLLM_FL_EXTERNAL_BLACKLIST", "rms_norm,x",
     "prefer=flagos;strict=0;external_black=rms_norm,x"},
    {"VLLM_FL_PER_OP", "rms_norm=vendor|reference",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference"},
    {"VLLM_FL_PER_OP", "rms_norm=vendor|reference;",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference"},
    {"VLLM_FL_PER_OP", " silu_and_mul = Vendor:cuda | impl:reference.c ; rms_norm=FLAGOS ; ",
     "prefer=flagos;strict=0;per=rms_norm=flagos;silu_and_mul=vendor:cuda|impl:reference.c"},
    {"VLLM_FL_PER_OP", "x=vendor:CUDA|vendor:amd|vendor",
     "prefer=flagos;strict=0;per=x=vendor:cuda|vendor:amd|vendor"},
    /* A repeated token selects nothing its first occurrence did not: dropped, as it has no
     * effect in vllm-plugin-FL either (case folded as the tokens are). */
    {"VLLM_FL_PER_OP",
     "rms_norm=vendor|Reference|VENDOR|impl:a.b|reference|impl:a.b|vendor:X|vendor:x",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference|impl:a.b|vendor:x"},
    {"VLLM_FL_PER_OP", "rms_norm=impl:a.B|impl:a.b",
     "prefer=flagos;strict=0;per=rms_norm=impl:a.B|impl:a.b"},
    {"VLLM_FL_PER_OP", "", DEFAULT_DESCRIPTION},
    {"VLLM_FL_CUSTOM_OPS", "none,+rms_norm", "prefer=flagos;strict=0;custom=none,+rms_norm"},
    {"VLLM_FL_CUSTOM_OPS", " -silu_and_mul , All ",
     "prefer=flagos;strict=0;custom=all,-silu_and_mul"},
    {"VLLM_FL_CUSTOM_OPS", "all", DEFAULT_DESCRIPTION},
    {"VLLM_FL_CUSTOM_OPS", " ", DEFAULT_DESCRIPTION},
};

START_TEST(test_env_valid)
{
    const struct env_case *c = &valid_env[_i];
    setenv(c->var, c->value, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "%s='%s': %d %s", c->var, c->value, rc, fld_last_error());
    ck_assert_str_eq(describe(), c->expected);
}
END_TEST

struct bad_env_case {
    const char *var;
    const char *value;
    const char *needles[3]; /* in fld_last_error(), besides the variable's name */
};

#define SWITCH_LIST "1, 0, true, false"
#define FLAG_LIST   "valid: 0, 1"
#define TOKEN_LIST  "flagos, vendor, vendor:NAME, reference, impl:ID"

static const struct bad_env_case invalid_env[] = {
    {"VLLM_FL_PREFER", "fast", {"'fast'", "flagos, vendor, reference"}},
    {"VLLM_FL_PREFER", "flagos,vendor", {"'flagos,vendor'", "flagos, vendor, reference"}},
    {"VLLM_FL_STRICT", "maybe", {"'maybe'", FLAG_LIST}},
    {"VLLM_FL_STRICT", "2", {"'2'", FLAG_LIST}},
    /* vllm-plugin-FL turns 'true' off here; on would be the opposite. */
    {"VLLM_FL_STRICT", "true", {"'true'", FLAG_LIST, "turns 'true' off"}},
    {"VLLM_FL_STRICT", "yes", {"'yes'", FLAG_LIST}},
    {"VLLM_FL_PREFER_ENABLED", "enabled", {"'enabled'", SWITCH_LIST}},
    /* vllm-plugin-FL reads 'yes' and 'on' as off: refused, not read as on. */
    {"VLLM_FL_PREFER_ENABLED", "yes", {"'yes'", SWITCH_LIST}},
    {"USE_FLAGGEMS", "y", {"'y'", SWITCH_LIST}},
    {"USE_FLAGGEMS", "on", {"'on'", SWITCH_LIST}},
    {"VLLM_FL_OOT_ENABLED", "nope", {"'nope'", SWITCH_LIST}},
    {"VLLM_FL_OOT_ENABLED", "No", {"'No'", SWITCH_LIST}},
    {"VLLM_FL_EXTERNAL_ENABLED", "off", {"'off'", SWITCH_LIST}},
    {"VLLM_FL_ALLOW_VENDORS", "cuda,,amd", {"empty item", "'cuda,,amd'"}},
    {"VLLM_FL_ALLOW_VENDORS", "cuda,", {"empty item"}},
    {"VLLM_FL_DENY_VENDORS", "amd;intel", {"'amd;intel'", "[A-Za-z0-9_.-]"}},
    {"VLLM_FL_FLAGOS_WHITELIST", "rms norm", {"'rms norm'"}},
    {"VLLM_FL_FLAGOS_BLACKLIST", ",rms_norm", {"empty item"}},
    {"VLLM_FL_OOT_WHITELIST", "a,,b", {"empty item"}},
    {"VLLM_FL_OOT_BLACKLIST", "a/b", {"'a/b'"}},
    {"VLLM_FL_PER_OP", "rms_norm", {"fragment 'rms_norm' has no '='", "op=token|token"}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor;silu_and_mul", {"'silu_and_mul'", "no '='"}},
    {"VLLM_FL_PER_OP", "=vendor", {"'=vendor'", "empty op"}},
    {"VLLM_FL_PER_OP", "rms_norm=", {"'rms_norm='", "empty order"}},
    {"VLLM_FL_PER_OP", "rms_norm=  ;", {"empty order"}},
    {"VLLM_FL_PER_OP", "rms_norm=cuda", {"invalid token 'cuda' for op 'rms_norm'", TOKEN_LIST}},
    {"VLLM_FL_PER_OP",
     "rms_norm=vendor;silu_and_mul=fast|vendor",
     {"'fast'", "'silu_and_mul'", TOKEN_LIST}},
    {"VLLM_FL_PER_OP", "rms_norm=flagos:x", {"'flagos:x'", TOKEN_LIST}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor;;silu_and_mul=flagos", {"empty fragment"}},
    {"VLLM_FL_PER_OP", ";rms_norm=vendor", {"empty fragment"}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor;rms_norm=flagos", {"'rms_norm'", "more than once"}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor||reference", {"empty token", "'rms_norm'"}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor:", {"vendor name", "'vendor:'"}},
    {"VLLM_FL_PER_OP", "rms_norm=vendor:a b", {"vendor name", "'a b'"}},
    {"VLLM_FL_PER_OP", "rms_norm=impl:nodot", {"impl id", "'nodot'"}},
    {"VLLM_FL_PER_OP", "rms norm=vendor", {"'rms norm'"}},
    {"VLLM_FL_CUSTOM_OPS", "all,none", {"'all' and 'none' together", "all, none, +OP, -OP"}},
    {"VLLM_FL_CUSTOM_OPS", "rms_norm", {"invalid item 'rms_norm'", "all, none, +OP, -OP"}},
};

START_TEST(test_env_invalid)
{
    const struct bad_env_case *c = &invalid_env[_i];
    setenv(c->var, c->value, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_ECONFIG, "%s='%s' gave %d, not FLD_ECONFIG", c->var, c->value, rc);
    assert_error_has(c->var);
    for (int k = 0; k < 3 && c->needles[k]; k++)
        assert_error_has(c->needles[k]);
}
END_TEST

START_TEST(test_env_flagos_white_and_black)
{
    setenv("VLLM_FL_FLAGOS_WHITELIST", "rms_norm", 1);
    setenv("VLLM_FL_FLAGOS_BLACKLIST", "silu_and_mul", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    assert_error_has("VLLM_FL_FLAGOS_WHITELIST");
    assert_error_has("VLLM_FL_FLAGOS_BLACKLIST");
}
END_TEST

START_TEST(test_env_oot_white_and_black)
{
    setenv("VLLM_FL_OOT_WHITELIST", "rms_norm", 1);
    setenv("VLLM_FL_OOT_BLACKLIST", "rms_norm", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    assert_error_has("VLLM_FL_OOT_WHITELIST");
    assert_error_has("VLLM_FL_OOT_BLACKLIST");
}
END_TEST

/* A failed reload keeps the policy in force, whichever variable is bad. */
START_TEST(test_reload_bad_env_keeps_policy)
{
    const struct bad_env_case *c = &invalid_env[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_set("prefer", "vendor"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");

    setenv(c->var, c->value, 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    assert_error_has(c->var);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");

    unsetenv(c->var);
    setenv("VLLM_FL_DENY_VENDORS", "x", 1);
    int rc = fld_reload();
    ck_assert_msg(rc == FLD_OK, "reload after fixing %s: %d %s", c->var, rc, fld_last_error());
    /* The environment replaces the programmatic prefer. */
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;deny=x");
}
END_TEST

START_TEST(test_reload_white_and_black_keeps_policy)
{
    setenv("VLLM_FL_OOT_WHITELIST", "a", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    const char *before = "prefer=flagos;strict=0;oot_white=a";
    ck_assert_str_eq(describe(), before);
    setenv("VLLM_FL_OOT_BLACKLIST", "b", 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    assert_error_has("VLLM_FL_OOT_BLACKLIST");
    ck_assert_str_eq(describe(), before);
    unsetenv("VLLM_FL_OOT_WHITELIST");
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;oot_black=b");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fld_policy_set and fld_policy_reset                                      */
/* ------------------------------------------------------------------------ */

struct set_case {
    const char *key;
    const char *value;
    const char *expected;
};

static const struct set_case valid_set[] = {
    {"prefer", "vendor", "prefer=vendor;strict=0"},
    {"prefer", "REFERENCE", "prefer=reference;strict=0"},
    {"VLLM_FL_PREFER", "vendor", "prefer=vendor;strict=0"},
    {"strict", "1", "prefer=flagos;strict=1"},
    {"VLLM_FL_STRICT", "1", "prefer=flagos;strict=1"},
    {"enabled", "false", "prefer=flagos;strict=0;enabled=0"},
    {"VLLM_FL_PREFER_ENABLED", "FALSE", "prefer=flagos;strict=0;enabled=0"},
    {"use_flaggems", "0", "prefer=flagos;strict=0;flaggems=0"},
    {"USE_FLAGGEMS", "false", "prefer=flagos;strict=0;flaggems=0"},
    {"oot_enabled", "false", "prefer=flagos;strict=0;oot=0"},
    {"external_enabled", "0", "prefer=flagos;strict=0;external=0"},
    {"external_blacklist", "rms_norm", "prefer=flagos;strict=0;external_black=rms_norm"},
    {"allow_vendors", "intel,amd", "prefer=flagos;strict=0;allow=amd,intel"},
    {"VLLM_FL_ALLOW_VENDORS", "amd", "prefer=flagos;strict=0;allow=amd"},
    {"deny_vendors", "AMD,Intel", "prefer=flagos;strict=0;deny=amd,intel"},
    {"per_op", "rms_norm=reference", "prefer=flagos;strict=0;per=rms_norm=reference"},
    {"VLLM_FL_PER_OP", "b=vendor;a=flagos", "prefer=flagos;strict=0;per=a=flagos;b=vendor"},
    {"flagos_whitelist", "rms_norm", "prefer=flagos;strict=0;flagos_white=rms_norm"},
    {"flagos_blacklist", "rms_norm", "prefer=flagos;strict=0;flagos_black=rms_norm"},
    {"oot_whitelist", "rms_norm", "prefer=flagos;strict=0;oot_white=rms_norm"},
    {"VLLM_FL_OOT_BLACKLIST", "rms_norm", "prefer=flagos;strict=0;oot_black=rms_norm"},
    {"custom_ops", "none,+rms_norm", "prefer=flagos;strict=0;custom=none,+rms_norm"},
    {"VLLM_FL_CUSTOM_OPS", "-rms_norm", "prefer=flagos;strict=0;custom=all,-rms_norm"},
};

START_TEST(test_set_valid)
{
    const struct set_case *c = &valid_set[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    int rc = fld_policy_set(c->key, c->value);
    ck_assert_msg(rc == FLD_OK, "%s='%s': %d %s", c->key, c->value, rc, fld_last_error());
    ck_assert_str_eq(describe(), c->expected);
}
END_TEST

static const struct set_case invalid_set[] = {
    {"prefer", "fast", "flagos, vendor, reference"},
    {"prefer", "", "flagos, vendor, reference"},
    {"prefer", NULL, "flagos, vendor, reference"},
    {"strict", "maybe", FLAG_LIST},
    {"strict", "on", FLAG_LIST},
    {"enabled", "2", SWITCH_LIST},
    {"use_flaggems", "yes please", SWITCH_LIST},
    {"oot_enabled", "", SWITCH_LIST},
    {"external_enabled", "no", SWITCH_LIST},
    {"allow_vendors", "a,,b", "empty item"},
    {"deny_vendors", "a b", "'a b'"},
    {"per_op", "rms_norm", "no '='"},
    {"per_op", "rms_norm=cuda", TOKEN_LIST},
    {"flagos_whitelist", "a,", "empty item"},
    {"oot_blacklist", "x y", "'x y'"},
    {"no_such_key", "1", "prefer, strict"},
    {"Prefer", "vendor", "prefer, strict"}, /* keys are exact */
};

START_TEST(test_set_invalid_changes_nothing)
{
    const struct set_case *c = &invalid_set[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_set("deny_vendors", "x"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("per_op", "rms_norm=vendor"), FLD_OK);
    const char *before = "prefer=flagos;strict=0;deny=x;per=rms_norm=vendor";
    ck_assert_str_eq(describe(), before);

    ck_assert_int_eq(fld_policy_set(c->key, c->value), FLD_ECONFIG);
    assert_error_has(c->key);
    assert_error_has(c->expected);
    ck_assert_str_eq(describe(), before);
}
END_TEST

START_TEST(test_set_null_key)
{
    ck_assert_int_eq(fld_policy_set(NULL, "x"), FLD_EINVAL);
}
END_TEST

START_TEST(test_set_clears_lists)
{
    ck_assert_int_eq(fld_policy_set("allow_vendors", "amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("per_op", "rms_norm=vendor"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;allow=amd;per=rms_norm=vendor");
    ck_assert_int_eq(fld_policy_set("allow_vendors", NULL), FLD_OK);
    ck_assert_int_eq(fld_policy_set("per_op", ""), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
}
END_TEST

START_TEST(test_set_white_and_black)
{
    ck_assert_int_eq(fld_policy_set("flagos_blacklist", "a"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("flagos_whitelist", "b"), FLD_ECONFIG);
    assert_error_has("VLLM_FL_FLAGOS_WHITELIST");
    assert_error_has("VLLM_FL_FLAGOS_BLACKLIST");
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;flagos_black=a");

    ck_assert_int_eq(fld_policy_set("flagos_blacklist", ""), FLD_OK);
    ck_assert_int_eq(fld_policy_set("flagos_whitelist", "b"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;flagos_white=b");

    ck_assert_int_eq(fld_policy_set("oot_whitelist", "a"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("oot_blacklist", "b"), FLD_ECONFIG);
    assert_error_has("VLLM_FL_OOT_WHITELIST");
    assert_error_has("VLLM_FL_OOT_BLACKLIST");
}
END_TEST

START_TEST(test_reset)
{
    setenv("VLLM_FL_PREFER", "vendor", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_set("strict", "1"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1;deny=amd");
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");

    /* The environment is read again, and a bad one changes nothing. */
    ck_assert_int_eq(fld_policy_set("strict", "1"), FLD_OK);
    setenv("VLLM_FL_PREFER", "fastest", 1);
    ck_assert_int_eq(fld_policy_reset(), FLD_ECONFIG);
    assert_error_has("VLLM_FL_PREFER");
    assert_error_has("'fastest'");
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1");
    setenv("VLLM_FL_PREFER", "reference", 1);
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=reference;strict=0");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Strict mode and the manifest                                             */
/* ------------------------------------------------------------------------ */

/* A manifest written outside the plugin directory (which teardown removes). */
static char manifest_path[64];
static char manifest_log[4096];

static void capture_warning(int level, const char *message, void *user)
{
    (void)user;
    size_t used = strlen(manifest_log);
    if (level == FLD_LOG_WARNING)
        snprintf(manifest_log + used, sizeof manifest_log - used, "%s\n", message);
}

/* Line 3 pins rms_norm (cpu, f32) to impl, and VLLM_FL_MANIFEST names the file. */
static void use_manifest(const char *impl)
{
    char text[256];
    strcpy(manifest_path, "/tmp/fld-test-manifest-XXXXXX");
    int fd = mkstemp(manifest_path);
    ck_assert_int_ge(fd, 0);
    int n = snprintf(
        text, sizeof text,
        "version: 1\nentries:\n  - {op: rms_norm, device: cpu, dtype: f32, impl: %s}\n", impl);
    ck_assert_int_eq(write(fd, text, (size_t)n), n);
    ck_assert_int_eq(close(fd), 0);
    setenv("VLLM_FL_MANIFEST", manifest_path, 1);
}

/* Initialises with an unusable manifest entry: a warning, not an error, while not strict. */
static void init_with_unusable_manifest(void)
{
    use_manifest("vendor.nope");
    setenv("VLLM_FL_LOG_LEVEL", "WARNING", 1);
    manifest_log[0] = '\0';
    fld_log_set_callback(capture_warning, NULL);
    int rc = fld_init();
    unlink(manifest_path);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    char where[128];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:3:51: impl 'vendor.nope'", manifest_path);
    ck_assert_msg(strstr(manifest_log, where), "no warning naming %s:\n%s", where, manifest_log);
}

static void assert_names_manifest_entry(void)
{
    char where[128];
    snprintf(where, sizeof where, "VLLM_FL_MANIFEST: %s:3:51: impl 'vendor.nope'", manifest_path);
    assert_error_has(where);
    assert_error_has("is not registered");
}

/* vllm-plugin-FL's test_policy_is_immutable_while_frozen: a manifest freezes
 * the global policy; fld_policy_reset() and scoped overrides stay allowed. */
START_TEST(test_set_refused_while_frozen)
{
    init_with_unusable_manifest();
    char before[1024];
    snprintf(before, sizeof before, "%s", describe());
    ck_assert_ptr_nonnull(strstr(before, "strict=0"));

    static const char *const keys[] = {"strict", "VLLM_FL_STRICT", "prefer", "deny_vendors"};
    static const char *const values[] = {"1", "1", "vendor", "amd"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        ck_assert_int_eq(fld_policy_set(keys[i], values[i]), FLD_ESTATE);
        assert_error_has("fld_policy_set: dispatch is frozen by VLLM_FL_MANIFEST=");
        assert_error_has(manifest_path);
        ck_assert_str_eq(describe(), before);
    }
    /* A policy file is refused the same way. */
    char path[] = "/tmp/fld-test-frozen-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "prefer: vendor\n", 15), 15);
    ck_assert_int_eq(close(fd), 0);
    ck_assert_int_eq(fld_policy_load_file(path), FLD_ESTATE);
    unlink(path);
    assert_error_has("fld_policy_load_file: dispatch is frozen");
    ck_assert_str_eq(describe(), before);
    /* Re-reading the configuration is allowed (the manifest file is gone by now, so
     * unset the variable first), and so is a scoped override. */
    unsetenv("VLLM_FL_MANIFEST");
    ck_assert_msg(fld_policy_reset() == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(fld_policy_set("prefer", "vendor"), FLD_OK);
    ck_assert_ptr_nonnull(strstr(describe(), "prefer=vendor;strict=0"));
}
END_TEST

START_TEST(test_push_strict_checks_manifest)
{
    init_with_unusable_manifest();
    char before[1024];
    snprintf(before, sizeof before, "%s", describe());

    ck_assert_int_eq(fld_policy_push_strict(true), FLD_ECONFIG);
    assert_names_manifest_entry();
    assert_error_has("fld_policy_push_strict");
    ck_assert_str_eq(describe(), before);
    /* Nothing was pushed. */
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);

    ck_assert_int_eq(fld_policy_push_strict(false), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
}
END_TEST

START_TEST(test_strict_with_usable_manifest)
{
    /* The control: an entry the registry honours lets strict through both ways. */
    use_manifest("reference.c");
    int rc = fld_init();
    unlink(manifest_path);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_ptr_nonnull(strstr(describe(), "strict=1"));
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_ptr_nonnull(strstr(describe(), "strict=1"));
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Scoped overrides                                                         */
/* ------------------------------------------------------------------------ */

START_TEST(test_push_nesting_restores)
{
    ck_assert_int_eq(fld_policy_push_preference("vendor"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1");
    ck_assert_int_eq(fld_policy_push_per_op("rms_norm=reference"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1;per=rms_norm=reference");
    ck_assert_int_eq(fld_policy_push_preference(" Reference"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=reference;strict=1;per=rms_norm=reference");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1;per=rms_norm=reference");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=1");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
    assert_error_has("fld_policy_pop");
}
END_TEST

START_TEST(test_pop_without_push)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
    ck_assert_str_ne(fld_last_error(), "");
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
}
END_TEST

START_TEST(test_push_denied_adds)
{
    setenv("VLLM_FL_DENY_VENDORS", "amd", 1);
    ck_assert_int_eq(fld_policy_push_denied_vendors("intel"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;deny=amd,intel");
    ck_assert_int_eq(fld_policy_push_denied_vendors("cuda, amd"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;deny=amd,cuda,intel");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;deny=amd,intel");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;deny=amd");
}
END_TEST

START_TEST(test_push_allowed_replaces)
{
    setenv("VLLM_FL_ALLOW_VENDORS", "amd,intel", 1);
    ck_assert_int_eq(fld_policy_push_allowed_vendors("cuda"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;allow=cuda");
    ck_assert_int_eq(fld_policy_push_allowed_vendors("rocm,ascend"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;allow=ascend,rocm");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;allow=cuda");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;allow=amd,intel");
}
END_TEST

START_TEST(test_push_per_op_merges)
{
    setenv("VLLM_FL_PER_OP", "rms_norm=vendor;silu_and_mul=flagos", 1);
    ck_assert_int_eq(fld_policy_push_per_op("rms_norm=reference|vendor;gelu_and_mul=vendor"),
                     FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;per=gelu_and_mul=vendor;"
                                 "rms_norm=reference|vendor;silu_and_mul=flagos");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;per=rms_norm=vendor;silu_and_mul=flagos");
}
END_TEST

START_TEST(test_push_invalid_pushes_nothing)
{
    ck_assert_int_eq(fld_policy_push_preference("fast"), FLD_ECONFIG);
    assert_error_has("flagos, vendor, reference");
    ck_assert_int_eq(fld_policy_push_preference(NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_policy_push_per_op("rms_norm"), FLD_ECONFIG);
    assert_error_has("no '='");
    ck_assert_int_eq(fld_policy_push_per_op("rms_norm=cuda"), FLD_ECONFIG);
    assert_error_has(TOKEN_LIST);
    ck_assert_int_eq(fld_policy_push_allowed_vendors("a,,b"), FLD_ECONFIG);
    ck_assert_int_eq(fld_policy_push_denied_vendors("a b"), FLD_ECONFIG);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
    ck_assert_int_eq(fld_policy_pop(), FLD_ESTATE);
}
END_TEST

struct thread_result {
    char seen[256];
    int push_rc, pop_rc, extra_pop_rc;
    const char *impl;
};

static void *describe_and_push_thread(void *arg)
{
    struct thread_result *r = arg;
    fld_policy_describe(r->seen, sizeof r->seen);
    r->push_rc = fld_policy_push_preference("reference");
    r->pop_rc = fld_policy_pop();
    r->extra_pop_rc = fld_policy_pop();
    return NULL;
}

START_TEST(test_override_invisible_to_other_threads)
{
    ck_assert_int_eq(fld_policy_push_denied_vendors("amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=1;deny=amd");

    struct thread_result r = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, describe_and_push_thread, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_str_eq(r.seen, DEFAULT_DESCRIPTION);
    ck_assert_int_eq(r.push_rc, FLD_OK);
    ck_assert_int_eq(r.pop_rc, FLD_OK);
    ck_assert_int_eq(r.extra_pop_rc, FLD_ESTATE); /* the main thread's pushes are not its own */

    ck_assert_str_eq(describe(), "prefer=flagos;strict=1;deny=amd");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
}
END_TEST

static void *push_and_exit_thread(void *arg)
{
    struct thread_result *r = arg;
    r->push_rc = fld_policy_push_preference("vendor");
    if (r->push_rc == FLD_OK)
        r->push_rc = fld_policy_push_denied_vendors("amd");
    if (r->push_rc == FLD_OK)
        r->push_rc = fld_policy_push_per_op("test_op=reference");
    fld_policy_describe(r->seen, sizeof r->seen);
    /* Fills this thread's override cache, which thread exit must drop. */
    r->impl = winner();
    return NULL; /* leaves its three overrides for thread exit to free */
}

static void *resolve_thread(void *arg)
{
    struct thread_result *r = arg;
    fld_policy_describe(r->seen, sizeof r->seen);
    r->impl = winner();
    return NULL;
}

START_TEST(test_thread_exit_with_pushes)
{
    register_test_plugin();
    for (int i = 0; i < 20; i++) {
        struct thread_result r = {0};
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, push_and_exit_thread, &r), 0);
        ck_assert_int_eq(pthread_join(t, NULL), 0);
        ck_assert_int_eq(r.push_rc, FLD_OK);
        ck_assert_str_eq(r.seen, "prefer=vendor;strict=0;deny=amd;per=test_op=reference");
        ck_assert_str_eq(r.impl, "reference.test");
    }
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
    assert_winner("default.flagos");

    /* The next thread starts clean and selects under the global policy. */
    struct thread_result r = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, resolve_thread, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_str_eq(r.seen, DEFAULT_DESCRIPTION);
    ck_assert_str_eq(r.impl, "default.flagos");

    /* And this thread's overrides still work. */
    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    assert_winner("reference.test");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    assert_winner("default.flagos");
}
END_TEST

START_TEST(test_override_selection_per_thread)
{
    setenv("VLLM_FL_PREFER", "vendor", 1);
    register_test_plugin();
    assert_winner("vendor.amd");
    ck_assert_int_eq(fld_policy_push_denied_vendors("amd"), FLD_OK);
    assert_winner("vendor.intel");

    struct thread_result r = {0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, resolve_thread, &r), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_str_eq(r.impl, "vendor.amd");

    ck_assert_int_eq(fld_policy_push_allowed_vendors("amd"), FLD_OK);
    assert_winner("default.flagos"); /* intel not allowed, amd still denied */
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    assert_winner("vendor.intel");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    assert_winner("vendor.amd");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Fingerprints                                                             */
/* ------------------------------------------------------------------------ */

START_TEST(test_fingerprint_equal_for_equal_policies)
{
    setenv("VLLM_FL_DENY_VENDORS", "intel, amd", 1);
    setenv("VLLM_FL_PER_OP", "silu_and_mul=flagos;rms_norm=Vendor|reference", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    char from_env[256];
    snprintf(from_env, sizeof from_env, "%s", describe());

    /* The same policy reached by other routes prints the same. */
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd,intel,amd"), FLD_OK);
    ck_assert_int_eq(fld_policy_set("per_op", "rms_norm=vendor|REFERENCE;silu_and_mul=flagos"),
                     FLD_OK);
    ck_assert_str_eq(describe(), from_env);

    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    ck_assert_str_ne(describe(), from_env);
    ck_assert_int_eq(fld_policy_push_denied_vendors("intel"), FLD_OK);
    ck_assert_str_eq(describe(), from_env);
}
END_TEST

START_TEST(test_fingerprint_differs)
{
    static const struct set_case changes[] = {
        {"prefer", "vendor", NULL},
        {"prefer", "reference", NULL},
        {"strict", "1", NULL},
        {"enabled", "0", NULL},
        {"use_flaggems", "0", NULL},
        {"oot_enabled", "0", NULL},
        {"allow_vendors", "a", NULL},
        {"allow_vendors", "b", NULL},
        {"deny_vendors", "a", NULL},
        {"per_op", "a=vendor", NULL},
        {"per_op", "a=vendor|reference", NULL},
        {"per_op", "a=vendor:x", NULL},
        {"per_op", "b=vendor", NULL},
        {"flagos_whitelist", "a", NULL},
        {"flagos_blacklist", "a", NULL},
        {"oot_whitelist", "a", NULL},
        {"oot_blacklist", "a", NULL},
        {"external_enabled", "0", NULL},
        {"external_whitelist", "a", NULL},
        {"external_blacklist", "a", NULL},
        {"custom_ops", "none", NULL},
        {"custom_ops", "-a", NULL},
        {"custom_ops", "+a", NULL},
    };
    enum { N = sizeof changes / sizeof changes[0] };
    char seen[N + 1][256];
    ck_assert_int_eq(fld_init(), FLD_OK);
    snprintf(seen[0], sizeof seen[0], "%s", describe());
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(fld_policy_reset(), FLD_OK);
        ck_assert_int_eq(fld_policy_set(changes[i].key, changes[i].value), FLD_OK);
        snprintf(seen[i + 1], sizeof seen[i + 1], "%s", describe());
    }
    for (int i = 0; i <= N; i++)
        for (int j = i + 1; j <= N; j++)
            ck_assert_msg(strcmp(seen[i], seen[j]) != 0, "same fingerprint %s", seen[i]);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Effects on selection                                                     */
/* ------------------------------------------------------------------------ */

struct select_case {
    const char *env[3][2];
    const char *expected; /* NULL: no implementation qualifies */
};

static const struct select_case select_cases[] = {
    {{{NULL}}, "default.flagos"},
    {{{"VLLM_FL_PREFER", "vendor"}}, "vendor.amd"},
    {{{"VLLM_FL_PREFER", "reference"}}, "reference.test"},
    {{{"VLLM_FL_PREFER", "vendor"}, {"VLLM_FL_DENY_VENDORS", "amd"}}, "vendor.intel"},
    {{{"VLLM_FL_PREFER", "vendor"}, {"VLLM_FL_ALLOW_VENDORS", "intel"}}, "vendor.intel"},
    /* deny wins over allow */
    {{{"VLLM_FL_PREFER", "vendor"},
      {"VLLM_FL_ALLOW_VENDORS", "amd,intel"},
      {"VLLM_FL_DENY_VENDORS", "amd"}},
     "vendor.intel"},
    {{{"VLLM_FL_PREFER", "vendor"},
      {"VLLM_FL_ALLOW_VENDORS", "amd"},
      {"VLLM_FL_DENY_VENDORS", "amd"}},
     "default.flagos"},
    /* vendor names compare without case, as users type them */
    {{{"VLLM_FL_PREFER", "vendor"}, {"VLLM_FL_DENY_VENDORS", "AMD"}}, "vendor.intel"},
    {{{"VLLM_FL_PREFER", "vendor"}, {"VLLM_FL_ALLOW_VENDORS", "Intel"}}, "vendor.intel"},
    {{{"VLLM_FL_PER_OP", "test_op=impl:vendor.intel|reference"}}, "vendor.intel"},
    {{{"VLLM_FL_PER_OP", "test_op=vendor:intel|flagos"}}, "vendor.intel"},
    {{{"VLLM_FL_PER_OP", "test_op=vendor:INTEL"}}, "vendor.intel"},
    {{{"VLLM_FL_PER_OP", "test_op=reference|vendor;other=vendor"}}, "reference.test"},
    {{{"VLLM_FL_PER_OP", "other=reference"}}, "default.flagos"},
    {{{"VLLM_FL_PER_OP", "test_op=vendor"}, {"VLLM_FL_DENY_VENDORS", "amd,intel"}}, NULL},
    {{{"VLLM_FL_PREFER_ENABLED", "false"}}, "reference.test"},
    {{{"VLLM_FL_PREFER_ENABLED", "0"}, {"VLLM_FL_PREFER", "vendor"}}, "reference.test"},
    {{{"USE_FLAGGEMS", "false"}}, "vendor.amd"},
    {{{"VLLM_FL_FLAGOS_BLACKLIST", "test_op"}}, "vendor.amd"},
    {{{"VLLM_FL_FLAGOS_BLACKLIST", "other_op"}}, "default.flagos"},
    {{{"VLLM_FL_FLAGOS_WHITELIST", "other_op"}}, "vendor.amd"},
    {{{"VLLM_FL_FLAGOS_WHITELIST", "test_op"}}, "default.flagos"},
    /* the test plugin is external (built outside this project) */
    {{{"VLLM_FL_EXTERNAL_ENABLED", "false"}}, NULL},
    {{{"VLLM_FL_EXTERNAL_BLACKLIST", "test_op"}}, NULL},
    {{{"VLLM_FL_EXTERNAL_BLACKLIST", "other_op"}}, "default.flagos"},
    {{{"VLLM_FL_EXTERNAL_WHITELIST", "other_op"}}, NULL},
    {{{"VLLM_FL_EXTERNAL_WHITELIST", "test_op"}}, "default.flagos"},
    /* VLLM_FL_OOT_* keep vllm-plugin-FL's meaning (engine layers): no effect here */
    {{{"VLLM_FL_OOT_ENABLED", "false"}}, "default.flagos"},
    {{{"VLLM_FL_OOT_BLACKLIST", "test_op"}}, "default.flagos"},
};

START_TEST(test_selection_from_env)
{
    const struct select_case *c = &select_cases[_i];
    for (int k = 0; k < 3 && c->env[k][0]; k++)
        setenv(c->env[k][0], c->env[k][1], 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    register_test_plugin();
    assert_winner(c->expected);
}
END_TEST

/* test_op_native: the same four kinds as test_op. */
static int register_native_impls(fld_registry *reg)
{
    static const char *const ids[] = {"default.flagos", "vendor.amd", "reference.test"};
    static const fld_kind kinds[] = {FLD_KIND_DEFAULT, FLD_KIND_VENDOR, FLD_KIND_REFERENCE};
    static const int prio[] = {FLD_PRIORITY_DEFAULT, FLD_PRIORITY_VENDOR, FLD_PRIORITY_REFERENCE};
    for (int i = 0; i < 3; i++) {
        fld_impl impl = {"test_op_native",
                         ids[i],
                         kinds[i],
                         i == 1 ? "amd" : NULL,
                         prio[i],
                         FLD_DEVICE_MASK_CPU,
                         FLD_DTYPE_MASK_ALL,
                         ok_fn,
                         NULL,
                         NULL};
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const char *native_winner(const char **source)
{
    static _Thread_local char id[64], src[128];
    fld_resolution *res = NULL;
    int rc = fld_explain("test_op_native", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    snprintf(id, sizeof id, "%s", res->selected ? res->selected : "(none)");
    snprintf(src, sizeof src, "%s", res->order_source ? res->order_source : "");
    fld_resolution_free(res);
    *source = src;
    return id;
}

/* An op named BASE_native is an op of its own: it follows its own order or the default one,
 * never BASE's (as in vllm-plugin-FL, whose orders are looked up by exact name). */
START_TEST(test_native_op_has_its_own_order)
{
    static const fld_plugin_descriptor native = {FLD_PLUGIN_MAGIC,
                                                 FLD_PLUGIN_ABI_MAJOR,
                                                 FLD_PLUGIN_ABI_MINOR,
                                                 sizeof(fld_plugin_descriptor),
                                                 0,
                                                 "native",
                                                 "1.0",
                                                 "1.0",
                                                 register_native_impls};
    const char *source;
    setenv("VLLM_FL_PER_OP", "test_op=vendor:amd|reference", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_register_plugin(&native), FLD_OK);
    ck_assert_str_eq(native_winner(&source), "default.flagos");
    ck_assert_str_eq(source, "default");
    /* Its own order applies. */
    ck_assert_int_eq(fld_policy_set("per_op", "test_op=vendor:amd;test_op_native=reference"),
                     FLD_OK);
    ck_assert_str_eq(native_winner(&source), "reference.test");
    ck_assert_str_eq(source, "fld_policy_set");
}
END_TEST

/* VLLM_FL_OOT_* in vllm-plugin-FL's meaning: which engine layers an integration replaces. */
struct oot_case {
    const char *env[2][2];
    const char *yaml; /* a VLLM_FL_CONFIG file's text, or NULL */
    bool rms_norm, silu_and_mul;
};

static const struct oot_case oot_cases[] = {
    {{{NULL}}, NULL, true, true},
    {{{"VLLM_FL_OOT_ENABLED", "0"}}, NULL, false, false},
    {{{"VLLM_FL_PREFER_ENABLED", "false"}}, NULL, false, false},
    {{{"VLLM_FL_OOT_BLACKLIST", "rms_norm"}}, NULL, false, true},
    {{{"VLLM_FL_OOT_WHITELIST", "rms_norm"}}, NULL, true, false},
    {{{"VLLM_FL_OOT_WHITELIST", "rms_norm,silu_and_mul"}}, NULL, true, true},
    {{{NULL}}, "oot_blacklist: [silu_and_mul]\n", true, false},
    {{{NULL}}, "oot_enabled: false\n", false, false},
};

START_TEST(test_oot_op_enabled)
{
    const struct oot_case *c = &oot_cases[_i];
    char path[] = "/tmp/fld-test-oot-XXXXXX";
    if (c->yaml) {
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, c->yaml, strlen(c->yaml)), (ssize_t)strlen(c->yaml));
        ck_assert_int_eq(close(fd), 0);
        setenv("VLLM_FL_CONFIG", path, 1);
    }
    for (int k = 0; k < 2 && c->env[k][0]; k++)
        setenv(c->env[k][0], c->env[k][1], 1);
    int rc = fld_init();
    if (c->yaml)
        unlink(path);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_int_eq(fld_oot_op_enabled("rms_norm"), c->rms_norm);
    ck_assert_int_eq(fld_oot_op_enabled("silu_and_mul"), c->silu_and_mul);
    ck_assert(!fld_oot_op_enabled(NULL));
    assert_error_has("fld_oot_op_enabled: argument 'op' is NULL");
    /* Selection ignores these fields (VLLM_FL_PREFER_ENABLED=false still keeps reference only). */
    register_test_plugin();
    bool enabled = !(c->env[0][0] && strcmp(c->env[0][0], "VLLM_FL_PREFER_ENABLED") == 0);
    assert_winner(enabled ? "default.flagos" : "reference.test");
}
END_TEST

/* Why an impl of test_op was rejected, or NULL if it was not. */
static const char *rejection_reason(const fld_resolution *res, const char *impl_id)
{
    for (size_t i = 0; i < res->n_rejected; i++)
        if (strcmp(res->rejected[i].impl_id, impl_id) == 0)
            return res->rejected[i].reason;
    return NULL;
}

START_TEST(test_explain_reasons_name_sources)
{
    setenv("VLLM_FL_PREFER", "vendor", 1);
    setenv("VLLM_FL_DENY_VENDORS", "amd", 1);
    setenv("VLLM_FL_FLAGOS_BLACKLIST", "test_op", 1);
    register_test_plugin();
    ck_assert_int_eq(fld_policy_set("allow_vendors", "amd"), FLD_OK);

    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->selected, "reference.test");
    const char *amd = rejection_reason(res, "vendor.amd");
    const char *intel = rejection_reason(res, "vendor.intel");
    const char *flagos = rejection_reason(res, "default.flagos");
    ck_assert_ptr_nonnull(amd);
    ck_assert_ptr_nonnull(intel);
    ck_assert_ptr_nonnull(flagos);
    ck_assert_msg(strstr(amd, "vendor 'amd' denied by VLLM_FL_DENY_VENDORS"), "%s", amd);
    ck_assert_msg(strstr(intel, "vendor 'intel' not in allow list (fld_policy_set)"), "%s", intel);
    ck_assert_msg(strstr(flagos, "op 'test_op' in flagos blacklist (VLLM_FL_FLAGOS_BLACKLIST)"),
                  "%s", flagos);
    ck_assert_str_eq(res->order, "vendor|flagos|reference");
    ck_assert_str_eq(res->order_source, "VLLM_FL_PREFER");
    fld_resolution_free(res);

    ck_assert_int_eq(fld_policy_push_per_op("test_op=impl:reference.test"), FLD_OK);
    ck_assert_int_eq(fld_explain("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->order, "impl:reference.test");
    ck_assert_str_eq(res->order_source, "scoped override");
    fld_resolution_free(res);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    ck_assert_int_eq(fld_explain("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->order, "reference|flagos|vendor");
    ck_assert_str_eq(res->order_source, "scoped override");
    fld_resolution_free(res);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);

    ck_assert_int_eq(fld_policy_set("per_op", "test_op=vendor:intel|reference"), FLD_OK);
    ck_assert_int_eq(fld_explain("test_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->order, "vendor:intel|reference");
    ck_assert_str_eq(res->order_source, "fld_policy_set");
    fld_resolution_free(res);
}
END_TEST

START_TEST(test_policy_changes_reach_selection)
{
    register_test_plugin();
    assert_winner("default.flagos");
    ck_assert_int_eq(fld_policy_set("prefer", "vendor"), FLD_OK);
    assert_winner("vendor.amd");
    ck_assert_int_eq(fld_policy_set("deny_vendors", "amd"), FLD_OK);
    assert_winner("vendor.intel");
    ck_assert_int_eq(fld_policy_push_preference("reference"), FLD_OK);
    assert_winner("reference.test");
    ck_assert_int_eq(fld_policy_push_per_op("test_op=impl:vendor.amd|flagos"), FLD_OK);
    assert_winner("default.flagos"); /* vendor.amd stays denied */
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    assert_winner("vendor.intel");
    ck_assert_int_eq(fld_policy_set("per_op", "test_op=vendor:amd|reference"), FLD_OK);
    assert_winner("reference.test");
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    assert_winner("default.flagos");
}
END_TEST

/* ------------------------------------------------------------------------ */

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *policy_suite(void)
{
    Suite *s = suite_create("policy");
    TCase *tc;

    tc = tcase_create("environment");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_loop_test(tc, test_env_valid, 0, N_OF(valid_env));
    tcase_add_loop_test(tc, test_env_invalid, 0, N_OF(invalid_env));
    tcase_add_test(tc, test_env_flagos_white_and_black);
    tcase_add_test(tc, test_env_oot_white_and_black);
    tcase_add_loop_test(tc, test_reload_bad_env_keeps_policy, 0, N_OF(invalid_env));
    tcase_add_test(tc, test_reload_white_and_black_keeps_policy);
    suite_add_tcase(s, tc);

    tc = tcase_create("set");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_set_valid, 0, N_OF(valid_set));
    tcase_add_loop_test(tc, test_set_invalid_changes_nothing, 0, N_OF(invalid_set));
    tcase_add_test(tc, test_set_null_key);
    tcase_add_test(tc, test_set_clears_lists);
    tcase_add_test(tc, test_set_white_and_black);
    tcase_add_test(tc, test_reset);
    tcase_add_test(tc, test_set_refused_while_frozen);
    tcase_add_test(tc, test_native_op_has_its_own_order);
    tcase_add_loop_test(tc, test_oot_op_enabled, 0, sizeof oot_cases / sizeof oot_cases[0]);
    tcase_add_test(tc, test_push_strict_checks_manifest);
    tcase_add_test(tc, test_strict_with_usable_manifest);
    suite_add_tcase(s, tc);

    tc = tcase_create("overrides");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_push_nesting_restores);
    tcase_add_test(tc, test_pop_without_push);
    tcase_add_test(tc, test_push_denied_adds);
    tcase_add_test(tc, test_push_allowed_replaces);
    tcase_add_test(tc, test_push_per_op_merges);
    tcase_add_test(tc, test_push_invalid_pushes_nothing);
    tcase_add_test(tc, test_override_invisible_to_other_threads);
    tcase_add_test(tc, test_thread_exit_with_pushes);
    tcase_add_test(tc, test_override_selection_per_thread);
    suite_add_tcase(s, tc);

    tc = tcase_create("fingerprint");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_fingerprint_equal_for_equal_policies);
    tcase_add_test(tc, test_fingerprint_differs);
    suite_add_tcase(s, tc);

    tc = tcase_create("selection");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_selection_from_env, 0, N_OF(select_cases));
    tcase_add_test(tc, test_explain_reasons_name_sources);
    tcase_add_test(tc, test_policy_changes_reach_selection);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(policy_suite());
}
