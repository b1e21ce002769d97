/*
 * The thread-local stack of scoped overrides (policy_override.c), as the
 * top floor sees it: the hook it sets so that an override leaving a thread
 * reaches dispatch's per-thread caches without the stack including
 * manager.h. The stack's reads on the call path are declared in policy.h.
 */
#ifndef FLD_CORE_POLICY_OVERRIDE_H
#define FLD_CORE_POLICY_OVERRIDE_H

/*
 * fn runs on the thread whose override leaves (fld_policy_pop(), and thread
 * exit with overrides still pushed), before the override is freed. lifecycle.c sets it at its first
 * initialisation, which every push waits for; NULL runs nothing.
 */
void fld__policy_on_override_pop(void (*fn)(void));

#endif
