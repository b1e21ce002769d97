/*
 * Process-wide state of the host: the one lock, the generation counter that
 * invalidates cached choices, lazy initialisation, fork handling, the global
 * policy pointer. Replaced objects go to reclaim.h, which frees them once no
 * lock-free reader can hold them.
 *
 * Lock: a single recursive mutex (fld__lock) protects the registry (op
 * entries' impl lists, plugin records), policy publication and chain
 * building. The cached call path takes no lock: it reads atomics only.
 * pthread_atfork handlers take the lock around fork(), so a child never
 * inherits it held.
 */
#ifndef FLD_CORE_HOST_H
#define FLD_CORE_HOST_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "reentry.h"

struct fld_policy;

void fld__lock(void);
void fld__unlock(void);

/* 0 until initialised; bumped on every registry or policy change. */
extern _Atomic uint64_t fld__generation;
/* Host lock held. Invalidates every cached chain and remembered failure. */
void fld__bump_generation(void);

/* True once initialised; read on every by-name and typed call. */
extern _Atomic bool fld__ready;

int fld_init(void);
/* fld_init() on behalf of the entry point fn, which it names when it refuses. */
int fld__init_from(const char *fn);
/*
 * FLD_OK once initialised (lazily initialising), else the init error; from
 * plugin code the host runs while loading (reentry.h), FLD_ESTATE naming fn.
 * The fast path is two loads: the refusal is checked only while some thread
 * runs such code.
 */
static inline int fld__ensure_init_from(const char *fn)
{
    if (__builtin_expect(atomic_load_explicit(&fld__ready, memory_order_acquire) &&
                             !atomic_load_explicit(&fld__plugin_code_threads, memory_order_relaxed),
                         1))
        return 0;
    return fld__init_from(fn);
}
/* fld__ensure_init_from() naming the public function it is called in. */
#define fld__ensure_init() fld__ensure_init_from(__func__)

/* The global policy (never NULL after init). Without the host lock, read it
 * inside fld__read_begin()/fld__read_end() (reclaim.h). */
const struct fld_policy *fld__policy_global(void);
/* The policy of the calling thread: its innermost override, else global. */
const struct fld_policy *fld__policy_effective(void);
/* Makes p the global policy (takes ownership) and bumps the generation.
 * Takes the host lock itself. */
void fld__policy_publish(struct fld_policy *p);

/*
 * Rebuilds the global policy from the platform file, the environment and
 * VLLM_FL_CONFIG (fld_policy_reset). On error nothing changes.
 */
int fld__policy_rebuild(void);

#endif
