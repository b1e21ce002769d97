/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ascend plugin's internal interface: the CANN functions it resolved at
 * load time (runtime.c), and the per-call helpers the operator mappings
 * (ops.c) use to describe tensors, get workspace and run aclnn operators.
 */
#ifndef FLD_ASCEND_ASCEND_H
#define FLD_ASCEND_ASCEND_H

#include <stdbool.h>

#include <fldispatch/plugin.h>

#include "acl_api.h"

struct fld_ascend_api {
#define FLD_ACL_FIELD(ret, name, params) ret(*name) params;
    FLD_ACL_RUNTIME_FUNCS(FLD_ACL_FIELD)
    FLD_ACL_TENSOR_FUNCS(FLD_ACL_FIELD)
    FLD_ACL_OP_FUNCS(FLD_ACL_FIELD)
    /* Optional operators: NULL when this CANN lacks them. */
    FLD_ACL_OPTIONAL_OP_FUNCS(FLD_ACL_FIELD)
#undef FLD_ACL_FIELD
    /* Optional: absent from some releases; NULL then. */
    const char *(*aclGetRecentErrMsg)(void);
    acl_nn_status (*aclDestroyAclOpExecutor)(acl_executor *executor);
};

/* Filled by fld__ascend_load(); only valid when it returned true. */
extern struct fld_ascend_api fld__acl;

/*
 * Finds CANN ($ASCEND_HOME_PATH, else /usr/local/Ascend/ascend-toolkit/latest),
 * opens its libraries and resolves every function. False with the reason
 * (kept for fld__ascend_available()) when something is missing.
 */
bool fld__ascend_load(void);
/* The CANN root chosen by fld__ascend_load(). */
const char *fld__ascend_home(void);
/* Releases the workspaces and the libraries (at plugin unload). */
void fld__ascend_unload(void);

/* fld_available_fn of every implementation and of the device hooks. */
bool fld__ascend_available(const char **reason);

/* Device hooks (fld_device_hooks). */
int fld__ascend_hook_alloc(int device_id, size_t bytes, void **ptr);
int fld__ascend_hook_free(int device_id, void *ptr);
int fld__ascend_hook_copy(int device_id, void *dst, const void *src, size_t bytes,
                          fld_copy_kind kind);
int fld__ascend_hook_synchronize(int device_id);

/* ------------------------------------------------------------------------ */
/* One operator call                                                        */
/* ------------------------------------------------------------------------ */

/* Rotary in reference.ascend describes 25 tensors (9 shared, 8 per query/key). */
#define FLD_ASCEND_MAX_TENSORS 32
#define FLD_ASCEND_MAX_SCALARS 4
#define FLD_ASCEND_MAX_DIMS    8

struct fld_ascend_scratch;

/* The thread's context when a call switched devices, put back at its end. */
struct fld_ascend_device_save {
    bool switched;    /* aclrtSetDevice was called for this call */
    acl_context prev; /* the context current before, or NULL: none */
};

struct fld_ascend_call {
    const char *impl; /* "vendor.ascend" or "reference.ascend", for messages */
    const char *op;   /* catalog op name, for messages */
    acl_stream stream;
    struct fld_ascend_device_save device_save;
    struct fld_ascend_scratch *scratch;
    acl_tensor *tensors[FLD_ASCEND_MAX_TENSORS];
    int n_tensors;
    acl_scalar *scalars[FLD_ASCEND_MAX_SCALARS];
    int n_scalars;
};

/*
 * Starts a call on device (the tensors' DLDevice): makes it the thread's
 * current Ascend device if it is not (fld__ascend_end() puts the thread's
 * previous context back), takes the calling thread's stream from
 * fld_get_stream() and its scratch memory. FLD_OK or FLD_EIMPL (message set).
 */
int fld__ascend_begin(struct fld_ascend_call *c, const char *op, DLDevice device);
/* The same for implementation impl (messages name it). */
int fld__ascend_begin_as(struct fld_ascend_call *c, const char *impl, const char *op,
                         DLDevice device);
/* Destroys the call's tensor and scalar descriptors; restores the thread's context. */
void fld__ascend_end(struct fld_ascend_call *c);

/*
 * An aclTensor over data: view dims and element strides, storage the
 * smallest 1-D extent that covers the view. Destroyed by fld__ascend_end().
 * NULL with FLD_EIMPL's message set on failure.
 */
acl_tensor *fld__ascend_tensor(struct fld_ascend_call *c, int ndim, const int64_t *dims,
                               const int64_t *strides, int acl_dtype, const void *data);
/*
 * An aclScalar holding the float32 value; destroyed by fld__ascend_end().
 * NULL with FLD_EIMPL's message set on failure.
 */
acl_scalar *fld__ascend_scalar(struct fld_ascend_call *c, float value);
/* ACL_DT_* of a float DLPack dtype, or -1. */
int fld__ascend_dtype(DLDataType t);

/*
 * Device scratch of at least bytes for intermediate tensors of this call,
 * valid until the next fld__ascend_buffers() on this thread. Returns NULL
 * with the message set when it cannot be had.
 */
void *fld__ascend_buffers(struct fld_ascend_call *c, size_t bytes);

/*
 * Phase two of an aclnn operator: takes a workspace of ws bytes (grown on
 * demand, per thread) and runs executor on the call's stream. FLD_OK or
 * FLD_EIMPL naming `name`.
 */
int fld__ascend_launch(struct fld_ascend_call *c, const char *name, acl_run_fn run, uint64_t ws,
                       acl_executor *executor);

/* Sets "<impl>: <op>: <func> failed: error N (text)"; returns FLD_EIMPL. */
int fld__ascend_fail(const struct fld_ascend_call *c, const char *func, int status);

/* Operator kernels and predicates (ops.c). */
int fld__ascend_rms_norm(const void *args);
bool fld__ascend_rms_norm_supports(const void *args);
int fld__ascend_silu_and_mul(const void *args);
bool fld__ascend_silu_and_mul_supports(const void *args);
int fld__ascend_rotary_embedding(const void *args);
bool fld__ascend_rotary_supports(const void *args);
int fld__ascend_attention_backend(const void *args);
int fld__ascend_gemma_rms_norm(const void *args);
bool fld__ascend_gemma_rms_norm_supports(const void *args);

/* reference.ascend (ops_reference.c): compositions of elementwise aclnn ops. */
int fld__ascend_ref_silu_and_mul(const void *args);
int fld__ascend_ref_mul_and_silu(const void *args);
int fld__ascend_ref_gelu_and_mul(const void *args);
int fld__ascend_ref_gelu_tanh_and_mul(const void *args);
int fld__ascend_ref_rms_norm(const void *args);
int fld__ascend_ref_gemma_rms_norm(const void *args);
int fld__ascend_ref_rotary_embedding(const void *args);

#endif
