/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy input at scale, and the error order that reading it in one pass
 * must keep: long op_backends maps, lists, custom_ops and VLLM_FL_OP_CONFIG
 * objects load in time (O(n^2) would take over a minute for 20k ops),
 * a repeated key is still reported at its second occurrence, an error before
 * the repeat still wins over it, and VLLM_FL_OP_CONFIG={} claims no source.
 * One op's order of 200k tokens loads in time from each of its sources
 * (finding repeated tokens was O(n^2): minutes), repeats dropped, and more
 * different tokens than FLD_ORDER_MAX_TOKENS are refused just as fast.
 *
 * Every test forks (CK_FORK), so each starts with a fresh library; the
 * fixture clears the policy variables and points VLLM_FL_PLUGIN_DIR at an
 * empty directory so the real plugins stay out.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/env.h"
#include "util/harness.h"
#include <fldispatch/fldispatch.h>

/* Sanitizer allocators copy on every realloc(), which makes the YAML reader's
 * one-at-a-time growth of a node's children (core/policy/config_yaml.c) quadratic
 * there: such builds check the same things on fewer items. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifdef SANITIZED
#define N_BIG 5000u
#else
#define N_BIG 20000u
#endif
/* Tokens of one long order; FLD_ORDER_MAX_TOKENS (core/base/parse.h) is 1024. */
#ifdef SANITIZED
#define N_TOKENS 20000u
#else
#define N_TOKENS 200000u
#endif
#define MAX_ORDER_TOKENS 1024u
/* Each load takes a few tens of milliseconds on an idle machine; the bound
 * is stretched by the run's load (tt_time_scale()). */
#define MAX_SECONDS (2.0 * tt_time_scale())

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static char tmp_dir[64], plugin_dir[128], file_path[160];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(tmp_dir, "/tmp/fld-test-scale-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
    snprintf(plugin_dir, sizeof plugin_dir, "%s/plugins", tmp_dir);
    ck_assert_int_eq(mkdir(plugin_dir, 0700), 0);
    setenv("VLLM_FL_PLUGIN_DIR", plugin_dir, 1);
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
    file_path[0] = '\0';
}

static void teardown(void)
{
    if (file_path[0])
        unlink(file_path);
    rmdir(plugin_dir);
    rmdir(tmp_dir);
}

/* Opens the test's one policy file for writing (name keeps its extension). */
static FILE *open_file(const char *name)
{
    snprintf(file_path, sizeof file_path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(file_path, "w");
    ck_assert_msg(f != NULL, "%s: %s", file_path, strerror(errno));
    return f;
}

static const char *write_file(const char *name, const char *text)
{
    FILE *f = open_file(name);
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
    return file_path;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* fld_init() under a stopwatch; returns its status. */
static int timed_init(const char *what)
{
    double t0 = now();
    int rc = fld_init();
    double dt = now() - t0;
    ck_assert_msg(dt < MAX_SECONDS, "%s: fld_init took %.2f s (limit %.1f s)", what, dt,
                  MAX_SECONDS);
    return rc;
}

#define assert_error_has(s)                                                                        \
    ck_assert_msg(strstr(fld_last_error(), (s)) != NULL, "'%s' not in last error: %s", (s),        \
                  fld_last_error())

/* ------------------------------------------------------------------------ */
/* The effective configuration, field by field                              */
/* ------------------------------------------------------------------------ */

struct fields {
    size_t orders;    /* op_backends.<op> entries */
    char *value;      /* of the field named by key */
    char source[256]; /* of the field named by key */
    const char *key;
};

static int collect(const fld_config_field *field, void *user)
{
    struct fields *f = user;
    if (strncmp(field->key, "op_backends.", 12) == 0)
        f->orders++;
    if (f->key && strcmp(field->key, f->key) == 0) {
        free(f->value);
        f->value = strdup(field->value);
        ck_assert_ptr_nonnull(f->value);
        snprintf(f->source, sizeof f->source, "%s", field->source);
    }
    return 0;
}

static struct fields fields_of(const char *key)
{
    struct fields f = {0, NULL, "", key};
    ck_assert_int_eq(fld_foreach_config_field(collect, &f), FLD_OK);
    ck_assert_msg(!key || f.value, "no field '%s'", key);
    return f;
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

/* ------------------------------------------------------------------------ */
/* Scale                                                                    */
/* ------------------------------------------------------------------------ */

/* Unsorted input: op names in a permuted order (7919 is prime, coprime to N_BIG). */
static unsigned permuted(unsigned i)
{
    return (unsigned)(((unsigned long)i * 7919u) % N_BIG);
}

/* "op_backends.op<permuted(1)>": the key of the second item, on line 3. */
static const char *second_key(void)
{
    static char key[64];
    snprintf(key, sizeof key, "op_backends.op%u", permuted(1));
    return key;
}

START_TEST(test_op_backends_20k)
{
    FILE *f = open_file("ops.yaml");
    fputs("op_backends:\n", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "  op%u: %s\n", permuted(i), i % 2 ? "vendor" : "[reference, flagos]");
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("op_backends") == FLD_OK, "%s", fld_last_error());

    struct fields fl = fields_of(second_key());
    ck_assert_uint_eq(fl.orders, N_BIG);
    /* Item 1 (line 3): vendor. */
    ck_assert_str_eq(fl.value, "vendor");
    char source[200];
    snprintf(source, sizeof source, "%s:3", file_path);
    ck_assert_str_eq(fl.source, source);
    free(fl.value);
    fl = fields_of("op_backends.op0");
    ck_assert_str_eq(fl.value, "reference|flagos");
    free(fl.value);
}
END_TEST

START_TEST(test_op_backends_20k_repeat_at_end)
{
    FILE *f = open_file("ops.yaml");
    fputs("op_backends:\n", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "  op%u: vendor\n", permuted(i));
    fprintf(f, "  op%u: flagos\n", permuted(1)); /* line N_BIG + 2 repeats line 3 */
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_int_eq(timed_init("op_backends repeat"), FLD_ECONFIG);
    char expected[300];
    snprintf(expected, sizeof expected,
             "%s:%u:3: op_backends: duplicate key 'op%u' (first at line 3)", file_path, N_BIG + 2,
             permuted(1));
    assert_error_has(expected);
}
END_TEST

START_TEST(test_allow_vendors_20k)
{
    FILE *f = open_file("allow.yaml");
    fputs("allow_vendors:\n", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "  - v%u\n", permuted(i));
    /* Repeats are dropped, not errors. */
    fprintf(f, "  - v0\n  - v%u\n", N_BIG - 1);
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("allow_vendors") == FLD_OK, "%s", fld_last_error());

    struct fields fl = fields_of("allow_vendors");
    ck_assert_uint_eq(count_char(fl.value, ','), N_BIG - 1);
    /* Sorted as strings. */
    ck_assert_msg(strncmp(fl.value, "v0,v1,v10,v100,v1000,v1", 23) == 0, "%.60s", fl.value);
    free(fl.value);
}
END_TEST

START_TEST(test_custom_ops_20k)
{
    FILE *f = open_file("custom.yaml");
    fputs("custom_ops:\n  - none\n", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "  - \"%cop%u\"\n", i % 2 ? '+' : '-', permuted(i));
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("custom_ops") == FLD_OK, "%s", fld_last_error());
    struct fields fl = fields_of("custom_ops");
    ck_assert_uint_eq(count_char(fl.value, '+'), N_BIG / 2);
    ck_assert_uint_eq(count_char(fl.value, '-'), N_BIG / 2);
    /* Odd numbers enabled, sorted as strings. */
    ck_assert_msg(strncmp(fl.value, "none,+op1,+op1", 14) == 0, "%.60s", fl.value);
    free(fl.value);
}
END_TEST

START_TEST(test_custom_ops_20k_conflict_at_end)
{
    FILE *f = open_file("custom.yaml");
    fputs("custom_ops:\n", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "  - +op%u\n", permuted(i));
    fputs("  - -op0\n", f);
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_int_eq(timed_init("custom_ops conflict"), FLD_ECONFIG);
    char expected[300];
    snprintf(expected, sizeof expected,
             "%s:%u:5: custom_ops: op 'op0' is both enabled and disabled ('+op0' and '-op0')",
             file_path, N_BIG + 2);
    assert_error_has(expected);
}
END_TEST

START_TEST(test_op_config_20k)
{
    FILE *f = open_file("ops.json");
    fputs("{", f);
    for (unsigned i = 0; i < N_BIG; i++)
        fprintf(f, "%s\n\"op%u\": \"vendor|reference\"", i ? "," : "", permuted(i));
    fputs("}\n", f);
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_OP_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("VLLM_FL_OP_CONFIG") == FLD_OK, "%s", fld_last_error());
    struct fields fl = fields_of(second_key());
    ck_assert_uint_eq(fl.orders, N_BIG);
    ck_assert_str_eq(fl.value, "vendor|reference");
    char source[300];
    snprintf(source, sizeof source, "VLLM_FL_OP_CONFIG (%s:3)", file_path);
    ck_assert_str_eq(fl.source, source);
    free(fl.value);
}
END_TEST

/* Names of the form o<i>=vendor: long, and set with setenv (no exec size limit). */
START_TEST(test_per_op_env_20k)
{
    size_t size = (size_t)N_BIG * 24, len = 0;
    char *spec = malloc(size);
    ck_assert_ptr_nonnull(spec);
    for (unsigned i = 0; i < N_BIG; i++)
        len += (size_t)snprintf(spec + len, size - len, "op%u=vendor|flagos;", permuted(i));
    setenv("VLLM_FL_PER_OP", spec, 1);
    ck_assert_msg(timed_init("VLLM_FL_PER_OP") == FLD_OK, "%s", fld_last_error());
    char last[64];
    snprintf(last, sizeof last, "op_backends.op%u", N_BIG - 1);
    struct fields fl = fields_of(last);
    ck_assert_uint_eq(fl.orders, N_BIG);
    ck_assert_str_eq(fl.value, "vendor|flagos");
    ck_assert_str_eq(fl.source, "VLLM_FL_PER_OP");
    free(fl.value);

    /* Repeated at the end: named with its fragment. */
    strcpy(spec + len, "op5=reference");
    ck_assert_int_eq(setenv("VLLM_FL_PER_OP", spec, 1), 0);
    double t0 = now();
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    ck_assert_double_lt(now() - t0, MAX_SECONDS);
    assert_error_has("VLLM_FL_PER_OP: op 'op5' is given more than once (again in 'op5=reference')");
    free(spec);
}
END_TEST

START_TEST(test_list_env_20k)
{
    size_t size = (size_t)N_BIG * 16, len = 0;
    char *csv = malloc(size);
    ck_assert_ptr_nonnull(csv);
    for (unsigned i = 0; i < N_BIG; i++)
        len += (size_t)snprintf(csv + len, size - len, "%sv%u", i ? "," : "", permuted(i));
    setenv("VLLM_FL_DENY_VENDORS", csv, 1);
    ck_assert_msg(timed_init("VLLM_FL_DENY_VENDORS") == FLD_OK, "%s", fld_last_error());
    struct fields fl = fields_of("deny_vendors");
    ck_assert_uint_eq(count_char(fl.value, ','), N_BIG - 1);
    free(fl.value);
    /* A scoped override merges into it: one more name, the repeats dropped. */
    double t0 = now();
    ck_assert_int_eq(fld_policy_push_denied_vendors(csv), FLD_OK);
    ck_assert_int_eq(fld_policy_push_denied_vendors("v0,zz"), FLD_OK);
    ck_assert_double_lt(now() - t0, MAX_SECONDS);
    fl = fields_of("deny_vendors");
    ck_assert_uint_eq(count_char(fl.value, ','), N_BIG);
    ck_assert_ptr_nonnull(strstr(fl.value, ",zz"));
    free(fl.value);
    free(csv);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* One long order                                                           */
/* ------------------------------------------------------------------------ */

/* Token i of a long order over `distinct` different tokens: the three kinds, then impl ids. */
static int long_order_token(char *buf, size_t size, unsigned i, unsigned distinct)
{
    static const char *const kinds[] = {"flagos", "vendor", "reference"};
    unsigned k = i % distinct;
    return k < 3 ? snprintf(buf, size, "%s", kinds[k]) : snprintf(buf, size, "impl:x.n%u", k);
}

/* "tok|tok|..." of n tokens over `distinct` different ones (malloc'd). */
static char *long_order(unsigned n, unsigned distinct)
{
    size_t size = (size_t)n * 16 + 1, len = 0;
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    text[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        if (i)
            text[len++] = '|';
        len += (size_t)long_order_token(text + len, size - len, i, distinct);
    }
    return text;
}

/* The order of rms_norm holds each of the `distinct` tokens once, in first-seen order. */
static void assert_long_order_kept(unsigned distinct)
{
    struct fields fl = fields_of("op_backends.rms_norm");
    ck_assert_uint_eq(count_char(fl.value, '|'), distinct - 1);
    ck_assert_msg(strncmp(fl.value, "flagos|vendor|reference|impl:x.n3|impl:x.n4|", 44) == 0,
                  "%.80s", fl.value);
    char last[32];
    snprintf(last, sizeof last, "|impl:x.n%u", distinct - 1);
    size_t n = strlen(fl.value), k = strlen(last);
    ck_assert_msg(n > k && strcmp(fl.value + n - k, last) == 0, "...%s", fl.value + n - 40);
    free(fl.value);
}

START_TEST(test_long_order_yaml_sequence)
{
    FILE *f = open_file("order.yaml");
    fputs("op_backends:\n  rms_norm:\n", f);
    char tok[32];
    for (unsigned i = 0; i < N_TOKENS; i++) {
        long_order_token(tok, sizeof tok, i, MAX_ORDER_TOKENS);
        fprintf(f, "    - %s\n", tok);
    }
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("op_backends sequence") == FLD_OK, "%s", fld_last_error());
    assert_long_order_kept(MAX_ORDER_TOKENS);
}
END_TEST

START_TEST(test_long_order_yaml_string)
{
    char *text = long_order(N_TOKENS, MAX_ORDER_TOKENS);
    FILE *f = open_file("order.yaml");
    fprintf(f, "op_backends:\n  rms_norm: '%s'\n", text);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("op_backends string") == FLD_OK, "%s", fld_last_error());
    assert_long_order_kept(MAX_ORDER_TOKENS);
}
END_TEST

START_TEST(test_long_order_env_and_set)
{
    char *text = long_order(N_TOKENS, MAX_ORDER_TOKENS);
    size_t n = strlen(text);
    char *spec = malloc(n + 16);
    ck_assert_ptr_nonnull(spec);
    snprintf(spec, n + 16, "rms_norm=%s", text);
    setenv("VLLM_FL_PER_OP", spec, 1);
    ck_assert_msg(timed_init("VLLM_FL_PER_OP") == FLD_OK, "%s", fld_last_error());
    assert_long_order_kept(MAX_ORDER_TOKENS);

    /* fld_policy_set() and a scoped override take the same path. */
    unsetenv("VLLM_FL_PER_OP");
    ck_assert_int_eq(fld_policy_set("per_op", "rms_norm=vendor"), FLD_OK);
    double t0 = now();
    ck_assert_msg(fld_policy_set("per_op", spec) == FLD_OK, "%s", fld_last_error());
    ck_assert_double_lt(now() - t0, MAX_SECONDS);
    assert_long_order_kept(MAX_ORDER_TOKENS);
    t0 = now();
    ck_assert_msg(fld_policy_push_per_op(spec) == FLD_OK, "%s", fld_last_error());
    ck_assert_double_lt(now() - t0, MAX_SECONDS);
    assert_long_order_kept(MAX_ORDER_TOKENS);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    free(spec);
    free(text);
}
END_TEST

START_TEST(test_long_order_op_config)
{
    char *text = long_order(N_TOKENS, MAX_ORDER_TOKENS);
    FILE *f = open_file("ops.json");
    fprintf(f, "{\"rms_norm\": \"%s\"}\n", text);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
    setenv("VLLM_FL_OP_CONFIG", file_path, 1);
    ck_assert_msg(timed_init("VLLM_FL_OP_CONFIG") == FLD_OK, "%s", fld_last_error());
    assert_long_order_kept(MAX_ORDER_TOKENS);
}
END_TEST

/* As many different tokens as an order may have, and one more. */
START_TEST(test_order_token_limit)
{
    char *text = long_order(MAX_ORDER_TOKENS, MAX_ORDER_TOKENS);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    size_t n = strlen(text);
    char *spec = malloc(n + 32);
    ck_assert_ptr_nonnull(spec);
    snprintf(spec, n + 32, "rms_norm=%s", text);
    ck_assert_msg(fld_policy_set("per_op", spec) == FLD_OK, "%s", fld_last_error());
    assert_long_order_kept(MAX_ORDER_TOKENS);
    snprintf(spec, n + 32, "rms_norm=%s|impl:x.more", text);
    ck_assert_int_eq(fld_policy_set("per_op", spec), FLD_ECONFIG);
    assert_error_has("per_op: the order for op 'rms_norm' has 1025 different tokens, more than "
                     "the 1024 an order may have");
    /* The policy in force is untouched. */
    assert_long_order_kept(MAX_ORDER_TOKENS);
    free(spec);
    free(text);
}
END_TEST

/* N_TOKENS different tokens: refused, as fast as a valid order loads. */
START_TEST(test_order_too_many_tokens_fast)
{
    char *text = long_order(N_TOKENS, N_TOKENS);
    FILE *f = open_file("order.yaml");
    fprintf(f, "op_backends:\n  rms_norm: '%s'\n", text);
    ck_assert_int_eq(fclose(f), 0);
    free(text);
    setenv("VLLM_FL_CONFIG", file_path, 1);
    ck_assert_int_eq(timed_init("too many tokens"), FLD_ECONFIG);
    char expected[300];
    snprintf(expected, sizeof expected,
             "%s:2:13: op_backends.rms_norm: the order for op 'rms_norm' has %u different tokens",
             file_path, N_TOKENS);
    assert_error_has(expected);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Which error wins: the first in input order, as before                    */
/* ------------------------------------------------------------------------ */

struct order_case {
    const char *var; /* VLLM_FL_CONFIG / VLLM_FL_OP_CONFIG: content is a file */
    const char *content;
    const char *expected; /* after "<file>" for files */
};

static const struct order_case order_cases[] = {
    {"VLLM_FL_CONFIG", "op_backends:\n  a: vendor\n  a: flagos\n  b: cuda\n",
     ":3:3: op_backends: duplicate key 'a' (first at line 2)"},
    {"VLLM_FL_CONFIG", "op_backends:\n  a: vendor\n  b: cuda\n  a: flagos\n",
     ":3:6: op_backends.b: invalid token 'cuda'"},
    /* The repeat is found before its value is read. */
    {"VLLM_FL_CONFIG", "op_backends:\n  a: vendor\n  b: flagos\n  a: cuda\n",
     ":4:3: op_backends: duplicate key 'a' (first at line 2)"},
    {"VLLM_FL_CONFIG", "op_backends:\n  b: vendor\n  a: vendor\n  b: flagos\n  a: flagos\n",
     ":4:3: op_backends: duplicate key 'b' (first at line 2)"},
    {"VLLM_FL_CONFIG", "op_backends:\n  a: vendor\n  a b: flagos\n  a: flagos\n",
     ":3:3: op_backends: invalid op name 'a b'"},
    {"VLLM_FL_CONFIG", "custom_ops: [+a, -a, bogus]\n",
     ":1:18: custom_ops: op 'a' is both enabled and disabled ('+a' and '-a')"},
    {"VLLM_FL_CONFIG", "custom_ops: [+a, bogus, -a]\n", ":1:18: custom_ops: invalid item 'bogus'"},
    {"VLLM_FL_CONFIG", "custom_ops: [+a, +a, +b, -b, -a]\n",
     ":1:26: custom_ops: op 'b' is both enabled and disabled"},
    {"VLLM_FL_CONFIG", "custom_ops: [-a, -a, all, +a]\n",
     ":1:27: custom_ops: op 'a' is both enabled and disabled"},
    {"VLLM_FL_OP_CONFIG", "{\"a\": \"vendor\",\n \"a\": \"cuda\"}",
     ":2:2: duplicate key 'a' (first at line 1)"},
    {"VLLM_FL_OP_CONFIG", "{\"a\": \"cuda\",\n \"a\": \"vendor\"}",
     ":1:7: invalid token 'cuda' for op 'a'"},
    {"VLLM_FL_OP_CONFIG", "{\"a\": \"vendor\",\n b: \"x\",\n \"a\": \"vendor\"}",
     ":2:2: JSON syntax error: unexpected 'b', expected a string key in double quotes"},
    {"VLLM_FL_PER_OP", "a=vendor;a=flagos;b",
     "VLLM_FL_PER_OP: op 'a' is given more than once (again in 'a=flagos')"},
    {"VLLM_FL_PER_OP", "a=vendor;b;a=flagos", "VLLM_FL_PER_OP: fragment 'b' has no '='"},
    {"VLLM_FL_PER_OP", "a=vendor; a = cuda ;b",
     "VLLM_FL_PER_OP: op 'a' is given more than once (again in 'a = cuda')"},
    {"VLLM_FL_PER_OP", "a=vendor;a=", "VLLM_FL_PER_OP: op 'a' is given more than once"},
    {"VLLM_FL_PER_OP", "b=vendor;a=vendor;b=flagos;a=flagos",
     "VLLM_FL_PER_OP: op 'b' is given more than once (again in 'b=flagos')"},
    {"VLLM_FL_CUSTOM_OPS", "+a,-a,bogus",
     "VLLM_FL_CUSTOM_OPS: op 'a' is both enabled and disabled"},
    {"VLLM_FL_CUSTOM_OPS", "+a,bogus,-a", "VLLM_FL_CUSTOM_OPS: invalid item 'bogus'"},
    {"VLLM_FL_CUSTOM_OPS", "+a,+b,-b,-a",
     "VLLM_FL_CUSTOM_OPS: op 'b' is both enabled and disabled"},
};

START_TEST(test_first_error_wins)
{
    const struct order_case *c = &order_cases[_i];
    char expected[400];
    if (strcmp(c->var, "VLLM_FL_CONFIG") == 0 || strcmp(c->var, "VLLM_FL_OP_CONFIG") == 0) {
        const char *path = write_file("policy.yaml", c->content);
        setenv(c->var, path, 1);
        snprintf(expected, sizeof expected, "%s%s", path, c->expected);
    } else {
        setenv(c->var, c->content, 1);
        snprintf(expected, sizeof expected, "%s", c->expected);
    }
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    assert_error_has(expected);
}
END_TEST

/* Valid input with repeats where they are allowed, read in one pass. */
START_TEST(test_repeats_allowed)
{
    setenv("VLLM_FL_CUSTOM_OPS", "+b,+a,+b,-c,-c,none", 1);
    setenv("VLLM_FL_ALLOW_VENDORS", "y,x,y", 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    char buf[256];
    fld_policy_describe(buf, sizeof buf);
    ck_assert_msg(strstr(buf, "allow=x,y"), "%s", buf);
    ck_assert_msg(strstr(buf, "custom=none,+a,+b,-c"), "%s", buf);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Layers merged once                                                       */
/* ------------------------------------------------------------------------ */

START_TEST(test_op_config_replaces_per_op)
{
    /* As vllm-plugin-FL: VLLM_FL_OP_CONFIG replaces VLLM_FL_PER_OP as a whole. */
    setenv("VLLM_FL_PER_OP", "c=reference;a=vendor;b=flagos", 1);
    setenv("VLLM_FL_OP_CONFIG",
           write_file("ops.json", "{\"d\": \"vendor\", \"b\": \"reference\", \"0\": \"flagos\"}"),
           1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    char buf[256];
    fld_policy_describe(buf, sizeof buf);
    ck_assert_str_eq(buf, "prefer=flagos;strict=0;per=0=flagos;b=reference;d=vendor");
    struct fields fl = fields_of("op_backends.b");
    ck_assert_msg(strncmp(fl.source, "VLLM_FL_OP_CONFIG (", 19) == 0, "%s", fl.source);
    free(fl.value);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* VLLM_FL_OP_CONFIG={} sets nothing, so it claims no source                */
/* ------------------------------------------------------------------------ */

START_TEST(test_op_config_empty_object_keeps_source)
{
    setenv("VLLM_FL_OP_CONFIG", write_file("ops.json", "{}"), 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    struct fields fl = fields_of("op_backends");
    ck_assert_uint_eq(fl.orders, 0);
    ck_assert_str_eq(fl.value, "");
    ck_assert_str_eq(fl.source, "default");
    free(fl.value);
}
END_TEST

START_TEST(test_op_config_nonempty_sets_source)
{
    /* The control: an object with an order does take the source. */
    setenv("VLLM_FL_OP_CONFIG", write_file("ops.json", "{\"rms_norm\": \"vendor\"}"), 1);
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    struct fields fl = fields_of("op_backends.rms_norm");
    ck_assert_msg(strncmp(fl.source, "VLLM_FL_OP_CONFIG (", 19) == 0, "%s", fl.source);
    free(fl.value);
}
END_TEST

static Suite *scale_suite(void)
{
    Suite *s = suite_create("config_scale");
    TCase *tc = tcase_create("scale");
    /* Sanitizer builds are several times slower than the 2 s the tests allow fld_init. */
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_op_backends_20k);
    tcase_add_test(tc, test_op_backends_20k_repeat_at_end);
    tcase_add_test(tc, test_allow_vendors_20k);
    tcase_add_test(tc, test_custom_ops_20k);
    tcase_add_test(tc, test_custom_ops_20k_conflict_at_end);
    tcase_add_test(tc, test_op_config_20k);
    tcase_add_test(tc, test_per_op_env_20k);
    tcase_add_test(tc, test_list_env_20k);
    suite_add_tcase(s, tc);

    tc = tcase_create("long_order");
    /* Bounds the run of a quadratic reading (minutes) as well as a slow sanitizer build. */
    tcase_set_timeout(tc, 30);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_long_order_yaml_sequence);
    tcase_add_test(tc, test_long_order_yaml_string);
    tcase_add_test(tc, test_long_order_env_and_set);
    tcase_add_test(tc, test_long_order_op_config);
    tcase_add_test(tc, test_order_token_limit);
    tcase_add_test(tc, test_order_too_many_tokens_fast);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_first_error_wins, 0, (int)N_OF(order_cases));
    tcase_add_test(tc, test_repeats_allowed);
    tcase_add_test(tc, test_op_config_replaces_per_op);
    tcase_add_test(tc, test_op_config_empty_object_keeps_source);
    tcase_add_test(tc, test_op_config_nonempty_sets_source);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(scale_suite());
}
