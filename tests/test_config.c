/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: YAML policy files and their strict schema (every error with
 * its file:line:column), VLLM_FL_CONFIG, VLLM_FL_OP_CONFIG,
 * VLLM_FL_CUSTOM_OPS, the precedence of the layers, fld_policy_load_file,
 * fld_foreach_config_field and atomic reloads under concurrent calls.
 *
 * Every test forks (CK_FORK), so each starts with a fresh library. The
 * fixture clears the policy variables, selects the cpu platform and points
 * VLLM_FL_PLUGIN_DIR at an empty directory; test files go into a fresh
 * mkdtemp directory.
 *
 * The platform-file layer is exercised for real: a copy of the library in
 * <tmp>/lib finds its platform files in <tmp>/share/fldispatch/config, so
 * those tests re-run this program (--dump-config) with LD_PRELOAD naming
 * that copy and read the effective configuration it prints. (Not
 * LD_LIBRARY_PATH: test programs carry a DT_RPATH to the build tree's
 * library, which the loader searches first.)
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/env.h"
#include "util/harness.h"
#include <fldispatch/plugin.h>

#define DEFAULT_DESCRIPTION "prefer=flagos;strict=0"
#define VALID_KEYS_START    "(valid: prefer, strict, allow_vendors, deny_vendors"
#define BOOL_VALID          "(valid: true, false, yes, no, on, off"
#define TOKEN_VALID         "(valid: flagos, vendor, vendor:NAME, reference, impl:ID)"
#define CUSTOM_VALID        "(valid: all, none, +OP, -OP"

static char plugin_dir[64];
static char tmp_dir[64];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(plugin_dir, "/tmp/fld-test-config-plugins-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(plugin_dir));
    strcpy(tmp_dir, "/tmp/fld-test-config-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    setenv("VLLM_FL_PLUGIN_DIR", plugin_dir, 1);
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
}

/* Removes what the tests put under tmp_dir (files, and <tmp>/lib, <tmp>/share/...). */
static void remove_tree(const char *path)
{
    char cmd[PATH_MAX + 32];
    /* The path is ours (mkdtemp, no quotes in it). */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

static void teardown(void)
{
    rmdir(plugin_dir);
    remove_tree(tmp_dir);
}

/* Writes tmp_dir/name; returns its path (one of a few rotating buffers). */
static const char *write_file(const char *name, const char *content)
{
    static char paths[8][PATH_MAX];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, PATH_MAX, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(content, 1, strlen(content), f), strlen(content));
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

static const char *describe(void)
{
    static _Thread_local char buf[2048];
    size_t n = fld_policy_describe(buf, sizeof buf);
    ck_assert_uint_lt(n, sizeof buf);
    return buf;
}

#define assert_error_has(s)                                                                        \
    ck_assert_msg(strstr(fld_last_error(), (s)) != NULL, "'%s' not in last error: %s", (s),        \
                  fld_last_error())

/* ------------------------------------------------------------------------ */
/* The effective configuration as a table                                   */
/* ------------------------------------------------------------------------ */

#define MAX_FIELDS 64

struct fields {
    size_t n;
    char key[MAX_FIELDS][128];
    char value[MAX_FIELDS][1024];
    char source[MAX_FIELDS][512];
};

static int collect(const fld_config_field *f, void *user)
{
    struct fields *t = user;
    ck_assert_uint_lt(t->n, MAX_FIELDS);
    ck_assert_ptr_nonnull(f->key);
    ck_assert_ptr_nonnull(f->value);
    ck_assert_ptr_nonnull(f->source);
    snprintf(t->key[t->n], sizeof t->key[0], "%s", f->key);
    snprintf(t->value[t->n], sizeof t->value[0], "%s", f->value);
    snprintf(t->source[t->n], sizeof t->source[0], "%s", f->source);
    t->n++;
    return 0;
}

static struct fields *read_fields(void)
{
    static struct fields t;
    memset(&t, 0, sizeof t);
    int rc = fld_foreach_config_field(collect, &t);
    ck_assert_msg(rc == FLD_OK, "fld_foreach_config_field: %d %s", rc, fld_last_error());
    return &t;
}

static int field_index(const struct fields *t, const char *key)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->key[i], key) == 0)
            return (int)i;
    return -1;
}

#define assert_field(t, k, v, s)                                                                   \
    do {                                                                                           \
        int i_ = field_index((t), (k));                                                            \
        ck_assert_msg(i_ >= 0, "no field '%s'", (k));                                              \
        ck_assert_msg(strcmp((t)->value[i_], (v)) == 0, "field '%s' is '%s', expected '%s'", (k),  \
                      (t)->value[i_], (v));                                                        \
        ck_assert_msg(strcmp((t)->source[i_], (s)) == 0,                                           \
                      "field '%s' comes from '%s', expected '%s'", (k), (t)->source[i_], (s));     \
    } while (0)

/* "path:line" */
static const char *at_line(const char *path, int line)
{
    static char bufs[8][PATH_MAX + 16];
    static int next;
    char *b = bufs[next++ % 8];
    snprintf(b, PATH_MAX + 16, "%s:%d", path, line);
    return b;
}

/* ------------------------------------------------------------------------ */
/* Log capture                                                              */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static int log_warnings;

static void capture_log(int level, const char *message, void *user)
{
    (void)user;
    pthread_mutex_lock(&log_mutex);
    if (level == FLD_LOG_WARNING)
        log_warnings++;
    size_t len = strlen(log_text);
    snprintf(log_text + len, sizeof log_text - len, "%d %s\n", level, message);
    pthread_mutex_unlock(&log_mutex);
}

/* ------------------------------------------------------------------------ */
/* An in-process plugin: cfg_op with one impl of each kind                   */
/* ------------------------------------------------------------------------ */

struct cfg_args {
    const char *served;
};

#define DEFINE_IMPL(fn, id)                                                                        \
    static int fn(const void *args)                                                                \
    {                                                                                              \
        ((struct cfg_args *)args)->served = id;                                                    \
        return FLD_OK;                                                                             \
    }
DEFINE_IMPL(serve_flagos, "default.flagos")
DEFINE_IMPL(serve_a, "vendor.a")
DEFINE_IMPL(serve_b, "vendor.b")
DEFINE_IMPL(serve_reference, "reference.t")

static int register_cfg_impls(fld_registry *reg)
{
    static const fld_impl impls[] = {
        {"cfg_op", "default.flagos", FLD_KIND_DEFAULT, NULL, FLD_PRIORITY_DEFAULT,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, serve_flagos, NULL, NULL},
        {"cfg_op", "vendor.a", FLD_KIND_VENDOR, "a", FLD_PRIORITY_VENDOR, FLD_DEVICE_MASK_CPU,
         FLD_DTYPE_MASK_ALL, serve_a, NULL, NULL},
        {"cfg_op", "vendor.b", FLD_KIND_VENDOR, "b", FLD_PRIORITY_VENDOR, FLD_DEVICE_MASK_CPU,
         FLD_DTYPE_MASK_ALL, serve_b, NULL, NULL},
        {"cfg_op", "reference.t", FLD_KIND_REFERENCE, NULL, FLD_PRIORITY_REFERENCE,
         FLD_DEVICE_MASK_CPU, FLD_DTYPE_MASK_ALL, serve_reference, NULL, NULL},
    };
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        int rc = fld_registry_register(reg, &impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor cfg_plugin = {FLD_PLUGIN_MAGIC,
                                                 FLD_PLUGIN_ABI_MAJOR,
                                                 FLD_PLUGIN_ABI_MINOR,
                                                 sizeof(fld_plugin_descriptor),
                                                 0,
                                                 "cfgtest",
                                                 "1.0",
                                                 FLD_VERSION_STRING,
                                                 register_cfg_impls};

static fld_op register_cfg_plugin(void)
{
    int rc = fld_register_plugin(&cfg_plugin);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin: %d %s", rc, fld_last_error());
    fld_op op = fld_op_lookup("cfg_op");
    ck_assert_ptr_nonnull(op);
    return op;
}

/* The impl serving one call of cfg_op, or NULL when the call fails. */
static const char *serve(fld_op op)
{
    struct cfg_args a = {NULL};
    return fld_call(op, &a) == FLD_OK ? a.served : NULL;
}

/* ------------------------------------------------------------------------ */
/* YAML schema errors                                                       */
/* ------------------------------------------------------------------------ */

struct bad_yaml {
    const char *content;
    const char *position; /* ":line:column: " after the path */
    const char *needles[2];
};

static const struct bad_yaml bad_yaml[] = {
    /* unknown keys */
    {"prefer: vendor\nprefered: flagos\n", ":2:1: ", {"unknown key 'prefered'", VALID_KEYS_START}},
    {"op_backend:\n  rms_norm: [vendor]\n",
     ":1:1: ",
     {"unknown key 'op_backend'; did you mean 'op_backends'?", VALID_KEYS_START}},
    {"Prefer: vendor\n", ":1:1: ", {"unknown key 'Prefer'; did you mean 'prefer'?"}},
    {"Prefer: vendor\n", ":1:1: ", {"unknown key 'Prefer'", VALID_KEYS_START}},
    {"per_op: x=vendor\n", ":1:1: ", {"unknown key 'per_op'", "op_backends, custom_ops"}},
    /* vllm-plugin-FL's tooling directive: a name, once. */
    {"action: [auto_tune]\n", ":1:9: ", {"action: expected a name", "not a sequence"}},
    {"action: auto_tune\nprefer: vendor\naction: x\n",
     ":3:1: ",
     {"duplicate key 'action' (first at line 1)"}},
    {"Action: auto_tune\n", ":1:1: ", {"unknown key 'Action'"}},
    /* booleans: YAML booleans only */
    {"strict: 'false'\n",
     ":1:9: ",
     {"strict: expected a YAML boolean, not the quoted string 'false'; "
      "remove the quotes",
      BOOL_VALID}},
    {"strict: \"true\"\n", ":1:9: ", {"the quoted string 'true'", BOOL_VALID}},
    {"strict: 1\n", ":1:9: ", {"strict: expected a YAML boolean, not '1'", BOOL_VALID}},
    {"strict: maybe\n", ":1:9: ", {"not 'maybe'", BOOL_VALID}},
    {"strict:\n", ":1:8: ", {"strict: expected a YAML boolean, not null", BOOL_VALID}},
    {"strict: [true]\n", ":1:9: ", {"not a sequence", BOOL_VALID}},
    {"prefer: flagos\nenabled: 'no'\n",
     ":2:10: ",
     {"enabled: expected a YAML boolean", BOOL_VALID}},
    {"use_flaggems: !!str off\n", ":1:15: ", {"use_flaggems: expected a YAML boolean", BOOL_VALID}},
    {"oot_enabled: !!bool maybe\n",
     ":1:14: ",
     {"oot_enabled: expected a YAML boolean", BOOL_VALID}},
    /* prefer */
    {"prefer: fast\n",
     ":1:9: ",
     {"prefer: invalid value 'fast'", "(valid: flagos, vendor, reference)"}},
    {"prefer: [vendor]\n",
     ":1:9: ",
     {"prefer: expected one of flagos, vendor, reference, not a "
      "sequence"}},
    {"prefer: on\n", ":1:9: ", {"not the boolean 'on'"}},
    {"prefer: ~\n", ":1:9: ", {"prefer: expected one of flagos, vendor, reference, not null"}},
    /* name lists */
    {"allow_vendors: {a: 1}\n",
     ":1:16: ",
     {"allow_vendors: expected a sequence of names or a "
      "comma-separated string, not a mapping"}},
    {"allow_vendors:\n", ":1:15: ", {"allow_vendors: expected a sequence", "not null"}},
    {"deny_vendors: 'a,,b'\n", ":1:15: ", {"deny_vendors: empty item in 'a,,b'"}},
    {"deny_vendors:\n  - amd\n  - \"a b\"\n", ":3:5: ", {"deny_vendors: invalid name 'a b'"}},
    {"deny_vendors: [amd, 'x,y']\n", ":1:21: ", {"item 'x,y' holds a comma"}},
    {"deny_vendors: [amd, '']\n", ":1:21: ", {"deny_vendors: empty item"}},
    {"deny_vendors: [amd, [x]]\n", ":1:21: ", {"deny_vendors: expected a name, not a sequence"}},
    {"flagos_blacklist: [a, yes]\n", ":1:23: ", {"not the boolean 'yes'"}},
    {"oot_whitelist: a/b\n", ":1:16: ", {"oot_whitelist: invalid name 'a/b'"}},
    /* op_backends */
    {"op_backends: [vendor]\n",
     ":1:14: ",
     {"op_backends: expected a mapping of op names to orders"}},
    {"op_backends:\n  rms_norm: [vendor, cuda]\n",
     ":2:22: ",
     {"op_backends.rms_norm: invalid token "
      "'cuda'",
      TOKEN_VALID}},
    {"op_backends:\n  rms_norm: vendor|cuda\n",
     ":2:13: ",
     {"invalid token 'cuda' for op 'rms_norm'", TOKEN_VALID}},
    {"op_backends: {rms_norm: 'vendor||reference'}\n", ":1:25: ", {"empty token", "'rms_norm'"}},
    {"op_backends:\n  rms_norm: vendor\n  silu_and_mul: flagos\n  rms_norm: flagos\n",
     ":4:3: ",
     {"op_backends: duplicate key 'rms_norm' (first at line 2)"}},
    {"op_backends:\n  rms_norm: []\n", ":2:13: ", {"op_backends.rms_norm: empty order"}},
    {"op_backends:\n  rms norm: vendor\n", ":2:3: ", {"invalid op name 'rms norm'"}},
    {"op_backends:\n  rms_norm:\n",
     ":2:12: ",
     {"op_backends.rms_norm: expected a sequence of tokens "
      "or an \"a|b\" string",
      "not null"}},
    {"op_backends:\n  rms_norm: [\"vendor:\"]\n", ":2:14: ", {"invalid vendor name"}},
    {"op_backends:\n  rms_norm: [impl:x]\n", ":2:14: ", {"invalid impl id 'x'"}},
    {"op_backends:\n  rms_norm: {a: b}\n", ":2:13: ", {"not a mapping"}},
    /* custom_ops */
    {"custom_ops: [all, none]\n",
     ":1:19: ",
     {"custom_ops: 'all' and 'none' together", CUSTOM_VALID}},
    {"custom_ops: 'none,+rms_norm,all'\n", ":1:13: ", {"'all' and 'none' together"}},
    {"custom_ops: [+rms_norm, -rms_norm]\n",
     ":1:25: ",
     {"op 'rms_norm' is both enabled and "
      "disabled"}},
    {"custom_ops: [rms_norm]\n", ":1:14: ", {"custom_ops: invalid item 'rms_norm'", CUSTOM_VALID}},
    {"custom_ops: '+'\n", ":1:13: ", {"invalid item '+'", CUSTOM_VALID}},
    {"custom_ops: 'all,,-x'\n", ":1:13: ", {"custom_ops: empty item", CUSTOM_VALID}},
    {"custom_ops: {all: true}\n", ":1:13: ", {"custom_ops: expected a sequence", "not a mapping"}},
    /* documents */
    {"prefer: vendor\nstrict: true\nprefer: flagos\n",
     ":3:1: ",
     {"duplicate key 'prefer' (first at line 1)"}},
    {"", ":1:1: ", {"empty file (expected a mapping of policy keys", "valid keys: prefer"}},
    {"# only a comment\n\n", ":1:1: ", {"empty file"}},
    {"---\n", ":2:1: ", {"empty document"}},
    {"- prefer\n- strict\n",
     ":1:1: ",
     {"expected a mapping of policy keys, not a sequence", "(valid keys: prefer"}},
    {"vendor\n", ":1:1: ", {"expected a mapping of policy keys, not 'vendor'"}},
    {"prefer: vendor\n---\nstrict: true\n", ":2:1: ", {"a second YAML document"}},
    {"? [a]\n: 1\n", ":1:3: ", {"a key must be a string, not a sequence"}},
    /* syntax */
    {"prefer: vendor\n  strict: true\n",
     ":2:9: ",
     {"YAML syntax error: mapping values are not "
      "allowed in this context"}},
    {"deny_vendors: [a, b\n",
     ":2:1: ",
     {"YAML syntax error: did not find expected ',' or ']'",
      "(while parsing a flow sequence, line 1 column 15)"}},
    {"prefer: \"vendor\n", ":2:1: ", {"YAML syntax error: found unexpected end of stream"}},
    {"prefer: vendor\n\tstrict: true\n", ":2:1: ", {"YAML syntax error: found a tab character"}},
    {"prefer: \xff\n", ":1:9: ", {"cannot read the file", "UTF-8"}},
    /* white- and blacklists */
    {"flagos_whitelist: [a]\nflagos_blacklist: [b]\n",
     ":2:1: ",
     {"flagos_blacklist and flagos_whitelist (line 1) are both set; set only one of them"}},
    {"oot_blacklist: b\nprefer: vendor\noot_whitelist: a\n",
     ":3:1: ",
     {"oot_whitelist and oot_blacklist (line 1) are both set"}},
    /* anchors, aliases, tags */
    {"allow_vendors: &v [a]\ndeny_vendors: *v\n",
     ":1:16: ",
     {"anchors and aliases are not supported (anchor '&v')"}},
    {"deny_vendors: *v\n", ":1:15: ", {"anchors and aliases are not supported (alias '*v')"}},
    {"op_backends: &o\n  rms_norm: vendor\n", ":1:14: ", {"anchor '&o'"}},
    {"prefer: !fancy vendor\n", ":1:9: ", {"unsupported tag '!fancy'"}},
    {"deny_vendors: !!set {a: null}\n", ":1:15: ", {"unsupported tag 'tag:yaml.org,2002:set'"}},
};

START_TEST(test_yaml_errors)
{
    const struct bad_yaml *c = &bad_yaml[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_set("deny_vendors", "x"), FLD_OK);
    char before[2048];
    snprintf(before, sizeof before, "%s", describe());

    const char *path = write_file("bad.yaml", c->content);
    int rc = fld_policy_load_file(path);
    ck_assert_msg(rc == FLD_ECONFIG, "case %d gave %d (%s)", _i, rc, fld_last_error());
    char located[PATH_MAX + 64];
    snprintf(located, sizeof located, "%s%s", path, c->position);
    assert_error_has(located);
    for (int k = 0; k < 2 && c->needles[k]; k++)
        assert_error_has(c->needles[k]);
    /* The position is followed by the message, not by a second position. */
    const char *after = strstr(fld_last_error(), located) + strlen(located);
    ck_assert_msg(strstr(after, path) == NULL, "path twice in: %s", fld_last_error());
    ck_assert_str_eq(describe(), before);
}
END_TEST

/* Files in other encodings (tests/data/yaml_encoding/README.md): refused with a position. */
static const struct {
    const char *file, *position, *needle;
} encoded_yaml[] = {
    {"utf16le-bom.yaml", ":1:1: ", "byte order mark of UTF-16LE; a YAML file here is UTF-8"},
    {"utf16be-bom.yaml", ":1:1: ", "byte order mark of UTF-16BE"},
    {"utf32le-bom.yaml", ":1:1: ", "byte order mark of UTF-32LE"},
    {"utf32be-bom.yaml", ":1:1: ", "byte order mark of UTF-32BE"},
    {"utf16le-no-bom.yaml", ":1:2: ", "cannot read the file"},
    {"latin1.yaml", ":2:6: ", "cannot read the file"},
};

START_TEST(test_yaml_encodings)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    char before[2048], path[PATH_MAX];
    snprintf(before, sizeof before, "%s", describe());
    snprintf(path, sizeof path, "%s/tests/data/yaml_encoding/%s", tt_src_dir(),
             encoded_yaml[_i].file);
    int rc = fld_policy_load_file(path);
    ck_assert_msg(rc == FLD_ECONFIG, "%s gave %d (%s)", encoded_yaml[_i].file, rc,
                  fld_last_error());
    char located[PATH_MAX + 64];
    snprintf(located, sizeof located, "%s%s", path, encoded_yaml[_i].position);
    assert_error_has(located);
    assert_error_has(encoded_yaml[_i].needle);
    ck_assert_str_eq(describe(), before);
}
END_TEST

/* A UTF-8 byte order mark is allowed; positions count from after it. */
START_TEST(test_yaml_utf8_byte_order_mark)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/yaml_encoding/utf8-bom.yaml", tt_src_dir());
    int rc = fld_policy_load_file(path);
    ck_assert_msg(rc == FLD_OK, "%s", fld_last_error());
    ck_assert_msg(strstr(describe(), "prefer=vendor") != NULL, "%s", describe());
    const char *bad = write_file("bom-bad.yaml", "\xef\xbb\xbfprefer: [vendor\n");
    ck_assert_int_eq(fld_policy_load_file(bad), FLD_ECONFIG);
    char located[PATH_MAX + 64];
    snprintf(located, sizeof located, "%s:2:1: ", bad);
    assert_error_has(located);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Valid YAML: values                                                       */
/* ------------------------------------------------------------------------ */

struct good_yaml {
    const char *content;
    const char *expected; /* fld_policy_describe() after loading it */
};

static const struct good_yaml good_yaml[] = {
    {"{}\n", DEFAULT_DESCRIPTION},
    {"prefer: vendor\n", "prefer=vendor;strict=0"},
    {"prefer: ' Reference '\n", "prefer=reference;strict=0"},
    {"\"prefer\": VENDOR\n", "prefer=vendor;strict=0"},
    {"strict: true\n", "prefer=flagos;strict=1"},
    {"strict: True\n", "prefer=flagos;strict=1"},
    {"strict: YES\n", "prefer=flagos;strict=1"},
    {"strict: on\n", "prefer=flagos;strict=1"},
    {"strict: !!bool true\n", "prefer=flagos;strict=1"},
    {"strict: false\n", DEFAULT_DESCRIPTION},
    {"strict: No\n", DEFAULT_DESCRIPTION},
    {"strict: OFF\n", DEFAULT_DESCRIPTION},
    {"enabled: false\nuse_flaggems: no\noot_enabled: off\n",
     "prefer=flagos;strict=0;enabled=0;flaggems=0;oot=0"},
    {"allow_vendors: [cuda, amd]\n", "prefer=flagos;strict=0;allow=amd,cuda"},
    {"allow_vendors:\n  - cuda\n  - amd\n  - cuda\n", "prefer=flagos;strict=0;allow=amd,cuda"},
    {"allow_vendors: 'cuda, amd'\n", "prefer=flagos;strict=0;allow=amd,cuda"},
    {"allow_vendors: cuda\n", "prefer=flagos;strict=0;allow=cuda"},
    {"allow_vendors: []\n", DEFAULT_DESCRIPTION},
    {"allow_vendors: ''\n", DEFAULT_DESCRIPTION},
    {"deny_vendors: [\"on\"]\n", "prefer=flagos;strict=0;deny=on"},
    {"deny_vendors: [123]\n", "prefer=flagos;strict=0;deny=123"},
    {"flagos_whitelist: [rms_norm]\noot_blacklist: silu_and_mul\n",
     "prefer=flagos;strict=0;flagos_white=rms_norm;oot_black=silu_and_mul"},
    {"flagos_blacklist: [copy_, to_copy]\noot_whitelist: [a.b-c_d]\n",
     "prefer=flagos;strict=0;flagos_black=copy_,to_copy;oot_white=a.b-c_d"},
    {"op_backends:\n  rms_norm: [vendor, reference]\n  silu_and_mul: 'flagos|vendor:cuda'\n",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference;silu_and_mul=flagos|vendor:cuda"},
    {"op_backends: {rms_norm: [impl:vendor.cpu, Reference]}\n",
     "prefer=flagos;strict=0;per=rms_norm=impl:vendor.cpu|reference"},
    {"op_backends: {rms_norm: \" vendor | reference \"}\n",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference"},
    {"op_backends: {}\n", DEFAULT_DESCRIPTION},
    /* A repeated token is dropped: it selects nothing its first occurrence did not. */
    {"op_backends:\n  rms_norm: [vendor, reference, Vendor, flagos, reference]\n",
     "prefer=flagos;strict=0;per=rms_norm=vendor|reference|flagos"},
    {"op_backends: {rms_norm: 'impl:a.b|vendor:X|impl:a.b|vendor:x'}\n",
     "prefer=flagos;strict=0;per=rms_norm=impl:a.b|vendor:x"},
    {"custom_ops: [none, +rms_norm]\n", "prefer=flagos;strict=0;custom=none,+rms_norm"},
    {"custom_ops: 'none, +rms_norm, +silu_and_mul'\n",
     "prefer=flagos;strict=0;custom=none,+rms_norm,+silu_and_mul"},
    {"custom_ops: [all, -rms_norm]\n", "prefer=flagos;strict=0;custom=all,-rms_norm"},
    {"custom_ops: [-b, +a, -c]\n", "prefer=flagos;strict=0;custom=all,+a,-b,-c"},
    {"custom_ops: [ALL]\n", DEFAULT_DESCRIPTION},
    {"custom_ops: []\n", DEFAULT_DESCRIPTION},
    {"# a platform-like file\nprefer: vendor # trailing comment\nstrict: false\n"
     "allow_vendors: [cuda]\nop_backends:\n  rms_norm: [vendor, flagos, reference]\n",
     "prefer=vendor;strict=0;allow=cuda;per=rms_norm=vendor|flagos|reference"},
};

START_TEST(test_yaml_valid)
{
    const struct good_yaml *c = &good_yaml[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    /* Something to replace: the file's policy is defaults + file. */
    ck_assert_int_eq(fld_policy_set("deny_vendors", "zz"), FLD_OK);
    const char *path = write_file("good.yaml", c->content);
    int rc = fld_policy_load_file(path);
    ck_assert_msg(rc == FLD_OK, "case %d: %d %s", _i, rc, fld_last_error());
    ck_assert_str_eq(describe(), c->expected);
}
END_TEST

/* Every field of a file records "path:line" of its key; the rest stay "default". */
START_TEST(test_yaml_sources)
{
    const char *path = write_file("sources.yaml", "# policy\n"
                                                  "prefer: vendor\n"
                                                  "\n"
                                                  "strict: true\n"
                                                  "deny_vendors:\n"
                                                  "  - B\n"
                                                  "op_backends:\n"
                                                  "  rms_norm: [vendor, reference]\n"
                                                  "\n"
                                                  "  silu_and_mul: flagos\n"
                                                  "custom_ops: none,+rms_norm\n"
                                                  "oot_enabled: false\n");
    /* Strict: every name the file mentions must be registered (vendor b is). */
    register_cfg_plugin();
    ck_assert_msg(fld_policy_load_file(path) == FLD_OK, "%s", fld_last_error());
    struct fields *t = read_fields();
    assert_field(t, "prefer", "vendor", at_line(path, 2));
    assert_field(t, "strict", "true", at_line(path, 4));
    assert_field(t, "deny_vendors", "b", at_line(path, 5));
    assert_field(t, "allow_vendors", "", "default");
    assert_field(t, "enabled", "true", "default");
    assert_field(t, "oot_enabled", "false", at_line(path, 12));
    assert_field(t, "op_backends.rms_norm", "vendor|reference", at_line(path, 8));
    assert_field(t, "op_backends.silu_and_mul", "flagos", at_line(path, 10));
    assert_field(t, "custom_ops", "none,+rms_norm", at_line(path, 11));
    ck_assert_int_eq(field_index(t, "op_backends"), -1);
    ck_assert_int_eq(field_index(t, "manifest"), -1);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fld_policy_load_file                                                     */
/* ------------------------------------------------------------------------ */

START_TEST(test_load_file_replaces_whole_policy)
{
    /* The environment and programmatic changes do not survive a load. */
    setenv("VLLM_FL_PREFER", "reference", 1);
    setenv("VLLM_FL_DENY_VENDORS", "amd", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_int_eq(fld_policy_set("per_op", "rms_norm=vendor"), FLD_OK);
    const char *path = write_file("p.yaml", "strict: yes\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=1");
    struct fields *t = read_fields();
    assert_field(t, "prefer", "flagos", "default");
    assert_field(t, "deny_vendors", "", "default");
    assert_field(t, "op_backends", "", "default");

    /* fld_policy_reset puts back what the environment says. */
    ck_assert_int_eq(fld_policy_reset(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=reference;strict=0;deny=amd");
}
END_TEST

START_TEST(test_load_file_failure_changes_nothing)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    const char *good = write_file("good.yaml", "prefer: vendor\ndeny_vendors: [amd]\n");
    ck_assert_int_eq(fld_policy_load_file(good), FLD_OK);
    const char *before = "prefer=vendor;strict=0;deny=amd";
    ck_assert_str_eq(describe(), before);
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "vendor.a");

    /* The error is in the last line: nothing before it may have been applied. */
    const char *bad =
        write_file("bad.yaml", "prefer: reference\nstrict: true\ndeny_vendors: [a]\nstrict: no\n");
    ck_assert_int_eq(fld_policy_load_file(bad), FLD_ECONFIG);
    assert_error_has("fld_policy_load_file: ");
    char located[PATH_MAX + 64];
    snprintf(located, sizeof located, "%s:4:1: duplicate key 'strict'", bad);
    assert_error_has(located);
    ck_assert_str_eq(describe(), before);
    ck_assert_str_eq(serve(op), "vendor.a");
    struct fields *t = read_fields();
    assert_field(t, "prefer", "vendor", at_line(good, 1));

    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/missing.yaml", tmp_dir);
    ck_assert_int_eq(fld_policy_load_file(missing), FLD_ECONFIG);
    char msg[PATH_MAX + 64];
    snprintf(msg, sizeof msg, "cannot open '%s': No such file or directory", missing);
    assert_error_has(msg);
    ck_assert_int_eq(fld_policy_load_file(tmp_dir), FLD_ECONFIG);
    assert_error_has("Is a directory");
    ck_assert_int_eq(fld_policy_load_file(NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_policy_load_file(""), FLD_EINVAL);
    ck_assert_str_eq(describe(), before);
}
END_TEST

START_TEST(test_load_file_affects_selection)
{
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "default.flagos");
    const char *path = write_file("sel.yaml", "prefer: vendor\n"
                                              "deny_vendors: a\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(serve(op), "vendor.b");
    path = write_file("sel2.yaml", "op_backends:\n  cfg_op: [vendor:a, reference]\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(serve(op), "vendor.a");

    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain("cfg_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->order, "vendor:a|reference");
    ck_assert_str_eq(res->order_source, at_line(path, 2));
    fld_resolution_free(res);

    /* Scoped overrides still apply on top of a loaded file. */
    ck_assert_int_eq(fld_policy_push_per_op("cfg_op=reference"), FLD_OK);
    ck_assert_str_eq(serve(op), "reference.t");
    struct fields *t = read_fields();
    assert_field(t, "op_backends.cfg_op", "reference", "scoped override");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_str_eq(serve(op), "vendor.a");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* custom_ops                                                               */
/* ------------------------------------------------------------------------ */

/* Why impl_id was rejected for cfg_op on CPU, or "" if it was not. */
static const char *rejection(const char *impl_id)
{
    static char reason[512];
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain("cfg_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    reason[0] = '\0';
    for (size_t i = 0; i < res->n_rejected; i++)
        if (strcmp(res->rejected[i].impl_id, impl_id) == 0)
            snprintf(reason, sizeof reason, "%s", res->rejected[i].reason);
    fld_resolution_free(res);
    return reason;
}

START_TEST(test_custom_ops_disable_op)
{
    fld_op op = register_cfg_plugin();
    const char *path = write_file("c.yaml", "prefer: vendor\ncustom_ops: [all, -cfg_op]\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(serve(op), "reference.t");
    char expected[PATH_MAX + 128];
    snprintf(expected, sizeof expected,
             "op 'cfg_op' disabled by custom_ops (%s): reference implementations only",
             at_line(path, 2));
    ck_assert_str_eq(rejection("vendor.a"), expected);
    ck_assert_str_eq(rejection("default.flagos"), expected);

    /* "none" disables every op not named with '+'. */
    path = write_file("c2.yaml", "prefer: vendor\ncustom_ops: [none, +other_op]\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(serve(op), "reference.t");
    path = write_file("c3.yaml", "prefer: vendor\ncustom_ops: none,+cfg_op\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    ck_assert_str_eq(serve(op), "vendor.a");
    ck_assert_str_eq(rejection("reference.t"), "");
}
END_TEST

START_TEST(test_custom_ops_env)
{
    setenv("VLLM_FL_CUSTOM_OPS", " none , +rms_norm,-silu_and_mul ", 1);
    setenv("VLLM_FL_PREFER", "vendor", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct fields *t = read_fields();
    assert_field(t, "custom_ops", "none,+rms_norm,-silu_and_mul", "VLLM_FL_CUSTOM_OPS");
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "reference.t");
    ck_assert_str_eq(rejection("vendor.b"),
                     "op 'cfg_op' disabled by custom_ops (VLLM_FL_CUSTOM_OPS): reference "
                     "implementations only");
    /* fld_policy_set speaks the same grammar. */
    ck_assert_int_eq(fld_policy_set("custom_ops", "+cfg_op,none"), FLD_OK);
    ck_assert_str_eq(serve(op), "vendor.a");
    ck_assert_int_eq(fld_policy_set("custom_ops", "all,none"), FLD_ECONFIG);
    assert_error_has("custom_ops: 'all' and 'none' together");
    ck_assert_int_eq(fld_policy_set("custom_ops", NULL), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");
}
END_TEST

struct bad_env {
    const char *var;
    const char *value;
    const char *needle;
};

static const struct bad_env bad_custom_env[] = {
    {"VLLM_FL_CUSTOM_OPS", "all,none", "VLLM_FL_CUSTOM_OPS: 'all' and 'none' together"},
    {"VLLM_FL_CUSTOM_OPS", "NONE,ALL", "'all' and 'none' together"},
    {"VLLM_FL_CUSTOM_OPS", "+a,-a", "VLLM_FL_CUSTOM_OPS: op 'a' is both enabled and disabled"},
    {"VLLM_FL_CUSTOM_OPS", "rms_norm", "VLLM_FL_CUSTOM_OPS: invalid item 'rms_norm'"},
    {"VLLM_FL_CUSTOM_OPS", "+a,,-b", "VLLM_FL_CUSTOM_OPS: empty item"},
    {"VLLM_FL_CUSTOM_OPS", "-a b", "invalid item '-a b'"},
};

START_TEST(test_custom_ops_env_invalid)
{
    const struct bad_env *c = &bad_custom_env[_i];
    setenv(c->var, c->value, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    assert_error_has(c->needle);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* VLLM_FL_OP_CONFIG                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_op_config_valid)
{
    const char *path = write_file("ops.json", "{\n"
                                              "  \"rms_norm\": \"vendor|reference\",\n"
                                              "  \"silu_and_mul\": \"flagos\",\n"
                                              "  \"cfg_op\": \" vendor:b \"\n"
                                              "}\n");
    setenv("VLLM_FL_OP_CONFIG", path, 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;per=cfg_op=vendor:b;rms_norm=vendor|"
                                 "reference;silu_and_mul=flagos");
    struct fields *t = read_fields();
    char source[PATH_MAX + 64];
    snprintf(source, sizeof source, "VLLM_FL_OP_CONFIG (%s)", at_line(path, 2));
    assert_field(t, "op_backends.rms_norm", "vendor|reference", source);
    snprintf(source, sizeof source, "VLLM_FL_OP_CONFIG (%s)", at_line(path, 4));
    assert_field(t, "op_backends.cfg_op", "vendor:b", source);
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "vendor.b");

    /* An empty object sets nothing. */
    write_file("ops.json", "{}");
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
}
END_TEST

struct bad_op_config {
    const char *content; /* NULL: the file does not exist */
    const char *position;
    const char *needle;
};

static const struct bad_op_config bad_op_configs[] = {
    {NULL, NULL, "cannot open '"},
    {"", ":1:1: ", "empty file (expected a JSON object of op names to tokens"},
    {"[\"vendor\"]", ":1:1: ",
     "expected a JSON object of op names to tokens, e.g. {\"rms_norm\": "
     "\"vendor|reference\"}, not an array"},
    {"\"vendor\"", ":1:1: ", "expected a JSON object of op names to tokens"},
    {"{\"rms_norm\": 1}", ":1:14: ", "the value of 'rms_norm' must be a JSON string of tokens"},
    {"{\"rms_norm\": true}", ":1:14: ", "not true"},
    {"{\"rms_norm\": null}", ":1:14: ", "not null"},
    {"{\"rms_norm\": [\"vendor\"]}", ":1:14: ", "not an array"},
    {"{\"rms_norm\": {\"a\": \"b\"}}", ":1:14: ", "not an object"},
    {"{\"rms_norm\": \"cuda\"}", ":1:14: ", "invalid token 'cuda' for op 'rms_norm'"},
    {"{\"rms_norm\": \"vendor||flagos\"}", ":1:14: ", "empty token"},
    {"{\"rms_norm\": \"\"}", ":1:14: ", "empty order for op 'rms_norm'"},
    {"{\n\"rms_norm\": \"vendor\",\n\"rms_norm\": \"flagos\"}",
     ":3:1: ", "duplicate key 'rms_norm' (first at line 2)"},
    {"{\"rms norm\": \"vendor\"}", ":1:2: ", "invalid op name 'rms norm'"},
    /* Strict JSON: what YAML (or a lenient reader) would take is refused. */
    {"{rms_norm: \"vendor\"}", ":1:2: ", "unexpected 'r', expected a string key in double quotes"},
    {"{\"rms_norm\": 'vendor'}", ":1:14: ", "single quotes are not JSON"},
    {"{\"rms_norm\": \"vendor\"", ":1:22: ", "unexpected end of file, expected ',' or '}'"},
    {"{\"rms_norm\": \"vendor\",}", ":1:23: ", "trailing ',' before '}' (not JSON)"},
    {"# ops\n{\"rms_norm\": \"vendor\"}", ":1:1: ", "comments are not JSON"},
    {"{\"rms_norm\": \"vendor\"} // x", ":1:24: ", "expected the end of the file"},
    {"rms_norm: vendor\n", ":1:1: ", "expected a JSON value"},
    {"\"rms_norm\": \"vendor\"\n", ":1:11: ", "expected the end of the file"},
    {"{\"rms_norm\": \"vendor\"}\n{}", ":2:1: ", "expected the end of the file"},
    {"\xef\xbb\xbf{\"rms_norm\": \"vendor\"}", ":1:1: ", "byte-order mark"},
    {"{\"rms_norm\": \"vend\xffor\"}", ":1:19: ", "invalid UTF-8 byte 0xff"},
    {"{\"rms_norm\": \"a\\qb\"}", ":1:16: ", "invalid escape '\\q'"},
    {"{\"rms_norm\": \"a\tb\"}", ":1:16: ", "control character 0x09 in a string"},
    {"{\"rms_norm\": \"\\ud800\"}", ":1:15: ", "not followed by a low surrogate"},
    {"{\"rms_norm\": 01}", ":1:14: ", "no leading zeros"},
    {"{\"rms_norm\" \"vendor\"}", ":1:13: ", "expected ':' after the key"},
};

START_TEST(test_op_config_invalid)
{
    const struct bad_op_config *c = &bad_op_configs[_i];
    char path[PATH_MAX];
    if (c->content)
        snprintf(path, sizeof path, "%s", write_file("ops.json", c->content));
    else
        snprintf(path, sizeof path, "%s/no-such.json", tmp_dir);
    setenv("VLLM_FL_OP_CONFIG", path, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char expected[PATH_MAX + 512];
    if (c->position) {
        snprintf(expected, sizeof expected, "VLLM_FL_OP_CONFIG: %s%s", path, c->position);
        assert_error_has(expected);
        assert_error_has(c->needle);
    } else {
        snprintf(expected, sizeof expected,
                 "VLLM_FL_OP_CONFIG: cannot open '%s': No such file or directory", path);
        assert_error_has(expected);
    }
}
END_TEST

/* ------------------------------------------------------------------------ */
/* VLLM_FL_CONFIG                                                           */
/* ------------------------------------------------------------------------ */

START_TEST(test_config_env_overrides_everything)
{
    const char *ops = write_file("ops.json", "{\"rms_norm\": \"reference\"}");
    const char *config = write_file("override.yaml", "prefer: vendor\n"
                                                     "op_backends:\n"
                                                     "  cfg_op: [vendor:b]\n");
    setenv("VLLM_FL_CONFIG", config, 1);
    setenv("VLLM_FL_PREFER", "reference", 1);
    setenv("VLLM_FL_STRICT", "1", 1);
    setenv("VLLM_FL_PER_OP", "cfg_op=reference", 1);
    setenv("VLLM_FL_DENY_VENDORS", "b", 1);
    setenv("VLLM_FL_CUSTOM_OPS", "none", 1);
    setenv("VLLM_FL_OP_CONFIG", ops, 1);
    setenv("VLLM_FL_ALLOW_VENDORS", " ", 1); /* blank: unset, not ignored */
    setenv("VLLM_FL_LOG_LEVEL", "WARNING", 1);
    fld_log_set_callback(capture_log, NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);

    ck_assert_str_eq(describe(), "prefer=vendor;strict=0;per=cfg_op=vendor:b");
    struct fields *t = read_fields();
    assert_field(t, "prefer", "vendor", at_line(config, 1));
    assert_field(t, "strict", "false", "default");
    assert_field(t, "deny_vendors", "", "default");
    assert_field(t, "custom_ops", "all", "default");
    assert_field(t, "op_backends.cfg_op", "vendor:b", at_line(config, 3));
    ck_assert_int_eq(field_index(t, "op_backends.rms_norm"), -1);
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "vendor.b");

    /* One WARNING naming each ignored variable (none of the unset or blank ones).
     * The others name cfg_op and vendor b, unknown when init checked the names
     * (the in-process plugin registers them later). */
    pthread_mutex_lock(&log_mutex);
    ck_assert_int_eq(log_warnings, 3);
    const char *w = strstr(log_text, "VLLM_FL_CONFIG=");
    ck_assert_msg(w != NULL, "no warning in: %s", log_text);
    ck_assert_ptr_null(strstr(w + 1, "VLLM_FL_CONFIG="));
    ck_assert_msg(strstr(log_text, "no op named 'cfg_op' is registered"), "%s", log_text);
    ck_assert_msg(strstr(log_text, "token 'vendor:b' names no registered vendor"), "%s", log_text);
    char expected[PATH_MAX + 256];
    snprintf(expected, sizeof expected,
             "VLLM_FL_CONFIG=%s is a complete override of the policy: ignoring VLLM_FL_PREFER, "
             "VLLM_FL_STRICT, VLLM_FL_DENY_VENDORS, VLLM_FL_PER_OP, VLLM_FL_CUSTOM_OPS, "
             "VLLM_FL_OP_CONFIG\n",
             config);
    ck_assert_msg(strstr(log_text, expected) != NULL, "expected '%s' in: %s", expected, log_text);
    pthread_mutex_unlock(&log_mutex);
}
END_TEST

/* A vllm-plugin-FL policy file with its tooling directive loads unchanged; the directive is
 * named in one WARNING and changes nothing. */
START_TEST(test_config_action_key_ignored)
{
    const char *config = write_file("upstream.yaml", "# Optional action for tooling\n"
                                                     "action: auto_tune\n"
                                                     "prefer: vendor\n"
                                                     "op_backends:\n"
                                                     "  rms_norm: [vendor, flagos]\n");
    setenv("VLLM_FL_CONFIG", config, 1);
    setenv("VLLM_FL_LOG_LEVEL", "WARNING", 1);
    fld_log_set_callback(capture_log, NULL);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0;per=rms_norm=vendor|flagos");
    char expected[PATH_MAX + 128];
    snprintf(expected, sizeof expected,
             "%s:2:1: action: 'auto_tune' is a directive for vllm-plugin-FL's tooling; "
             "fldispatch ignores it",
             config);
    pthread_mutex_lock(&log_mutex);
    ck_assert_msg(strstr(log_text, expected) != NULL, "expected '%s' in: %s", expected, log_text);
    pthread_mutex_unlock(&log_mutex);
}
END_TEST

START_TEST(test_config_env_no_warning_without_env)
{
    const char *config = write_file("override.yaml", "strict: true\n");
    setenv("VLLM_FL_CONFIG", config, 1);
    setenv("VLLM_FL_LOG_LEVEL", "WARNING", 1);
    fld_log_set_callback(capture_log, NULL);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=1");
    ck_assert_int_eq(log_warnings, 0);
}
END_TEST

START_TEST(test_config_env_errors)
{
    char missing[PATH_MAX], expected[PATH_MAX + 128];
    snprintf(missing, sizeof missing, "%s/nope/policy.yaml", tmp_dir);
    setenv("VLLM_FL_CONFIG", missing, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    snprintf(expected, sizeof expected,
             "VLLM_FL_CONFIG: cannot open '%s': No such file or directory", missing);
    assert_error_has(expected);
    /* Remembered until reload. */
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    assert_error_has(expected);

    setenv("VLLM_FL_CONFIG", tmp_dir, 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    snprintf(expected, sizeof expected, "VLLM_FL_CONFIG: cannot open '%s': Is a directory",
             tmp_dir);
    assert_error_has(expected);

    const char *bad = write_file("bad.yaml", "prefer: vendor\nstrict: 'yes'\n");
    setenv("VLLM_FL_CONFIG", bad, 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    snprintf(expected, sizeof expected, "VLLM_FL_CONFIG: %s:2:9: strict: expected a YAML boolean",
             bad);
    assert_error_has(expected);

    const char *good = write_file("good.yaml", "prefer: reference\n");
    setenv("VLLM_FL_CONFIG", good, 1);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=reference;strict=0");

    /* A failed reload keeps the policy in force. */
    unlink(good);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    assert_error_has("fld_reload: configuration kept as it was");
    assert_error_has("VLLM_FL_CONFIG: cannot open");
    ck_assert_str_eq(describe(), "prefer=reference;strict=0");
}
END_TEST

START_TEST(test_config_env_blank_is_unset)
{
    setenv("VLLM_FL_CONFIG", "  ", 1);
    setenv("VLLM_FL_OP_CONFIG", "", 1);
    setenv("VLLM_FL_PREFER", "vendor", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=vendor;strict=0");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Per-op precedence and env over lower layers                              */
/* ------------------------------------------------------------------------ */

/* As in vllm-plugin-FL: VLLM_FL_OP_CONFIG replaces the per-op orders of the
 * lower layers as a whole (VLLM_FL_PER_OP's silu_and_mul order is gone). */
START_TEST(test_op_config_beats_per_op)
{
    const char *ops =
        write_file("ops.json", "{\"rms_norm\": \"vendor\", \"cfg_op\": \"vendor:a\"}");
    setenv("VLLM_FL_OP_CONFIG", ops, 1);
    setenv("VLLM_FL_PER_OP", "rms_norm=reference;silu_and_mul=reference;cfg_op=vendor:b", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    struct fields *t = read_fields();
    char source[PATH_MAX + 64];
    snprintf(source, sizeof source, "VLLM_FL_OP_CONFIG (%s)", at_line(ops, 1));
    assert_field(t, "op_backends.rms_norm", "vendor", source);
    assert_field(t, "op_backends.cfg_op", "vendor:a", source);
    ck_assert_int_eq(field_index(t, "op_backends.silu_and_mul"), -1);
    fld_op op = register_cfg_plugin();
    ck_assert_str_eq(serve(op), "vendor.a");
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld_explain("cfg_op", FLD_DEVICE_CPU, FLD_DTYPE_ANY, &res), FLD_OK);
    ck_assert_str_eq(res->order_source, source);
    fld_resolution_free(res);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The platform layer, with a relocated copy of the library                 */
/* ------------------------------------------------------------------------ */

static char fake_prefix[PATH_MAX];

/* <tmp>/prefix/lib/libfldispatch.so.0 (a copy) and <tmp>/prefix/share/fldispatch/config/. */
static void make_fake_install(const char *cpu_yaml)
{
    const char *builddir = tt_build_dir();
    char src[PATH_MAX], dst[PATH_MAX + 64];
    snprintf(fake_prefix, sizeof fake_prefix, "%s/prefix", tmp_dir);
    snprintf(dst, sizeof dst, "mkdir -p '%s/lib' '%s/share/fldispatch/config'", fake_prefix,
             fake_prefix);
    ck_assert_int_eq(system(dst), 0);
    snprintf(src, sizeof src, "%s/lib/libfldispatch.so.0", builddir);
    snprintf(dst, sizeof dst, "%s/lib/libfldispatch.so.0", fake_prefix);
    int in = open(src, O_RDONLY);
    ck_assert_msg(in >= 0, "%s: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    ck_assert_int_ge(out, 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        ck_assert_int_eq(write(out, buf, (size_t)n), n);
    ck_assert_int_eq(n, 0);
    close(in);
    close(out);
    char yaml[PATH_MAX + 64];
    snprintf(yaml, sizeof yaml, "%s/share/fldispatch/config/cpu.yaml", fake_prefix);
    FILE *f = fopen(yaml, "w");
    ck_assert_ptr_nonnull(f);
    fputs(cpu_yaml, f);
    fclose(f);
}

static const char *fake_platform_file(void)
{
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/share/fldispatch/config/cpu.yaml", fake_prefix);
    return path;
}

/* Runs this program with --dump-config on the fake install; its output. */
static const char *dump_config(void)
{
    static char output[65536];
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* The preloaded copy carries the soname libfldispatch.so.0, so it
         * is the one this program's DT_NEEDED entry binds to. Under ASan
         * its runtime then no longer comes first, which is harmless here. */
        char lib[PATH_MAX + 32], asan[1024];
        snprintf(lib, sizeof lib, "%s/lib/libfldispatch.so.0", fake_prefix);
        setenv("LD_PRELOAD", lib, 1);
        const char *opts = getenv("ASAN_OPTIONS");
        snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", opts ? opts : "",
                 opts && *opts ? ":" : "");
        setenv("ASAN_OPTIONS", asan, 1);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl("/proc/self/exe", "test_config", "--dump-config", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], output + len, sizeof output - 1 - len)) > 0)
        len += (size_t)n;
    output[len] = '\0';
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: %s", output);
    return output;
}

/* The child's side: prints the init status, the platform file and every field. */
static int print_config_field(const fld_config_field *f, void *user)
{
    (void)user;
    printf("field\t%s\t%s\t%s\n", f->key, f->value, f->source);
    return 0;
}

static int run_dump_config(void)
{
    int rc = fld_init();
    printf("init\t%d\t%s\n", rc, rc ? fld_last_error() : "");
    if (rc == FLD_OK) {
        fld_platform_info info;
        if (fld_platform(&info) == FLD_OK)
            printf("platform\t%s\t%s\n", info.name, info.config_file);
        fld_foreach_config_field(print_config_field, NULL);
    }
    fflush(stdout);
    return 0;
}

/* The "value\tsource" of key in a dump, or NULL. */
static const char *dumped(const char *dump, const char *key)
{
    static char buf[4096];
    char prefix[256];
    snprintf(prefix, sizeof prefix, "field\t%s\t", key);
    for (const char *line = dump; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n >= strlen(prefix) && strncmp(line, prefix, strlen(prefix)) == 0) {
            snprintf(buf, sizeof buf, "%.*s", (int)(n - strlen(prefix)), line + strlen(prefix));
            return buf;
        }
        line = end ? end + 1 : NULL;
    }
    return NULL;
}

#define assert_dumped(dump, key, value, source)                                                    \
    do {                                                                                           \
        char want_[PATH_MAX + 1100];                                                               \
        snprintf(want_, sizeof want_, "%s\t%s", (value), (source));                                \
        const char *got_ = dumped((dump), (key));                                                  \
        ck_assert_msg(got_ &&strcmp(got_, want_) == 0, "%s: got '%s', expected '%s'", (key),       \
                      got_ ? got_ : "(none)", want_);                                              \
    } while (0)

static const char every_field_yaml[] = "# a platform file with every key\n"
                                       "prefer: vendor\n"
                                       "strict: true\n"
                                       "enabled: true\n"
                                       "use_flaggems: false\n"
                                       "oot_enabled: false\n"
                                       "allow_vendors: [CPU, template]\n"
                                       "deny_vendors: Template\n"
                                       "flagos_blacklist: [copy_, to_copy]\n"
                                       "oot_whitelist: rms_norm\n"
                                       "op_backends:\n"
                                       "  rms_norm: [vendor, reference]\n"
                                       "  silu_and_mul: flagos|vendor\n"
                                       "custom_ops: [none, +rms_norm]\n";

/* The build's plugins, so that the vendors the platform file names exist:
 * strict mode makes an unknown name an error. */
static void use_build_plugins(void)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/lib/fldispatch/plugins", tt_build_dir());
    setenv("VLLM_FL_PLUGIN_DIR", dir, 1);
}

/* Every field of a platform file is in force, strict included (the Python
 * system's platform strict never applied). */
START_TEST(test_platform_file_every_field)
{
    make_fake_install(every_field_yaml);
    use_build_plugins();
    const char *dump = dump_config();
    const char *file = fake_platform_file();
    ck_assert_msg(strstr(dump, "init\t0\t\n"), "%s", dump);
    char platform_line[PATH_MAX + 64];
    snprintf(platform_line, sizeof platform_line, "platform\tcpu\t%s\n", file);
    ck_assert_msg(strstr(dump, platform_line), "expected '%s' in %s", platform_line, dump);
    assert_dumped(dump, "prefer", "vendor", at_line(file, 2));
    assert_dumped(dump, "strict", "true", at_line(file, 3));
    assert_dumped(dump, "enabled", "true", at_line(file, 4));
    assert_dumped(dump, "use_flaggems", "false", at_line(file, 5));
    assert_dumped(dump, "oot_enabled", "false", at_line(file, 6));
    assert_dumped(dump, "allow_vendors", "cpu,template", at_line(file, 7));
    assert_dumped(dump, "deny_vendors", "template", at_line(file, 8));
    assert_dumped(dump, "flagos_whitelist", "", "default");
    assert_dumped(dump, "flagos_blacklist", "copy_,to_copy", at_line(file, 9));
    assert_dumped(dump, "oot_whitelist", "rms_norm", at_line(file, 10));
    assert_dumped(dump, "oot_blacklist", "", "default");
    assert_dumped(dump, "op_backends.rms_norm", "vendor|reference", at_line(file, 12));
    assert_dumped(dump, "op_backends.silu_and_mul", "flagos|vendor", at_line(file, 13));
    assert_dumped(dump, "custom_ops", "none,+rms_norm", at_line(file, 14));
}
END_TEST

/* VLLM_FL_PER_OP replaces the platform file's op_backends as a whole, as in
 * vllm-plugin-FL: an op the variable does not name falls back to prefer's order. */
START_TEST(test_platform_file_per_op_replaces)
{
    make_fake_install(every_field_yaml);
    setenv("VLLM_FL_STRICT", "0", 1);
    setenv("VLLM_FL_PER_OP", "gelu_and_mul=vendor", 1);
    const char *dump = dump_config();
    ck_assert_msg(strstr(dump, "init\t0\t\n"), "%s", dump);
    assert_dumped(dump, "op_backends.gelu_and_mul", "vendor", "VLLM_FL_PER_OP");
    ck_assert_ptr_null(dumped(dump, "op_backends.rms_norm"));
    ck_assert_ptr_null(dumped(dump, "op_backends.silu_and_mul"));
}
END_TEST

/* Environment variables replace single fields of the platform file;
 * VLLM_FL_OP_CONFIG > VLLM_FL_PER_OP > op_backends, each replacing the orders below. */
START_TEST(test_platform_file_under_env)
{
    make_fake_install(every_field_yaml);
    const char *ops = write_file("ops.json", "{\"silu_and_mul\": \"reference\"}");
    setenv("VLLM_FL_STRICT", "0", 1);
    setenv("VLLM_FL_PER_OP", "rms_norm=reference;gelu_and_mul=vendor", 1);
    setenv("VLLM_FL_OP_CONFIG", ops, 1);
    setenv("VLLM_FL_CUSTOM_OPS", "-silu_and_mul", 1);
    setenv("VLLM_FL_FLAGOS_WHITELIST", "rms_norm", 1);
    setenv("VLLM_FL_OOT_BLACKLIST", "x", 1);
    setenv("VLLM_FL_ALLOW_VENDORS", "cuda", 1);
    const char *dump = dump_config();
    const char *file = fake_platform_file();
    ck_assert_msg(strstr(dump, "init\t0\t\n"), "%s", dump);
    assert_dumped(dump, "prefer", "vendor", at_line(file, 2));
    assert_dumped(dump, "strict", "false", "VLLM_FL_STRICT");
    assert_dumped(dump, "allow_vendors", "cuda", "VLLM_FL_ALLOW_VENDORS");
    assert_dumped(dump, "deny_vendors", "template", at_line(file, 8));
    /* A list set by the environment replaces its pair from the file. */
    assert_dumped(dump, "flagos_whitelist", "rms_norm", "VLLM_FL_FLAGOS_WHITELIST");
    assert_dumped(dump, "flagos_blacklist", "", "cleared by VLLM_FL_FLAGOS_WHITELIST");
    assert_dumped(dump, "oot_blacklist", "x", "VLLM_FL_OOT_BLACKLIST");
    assert_dumped(dump, "oot_whitelist", "", "cleared by VLLM_FL_OOT_BLACKLIST");
    /* VLLM_FL_OP_CONFIG replaces every per-op order of the layers below. */
    ck_assert_ptr_null(dumped(dump, "op_backends.rms_norm"));
    ck_assert_ptr_null(dumped(dump, "op_backends.gelu_and_mul"));
    char source[PATH_MAX + 64];
    snprintf(source, sizeof source, "VLLM_FL_OP_CONFIG (%s)", at_line(ops, 1));
    assert_dumped(dump, "op_backends.silu_and_mul", "reference", source);
    assert_dumped(dump, "custom_ops", "all,-silu_and_mul", "VLLM_FL_CUSTOM_OPS");
}
END_TEST

/* VLLM_FL_CONFIG replaces the platform file too: defaults + that file. */
START_TEST(test_platform_file_under_config)
{
    make_fake_install(every_field_yaml);
    const char *config = write_file("override.yaml", "strict: false\nprefer: reference\n");
    setenv("VLLM_FL_CONFIG", config, 1);
    const char *dump = dump_config();
    ck_assert_msg(strstr(dump, "init\t0\t\n"), "%s", dump);
    /* The platform file was not read, so it is not claimed as in use. */
    ck_assert_msg(strstr(dump, "platform\tcpu\t\n"), "%s", dump);
    assert_dumped(dump, "prefer", "reference", at_line(config, 2));
    assert_dumped(dump, "strict", "false", at_line(config, 1));
    assert_dumped(dump, "deny_vendors", "", "default");
    assert_dumped(dump, "custom_ops", "all", "default");
    assert_dumped(dump, "op_backends", "", "default");
}
END_TEST

START_TEST(test_platform_file_error)
{
    make_fake_install("prefer: vendor\nstrict: 'true'\n");
    const char *dump = dump_config();
    char expected[PATH_MAX + 128];
    snprintf(expected, sizeof expected,
             "init\t%d\tplatform file of 'cpu': %s:2:9: strict: expected a YAML boolean",
             FLD_ECONFIG, fake_platform_file());
    ck_assert_msg(strstr(dump, expected), "expected '%s' in %s", expected, dump);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fld_foreach_config_field                                                 */
/* ------------------------------------------------------------------------ */

static int stop_at_third(const fld_config_field *f, void *user)
{
    (void)f;
    int *count = user;
    return ++*count == 3 ? 42 : 0;
}

START_TEST(test_foreach_fields)
{
    const char *path = write_file("f.yaml", "prefer: reference\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_OK);
    struct fields *t = read_fields();
    static const char *const keys[] = {
        "prefer",
        "strict",
        "enabled",
        "use_flaggems",
        "allow_vendors",
        "deny_vendors",
        "flagos_whitelist",
        "flagos_blacklist",
        "oot_enabled",
        "oot_whitelist",
        "oot_blacklist",
        "external_enabled",
        "external_whitelist",
        "external_blacklist",
        "custom_ops",
        "op_backends",
    };
    ck_assert_uint_eq(t->n, sizeof keys / sizeof keys[0]);
    for (size_t i = 0; i < t->n; i++)
        ck_assert_str_eq(t->key[i], keys[i]);
    assert_field(t, "prefer", "reference", at_line(path, 1));
    assert_field(t, "strict", "false", "default");
    assert_field(t, "use_flaggems", "true", "default");
    assert_field(t, "custom_ops", "all", "default");
    assert_field(t, "op_backends", "", "default");

    int count = 0;
    ck_assert_int_eq(fld_foreach_config_field(stop_at_third, &count), 42);
    ck_assert_int_eq(count, 3);
    ck_assert_int_eq(fld_foreach_config_field(NULL, NULL), FLD_EINVAL);

    /* Programmatic and scoped sources, per thread. */
    ck_assert_int_eq(fld_policy_set("deny_vendors", "b,a"), FLD_OK);
    /* (x is no registered op: pushed strict, it would be refused) */
    ck_assert_int_eq(fld_policy_push_per_op("x=vendor"), FLD_OK);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    t = read_fields();
    assert_field(t, "deny_vendors", "a,b", "fld_policy_set");
    assert_field(t, "strict", "true", "scoped override");
    assert_field(t, "op_backends.x", "vendor", "scoped override");
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    t = read_fields();
    assert_field(t, "strict", "false", "default");
}
END_TEST

START_TEST(test_foreach_manifest)
{
    /* The manifest is reported; it freezes the global policy. */
    const char *manifest = write_file("frozen.yaml", "# fldispatch manifest\n"
                                                     "version: 1\n"
                                                     "entries:\n"
                                                     "  - {op: rms_norm, device: cpu, dtype: f32, "
                                                     "impl: reference.c}\n");
    setenv("VLLM_FL_MANIFEST", manifest, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "%d %s", rc, fld_last_error());
    struct fields *t = read_fields();
    assert_field(t, "manifest", manifest, "VLLM_FL_MANIFEST");
    const char *path = write_file("p.yaml", "prefer: vendor\n");
    ck_assert_int_eq(fld_policy_load_file(path), FLD_ESTATE);
    t = read_fields();
    assert_field(t, "prefer", "flagos", "default");
    assert_field(t, "manifest", manifest, "VLLM_FL_MANIFEST");
    ck_assert_msg(strstr(describe(), ";manifest="), "%s", describe());
}
END_TEST

START_TEST(test_fingerprint_custom_ops)
{
    ck_assert_int_eq(fld_policy_set("custom_ops", "-b,+a"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;custom=all,+a,-b");
    ck_assert_int_eq(fld_policy_set("custom_ops", "none"), FLD_OK);
    ck_assert_str_eq(describe(), "prefer=flagos;strict=0;custom=none");
    ck_assert_int_eq(fld_policy_set("custom_ops", "all"), FLD_OK);
    ck_assert_str_eq(describe(), DEFAULT_DESCRIPTION);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Reload under concurrent calls                                            */
/* ------------------------------------------------------------------------ */

/*
 * Policy A serves cfg_op with vendor.a, policy B with vendor.b. A mixture
 * (A's allow list with B's order, or the reverse) leaves no candidate, so a
 * torn policy shows as a failed call.
 */
static const char policy_a[] = "allow_vendors: [a]\nop_backends:\n  cfg_op: [vendor:a]\n";
static const char policy_b[] = "allow_vendors: [b]\nop_backends:\n  cfg_op: vendor:b\n";

struct worker {
    fld_op op;
    atomic_bool *stop;
    long calls, served_a, served_b, bad;
    int first_bad_rc;
};

static void *call_loop(void *arg)
{
    struct worker *w = arg;
    while (!atomic_load(w->stop) || w->calls < 100) {
        struct cfg_args a = {NULL};
        int rc = fld_call(w->op, &a);
        w->calls++;
        if (rc == FLD_OK && a.served && strcmp(a.served, "vendor.a") == 0)
            w->served_a++;
        else if (rc == FLD_OK && a.served && strcmp(a.served, "vendor.b") == 0)
            w->served_b++;
        else if (w->bad++ == 0)
            w->first_bad_rc = rc;
    }
    return NULL;
}

enum { N_WORKERS = 3, N_SWITCHES = 200 };

static void run_switching(int (*switch_to)(int which))
{
    fld_op op = register_cfg_plugin();
    ck_assert_int_eq(switch_to(0), FLD_OK);
    atomic_bool stop = false;
    struct worker w[N_WORKERS];
    pthread_t t[N_WORKERS];
    for (int i = 0; i < N_WORKERS; i++) {
        w[i] = (struct worker){.op = op, .stop = &stop};
        ck_assert_int_eq(pthread_create(&t[i], NULL, call_loop, &w[i]), 0);
    }
    for (int i = 1; i <= N_SWITCHES; i++) {
        int rc = switch_to(i % 2);
        ck_assert_msg(rc == FLD_OK, "switch %d: %d %s", i, rc, fld_last_error());
        /* The switch is in force for the next call on this thread. */
        ck_assert_str_eq(serve(op), i % 2 ? "vendor.b" : "vendor.a");
    }
    atomic_store(&stop, true);
    long calls = 0, a = 0, b = 0;
    for (int i = 0; i < N_WORKERS; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_msg(w[i].bad == 0, "worker %d: %ld of %ld calls not served by a or b (rc %d)", i,
                      w[i].bad, w[i].calls, w[i].first_bad_rc);
        calls += w[i].calls;
        a += w[i].served_a;
        b += w[i].served_b;
    }
    ck_assert_int_eq(a + b, calls);
    ck_assert_int_gt(calls, 0);
}

static char policy_files[2][PATH_MAX];

static void write_policies(void)
{
    snprintf(policy_files[0], PATH_MAX, "%s", write_file("a.yaml", policy_a));
    snprintf(policy_files[1], PATH_MAX, "%s", write_file("b.yaml", policy_b));
}

static int switch_by_load_file(int which)
{
    return fld_policy_load_file(policy_files[which]);
}

START_TEST(test_concurrent_load_file)
{
    write_policies();
    run_switching(switch_by_load_file);
}
END_TEST

static int switch_by_reload(int which)
{
    setenv("VLLM_FL_ALLOW_VENDORS", which ? "b" : "a", 1);
    setenv("VLLM_FL_PER_OP", which ? "cfg_op=vendor:b" : "cfg_op=vendor:a", 1);
    return fld_reload();
}

START_TEST(test_concurrent_reload_env)
{
    run_switching(switch_by_reload);
}
END_TEST

static int switch_by_reload_config(int which)
{
    setenv("VLLM_FL_CONFIG", policy_files[which], 1);
    return fld_reload();
}

START_TEST(test_concurrent_reload_config)
{
    write_policies();
    run_switching(switch_by_reload_config);
}
END_TEST

/* A failing load between good ones: calls keep being served by the last good policy. */
static int switch_with_failures(int which)
{
    const char *bad = write_file("torn.yaml", "allow_vendors: [b]\nop_backends: {cfg_op: cuda}\n");
    if (fld_policy_load_file(bad) != FLD_ECONFIG)
        return FLD_EINVAL;
    return fld_policy_load_file(policy_files[which]);
}

START_TEST(test_concurrent_failed_loads)
{
    write_policies();
    run_switching(switch_with_failures);
}
END_TEST

/* ------------------------------------------------------------------------ */

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------------------ */
/* Special files where a configuration file belongs                         */
/* ------------------------------------------------------------------------ */

/*
 * A FIFO must be refused, not opened for reading: that waits for a writer
 * forever, under the lock every caller needs. alarm() turns a regression
 * into a failure instead of a hang.
 */
START_TEST(test_fifo_is_not_a_config_file)
{
    static const char *const vars[] = {"VLLM_FL_CONFIG", "VLLM_FL_OP_CONFIG"};
    char fifo[PATH_MAX], expected[PATH_MAX + 128];
    snprintf(fifo, sizeof fifo, "%s/fifo.yaml", tmp_dir);
    ck_assert_msg(mkfifo(fifo, 0600) == 0, "mkfifo %s: %s", fifo, strerror(errno));
    alarm(5);
    for (int i = 0; i < N_OF(vars); i++) {
        setenv(vars[i], fifo, 1);
        ck_assert_int_eq(i == 0 ? fld_init() : fld_reload(), FLD_ECONFIG);
        snprintf(expected, sizeof expected, "%s: cannot open '%s': not a regular file", vars[i],
                 fifo);
        assert_error_has(expected);
        unsetenv(vars[i]);
    }
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_policy_load_file(fifo), FLD_ECONFIG);
    snprintf(expected, sizeof expected,
             "fld_policy_load_file: cannot open '%s': not a regular file", fifo);
    assert_error_has(expected);
    /* A character device is refused the same way. */
    ck_assert_int_eq(fld_policy_load_file("/dev/null"), FLD_ECONFIG);
    assert_error_has("not a regular file");
    alarm(0);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

    tc = tcase_create("yaml");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_yaml_errors, 0, N_OF(bad_yaml));
    tcase_add_loop_test(tc, test_yaml_encodings, 0, N_OF(encoded_yaml));
    tcase_add_test(tc, test_yaml_utf8_byte_order_mark);
    tcase_add_loop_test(tc, test_yaml_valid, 0, N_OF(good_yaml));
    tcase_add_test(tc, test_yaml_sources);
    suite_add_tcase(s, tc);

    tc = tcase_create("load_file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_load_file_replaces_whole_policy);
    tcase_add_test(tc, test_load_file_failure_changes_nothing);
    tcase_add_test(tc, test_load_file_affects_selection);
    suite_add_tcase(s, tc);

    tc = tcase_create("custom_ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_custom_ops_disable_op);
    tcase_add_test(tc, test_custom_ops_env);
    tcase_add_loop_test(tc, test_custom_ops_env_invalid, 0, N_OF(bad_custom_env));
    tcase_add_test(tc, test_fingerprint_custom_ops);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_op_config_valid);
    tcase_add_loop_test(tc, test_op_config_invalid, 0, N_OF(bad_op_configs));
    tcase_add_test(tc, test_config_env_overrides_everything);
    tcase_add_test(tc, test_config_action_key_ignored);
    tcase_add_test(tc, test_config_env_no_warning_without_env);
    tcase_add_test(tc, test_config_env_errors);
    tcase_add_test(tc, test_config_env_blank_is_unset);
    tcase_add_test(tc, test_op_config_beats_per_op);
    tcase_add_test(tc, test_fifo_is_not_a_config_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("platform_file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_platform_file_every_field);
    tcase_add_test(tc, test_platform_file_under_env);
    tcase_add_test(tc, test_platform_file_per_op_replaces);
    tcase_add_test(tc, test_platform_file_under_config);
    tcase_add_test(tc, test_platform_file_error);
    suite_add_tcase(s, tc);

    tc = tcase_create("report");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_foreach_fields);
    tcase_add_test(tc, test_foreach_manifest);
    suite_add_tcase(s, tc);

    tc = tcase_create("reload");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_concurrent_load_file);
    tcase_add_test(tc, test_concurrent_reload_env);
    tcase_add_test(tc, test_concurrent_reload_config);
    tcase_add_test(tc, test_concurrent_failed_loads);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--dump-config") == 0)
        return run_dump_config();
    return tt_run_suite(config_suite());
}
