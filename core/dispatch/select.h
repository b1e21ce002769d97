/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Selection: which of an op's registered implementations may serve a
 * (device, dtype) under a policy, in which order, and why each other one
 * may not. Its product is the chain that dispatch (chain_cache.c) caches and
 * runs, and the resolution that fld_explain()/fld_resolve() hand out.
 *
 * This header is the whole interface between the two files: the chain
 * record, the two functions that build a chain or a resolution (both under
 * the host lock, never on the cached call path), and the words both files
 * use for a slot's device and dtype in messages.
 */
#ifndef FLD_CORE_SELECT_H
#define FLD_CORE_SELECT_H

#include <stdbool.h>
#include <stdint.h>

#include "devices.h"
#include "dtypes.h"
#include "ops.h"

struct fld_policy;

/*
 * The ordered candidates of one (op, device, dtype) under one policy. Built
 * by fld__select_chain() as one allocation (free() frees it) and then
 * immutable, except for the two atomics, which dispatch writes: which
 * candidates failed (non-strict fallback memory) and which were announced
 * in the log. global and tls_next are dispatch's too.
 */
struct fld_chain {
    uint64_t generation;
    uint64_t policy_serial;
    bool strict;
    bool global;                /* in op->slots[] (else a thread's override chain) */
    _Atomic uint64_t failed;    /* bit i: impls[i] failed (non-strict memory) */
    _Atomic uint64_t announced; /* bit i: "using" line logged for impls[i] */
    struct fld_chain *tls_next; /* thread-local retire list */
    uint32_t buckets;           /* a key slot's chain: the manifest's row buckets of the key */
    uint32_t n;
    struct fld_impl_rec *impls[];
};

/* The chain of op for the slot key (dev, dt) under pol, for calls of
 * `rows` rows (0: the key's chain without a row bucket; see manifest.h),
 * stamped with generation; NULL when out of memory. Host lock held. */
struct fld_chain *fld__select_chain(struct fld_op_s *op, int dev, int dt, int64_t rows,
                                    const struct fld_policy *pol, uint64_t generation);

/* fld_explain()'s resolution of op for (dev, dt) and `rows` rows (0: no
 * row bucket) under the effective policy; device_type and dtype are the
 * caller's words for the key. Takes the host lock. FLD_OK, or FLD_ENOMEM
 * with the error set. */
int fld__select_explain(struct fld_op_s *op, int dev, int dt, int64_t rows, int device_type,
                        DLDataType dtype, fld_resolution **out);

/* A slot key's device and dtype, as messages name them. */
static inline const char *fld__device_label(int dev)
{
    return dev == FLD_DEV_ANY ? "any device" : fld_device_name(fld__device_type_of(dev));
}

static inline const char *fld__dtype_label(int dt)
{
    return dt >= 0 && dt < FLD_NDTYPES ? fld__dtypes[dt].name : "any dtype";
}

#endif
