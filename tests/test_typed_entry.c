/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The typed entry points run their family's quick checks inline and fall
 * back to the full validator for anything those do not surely accept. Each
 * case here is a layout next to the quick checks' edge, called through the
 * public entry point (fld_rms_norm, fld_silu_and_mul) with a recording
 * kernel: a call the rules accept reaches the kernel with the caller's
 * tensors, one they refuse fails with FLD_EINVAL and the full validator's
 * message, and runs nothing. The cases: a tensor that looks contiguous but
 * is not (a row stride below the width, a last stride other than 1, padded
 * rows), a byte_offset (aligned and not), rank 1 and rank 3, empty rows,
 * aliasing (out == x, out shifted into x, residual on weight), and a
 * 16-bit x with float32 weight and residual.
 *
 * The kernel never touches tensor memory: the tensors point at addresses
 * nothing maps.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "util/harness.h"

static int calls;
static const void *seen_x;

static int norm_kernel(const void *args)
{
    calls++;
    seen_x = ((const fld_rms_norm_args *)args)->x->data;
    return FLD_OK;
}

static int act_kernel(const void *args)
{
    calls++;
    seen_x = ((const fld_activation_args *)args)->x->data;
    return FLD_OK;
}

static int entry_register(fld_registry *reg)
{
    const struct {
        const char *op;
        fld_kernel_fn fn;
    } rows[] = {{FLD_OP_RMS_NORM, norm_kernel}, {FLD_OP_SILU_AND_MUL, act_kernel}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const fld_impl impl = {
            .op = rows[i].op,
            .impl_id = "vendor.entry",
            .kind = FLD_KIND_VENDOR,
            .vendor = "entry",
            .priority = 200,
            .devices = FLD_DEVICE_MASK_ALL,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = rows[i].fn,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

static const fld_plugin_descriptor entry_plugin = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = FLD_PLUGIN_FLAG_IN_TREE,
    .name = "entry",
    .version = FLD_VERSION_STRING,
    .host_version = FLD_VERSION_STRING,
    .register_builtins = entry_register,
};

static void setup(void)
{
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(fld_register_plugin(&entry_plugin) == FLD_OK, "%s", fld_last_error());
}

static void teardown(void)
{
    fld_shutdown();
}

static const DLDataType F32 = {kDLFloat, 32, 1}, BF16 = {kDLBfloat, 16, 1};

#define BASE ((uintptr_t)1 << 40)
#define FAR  ((uintptr_t)1 << 20) /* between tensors that must not meet */

static DLTensor tensor(uintptr_t addr, DLDataType dt, int ndim, int64_t *shape, int64_t *strides)
{
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)addr;
    t.device = (DLDevice){kDLCPU, 0};
    t.ndim = ndim;
    t.dtype = dt;
    t.shape = shape;
    t.strides = strides;
    return t;
}

/* The call reached the kernel with x. */
static void accepted(int rc, const DLTensor *x)
{
    ck_assert_msg(rc == FLD_OK, "refused: %s", fld_last_error());
    ck_assert_int_eq(calls, 1);
    ck_assert_ptr_eq(seen_x, x->data);
    calls = 0;
}

/* The call failed with FLD_EINVAL and a message holding what, and ran nothing. */
static void refused(int rc, const char *what)
{
    ck_assert_int_eq(rc, FLD_EINVAL);
    ck_assert_int_eq(calls, 0);
    ck_assert_msg(strstr(fld_last_error(), what) != NULL, "message '%s' lacks '%s'",
                  fld_last_error(), what);
}

START_TEST(looks_contiguous_but_is_not)
{
    int64_t s[2] = {4, 64}, w_shape[1] = {64};
    DLTensor w = tensor(BASE + 2 * FAR, F32, 1, w_shape, NULL);
    DLTensor out = tensor(BASE + FAR, F32, 2, s, NULL);

    int64_t narrow[2] = {32, 1}; /* rows overlap: stride below the width */
    DLTensor x = tensor(BASE, F32, 2, s, narrow);
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f),
            "the row stride is smaller than the row width");

    int64_t column[2] = {64, 2}; /* every other element */
    x = tensor(BASE, F32, 2, s, column);
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "stride 2 in its last dimension");

    int64_t padded[2] = {96, 1}, exact[2] = {64, 1};
    x = tensor(BASE, F32, 2, s, padded);
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    x = tensor(BASE, F32, 2, s, exact);
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    /* a single row's stride is never stepped: any value is fine */
    int64_t s1[2] = {1, 64}, odd[2] = {-7, 1};
    x = tensor(BASE, F32, 2, s1, odd);
    DLTensor out1 = tensor(BASE + FAR, F32, 2, s1, NULL);
    accepted(fld_rms_norm(&out1, &x, &w, NULL, 1e-6f), &x);
}
END_TEST

START_TEST(byte_offset)
{
    int64_t s[2] = {2, 64}, w_shape[1] = {64};
    DLTensor x = tensor(BASE, F32, 2, s, NULL), out = tensor(BASE + FAR, F32, 2, s, NULL);
    DLTensor w = tensor(BASE + 2 * FAR, F32, 1, w_shape, NULL);
    x.byte_offset = 256;
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    out.byte_offset = 2; /* half a float32 */
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "not aligned");
    out.byte_offset = 0;
    /* x's data with another offset: the ranges are data + byte_offset */
    out.data = x.data;
    out.byte_offset = 64;
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "out may alias x only exactly");
    out.data = (void *)(BASE + FAR);
    out.byte_offset = 0;
    w.byte_offset = ((uint64_t)1 << 31) + 4; /* beyond the quick checks' bounds, still valid */
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
}
END_TEST

START_TEST(other_ranks)
{
    int64_t s1[1] = {64}, s3[3] = {2, 3, 64};
    DLTensor x = tensor(BASE, F32, 1, s1, NULL), out = tensor(BASE + FAR, F32, 1, s1, NULL);
    DLTensor w = tensor(BASE + 2 * FAR, F32, 1, s1, NULL);
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    x = tensor(BASE, F32, 3, s3, NULL);
    out = tensor(BASE + FAR, F32, 3, s3, NULL);
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    /* out of another rank than x, with as many elements */
    int64_t s2[2] = {6, 64};
    out = tensor(BASE + FAR, F32, 2, s2, NULL);
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "has shape [6, 64] but 'x' has [2, 3, 64]");
    /* a rank-2 weight */
    int64_t w2[2] = {1, 64};
    out = tensor(BASE + FAR, F32, 3, s3, NULL);
    w = tensor(BASE + 2 * FAR, F32, 2, w2, NULL);
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "tensor 'weight' has shape [1, 64]");
}
END_TEST

START_TEST(empty_rows)
{
    int64_t s[2] = {0, 64}, w_shape[1] = {64};
    /* an empty tensor's data is never touched: even NULL is accepted */
    DLTensor x = tensor(0, F32, 2, s, NULL), out = tensor(0, F32, 2, s, NULL);
    DLTensor w = tensor(BASE, F32, 1, w_shape, NULL);
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    int64_t act_x[2] = {0, 128}, act_out[2] = {0, 64};
    x = tensor(0, F32, 2, act_x, NULL);
    out = tensor(0, F32, 2, act_out, NULL);
    accepted(fld_silu_and_mul(&out, &x), &x);
    /* but an empty x does not make a mismatched out acceptable */
    int64_t wrong[2] = {0, 63};
    out = tensor(0, F32, 2, wrong, NULL);
    refused(fld_silu_and_mul(&out, &x), "expected out [0, 64]");
}
END_TEST

START_TEST(aliasing)
{
    int64_t s[2] = {4, 64}, w_shape[1] = {64};
    DLTensor x = tensor(BASE, F32, 2, s, NULL), w = tensor(BASE + 2 * FAR, F32, 1, w_shape, NULL);
    DLTensor out = x; /* in place: allowed */
    accepted(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), &x);
    out.data = (void *)(BASE + 4 * 16); /* sixteen elements into x */
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "out may alias x only exactly");
    /* out at x's start with another row stride is not the in-place form */
    int64_t padded[2] = {128, 1};
    out = tensor(BASE, F32, 2, s, padded);
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "out may alias x only exactly");
    /* the residual is written: it must not meet the weight it reads */
    out = tensor(BASE + FAR, F32, 2, s, NULL);
    DLTensor r = tensor(BASE + 2 * FAR - 64, F32, 2, s, NULL);
    refused(fld_rms_norm(&out, &x, &w, &r, 1e-6f), "tensor 'residual'");
    r = tensor(BASE + 3 * FAR, F32, 2, s, NULL);
    accepted(fld_rms_norm(&out, &x, &w, &r, 1e-6f), &x);
    /* interleaved column halves of one buffer share no byte: accepted */
    int64_t half[2] = {4, 32}, wide[2] = {64, 1}, w32[1] = {32};
    DLTensor xl = tensor(BASE, F32, 2, half, wide), ol = tensor(BASE + 4 * 32, F32, 2, half, wide);
    DLTensor wl = tensor(BASE + 2 * FAR, F32, 1, w32, NULL);
    accepted(fld_rms_norm(&ol, &xl, &wl, NULL, 1e-6f), &xl);
}
END_TEST

START_TEST(sixteen_bit_with_float32_operands)
{
    int64_t s[2] = {2, 64}, w_shape[1] = {64};
    DLTensor x = tensor(BASE, BF16, 2, s, NULL), out = tensor(BASE + FAR, BF16, 2, s, NULL);
    DLTensor w = tensor(BASE + 2 * FAR, F32, 1, w_shape, NULL);
    DLTensor r = tensor(BASE + 3 * FAR, F32, 2, s, NULL);
    accepted(fld_rms_norm(&out, &x, &w, &r, 1e-6f), &x);
    /* a float32 x takes no 16-bit operand */
    x.dtype = out.dtype = F32;
    w.dtype = BF16;
    refused(fld_rms_norm(&out, &x, &w, NULL, 1e-6f), "tensor 'weight' has dtype bfloat16");
    w.dtype = F32;
    r.dtype = BF16;
    refused(fld_rms_norm(&out, &x, &w, &r, 1e-6f), "tensor 'residual' has dtype bfloat16");
    /* a float32 residual with a 16-bit x must still not meet out */
    x.dtype = out.dtype = BF16;
    r = tensor(BASE + FAR + 64, F32, 2, s, NULL);
    refused(fld_rms_norm(&out, &x, &w, &r, 1e-6f), "overlaps");
}
END_TEST

static Suite *entry_suite(void)
{
    Suite *s = suite_create("typed_entry");
    TCase *tc = tcase_create("edges");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, looks_contiguous_but_is_not);
    tcase_add_test(tc, byte_offset);
    tcase_add_test(tc, other_ranks);
    tcase_add_test(tc, empty_rows);
    tcase_add_test(tc, aliasing);
    tcase_add_test(tc, sixteen_bit_with_float32_operands);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_typed_entry", entry_suite());
}
