/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch verify, run for real: $FLD_BUILDDIR/bin/fldispatch in a child
 * with a controlled environment (no inherited VLLM_FL_* variables, the
 * build's plugin directory, platform cpu). The quick set must pass for the
 * built-in reference and the cpu plugin; the fixture plugin
 * tests/plugins/bad_kernel.c (loaded through VLLM_FL_PLUGIN_MODULES) brings
 * kernels that are wrong, write row padding, decline cleanly or decline
 * after writing, and verify must tell each apart.
 *
 * Devices: tests/fakedev/fake_device.c (fld-fakedev.so) is a cuda device on
 * CPU memory with right and (FLD_FAKEDEV_BAD=1) wrong kernels, so that
 * verify --device cuda runs its whole device path here: copies in and out,
 * guard bytes, the reference on the CPU. The fixtures of the GPU and Ascend
 * plugins (fld-fakecuda.so, the fake CANN) are used when they are built.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

#include "../tools/catalog.c"
#include "util/harness.h"
#include "util/schema.h"
#include "util/tool.h"

/* "VLLM_FL_PLUGIN_MODULES=<build>/tests/plugins/fld-bad_kernel.so", in a static buffer. */
static const char *bad_kernel_env(void)
{
    static char entry[4096];
    snprintf(entry, sizeof entry, "VLLM_FL_PLUGIN_MODULES=%s/tests/plugins/fld-bad_kernel.so",
             tt_build_dir());
    ck_assert_msg(access(entry + strlen("VLLM_FL_PLUGIN_MODULES="), R_OK) == 0,
                  "%s is not built (make tests)", entry + strlen("VLLM_FL_PLUGIN_MODULES="));
    return entry;
}

/* "VLLM_FL_PLUGIN_MODULES=<build>/tests/fakedev/fld-fakedev.so", in a static buffer. */
static const char *fakedev_env(void)
{
    static char entry[4096];
    snprintf(entry, sizeof entry, "VLLM_FL_PLUGIN_MODULES=%s/tests/fakedev/fld-fakedev.so",
             tt_build_dir());
    ck_assert_msg(access(entry + strlen("VLLM_FL_PLUGIN_MODULES="), R_OK) == 0,
                  "%s is not built (make tests)", entry + strlen("VLLM_FL_PLUGIN_MODULES="));
    return entry;
}

/* The line after the first line containing needle (the "first failure" detail). */
static const char *line_after(const char *text, const char *needle)
{
    static char line[1024];
    const char *hit = strstr(text, needle);
    if (!hit)
        return NULL;
    const char *next = strchr(hit, '\n');
    if (!next)
        return NULL;
    next++;
    size_t len = strcspn(next, "\n");
    if (len >= sizeof line)
        len = sizeof line - 1;
    memcpy(line, next, len);
    line[len] = '\0';
    return line;
}

/* ---- the checker checks itself ------------------------------------------ */

START_TEST(json_checker_rejects_bad_documents)
{
    ck_assert(tt_json_valid("{\"a\": [1, -2.5e3, true, null, \"x\"], \"b\": {}}\n"));
    ck_assert(!tt_json_valid("{\"a\": 1,}"));
    ck_assert(!tt_json_valid("{\"a\" 1}"));
    ck_assert(!tt_json_valid("[1, 2"));
    ck_assert(!tt_json_valid("{} {}"));
}
END_TEST

/* ---- the quick set passes ------------------------------------------------- */

static const char *const compute_ops[] = {"silu_and_mul",      "mul_and_silu", "gelu_and_mul",
                                          "gelu_tanh_and_mul", "rms_norm",     "gemma_rms_norm",
                                          "rotary_embedding"};
static const char *const dtypes[] = {"f32", "f16", "bf16"};

/* A table cell: the name padded by the space that follows it. */
static const char *cell(const char *name)
{
    static char buf[4][64];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "%s ", name);
    return b;
}

START_TEST(quick_passes_for_every_op_and_dtype)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick"));
    assert_status(r, 0);
    for (size_t op = 0; op < sizeof compute_ops / sizeof compute_ops[0]; op++)
        for (size_t dt = 0; dt < 3; dt++)
            for (const char *const *impl = (const char *const[]){"reference.c", "vendor.cpu", NULL};
                 *impl; impl++)
                ck_assert_msg(
                    line_with(r.out, cell(compute_ops[op]), cell(dtypes[dt]), cell(*impl), "PASS"),
                    "no PASS line for %s %s %s:\n" CLIP, compute_ops[op], dtypes[dt], *impl, r.out);
    ck_assert_msg(!strstr(r.out, "FAIL"), CLIP, r.out);
    ck_assert(line_with(r.out, "rows:", " 0 failed"));
    ck_assert(!strstr(r.out, "attention_backend"));
    ck_assert_str_eq(r.err, "");
    /* Every row's IMPL starts under the header's, the longest op name (rotary_embedding_out) too.
     */
    const char *header = strstr(r.out, "\nOP ");
    ck_assert_ptr_nonnull(header);
    size_t col = (size_t)(strstr(header, "IMPL") - (header + 1));
    int rows = 0;
    for (const char *line = strchr(header + 1, '\n'); line && strchr(line + 1, '\n');
         line = strchr(line + 1, '\n')) {
        const char *row = line + 1;
        if (strncmp(row, "rotary_embedding_out ", 21) != 0 && strncmp(row, "rms_norm ", 9) != 0)
            continue;
        ck_assert_msg(row[col - 1] == ' ' && (strncmp(row + col, "reference.c", 11) == 0 ||
                                              strncmp(row + col, "vendor.cpu", 10) == 0),
                      "IMPL is not at column %zu in:\n%.*s", col, (int)strcspn(row, "\n"), row);
        rows++;
    }
    ck_assert_int_ge(rows, 12);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(json_for_one_op_and_dtype)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick", "rms_norm", "--dtype", "bf16", "--json"));
    assert_status(r, 0);
    ck_assert_msg(r.out[0] == '{' && tt_json_valid(r.out), "not a JSON object:\n" CLIP, r.out);
    tt_assert_schema(r.out, "verify");
    static const char *const keys[] = {"\"op\": ",
                                       "\"dtype\": ",
                                       "\"impl_id\": ",
                                       "\"cases\": ",
                                       "\"passed\": ",
                                       "\"declined\": ",
                                       "\"atol\": ",
                                       "\"max_abs_err\": ",
                                       "\"max_rel_err\": ",
                                       "\"rtol\": ",
                                       "\"status\": ",
                                       "\"reason\": null",
                                       "\"first_failure\": null"};
    const int n_results = tt_count_of(r.out, "\"impl_id\": ");
    ck_assert_int_ge(n_results, 2);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(tt_count_of(r.out, keys[i]) == n_results, "key %s: %d of %d results", keys[i],
                      tt_count_of(r.out, keys[i]), n_results);
    ck_assert(strstr(r.out, "\"device\": \"cpu\""));
    ck_assert(strstr(r.out, "\"results\": ["));
    ck_assert(strstr(r.out, "\"ok\": true"));
    ck_assert(strstr(r.out, "\"impl_id\": \"reference.c\""));
    ck_assert(strstr(r.out, "\"impl_id\": \"vendor.cpu\""));
    ck_assert_int_eq(tt_count_of(r.out, "\"op\": \"rms_norm\""), n_results);
    ck_assert_int_eq(tt_count_of(r.out, "\"dtype\": \"bf16\""), n_results);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"pass\""), n_results);
    ck_assert_int_eq(tt_count_of(r.out, "\"atol\": 0.01"), n_results); /* the norms' 1e-2 */
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(same_seed_same_result)
{
    struct tt_tool_run a, b, c;
    tt_tool_run(&a, NO_ENV, ARGS("verify", "--quick", "gelu_and_mul", "--dtype", "f16", "--json"));
    tt_tool_run(&b, NO_ENV, ARGS("verify", "--quick", "gelu_and_mul", "--dtype", "f16", "--json"));
    tt_tool_run(
        &c, NO_ENV,
        ARGS("verify", "--quick", "gelu_and_mul", "--dtype", "f16", "--json", "--seed", "7"));
    assert_status(a, 0);
    assert_status(c, 0);
    ck_assert_str_eq(a.out, b.out);
    ck_assert(strstr(c.out, "\"seed\": 7"));
    tt_tool_run_free(&a);
    tt_tool_run_free(&b);
    tt_tool_run_free(&c);
}
END_TEST

START_TEST(help_describes_the_command)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--help"));
    assert_status(r, 0);
    ck_assert(strstr(r.out, "Usage: fldispatch verify"));
    ck_assert(line_with(r.out, "--dtype", "f32"));
    ck_assert(strstr(r.out, "all three"));
    ck_assert(line_with(r.out, "rms_norm family", "0.01/0.01"));
    ck_assert(line_with(r.out, "activations", "1e-05/1.3e-06", "0.001/0.016"));
    ck_assert_str_eq(r.err, "");
    tt_tool_run_free(&r);
}
END_TEST

/* ---- usage errors and devices --------------------------------------------- */

START_TEST(usage_errors)
{
    static const struct {
        const char *args[4];
        const char *message;
    } cases[] = {
        {{"verify", "nosuch_op", NULL}, "unknown op 'nosuch_op'"},
        {{"verify", "--dtype", "f64", NULL}, "unknown dtype 'f64'"},
        {{"verify", "--dtype", "any", NULL}, "unknown dtype 'any'"},
        {{"verify", "--device", "gpu", NULL}, "unknown device 'gpu'"},
        {{"verify", "--frobnicate", NULL}, "unknown option '--frobnicate'"},
        {{"verify", "--seed", "-3", NULL}, "--seed"},
        {{"verify", "--dtype", NULL}, "needs a value"},
        {{"verify", "attention_backend", NULL}, "attention_backend has no tensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, cases[i].args);
        assert_status(r, 2);
        ck_assert_msg(strstr(r.err, cases[i].message), "'%s' not in:\n" CLIP, cases[i].message,
                      r.err);
        ck_assert_str_eq(r.out, "");
        tt_tool_run_free(&r);
    }
}
END_TEST

/* The names of the catalog ops that take tensors, ", "-joined in catalog order. */
static int join_tensor_op(const fld_catalog_op_info *op, void *user)
{
    char *list = user;
    if (op->args != FLD_ARGS_ATTENTION_BACKEND)
        snprintf(list + strlen(list), 512 - strlen(list), "%s%s", list[0] ? ", " : "", op->name);
    return 0;
}

START_TEST(ops_come_from_the_catalog)
{
    char list[512] = "", expected[600];
    ck_assert_int_eq(fld_foreach_catalog_op(join_tensor_op, list), FLD_OK);
    /* the unknown-op message lists the catalog's ops with tensors, in its order */
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("verify", "nosuch_op"));
    assert_status(r, 2);
    snprintf(expected, sizeof expected, "unknown op 'nosuch_op' (%s)", list);
    ck_assert_msg(strstr(r.err, expected), "'%s' not in:\n" CLIP, expected, r.err);
    tt_tool_run_free(&r);
    /* and so does the help, in its words */
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--help"));
    assert_status(r, 0);
    for (char *name = strtok(list, ", "); name; name = strtok(NULL, ", "))
        ck_assert_msg(strstr(r.out, name), "verify --help does not name %s:\n" CLIP, name, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(attention_backend_is_skipped_among_others)
{
    struct tt_tool_run r;
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick", "attention_backend", "silu_and_mul"));
    assert_status(r, 0);
    ck_assert(strstr(r.err, "attention_backend has no tensors; skipped"));
    ck_assert(line_with(r.out, "silu_and_mul ", "vendor.cpu", "PASS"));
    ck_assert(!line_with(r.out, "rms_norm"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(device_without_memory_provider_exits_3)
{
    /* Whatever plugins this build has for them, nothing here provides device memory:
     * no plugin at all, or one that is unavailable (no driver, no CANN). */
    static const char *const devices[] = {"cuda", "rocm", "ascend"};
    for (size_t i = 0; i < 3; i++) {
        struct tt_tool_run r;
        tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick", "--device", devices[i]));
        assert_status(r, 3);
        char msg[128];
        snprintf(msg, sizeof msg, "fldispatch verify: device %s: ", devices[i]);
        ck_assert_msg(strstr(r.err, msg), "'%s' not in:\n" CLIP, msg, r.err);
        ck_assert_msg(strstr(r.err, "fld_device_provider"), CLIP, r.err);
        ck_assert_msg(!strstr(r.out, "PASS"), CLIP, r.out);
        tt_tool_run_free(&r);
    }
    /* an implementation registered for cuda is listed, skipped with the reason */
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()), ARGS("verify", "--device", "cuda", "rms_norm"));
    assert_status(r, 3);
    ck_assert_msg(line_with(r.out, "rms_norm ", "f32 ", "vendor.bad", "skipped",
                            "no device memory for cuda: fld_device_provider"),
                  CLIP, r.out);
    ck_assert(strstr(r.err, "fldispatch verify: device cuda: "));
    tt_tool_run_free(&r);
}
END_TEST

/* ---- a device on CPU memory (tests/fakedev) -------------------------------- */

START_TEST(fake_device_passes)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env()), ARGS("verify", "--quick", "--device", "cuda"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "verify: device cuda"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "device memory: plugin 'fakedev'", "reference.c on the CPU",
                            "guard bytes"),
                  CLIP, r.out);
    static const char *const fake_ops[] = {"silu_and_mul", "rms_norm", "rotary_embedding"};
    for (size_t op = 0; op < 3; op++)
        for (size_t dt = 0; dt < 3; dt++)
            ck_assert_msg(line_with(r.out, cell(fake_ops[op]), cell(dtypes[dt]),
                                    cell("vendor.fakedev"), "PASS"),
                          "no PASS line for %s %s:\n" CLIP, fake_ops[op], dtypes[dt], r.out);
    /* reference.c declares the cpu only: it is the host's expectation, not a row */
    ck_assert_msg(!strstr(r.out, "reference.c  "), CLIP, r.out);
    ck_assert_msg(!strstr(r.out, "FAIL"), CLIP, r.out);
    /* every device buffer was freed (the fixture reports leaks when unloaded) */
    ck_assert_msg(!strstr(r.err, "not freed"), CLIP, r.err);
    ck_assert_str_eq(r.err, "");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(fake_device_catches_wrong_values_and_overruns)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_BAD=1"),
                ARGS("verify", "--quick", "--device", "cuda", "silu_and_mul", "rms_norm", "--dtype",
                     "f32,bf16"));
    assert_status(r, 1);
    for (size_t dt = 0; dt < 3; dt += 2) {
        ck_assert_msg(
            line_with(r.out, "silu_and_mul ", cell(dtypes[dt]), "vendor.fakedev_bad", "FAIL"), CLIP,
            r.out);
        ck_assert_msg(line_with(r.out, "rms_norm ", cell(dtypes[dt]), "vendor.fakedev_bad", "FAIL"),
                      CLIP, r.out);
        ck_assert(line_with(r.out, "silu_and_mul ", cell(dtypes[dt]), "vendor.fakedev ", "PASS"));
        ck_assert(line_with(r.out, "rms_norm ", cell(dtypes[dt]), "vendor.fakedev ", "PASS"));
    }
    /* wrong values: compared after the copy back */
    ck_assert_msg(line_with(r.out, "first failure", "'out' element", "got ", "expected "), CLIP,
                  r.out);
    /* a write just past a tensor's storage lands in verify's guard bytes */
    ck_assert_msg(line_with(r.out, "first failure", "guard bytes after the storage of"), CLIP,
                  r.out);
    ck_assert_msg(!strstr(r.err, "not freed"), CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(fake_device_unavailable_names_the_reason)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_UNAVAILABLE=1"),
                ARGS("verify", "--quick", "--device", "cuda", "rms_norm"));
    assert_status(r, 3);
    ck_assert_msg(line_with(r.err, "fldispatch verify: device cuda: ", "fakedev",
                            "switched off by FLD_FAKEDEV_UNAVAILABLE"),
                  CLIP, r.err);
    ck_assert_msg(!strstr(r.out, "PASS"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(fake_device_asynchronous_failure_fails)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env(), "FLD_FAKEDEV_FAIL_SYNC=1"),
                ARGS("verify", "--quick", "--device", "cuda", "rms_norm", "--dtype", "f16"));
    assert_status(r, 1);
    ck_assert_msg(line_with(r.out, "rms_norm ", "f16 ", "vendor.fakedev ", "FAIL"), CLIP, r.out);
    ck_assert_msg(
        line_with(r.out, "first failure", "synchronizing after the call", "failed asynchronously"),
        CLIP, r.out);
    ck_assert_msg(!strstr(r.err, "not freed"), CLIP, r.err);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(fake_device_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("verify", "--quick", "--device", "cuda", "rotary_embedding", "--json"));
    assert_status(r, 0);
    ck_assert_msg(r.out[0] == '{' && tt_json_valid(r.out), "not a JSON object:\n" CLIP, r.out);
    ck_assert(strstr(r.out, "\"device\": \"cuda\""));
    ck_assert(strstr(r.out, "\"provider\": \"fakedev\""));
    tt_assert_schema(r.out, "verify");
    ck_assert_int_eq(tt_count_of(r.out, "\"impl_id\": \"vendor.fakedev\""), 3);
    ck_assert_int_eq(tt_count_of(r.out, "\"status\": \"pass\""), 3);
    ck_assert(strstr(r.out, "\"ok\": true"));
    tt_tool_run_free(&r);
}
END_TEST

/* The device --device cpu is unchanged: no provider line, a null provider. */
START_TEST(cpu_has_no_device_lines)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(fakedev_env()),
                ARGS("verify", "--quick", "silu_and_mul", "--dtype", "f32"));
    assert_status(r, 0);
    ck_assert_msg(!strstr(r.out, "device memory"), CLIP, r.out);
    ck_assert_msg(!strstr(r.out, "fakedev"), CLIP, r.out);
    tt_tool_run_free(&r);
    tt_tool_run(&r, NO_ENV, ARGS("verify", "--quick", "silu_and_mul", "--dtype", "f32", "--json"));
    assert_status(r, 0);
    ck_assert_msg(strstr(r.out, "\"provider\": null"), CLIP, r.out);
    tt_assert_schema(r.out, "verify");
    tt_tool_run_free(&r);
}
END_TEST

/* ---- the other helpers' fixtures, when this tree builds them ----------------- */

START_TEST(fakecuda_plugin_passes)
{
    /* fld-fakecuda.so registers the cuda plugin's impl_ids: it is the only plugin here */
    char dir[4096], so[4096];
    snprintf(dir, sizeof dir, "VLLM_FL_PLUGIN_DIR=%s/tests/gpuplug", tt_build_dir());
    snprintf(so, sizeof so, "%s/fld-fakecuda.so", dir + strlen("VLLM_FL_PLUGIN_DIR="));
    if (access(so, R_OK) != 0)
        return; /* tests/gpuplug/tests.mk builds it only with the GPU emulator's sources */
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(dir), ARGS("verify", "--quick", "--device", "cuda"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "device memory: plugin 'fakecuda'"), CLIP, r.out);
    for (size_t op = 0; op < sizeof compute_ops / sizeof compute_ops[0]; op++)
        for (size_t dt = 0; dt < 3; dt++)
            ck_assert_msg(line_with(r.out, cell(compute_ops[op]), cell(dtypes[dt]),
                                    cell("vendor.cuda"), "PASS"),
                          "no PASS line for %s %s vendor.cuda:\n" CLIP, compute_ops[op], dtypes[dt],
                          r.out);
    ck_assert_msg(!strstr(r.out, "FAIL"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(fake_cann_ascend_passes)
{
    char home[4096], plugin[4096];
    snprintf(home, sizeof home, "ASCEND_HOME_PATH=%s/tests/fake_acl", tt_build_dir());
    snprintf(plugin, sizeof plugin, "%s/lib/fldispatch/plugins/fld-ascend.so", tt_build_dir());
    if (access(plugin, R_OK) != 0 || access(home + strlen("ASCEND_HOME_PATH="), R_OK) != 0)
        return; /* the ascend plugin or the fake CANN is not in this tree yet */
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(home), ARGS("verify", "--quick", "--device", "ascend"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "device memory: plugin 'ascend'"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "PASS"), CLIP, r.out);
    ck_assert_msg(!strstr(r.out, "FAIL"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* ---- implementations that verify must catch ------------------------------- */

START_TEST(wrong_result_fails)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()), ARGS("verify", "--quick", "silu_and_mul"));
    assert_status(r, 1);
    ck_assert_msg(line_with(r.out, "silu_and_mul ", "f32 ", "vendor.bad ", "FAIL"), CLIP, r.out);
    const char *detail = line_after(r.out, "vendor.bad ");
    ck_assert_ptr_nonnull(detail);
    ck_assert_msg(strstr(detail, "first failure: case T=") && strstr(detail, "'out' element") &&
                      strstr(detail, "got ") && strstr(detail, "expected "),
                  "detail line: %s", detail);
    /* the others still pass, and the fixture serves f32 only */
    ck_assert(line_with(r.out, "silu_and_mul ", "f32 ", "vendor.cpu ", "PASS"));
    ck_assert(line_with(r.out, "silu_and_mul ", "f32 ", "reference.c ", "PASS"));
    ck_assert(!line_with(r.out, "f16 ", "vendor.bad"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(padding_write_fails_and_names_the_case)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()), ARGS("verify", "--quick", "rms_norm", "--dtype", "f32"));
    assert_status(r, 1);
    const char *row = line_with(r.out, "rms_norm ", "vendor.bad ", "FAIL");
    ck_assert_msg(row, CLIP, r.out);
    const char *detail = line_after(r.out, "vendor.bad ");
    ck_assert_ptr_nonnull(detail);
    /* only the strided in-place case has padding in an output */
    ck_assert_msg(strstr(detail, "strided") && strstr(detail, "in-place") &&
                      strstr(detail, "padding"),
                  "detail line: %s", detail);
    ck_assert(line_with(r.out, "rms_norm ", "vendor.cpu ", "PASS"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(failure_in_json)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()),
                ARGS("verify", "--quick", "silu_and_mul", "--dtype", "f32", "--json"));
    assert_status(r, 1);
    ck_assert_msg(tt_json_valid(r.out), CLIP, r.out);
    ck_assert(strstr(r.out, "\"ok\": false"));
    ck_assert(strstr(r.out, "\"status\": \"fail\""));
    ck_assert(strstr(r.out, "\"first_failure\": \"case T="));
    tt_assert_schema(r.out, "verify");
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(clean_decline_passes)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()),
                ARGS("verify", "--quick", "gelu_and_mul", "gelu_tanh_and_mul"));
    assert_status(r, 0);
    /* FLD_EUNSUPPORTED from the kernel, and supports() false, for every dtype */
    for (size_t op = 2; op < 4; op++)
        for (size_t dt = 0; dt < 3; dt++)
            ck_assert_msg(line_with(r.out, cell(compute_ops[op]), cell(dtypes[dt]), "vendor.bad ",
                                    "declined "),
                          "%s %s:\n" CLIP, compute_ops[op], dtypes[dt], r.out);
    ck_assert(!strstr(r.out, "FAIL"));
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(decline_after_writing_fails)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()),
                ARGS("verify", "--quick", "mul_and_silu", "--dtype", "bf16"));
    assert_status(r, 1);
    ck_assert(line_with(r.out, "mul_and_silu ", "bf16 ", "vendor.bad ", "FAIL"));
    ck_assert_msg(line_with(r.out, "first failure", "declined", "but wrote 'out'"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

/* A kernel that writes past the end of out fails its row, named, and the run goes on. */
START_TEST(write_past_out_fails_by_name)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV(bad_kernel_env()),
                ARGS("verify", "--quick", "gelu_quick", "rms_norm", "--dtype", "f32"));
    assert_status(r, 1);
    ck_assert_msg(line_with(r.out, "gelu_quick ", "f32 ", "vendor.bad ", "FAIL"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "first failure", "wrote past the end of 'out'", "guard bytes"),
                  CLIP, r.out);
    ck_assert_msg(line_with(r.out, "gelu_quick ", "f32 ", "reference.c ", "PASS"), CLIP, r.out);
    ck_assert_msg(line_with(r.out, "rms_norm ", "f32 ", "reference.c ", "PASS"), CLIP, r.out);
    tt_tool_run_free(&r);
}
END_TEST

START_TEST(policy_dropped_impl_is_skipped)
{
    struct tt_tool_run r;
    tt_tool_run(&r, ENV("VLLM_FL_DENY_VENDORS=cpu"),
                ARGS("verify", "--quick", "rms_norm", "--dtype", "f16"));
    assert_status(r, 0);
    ck_assert_msg(line_with(r.out, "rms_norm ", "vendor.cpu ", "skipped", "cpu"), CLIP, r.out);
    ck_assert(line_with(r.out, "rms_norm ", "reference.c ", "PASS"));
    tt_tool_run_free(&r);
}
END_TEST

/* Every instruction-set variant of the cpu plugin that this build has (it
 * falls back to the best the CPU runs at or below the cap). */
START_TEST(quick_passes_for_every_cpu_variant)
{
#if defined(__x86_64__)
    static const char *const variants[] = {"avx512_bf16", "avx512", "avx2", "portable"};
#elif defined(__aarch64__)
    static const char *const variants[] = {"neon", "portable"};
#else
    static const char *const variants[] = {"portable"};
#endif
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        char isa[64];
        snprintf(isa, sizeof isa, "VLLM_FL_CPU_ISA=%s", variants[v]);
        struct tt_tool_run r;
        tt_tool_run(&r, ENV(isa), ARGS("verify", "--quick"));
        assert_status(r, 0);
        int rows = 0;
        for (size_t op = 0; op < sizeof compute_ops / sizeof compute_ops[0]; op++)
            for (size_t dt = 0; dt < 3; dt++)
                rows += line_with(r.out, cell(compute_ops[op]), cell(dtypes[dt]), "vendor.cpu ",
                                  "PASS") != NULL;
        ck_assert_msg(rows == 21, "%s: %d of 21 vendor.cpu rows pass:\n" CLIP, isa, rows, r.out);
        tt_tool_run_free(&r);
    }
}
END_TEST

/*
 * Verify and bench take an op's inputs from its argument kind
 * (tools/catalog.c tool_op_family()): the kinds of the catalog have their
 * families, and a kind the tool does not know stops it (exit 2) instead of
 * leaving the op out unsaid.
 */
START_TEST(every_args_kind_has_a_family)
{
    const struct tool_op *ops;
    size_t n = tool_catalog_ops(&ops);
    ck_assert_uint_gt(n, 0);
    for (size_t i = 0; i < n; i++) {
        enum tool_family f = tool_op_family(&ops[i]);
        ck_assert_msg(f == TOOL_FAMILY_NONE ? ops[i].args == FLD_ARGS_ATTENTION_BACKEND
                                            : ops[i].args != FLD_ARGS_ATTENTION_BACKEND,
                      "op %s", ops[i].name);
    }
    struct tool_op tensors[TOOL_MAX_OPS];
    ck_assert_uint_eq(tool_tensor_ops(tensors), n - 1);
}
END_TEST

START_TEST(unknown_args_kind_stops_the_tool)
{
    const struct tool_op future = {"future_op", (fld_args_kind)99};
    (void)tool_op_family(&future);
}
END_TEST

static Suite *verify_suite(void)
{
    Suite *s = suite_create("verify");
    TCase *tc = tcase_create("tool");
    tcase_add_test(tc, every_args_kind_has_a_family);
    tcase_add_exit_test(tc, unknown_args_kind_stops_the_tool, 2);
    tcase_set_timeout(tc, 120); /* each run of the tool is a fraction of a second when idle */
    tcase_add_test(tc, json_checker_rejects_bad_documents);
    tcase_add_test(tc, quick_passes_for_every_op_and_dtype);
    tcase_add_test(tc, quick_passes_for_every_cpu_variant);
    tcase_add_test(tc, json_for_one_op_and_dtype);
    tcase_add_test(tc, same_seed_same_result);
    tcase_add_test(tc, help_describes_the_command);
    tcase_add_test(tc, usage_errors);
    tcase_add_test(tc, ops_come_from_the_catalog);
    tcase_add_test(tc, attention_backend_is_skipped_among_others);
    tcase_add_test(tc, device_without_memory_provider_exits_3);
    tcase_add_test(tc, fake_device_passes);
    tcase_add_test(tc, fake_device_catches_wrong_values_and_overruns);
    tcase_add_test(tc, fake_device_unavailable_names_the_reason);
    tcase_add_test(tc, fake_device_asynchronous_failure_fails);
    tcase_add_test(tc, fake_device_json);
    tcase_add_test(tc, cpu_has_no_device_lines);
    tcase_add_test(tc, fakecuda_plugin_passes);
    tcase_add_test(tc, fake_cann_ascend_passes);
    tcase_add_test(tc, wrong_result_fails);
    tcase_add_test(tc, padding_write_fails_and_names_the_case);
    tcase_add_test(tc, failure_in_json);
    tcase_add_test(tc, clean_decline_passes);
    tcase_add_test(tc, decline_after_writing_fails);
    tcase_add_test(tc, write_past_out_fails_by_name);
    tcase_add_test(tc, policy_dropped_impl_is_skipped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(verify_suite());
}
