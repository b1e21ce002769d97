/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The thread-local stack of scoped overrides (policy_override.c), as the
 * top level sees it: the hook it sets so that an override leaving a thread
 * reaches dispatch's per-thread caches without the stack including
 * dispatch.h. The stack's reads on the call path are declared in policy.h.
 */
#ifndef FLD_CORE_POLICY_OVERRIDE_H
#define FLD_CORE_POLICY_OVERRIDE_H

#include <stdbool.h>

/*
 * fn runs on the thread whose override leaves (fld_policy_pop(), and thread
 * exit with overrides still pushed), before the override is freed. lifecycle.c sets it at its first
 * initialisation, which every push waits for; NULL runs nothing.
 */
void fld__policy_on_override_pop(void (*fn)(void));

struct fld_policy;

/*
 * Pushes p (built on the calling thread's effective policy, or a whole
 * policy) as one override of the calling thread. Takes ownership of p in
 * every case. FLD_OK or FLD_ENOMEM naming what.
 */
int fld__policy_push(const char *what, struct fld_policy *p);

/*
 * Checks the names of `pushed`, a policy that holds only what a push or a
 * change brings (built-in defaults elsewhere), against the registry as the
 * environment's are checked: a WARNING each, or FLD_ECONFIG prefixed with
 * what when strict (the strictness the thread or the global policy has
 * after the change; stored into pushed->strict). Takes the host lock.
 */
int fld__policy_check_pushed_names(const char *what, struct fld_policy *pushed, bool strict);

#endif
