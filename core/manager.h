/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The op manager: the call path, the lock-free per-(op, device, dtype)
 * cache of resolved chains, dispatch with non-strict fallback and failure
 * memory, and explain/resolve for tools. The chains' contents are
 * selection's (select.h).
 */
#ifndef FLD_CORE_MANAGER_H
#define FLD_CORE_MANAGER_H

#include "ops.h"

/* Dispatches a catalog op by index after validating args. */
int fld__call_catalog(enum fld_catalog_index idx, const void *args);
/*
 * Dispatches a catalog op by index on the key (fld__slot()) of arguments the
 * caller has checked as its validator would (prepared calls, prepared.c).
 */
int fld__call_checked(enum fld_catalog_index idx, unsigned slot, const void *args);

/* Drops every cached chain of every op (host lock held; at shutdown). */
void fld__manager_shutdown(void);
/* The calling thread's override caches: frees them (on pop, thread exit). */
void fld__manager_tls_flush(void);

#endif
