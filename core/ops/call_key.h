/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The key a validator derives from a catalog call, on its own so that the
 * quick checks (validate_fast.h) need nothing of the ops (ops.h).
 */
#ifndef FLD_CORE_CALL_KEY_H
#define FLD_CORE_CALL_KEY_H

/* What a validator derives from a call: the cache slot to use (ops.h fld__slot()). */
struct fld_call_key {
    int device; /* FLD_DEV_* */
    int dtype;  /* FLD_DT_* */
};

#endif
