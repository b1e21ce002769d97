/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dtype table: one row per element type the catalog dispatches on.
 * Everything in core that names, counts or parses a dtype derives from it:
 * the FLD_DT_* indexes of the cache slots, fld_dtype_name() and
 * fld_dtype_from_name(), the manifest's dtype words, the counters' and the
 * trace's dtype words, selection's labels and validation's messages. Outside
 * core, the tool's and the Python extension's dtype names and mask bits
 * derive from it through fld__dtype_row() (<fldispatch/internal/tool_api.h>).
 *
 * A new dtype is a row here, its FLD_DTYPE_<id> and FLD_DTYPE_MASK_<id> in
 * <fldispatch/fldispatch.h> and its case in fld_dtype_index()
 * (<fldispatch/plugin.h>; dtypes.c checks that the masks are the rows'
 * bits), and the kernels that serve it.
 *
 * Columns of FLD_DTYPE_TABLE(X), in the order of the FLD_DTYPE_MASK_* bits:
 *   id     FLD_DT_<id>, the row's index; FLD_DTYPE_MASK_<id> is its bit
 *   name   its short name ("bf16"), as fld_dtype_name()
 *   long   its long name ("bfloat16"), PyTorch's (torch.bfloat16) and the one
 *          validation's messages print; fld_dtype_from_name() takes both
 *   code   its DLPack type code (kDLFloat, kDLBfloat)
 *   bits   its width in bits (the element size is bits / 8)
 *
 * Thread-safety: constant data and pure functions, MT safe.
 */
#ifndef FLD_CORE_DTYPES_H
#define FLD_CORE_DTYPES_H

#include <stdint.h>

#include <fldispatch/fldispatch.h>

/* clang-format off */
#define FLD_DTYPE_TABLE(X)                            \
    X(F32,  "f32",  "float32",  kDLFloat,  32)        \
    X(F16,  "f16",  "float16",  kDLFloat,  16)        \
    X(BF16, "bf16", "bfloat16", kDLBfloat, 16)
/* clang-format on */

/* Dtype indexes of the cache slots; FLD_DT_ANY is the slot of "any dtype". */
enum {
#define FLD__DTYPE_ENUM(id, ...) FLD_DT_##id,
    FLD_DTYPE_TABLE(FLD__DTYPE_ENUM)
#undef FLD__DTYPE_ENUM
        FLD_NDTYPES,
    FLD_DT_ANY = FLD_NDTYPES
};

/* "f32, f16, bf16": the short names, for the "valid: ..." parts of messages. */
#define FLD__DTYPE_NAME_ITEM(id, name, ...) name ", "
#define FLD_DTYPE_NAMES_TEXT FLD_DTYPE_TABLE(FLD__DTYPE_NAME_ITEM) "any"

/* One row, as data (dtypes.c). */
struct fld_dtype_desc {
    const char *name, *long_name;
    uint8_t code, bits;
    uint32_t mask; /* FLD_DTYPE_MASK_<id> */
};
extern const struct fld_dtype_desc fld__dtypes[FLD_NDTYPES];

/* The short name of a FLD_DT_* index, "any" for FLD_DT_ANY and anything else. */
const char *fld__dtype_word(int dt);

/* The long name ("bfloat16") of a DLPack dtype the table has, else NULL.
 * Inline: validate.c's messages use it, and a test compiles validate.c alone. */
static inline const char *fld__dtype_long_name(DLDataType t)
{
#define FLD__DTYPE_LONG(id, name_, long_, code_, bits_)                                            \
    if (t.lanes == 1 && t.code == (code_) && t.bits == (bits_))                                    \
        return long_;
    FLD_DTYPE_TABLE(FLD__DTYPE_LONG)
#undef FLD__DTYPE_LONG
    return NULL;
}

#endif
