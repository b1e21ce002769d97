/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dtype table (core/base/dtypes.h) walked row by row through
 * fld__dtype_row(): each row's names parse back to its DLPack dtype
 * (fld_dtype_from_name()), fld_dtype_name() and fld_dtype_index() agree with
 * the row's place, its mask is the row's FLD_DTYPE_MASK_* bit, and an
 * unknown name's message lists every row.
 */
#include <check.h>
#include <string.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>
#include <fldispatch/plugin.h>

#include "util/harness.h"

START_TEST(test_every_row_round_trips)
{
    const struct fld_tool_dtype *d;
    uint32_t all = 0;
    unsigned n = 0;
    for (; (d = fld__dtype_row(n)); n++) {
        DLDataType want = {d->code, d->bits, 1}, got;
        ck_assert_uint_eq(d->mask, 1u << n);
        ck_assert_int_eq(fld_dtype_index(want), (int)n);
        ck_assert_str_eq(fld_dtype_name(want), d->name);
        ck_assert_int_eq(fld_dtype_from_name(d->name, &got), FLD_OK);
        ck_assert(got.code == want.code && got.bits == want.bits && got.lanes == 1);
        ck_assert_int_eq(fld_dtype_from_name(d->long_name, &got), FLD_OK);
        ck_assert(got.code == want.code && got.bits == want.bits && got.lanes == 1);
        ck_assert_uint_eq(d->bits % 8, 0);
        all |= d->mask;
    }
    ck_assert_uint_eq(all, FLD_DTYPE_MASK_ALL);
    ck_assert_ptr_null(fld__dtype_row(n));
}
END_TEST

START_TEST(test_unknown_name_lists_every_row)
{
    DLDataType dt;
    ck_assert_int_eq(fld_dtype_from_name("f8", &dt), FLD_EINVAL);
    const struct fld_tool_dtype *d;
    for (unsigned i = 0; (d = fld__dtype_row(i)); i++)
        ck_assert_msg(strstr(fld_last_error(), d->name), "'%s' not in: %s", d->name,
                      fld_last_error());
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "any"));
    ck_assert_int_eq(fld_dtype_from_name("any", &dt), FLD_OK);
    ck_assert(dt.code == 0 && dt.bits == 0 && dt.lanes == 0);
}
END_TEST

static Suite *dtype_suite(void)
{
    Suite *s = suite_create("dtype_table");
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, test_every_row_round_trips);
    tcase_add_test(tc, test_unknown_name_lists_every_row);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(dtype_suite());
}
