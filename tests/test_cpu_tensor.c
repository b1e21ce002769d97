/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/util/cpu_tensor.c, the tests' CPU-tensor helper:
 * the layout of a view (guards, byte_offset, strides), values through every
 * supported dtype, the sentinel check, the fixed-seed fills, and the
 * non-aborting creators (NULL for a bad dtype, ndim, shape or
 * stride, or a size that overflows), against the aborting ones of the tests.
 */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "util/cpu_tensor.h"
#include "util/harness.h"

START_TEST(view_layout_and_guards)
{
    tt_tensor *t = tt_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){3, 5}, (int64_t[]){8, 1});
    ck_assert_uint_eq(t->t.byte_offset, TT_GUARD);
    ck_assert_uint_eq((uintptr_t)t->buf % 64, 0);
    ck_assert_ptr_eq(t->t.strides, t->strides);
    ck_assert_int_eq(tt_numel(t), 15);
    /* the buffer covers the view, 64-byte rounded, with a guard on each side */
    ck_assert_uint_ge(t->buf_bytes, 2 * TT_GUARD + (2 * 8 + 5) * 4);
    ck_assert_uint_eq(t->buf_bytes % 64, 0);
    ck_assert(tt_padding_intact(t));
    for (int64_t i = 0; i < tt_numel(t); i++)
        ck_assert(tt_get(t, i) == 0.0);
    /* a write between rows (column 6 of row 0) is outside the view */
    const float one = 1.0f;
    memcpy((char *)t->buf + TT_GUARD + 6 * sizeof one, &one, sizeof one);
    ck_assert(!tt_padding_intact(t));
    tt_free(t);
}
END_TEST

START_TEST(values_round_to_each_dtype)
{
    static const DLDataType dtypes[] = {FLD_DTYPE_F32,     FLD_DTYPE_F16, FLD_DTYPE_BF16,
                                        {kDLFloat, 64, 1}, TT_INT64,      TT_INT32};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        tt_tensor *t = tt_new(dtypes[d], 1, (int64_t[]){4});
        tt_set(t, 2, 3.0);
        ck_assert(tt_get(t, 2) == 3.0);
        tt_set(t, 1, 1.0 / 3.0);
        ck_assert(tt_get(t, 1) == tt_round(dtypes[d], 1.0 / 3.0) ||
                  (dtypes[d].code == kDLInt && tt_get(t, 1) == 0.0));
        ck_assert(tt_padding_intact(t));
        tt_free(t);
    }
}
END_TEST

START_TEST(fills_repeat_with_the_seed)
{
    tt_tensor *a = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){7, 33});
    tt_tensor *b = tt_new_strided(FLD_DTYPE_BF16, 2, (int64_t[]){7, 33}, (int64_t[]){40, 1});
    tt_fill_normal(a, 42, 0.0, 1.0);
    tt_fill_normal(b, 42, 0.0, 1.0);
    double sum = 0.0;
    for (int64_t i = 0; i < tt_numel(a); i++) {
        ck_assert(tt_get(a, i) == tt_get(b, i));
        sum += tt_get(a, i);
    }
    ck_assert(sum != 0.0);
    ck_assert(tt_padding_intact(b));
    tt_fill_normal(b, 43, 0.0, 1.0);
    ck_assert(tt_get(a, 0) != tt_get(b, 0) || tt_get(a, 1) != tt_get(b, 1));
    tt_free(a);
    tt_free(b);
}
END_TEST

START_TEST(try_new_refuses_without_aborting)
{
    ck_assert_ptr_null(tt_try_new((DLDataType){kDLUInt, 8, 1}, 1, (int64_t[]){4}));
    ck_assert_ptr_null(tt_try_new(FLD_DTYPE_F32, TT_MAX_DIMS + 1, (int64_t[TT_MAX_DIMS + 1]){0}));
    ck_assert_ptr_null(tt_try_new(FLD_DTYPE_F32, 2, (int64_t[]){-1, 4}));
    ck_assert_ptr_null(tt_try_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){2, 4}, (int64_t[]){-4, 1}));
    ck_assert_ptr_null(tt_try_new(FLD_DTYPE_F32, 2, (int64_t[]){INT64_MAX / 2, 4}));
    ck_assert_ptr_null(
        tt_try_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){4, 2}, (int64_t[]){INT64_MAX / 2, 1}));
    /* what it accepts, it makes like tt_new_strided() */
    tt_tensor *t = tt_try_new_strided(FLD_DTYPE_F16, 2, (int64_t[]){2, 3}, (int64_t[]){5, 1});
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->t.byte_offset, TT_GUARD);
    ck_assert(tt_padding_intact(t));
    tt_free(t);
    /* and an empty tensor is a tensor */
    t = tt_try_new(FLD_DTYPE_F32, 2, (int64_t[]){0, 8});
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(tt_numel(t), 0);
    tt_free(t);
}
END_TEST

START_TEST(new_aborts_where_try_new_refuses)
{
    tt_new(FLD_DTYPE_F32, 2, (int64_t[]){INT64_MAX / 2, 4});
}
END_TEST

static Suite *cpu_tensor_suite(void)
{
    Suite *s = suite_create("cpu_tensor");
    TCase *tc = tcase_create("cpu_tensor");
    tcase_add_test(tc, view_layout_and_guards);
    tcase_add_test(tc, values_round_to_each_dtype);
    tcase_add_test(tc, fills_repeat_with_the_seed);
    tcase_add_test(tc, try_new_refuses_without_aborting);
    tcase_add_test_raise_signal(tc, new_aborts_where_try_new_refuses, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(cpu_tensor_suite());
}
