/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dtype table's rows as data, and the names derived from them (see
 * dtypes.h): fld_dtype_name(), fld_dtype_from_name(), the words of the
 * manifest, the counters and the trace, and the tool's rows.
 */
#include <stdbool.h>
#include <string.h>

#include <fldispatch/fldispatch.h>
#include <fldispatch/internal/tool_api.h>
#include <fldispatch/plugin.h>

#include "dtypes.h"
#include "error.h"

const struct fld_dtype_desc fld__dtypes[FLD_NDTYPES] = {
#define ROW(id, name, long_name, code, bits)                                                       \
    [FLD_DT_##id] = {name, long_name, code, bits, FLD_DTYPE_MASK_##id},
    FLD_DTYPE_TABLE(ROW)
#undef ROW
};

/* The public masks are the rows' bits, and the all-mask their union. */
#define CHECK_MASK(id, ...)                                                                        \
    _Static_assert(FLD_DTYPE_MASK_##id == 1u << FLD_DT_##id, "FLD_DTYPE_MASK_" #id);
FLD_DTYPE_TABLE(CHECK_MASK)
#undef CHECK_MASK
_Static_assert(FLD_DTYPE_MASK_ALL == (1u << FLD_NDTYPES) - 1, "FLD_DTYPE_MASK_ALL");

static const struct fld_tool_dtype tool_rows[FLD_NDTYPES] = {
#define TOOL_ROW(id, name, long_name, code, bits)                                                  \
    [FLD_DT_##id] = {name, long_name, code, bits, FLD_DTYPE_MASK_##id},
    FLD_DTYPE_TABLE(TOOL_ROW)
#undef TOOL_ROW
};

const struct fld_tool_dtype *fld__dtype_row(unsigned index)
{
    return index < FLD_NDTYPES ? &tool_rows[index] : NULL;
}

const char *fld__dtype_word(int dt)
{
    return dt >= 0 && dt < FLD_NDTYPES ? fld__dtypes[dt].name : "any";
}

const char *fld_dtype_name(DLDataType dtype)
{
    if (dtype.code == 0 && dtype.bits == 0 && dtype.lanes == 0)
        return "any";
    int i = fld_dtype_index(dtype);
    return i < 0 || i >= FLD_NDTYPES ? NULL : fld__dtypes[i].name;
}

int fld_dtype_from_name(const char *name, DLDataType *dtype)
{
    if (!name || !dtype)
        return fld__fail(FLD_EINVAL, "fld_dtype_from_name: argument '%s' is NULL",
                         name ? "dtype" : "name");
    for (int i = 0; i < FLD_NDTYPES; i++) {
        if (strcmp(name, fld__dtypes[i].name) == 0 || strcmp(name, fld__dtypes[i].long_name) == 0) {
            *dtype = (DLDataType){fld__dtypes[i].code, fld__dtypes[i].bits, 1};
            return FLD_OK;
        }
    }
    if (strcmp(name, "any") == 0) {
        *dtype = FLD_DTYPE_ANY;
        return FLD_OK;
    }
    return fld__fail(FLD_EINVAL, "unknown dtype '%s' (valid: " FLD_DTYPE_NAMES_TEXT ")", name);
}
