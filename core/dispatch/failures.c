/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The failure memory of the cached chains, for tools and applications:
 * fld_clear_failures() forgets it, fld_foreach_failure() lists it (the
 * global chains of the current generation, and the calling thread's under
 * the override in force).
 */
#include "chain.h"
#include "devices.h"
#include "dispatch_override.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "names.h"
#include "registry.h"

static void clear_op_failures(struct fld_op_s *op, void *user)
{
    const unsigned n = fld__op_buckets(op) ? FLD_NALLSLOTS : FLD_NSLOTS;
    for (unsigned s = 0; s < n; s++) {
        struct fld_chain *c = atomic_load(fld__chain_at(op, s));
        if (c)
            atomic_store(&c->failed, 0);
    }
}

int fld_clear_failures(const char *name)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    fld__lock();
    if (name) {
        struct fld_op_s *op = fld__op_find(name);
        if (!op) {
            fld__unlock();
            return fld__unknown_op(name);
        }
        clear_op_failures(op, NULL);
    } else {
        fld__op_foreach(clear_op_failures, NULL);
    }
    fld__unlock();
    fld__dispatch_tls_flush();
    return FLD_OK;
}

/* fld_foreach_failure()'s walk: the callback, and its first non-zero return. */
struct failure_walk {
    int (*fn)(const fld_failure_info *info, void *user);
    void *user;
    int rc;
};

/* Reports the failed candidates of chain c, cached for op's slot. */
static void list_chain_failures(struct failure_walk *w, const struct fld_op_s *op, unsigned slot,
                                const struct fld_chain *c)
{
    static const DLDataType dtypes[] = {
        [FLD_DT_F32] = {kDLFloat, 32, 1},
        [FLD_DT_F16] = {kDLFloat, 16, 1},
        [FLD_DT_BF16] = {kDLBfloat, 16, 1},
        [FLD_DT_ANY] = {0, 0, 0},
    };
    int dev, dt;
    fld__slot_dev_dt(slot, &dev, &dt);
    uint64_t failed = atomic_load(&c->failed);
    for (uint32_t i = 0; i < c->n && i < 64 && w->rc == 0; i++) {
        if (!(failed & (1ull << i)))
            continue;
        fld_failure_info info = {
            .op = op->name,
            .device_type = dev == FLD_DEV_ANY ? 0 : fld__device_type_of(dev),
            .dtype = dtypes[dt],
            .impl_id = fld__impl_name(c->impls[i]),
        };
        w->rc = w->fn(&info, w->user);
    }
}

/* fld__override_chains()'s callback: a chain of the calling thread's override. */
static void list_thread_chain_failures(const struct fld_op_s *op, unsigned slot,
                                       const struct fld_chain *c, void *user)
{
    list_chain_failures(user, op, slot, c); /* nothing once the callback said stop */
}

static void list_op_failures(struct fld_op_s *op, void *user)
{
    struct failure_walk *w = user;
    uint64_t gen = atomic_load(&fld__generation);
    const unsigned n = fld__op_buckets(op) ? FLD_NALLSLOTS : FLD_NSLOTS;
    for (unsigned s = 0; s < n && w->rc == 0; s++) {
        const struct fld_chain *c = atomic_load(fld__chain_at(op, s));
        if (c && c->generation == gen)
            list_chain_failures(w, op, s, c);
    }
}

int fld_foreach_failure(int (*fn)(const fld_failure_info *info, void *user), void *user)
{
    FLD_CALL_SCOPE();
    int rc = fld__ensure_init();
    if (rc)
        return rc;
    if (!fn)
        return fld__fail(FLD_EINVAL, "fld_foreach_failure: argument 'fn' is NULL");
    struct failure_walk w = {fn, user, 0};
    fld__lock();
    fld__op_foreach(list_op_failures, &w);
    /* The calling thread's chains under the override in force. */
    const struct fld_policy *top = fld__policy_override_top();
    uint64_t gen = atomic_load(&fld__generation);
    if (top && w.rc == 0)
        fld__override_chains(top->serial, gen, list_thread_chain_failures, &w);
    fld__unlock();
    return w.rc;
}
