/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The chains of a thread with a scoped policy override (dispatch_override.c),
 * beside the global chains of chain_cache.c.
 */
#ifndef FLD_CORE_DISPATCH_OVERRIDE_H
#define FLD_CORE_DISPATCH_OVERRIDE_H

#include "ops.h"
#include "policy.h"
#include "select.h"

/* A call under the calling thread's scoped policy pol: its own chains. */
int fld__dispatch_overridden(struct fld_op_s *op, unsigned slot, const void *args,
                             const struct fld_policy *pol);
/* Calls fn for each chain the calling thread's override cache holds under
 * policy serial `serial` and generation gen. */
void fld__override_chains(uint64_t serial, uint64_t gen,
                          void (*fn)(const struct fld_op_s *op, unsigned slot,
                                     const struct fld_chain *c, void *user),
                          void *user);
/* The calling thread's override caches: frees them (on pop, thread exit). */
void fld__dispatch_tls_flush(void);

#endif
