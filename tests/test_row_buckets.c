/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Row buckets in manifests: the reader's errors for 'rows' (each with its
 * line:column), dispatch that sends each call to its bucket's pin (the
 * row_pair fixture's two implementations count their calls), the rows no
 * bucket covers, the explanation of a bucket's choice, and buckets kept
 * across fld_reload() and fork().
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>

#include "util/env.h"
#include "util/harness.h"

static char tmpdir[256];
static char manifest[PATH_MAX];

static void setup(void)
{
    tt_clear_fld_environment();
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/fld-buckets-XXXXXX", base && *base ? base : "/tmp");
    ck_assert_msg(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
    snprintf(manifest, sizeof manifest, "%s/tuned.yaml", tmpdir);
}

static void teardown(void)
{
    fld_shutdown();
    unlink(manifest);
    rmdir(tmpdir);
}

static void write_manifest(const char *text)
{
    FILE *f = fopen(manifest, "w");
    ck_assert_msg(f != NULL, "%s: %s", manifest, strerror(errno));
    ck_assert_int_ge(fputs(text, f), 0);
    ck_assert_int_eq(fclose(f), 0);
    setenv("VLLM_FL_MANIFEST", manifest, 1);
}

/* ---- reader errors ------------------------------------------------------ */

#define ROWS_ENTRY(rows, impl)                                                                     \
    "  - {op: rms_norm, device: cpu, dtype: f32, rows: " rows ", impl: " impl "}\n"

struct bad_case {
    const char *text;
    const char *where; /* "line:column" */
    const char *what;
};

static const struct bad_case bad_cases[] = {
    {"version: 1\nentries:\n" ROWS_ENTRY("1-16", "vendor.cpu") ROWS_ENTRY("8-32", "reference.c"),
     "4:51", "rows 8-32 overlaps rows 1-16 of the entry at line 3 for (rms_norm, cpu, f32)"},
    /* Overlap found whatever the order in the file: the later entry is named. */
    {"version: 1\nentries:\n" ROWS_ENTRY("17-", "vendor.cpu") ROWS_ENTRY("1-17", "reference.c"),
     "4:51", "rows 1-17 overlaps rows 17- of the entry at line 3"},
    {"version: 1\nentries:\n" ROWS_ENTRY("4", "vendor.cpu") ROWS_ENTRY("1-4", "reference.c"),
     "4:51", "rows 1-4 overlaps rows 4 of the entry at line 3"},
    {"version: 1\nentries:\n" ROWS_ENTRY("16-1", "vendor.cpu"), "3:51",
     "invalid rows '16-1': the range ends (1) before it starts (16)"},
    {"version: 1\nentries:\n" ROWS_ENTRY("0-4", "vendor.cpu"), "3:51",
     "invalid rows '0-4': expected LO-HI, LO- or N with whole row counts from 1"},
    /* A count past the largest one says what the largest is. */
    {"version: 1\nentries:\n" ROWS_ENTRY("1-9223372036854775807", "vendor.cpu"), "3:51",
     "invalid rows '1-9223372036854775807': a row count is at most 999999999999999999 (write "
     "'LO-' for a range without an upper end)"},
    {"version: 1\nentries:\n" ROWS_ENTRY("1000000000000000000-", "vendor.cpu"), "3:51",
     "a row count is at most 999999999999999999"},
    {"version: 1\nentries:\n" ROWS_ENTRY("-4", "vendor.cpu"), "3:51", "invalid rows '-4'"},
    {"version: 1\nentries:\n" ROWS_ENTRY("a-b", "vendor.cpu"), "3:51", "invalid rows 'a-b'"},
    {"version: 1\nentries:\n" ROWS_ENTRY("1-2-3", "vendor.cpu"), "3:51", "invalid rows '1-2-3'"},
    {"version: 1\nentries:\n" ROWS_ENTRY("[1, 16]", "vendor.cpu"), "3:51",
     "key 'rows' must be a row range such as '1-16', '17-512' or '513-', got a sequence"},
    {"version: 1\nentries:\n" ROWS_ENTRY("~", "vendor.cpu"), "3:51",
     "key 'rows' must be a row range such as '1-16', '17-512' or '513-', got null"},
    {"version: 1\nentries:\n" ROWS_ENTRY("1", "vendor.cpu") ROWS_ENTRY("2", "vendor.cpu")
         ROWS_ENTRY("3", "vendor.cpu") ROWS_ENTRY("4", "vendor.cpu") ROWS_ENTRY("5", "vendor.cpu")
             ROWS_ENTRY("6", "vendor.cpu") ROWS_ENTRY("7-", "vendor.cpu"),
     "9:51", "too many row buckets for (rms_norm, cpu, f32): at most 6"},
    /* Two entries without rows for one key are still a duplicate. */
    {"version: 1\nentries:\n" ROWS_ENTRY(
         "1-16", "vendor.cpu") "  - {op: rms_norm, device: cpu, dtype: f32, impl: vendor.cpu}\n"
                               "  - {op: rms_norm, device: cpu, dtype: f32, impl: reference.c}\n",
     "5:5", "duplicate entry for (rms_norm, cpu, f32); first at line 4"},
};

START_TEST(bucket_reader_errors)
{
    const struct bad_case *c = &bad_cases[_i];
    write_manifest(c->text);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_ECONFIG, "case %d: fld_init returned %d (%s)", _i, rc,
                  fld_last_error());
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where, "%s:%s: ", manifest, c->where);
    const char *msg = fld_last_error();
    ck_assert_msg(strstr(msg, where), "case %d: message does not point at %s:\n%s", _i, c->where,
                  msg);
    ck_assert_msg(strstr(msg, c->what), "case %d: message lacks '%s':\n%s", _i, c->what, msg);
}
END_TEST

/* An unknown impl in a bucket is named with line:column and its rows (strict: an error). */
START_TEST(bucket_unknown_impl_is_named)
{
    write_manifest("version: 1\nentries:\n" ROWS_ENTRY("1-16", "vendor.nope"));
    setenv("VLLM_FL_STRICT", "1", 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char where[PATH_MAX + 64];
    snprintf(where, sizeof where,
             "VLLM_FL_MANIFEST: %s:3:63: impl 'vendor.nope' for rms_norm "
             "(cpu, f32, rows 1-16) is not registered",
             manifest);
    ck_assert_msg(strstr(fld_last_error(), where), "expected '%s' in:\n%s", where,
                  fld_last_error());
}
END_TEST

/* ---- dispatch by bucket -------------------------------------------------- */

static long (*pair_calls)(int which);

/* Loads the row_pair fixture beside the in-tree plugins, then the manifest. */
static void init_with_pair(const char *manifest_text)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/plugins/fld-row_pair.so", tt_build_dir());
    setenv("VLLM_FL_PLUGIN_MODULES", path, 1);
    write_manifest(manifest_text);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %s", fld_last_error());
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(h != NULL, "row_pair is not loaded: %s", dlerror());
    pair_calls = (long (*)(int))dlsym(h, "fld_fixture_row_pair_calls");
    ck_assert_ptr_nonnull(pair_calls);
    dlclose(h);
}

/* rms_norm on [rows, 64] float32 (as [2, rows/2, 64] when split, same row count). */
static void call_rows(int64_t rows, bool three_dims)
{
    enum { H = 64 };
    float *x = calloc((size_t)(rows * H), sizeof *x), *out = calloc((size_t)(rows * H), sizeof *x);
    float w[H];
    ck_assert(x && out);
    for (int i = 0; i < H; i++)
        w[i] = 1.0f;
    for (int64_t i = 0; i < rows * H; i++)
        x[i] = (float)(i % 7) - 3.0f;
    int64_t shape2[2] = {rows, H}, shape3[3] = {2, rows / 2, H}, wshape[1] = {H};
    DLDataType f32 = {kDLFloat, 32, 1};
    DLDevice cpu = {kDLCPU, 0};
    DLTensor tx = {x, cpu, three_dims ? 3 : 2, f32, three_dims ? shape3 : shape2, NULL, 0};
    DLTensor tout = tx;
    tout.data = out;
    DLTensor tw = {w, cpu, 1, f32, wshape, NULL, 0};
    int rc = fld_rms_norm(&tout, &tx, &tw, NULL, 1e-6f);
    ck_assert_msg(rc == FLD_OK, "rms_norm of %lld rows: %s", (long long)rows, fld_last_error());
    /* Correct whichever served: row 0 is x * rsqrt(mean(x^2) + eps). */
    double ss = 0;
    for (int i = 0; i < H; i++)
        ss += (double)x[i] * x[i];
    ck_assert_double_eq_tol(out[1], x[1] / sqrt(ss / H + 1e-6), 1e-4);
    free(x);
    free(out);
}

/* Calls with `rows` rows n times; asserts which of the pair served them. */
static void expect_served(int64_t rows, bool three_dims, int small, int large)
{
    long s0 = pair_calls(0), l0 = pair_calls(1);
    for (int i = 0; i < 3; i++) /* the first builds the chain, the others take the direct path */
        call_rows(rows, three_dims);
    ck_assert_msg(pair_calls(0) - s0 == 3 * small && pair_calls(1) - l0 == 3 * large,
                  "%lld rows: row_small served %ld, row_large %ld (expected %d and %d)",
                  (long long)rows, pair_calls(0) - s0, pair_calls(1) - l0, 3 * small, 3 * large);
}

static const char pair_manifest[] = "version: 1\nentries:\n" ROWS_ENTRY("1-16", "vendor.row_small")
    ROWS_ENTRY("17-", "vendor.row_large");

START_TEST(dispatch_picks_by_bucket)
{
    init_with_pair(pair_manifest);
    expect_served(1, false, 1, 0);
    expect_served(16, false, 1, 0);
    expect_served(17, false, 0, 1);
    expect_served(512, false, 0, 1);
    /* Rows are the product of the leading dims: [2, 9, 64] is 18 rows. */
    expect_served(18, true, 0, 1);
    expect_served(8, true, 1, 0);
    /* Alternating keeps each bucket on its own pin. */
    for (int i = 0; i < 4; i++) {
        expect_served(4, false, 1, 0);
        expect_served(100, false, 0, 1);
    }
}
END_TEST

/* Rows outside every bucket resolve as the key without a bucket: here the entry without rows. */
START_TEST(rows_outside_buckets_take_the_whole_entry)
{
    init_with_pair("version: 1\nentries:\n" ROWS_ENTRY(
        "5-8", "vendor.row_large") "  - {op: rms_norm, device: cpu, dtype: f32, impl: "
                                   "vendor.row_small}\n");
    expect_served(4, false, 1, 0);
    expect_served(6, false, 0, 1);
    expect_served(9, false, 1, 0);
}
END_TEST

START_TEST(explain_names_the_bucket)
{
    init_with_pair(pair_manifest);
    fld_resolution *res = NULL;
    ck_assert_int_eq(fld__explain_rows("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, 3, &res), FLD_OK);
    ck_assert_str_eq(res->selected, "vendor.row_small");
    ck_assert_msg(strstr(res->order_source, ":3 (rows 1-16)"), "%s", res->order_source);
    fld_resolution_free(res);
    ck_assert_int_eq(fld__explain_rows("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, 4096, &res),
                     FLD_OK);
    ck_assert_str_eq(res->selected, "vendor.row_large");
    ck_assert_msg(strstr(res->order_source, ":4 (rows 17-)"), "%s", res->order_source);
    fld_resolution_free(res);
    /* Without rows: no bucket, so not the manifest's choice. */
    ck_assert_int_eq(fld_explain("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, &res), FLD_OK);
    ck_assert_ptr_null(strstr(res->order_source, "rows"));
    fld_resolution_free(res);
}
END_TEST

START_TEST(reload_keeps_and_changes_buckets)
{
    init_with_pair(pair_manifest);
    expect_served(2, false, 1, 0);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    expect_served(2, false, 1, 0);
    expect_served(40, false, 0, 1);
    /* A new manifest with the buckets swapped takes over at reload. */
    write_manifest("version: 1\nentries:\n" ROWS_ENTRY("1-16", "vendor.row_large")
                       ROWS_ENTRY("17-", "vendor.row_small"));
    ck_assert_int_eq(fld_reload(), FLD_OK);
    expect_served(2, false, 0, 1);
    expect_served(40, false, 1, 0);
}
END_TEST

/* A thread's scoped override keeps the manifest, so its calls go by bucket too. */
START_TEST(scoped_override_keeps_buckets)
{
    init_with_pair(pair_manifest);
    ck_assert_int_eq(fld_policy_push_strict(true), FLD_OK);
    expect_served(2, false, 1, 0);
    expect_served(40, false, 0, 1);
    expect_served(16, false, 1, 0);
    ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    expect_served(40, false, 0, 1);
}
END_TEST

START_TEST(fork_keeps_buckets)
{
    init_with_pair(pair_manifest);
    expect_served(2, false, 1, 0);
    expect_served(40, false, 0, 1);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        long s0 = pair_calls(0), l0 = pair_calls(1);
        call_rows(3, false);
        call_rows(64, false);
        call_rows(64, false);
        _exit(pair_calls(0) - s0 == 1 && pair_calls(1) - l0 == 2 ? 0 : 1);
    }
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child's calls missed their buckets");
}
END_TEST

static Suite *buckets_suite(void)
{
    Suite *s = suite_create("row_buckets");
    TCase *reader = tcase_create("reader");
    tcase_add_checked_fixture(reader, setup, teardown);
    tcase_add_loop_test(reader, bucket_reader_errors, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(reader, bucket_unknown_impl_is_named);
    suite_add_tcase(s, reader);

    TCase *dispatch = tcase_create("dispatch");
    tcase_add_checked_fixture(dispatch, setup, teardown);
    tcase_add_test(dispatch, dispatch_picks_by_bucket);
    tcase_add_test(dispatch, rows_outside_buckets_take_the_whole_entry);
    tcase_add_test(dispatch, explain_names_the_bucket);
    tcase_add_test(dispatch, reload_keeps_and_changes_buckets);
    tcase_add_test(dispatch, scoped_override_keeps_buckets);
    tcase_add_test(dispatch, fork_keeps_buckets);
    suite_add_tcase(s, dispatch);
    return s;
}

int main(void)
{
    return tt_run_suite_with_build_dir("test_row_buckets", buckets_suite());
}
