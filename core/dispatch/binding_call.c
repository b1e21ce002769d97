/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A language binding's calls (<fldispatch/binding.h>): an op called with the
 * binding's own argument record, and the binding's own direct path. They
 * run the same chains as the library's entry points (chain.h); plugin
 * kernels decline the binding's record (chain_run.c).
 */
#include <fldispatch/binding.h>

#include "chain.h"
#include "dispatch.h"
#include "error.h"
#include "host.h"
#include "inflight.h"
#include "reclaim.h"
#include "registry.h"

#define unlikely(x) __builtin_expect(!!(x), 0)

/*
 * What the binding may call directly on the key's slot (binding.h
 * fld_binding_direct): the first candidate of its global chain, when that is
 * a binding's kernel that has served a call and has not failed. Inside a
 * reader section; nothing while some thread has a scoped override.
 */
static void direct_of(struct fld_op_s *op, unsigned slot, fld_binding_direct *direct)
{
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        return;
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (!c || c->generation != atomic_load(&fld__generation))
        c = fld__global_chain(op, slot);
    if (c && c->n && !c->impls[0]->fn && !(atomic_load(&c->failed) & 1u) &&
        (atomic_load(&c->announced) & 1u)) {
        direct->fn = c->impls[0]->binding_fn;
        direct->ctx = c->impls[0]->binding_ctx;
        direct->stamp = c->generation;
    }
    fld__read_end();
}

int fld_binding_call(fld_op handle, int device_type, DLDataType dtype, const void *binding_args,
                     fld_binding_direct *direct)
{
    if (direct)
        *direct = (fld_binding_direct){NULL, NULL, 0};
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op)
        return fld__fail(FLD_EINVAL, "fld_binding_call: argument 'op' is NULL");
    if (!binding_args)
        return fld__fail(FLD_EINVAL, "fld_binding_call: argument 'binding_args' is NULL");
    FLD_CALL_SCOPE();
    if (unlikely(!fld__library_open()))
        return fld__closed_handle("fld_binding_call");
    if (unlikely(fld__inflight_mine() > FLD_MAX_CALL_DEPTH))
        return fld__call_too_deep(op->name);
    if (op->schema)
        return fld__fail(FLD_EINVAL,
                         "%s is a catalog op: call it with its argument struct (its typed entry "
                         "point or fld_call()), not with a binding's own arguments",
                         op->name);
    int dev, dt;
    int rc = fld__key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    unsigned slot = fld__slot(dev, dt);
    const void *outer = fld__binding_args_swap(binding_args);
    /* Not dispatch(): its direct path may call a plugin kernel. */
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        rc = fld__dispatch_maybe_overridden(op, slot, binding_args);
    else
        rc = fld__dispatch_slow(op, slot, binding_args);
    fld__binding_args_swap(outer);
    if (direct && rc == FLD_OK)
        direct_of(op, slot, direct);
    return rc;
}

int fld_binding_op_keyed(fld_op handle, uint64_t *stamp)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op || !stamp)
        return fld__fail(FLD_EINVAL, "fld_binding_op_keyed: argument '%s' is NULL",
                         op ? "stamp" : "op");
    FLD_CALL_SCOPE();
    if (unlikely(!fld__library_open()))
        return fld__closed_handle("fld_binding_op_keyed");
    fld__lock();
    *stamp = atomic_load(&fld__generation);
    int keyed = op->schema || fld__policy_global()->manifest;
    for (size_t i = 0; i < op->n_impls && !keyed; i++)
        keyed = op->impls[i]->devices != FLD_DEVICE_MASK_ALL ||
                op->impls[i]->dtypes != FLD_DTYPE_MASK_ALL;
    fld__unlock();
    return keyed;
}

uint64_t fld_binding_stamp(void)
{
    if (atomic_load_explicit(&fld__override_threads, memory_order_relaxed))
        return 0;
    return atomic_load_explicit(&fld__generation, memory_order_acquire);
}

int fld_binding_first_failed(fld_op handle, int device_type, DLDataType dtype,
                             const void *binding_args, void *ctx, int status)
{
    struct fld_op_s *op = (struct fld_op_s *)handle;
    if (!op || !binding_args)
        return fld__fail(FLD_EINVAL, "fld_binding_first_failed: argument '%s' is NULL",
                         op ? "binding_args" : "op");
    FLD_CALL_SCOPE();
    if (unlikely(!fld__library_open()))
        return fld__closed_handle("fld_binding_first_failed");
    int dev, dt;
    int rc = fld__key_from(device_type, dtype, &dev, &dt);
    if (rc)
        return rc;
    unsigned slot = fld__slot(dev, dt);
    const void *outer = fld__binding_args_swap(binding_args);
    fld__read_begin();
    struct fld_chain *c = atomic_load(&op->slots[slot]);
    if (c && c->generation == atomic_load(&fld__generation) && c->n && !c->impls[0]->fn &&
        c->impls[0]->binding_ctx == ctx)
        rc = fld__run_chain(op, slot, c, binding_args, 1, status == FLD_OK ? FLD_EIMPL : status);
    else
        rc = fld__dispatch_slow(op, slot, binding_args);
    fld__read_end();
    fld__binding_args_swap(outer);
    return rc;
}
