/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/base/error.c: the message a public function leaves when an argument is
 * NULL names that function and that argument ("fld_resolve: argument 'op'
 * is NULL"), for every public entry point with a pointer argument the
 * caller must give (NULL that means "none", such as fld_clear_failures(NULL),
 * is documented and not listed). The typed op entry points and fld_call()
 * name the op and the tensor instead ("rms_norm: tensor 'x' is NULL"): the
 * op is what the caller called.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/harness.h"

struct null_case {
    const char *call;     /* as written in the test, for messages */
    int (*run)(void);     /* makes the call; returns its status */
    int status;           /* expected */
    const char *function; /* expected at the start of the message */
    const char *argument; /* expected quoted in the message */
};

static DLDevice cpu0 = {kDLCPU, 0};

static int c_resolve_op(void)
{
    const char *id;
    return fld_resolve(NULL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
}
static int c_resolve_id(void)
{
    return fld_resolve("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, NULL);
}
static int c_explain_op(void)
{
    fld_resolution *r;
    return fld_explain(NULL, FLD_DEVICE_CPU, FLD_DTYPE_F32, &r);
}
static int c_explain_out(void)
{
    return fld_explain("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, NULL);
}
static int c_device_from_name(void)
{
    int d;
    return fld_device_from_name(NULL, &d);
}
static int c_device_from_name_out(void)
{
    return fld_device_from_name("cpu", NULL);
}
static int c_dtype_from_name(void)
{
    DLDataType t;
    return fld_dtype_from_name(NULL, &t);
}
static int c_dtype_from_name_out(void)
{
    return fld_dtype_from_name("f32", NULL);
}
static int c_op_lookup(void)
{
    return fld_op_lookup(NULL) ? FLD_OK : FLD_EINVAL;
}
static int c_call(void)
{
    return fld_call(NULL, NULL);
}
static int c_call_by_name(void)
{
    return fld_call_by_name(NULL, NULL);
}
static int c_call_on(void)
{
    return fld_call_on(NULL, FLD_DEVICE_CPU, FLD_DTYPE_F32, NULL);
}
static int c_policy_set(void)
{
    return fld_policy_set(NULL, "vendor");
}
static int c_push_preference(void)
{
    return fld_policy_push_preference(NULL);
}
static int c_load_file(void)
{
    return fld_policy_load_file(NULL);
}
static int c_oot(void)
{
    return fld_oot_op_enabled(NULL) ? FLD_OK : FLD_EINVAL;
}
static int c_config_fields(void)
{
    return fld_foreach_config_field(NULL, NULL);
}
static int c_platform(void)
{
    return fld_platform(NULL);
}
static int c_foreach_plugin(void)
{
    return fld_foreach_plugin(NULL, NULL);
}
static int c_foreach_impl(void)
{
    return fld_foreach_impl(NULL, NULL);
}
static int c_foreach_catalog_op(void)
{
    return fld_foreach_catalog_op(NULL, NULL);
}
static int c_load_plugin(void)
{
    return fld_load_plugin(NULL);
}
static int c_register_plugin(void)
{
    return fld_register_plugin(NULL);
}
static int c_device_alloc(void)
{
    return fld_device_alloc(cpu0, 16, NULL);
}
static int c_device_copy(void)
{
    char b[4] = {0};
    return fld_device_copy(cpu0, NULL, b, sizeof b, FLD_COPY_HOST_TO_DEVICE);
}
static int c_device_provider(void)
{
    return fld_device_provider(FLD_DEVICE_CPU, NULL);
}
static int c_registry_register(void)
{
    return fld_registry_register(NULL, NULL);
}
static int c_registry_detail(void)
{
    return fld_registry_set_detail(NULL, "%s", "x");
}
static int c_registry_hooks(void)
{
    return fld_registry_set_device_hooks(NULL, NULL);
}
static int c_set_error(void)
{
    fld_set_error(NULL);
    return FLD_EINVAL;
}
static int c_log(void)
{
    fld_log(FLD_LOG_ERROR, NULL);
    return FLD_EINVAL;
}
static int c_tensor_rows(void)
{
    fld_rows rows;
    fld_tensor_rows(NULL, &rows);
    return rows.data == NULL && rows.rows == 0 ? FLD_EINVAL : FLD_OK;
}
static int c_rotary_geometry(void)
{
    fld_rotary_geometry g;
    fld_rotary_geometry_of(NULL, &g);
    return g.tokens == 0 ? FLD_EINVAL : FLD_OK;
}
static int c_rms_norm(void)
{
    return fld_rms_norm(NULL, NULL, NULL, NULL, 1e-6f);
}
static int c_silu(void)
{
    return fld_silu_and_mul(NULL, NULL);
}
static int c_rotary(void)
{
    return fld_rotary_embedding(NULL, NULL, NULL, 8, NULL, true);
}
static int c_attention(void)
{
    return fld_attention_backend(FLD_DEVICE_CPU, false, false, NULL);
}
static int c_call_by_name_args(void)
{
    return fld_call_by_name("rms_norm", NULL);
}

#define CASE(fn, status, function, argument)                                                       \
    {                                                                                              \
#fn, fn, status, function, argument                                                        \
    }

static const struct null_case cases[] = {
    CASE(c_resolve_op, FLD_EINVAL, "fld_resolve", "op"),
    CASE(c_resolve_id, FLD_EINVAL, "fld_resolve", "impl_id"),
    CASE(c_explain_op, FLD_EINVAL, "fld_explain", "op"),
    CASE(c_explain_out, FLD_EINVAL, "fld_explain", "out"),
    CASE(c_device_from_name, FLD_EINVAL, "fld_device_from_name", "name"),
    CASE(c_device_from_name_out, FLD_EINVAL, "fld_device_from_name", "device_type"),
    CASE(c_dtype_from_name, FLD_EINVAL, "fld_dtype_from_name", "name"),
    CASE(c_dtype_from_name_out, FLD_EINVAL, "fld_dtype_from_name", "dtype"),
    CASE(c_op_lookup, FLD_EINVAL, "fld_op_lookup", "name"),
    CASE(c_call, FLD_EINVAL, "fld_call", "op"),
    CASE(c_call_by_name, FLD_EINVAL, "fld_call_by_name", "name"),
    CASE(c_call_on, FLD_EINVAL, "fld_call_on", "op"),
    CASE(c_policy_set, FLD_EINVAL, "fld_policy_set", "key"),
    CASE(c_push_preference, FLD_EINVAL, "fld_policy_push_preference", "kind"),
    CASE(c_load_file, FLD_EINVAL, "fld_policy_load_file", "path"),
    CASE(c_oot, FLD_EINVAL, "fld_oot_op_enabled", "op"),
    CASE(c_config_fields, FLD_EINVAL, "fld_foreach_config_field", "fn"),
    CASE(c_platform, FLD_EINVAL, "fld_platform", "out"),
    CASE(c_foreach_plugin, FLD_EINVAL, "fld_foreach_plugin", "fn"),
    CASE(c_foreach_impl, FLD_EINVAL, "fld_foreach_impl", "fn"),
    CASE(c_foreach_catalog_op, FLD_EINVAL, "fld_foreach_catalog_op", "fn"),
    CASE(c_load_plugin, FLD_EINVAL, "fld_load_plugin", "path"),
    CASE(c_register_plugin, FLD_EINVAL, "fld_register_plugin", "desc"),
    CASE(c_device_alloc, FLD_EINVAL, "fld_device_alloc", "ptr"),
    CASE(c_device_copy, FLD_EINVAL, "fld_device_copy", "dst"),
    CASE(c_device_provider, FLD_EINVAL, "fld_device_provider", "plugin"),
    CASE(c_registry_register, FLD_EINVAL, "fld_registry_register", "reg"),
    CASE(c_registry_detail, FLD_EINVAL, "fld_registry_set_detail", "reg"),
    CASE(c_registry_hooks, FLD_EINVAL, "fld_registry_set_device_hooks", "reg"),
    CASE(c_set_error, FLD_EINVAL, "fld_set_error", "fmt"),
    CASE(c_log, FLD_EINVAL, "fld_log", "fmt"),
    CASE(c_tensor_rows, FLD_EINVAL, "fld_tensor_rows", "t"),
    CASE(c_rotary_geometry, FLD_EINVAL, "fld_rotary_geometry_of", "args"),
    /* The op entry points name the op and the tensor. */
    CASE(c_rms_norm, FLD_EINVAL, "rms_norm", "x"),
    CASE(c_silu, FLD_EINVAL, "silu_and_mul", "x"),
    CASE(c_rotary, FLD_EINVAL, "rotary_embedding", "positions"),
    CASE(c_attention, FLD_EINVAL, "attention_backend", "name"),
    CASE(c_call_by_name_args, FLD_EINVAL, "rms_norm", "args"),
};

START_TEST(null_argument_names_function_and_argument)
{
    const struct null_case *c = &cases[_i];
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_set_error("%s", "(before)");
    int rc = c->run();
    ck_assert_msg(rc == c->status, "%s: status %d, expected %d (%s)", c->call, rc, c->status,
                  fld_last_error());
    const char *msg = fld_last_error();
    char prefix[96], quoted[64];
    snprintf(prefix, sizeof prefix, "%s: ", c->function);
    snprintf(quoted, sizeof quoted, "'%s'", c->argument);
    ck_assert_msg(strncmp(msg, prefix, strlen(prefix)) == 0,
                  "%s: message '%s' does not start with '%s'", c->call, msg, prefix);
    ck_assert_msg(strstr(msg, quoted), "%s: message '%s' does not name %s", c->call, msg, quoted);
}
END_TEST

static int count(const fld_plugin_info *i, void *u)
{
    (void)i;
    ++*(int *)u;
    return 0;
}

START_TEST(register_plugin_null_leaves_no_record)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    int before = 0, after = 0;
    ck_assert_int_eq(fld_foreach_plugin(count, &before), FLD_OK);
    ck_assert_int_eq(fld_register_plugin(NULL), FLD_EINVAL);
    ck_assert_int_eq(fld_foreach_plugin(count, &after), FLD_OK);
    ck_assert_int_eq(before, after);
}
END_TEST

/* The functions fldispatch.h and plugin.h mark "No init" work where fld_init() refuses. */
START_TEST(no_init_functions_work_under_a_refused_configuration)
{
    ck_assert_int_eq(setenv("VLLM_FL_PREFER", "fastest", 1), 0);
    fld_set_error("%s", "(before)");
    ck_assert_str_eq(fld_version(), FLD_VERSION_STRING);
    ck_assert_str_eq(fld_strerror(FLD_EINVAL), "invalid argument");
    ck_assert_str_eq(fld_device_name(FLD_DEVICE_ROCM), "rocm");
    int dev = 0;
    ck_assert_int_eq(fld_device_from_name("nvidia", &dev), FLD_OK);
    ck_assert_int_eq(dev, FLD_DEVICE_CUDA);
    ck_assert_str_eq(fld_dtype_name(FLD_DTYPE_BF16), "bf16");
    DLDataType dt;
    ck_assert_int_eq(fld_dtype_from_name("float16", &dt), FLD_OK);
    ck_assert_str_eq(fld_plugin_status_name(FLD_PLUGIN_UNAVAILABLE), "unavailable");
    ck_assert_str_eq(fld_plugin_status_name(FLD_PLUGIN_SKIPPED), "skipped");
    ck_assert_ptr_null(fld_plugin_status_name((fld_plugin_status)7));
    fld_log_set_level(FLD_LOG_ERROR);
    ck_assert_int_eq(fld_log_get_level(), FLD_LOG_ERROR);
    fld_log(FLD_LOG_DEBUG, "%s", "not shown");
    int stream = 0;
    ck_assert_int_eq(fld_set_stream(FLD_DEVICE_CUDA, &stream), FLD_OK);
    ck_assert_ptr_eq(fld_get_stream(FLD_DEVICE_CUDA), &stream);
    fld_resolution_free(NULL);
    int64_t shape[2] = {2, 3};
    float data[6];
    DLTensor t = {
        .data = data, .device = {kDLCPU, 0}, .ndim = 2, .dtype = FLD_DTYPE_F32, .shape = shape};
    fld_rows rows;
    fld_tensor_rows(&t, &rows);
    ck_assert_int_eq(rows.rows, 2);
    ck_assert_int_eq(rows.width, 3);
    /* none of them tried to initialise: the refusal is still to come */
    ck_assert_str_eq(fld_last_error(), "(before)");
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "VLLM_FL_PREFER"));
    /* and after it, the thread's stream is still its own */
    ck_assert_ptr_eq(fld_get_stream(FLD_DEVICE_CUDA), &stream);
}
END_TEST

static Suite *error_suite(void)
{
    Suite *s = suite_create("error");
    TCase *tc = tcase_create("null arguments");
    tcase_add_loop_test(tc, null_argument_names_function_and_argument, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, register_plugin_null_leaves_no_record);
    tcase_add_test(tc, no_init_functions_work_under_a_refused_configuration);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_error", error_suite());
}
