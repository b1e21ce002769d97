/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Op signatures (fldispatch.h "Op signatures"): parsing a torch-schema-like
 * string into its argument declarations and canonical text, and checking a
 * call's fld_args against them. No library state: the registry keeps the
 * parsed signatures on their ops (ops.h).
 */
#ifndef FLD_CORE_SIGNATURE_H
#define FLD_CORE_SIGNATURE_H

#include <stdbool.h>
#include <stddef.h>

#include <fldispatch/fldispatch.h>

/* A parsed signature; info's pointers point into the allocation. */
struct fld_sig {
    fld_signature_info info;
};

/*
 * Parses text as the signature of op. allow_returns: the catalog's form,
 * which may return one value; declarations return "()". FLD_OK and *out
 * (info.declared_by set from declared_by, copied), or FLD_EINVAL / FLD_ENOMEM
 * with the message in err: "op 'x': malformed signature at column 7:
 * expected a type (Tensor, int, float, bool, str), found 'Tensr' in '...'".
 */
int fld__sig_parse(const char *op, const char *text, bool allow_returns, const char *declared_by,
                   struct fld_sig **out, char *err, size_t err_size);
void fld__sig_free(struct fld_sig *s);

/*
 * Checks a call's args (a const fld_args *) against s; on FLD_OK *dev is
 * the FLD_DEV_* of its first tensor (FLD_DEV_ANY without one) and *dt the
 * fld_dtype_index() of its first float32/float16/bfloat16 tensor (-1: none).
 * FLD_EINVAL with fld_last_error() naming op and argument otherwise.
 */
int fld__sig_check(const struct fld_sig *s, const void *args, int *dev, int *dt);

#endif
