/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The slice of Huawei CANN (AscendCL runtime + aclnn operator API) that the
 * ascend plugin uses, declared here in our own words so the plugin builds
 * without the SDK. Everything is resolved with dlsym() at load time.
 *
 * Sources (CANN public documentation; values and signatures checked there):
 *   AscendCL runtime (aclInit, aclrtGetDeviceCount, aclrtSetDevice,
 *   aclrtGetDevice, aclrtGetCurrentContext, aclrtSetCurrentContext,
 *   aclrtMalloc, aclrtFree, aclrtMemcpy, aclrtMemcpyAsync,
 *   aclrtSynchronizeStream, aclGetRecentErrMsg), aclDataType / aclFormat /
 *   aclrtMemcpyKind values:
 *     https://www.hiascend.com/document/ (CANN "AscendCL API reference",
 *     acl/acl_base.h and acl/acl_rt.h of the toolkit)
 *   aclCreateTensor / aclDestroyTensor (exported by libnnopbase.so):
 *     https://www.hiascend.com/document/ ("aclnn common API", aclCreateTensor)
 *   aclnnRmsNorm:
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnRmsNorm.md
 *   aclnnAddRmsNorm (toolkit header aclnnop/aclnn_add_rms_norm.h, CANN 8.1.RC1):
 *     https://www.hiascend.com/document/ (aolapi, aclnnAddRmsNorm)
 *   aclnnSwiGlu:
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnSwiGlu.md
 *   aclnnRotaryPositionEmbedding (mode 0 half, 1 interleave; x 4-D in the
 *   documented releases -- [B, S, N, D] with cos/sin [1 or B, S, 1, D] for
 *   the BSND layout; 3-D only in some newer ones -- non-contiguous x/cos/sin
 *   allowed, out contiguous, D < 896):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1alpha003/API/aolapi/context/aclnnRotaryPositionEmbedding.md
 *     https://gitcode.com/cann/ops-transformer (posembedding/rotary_position_embedding/docs)
 *   aclnnIndexSelect: https://www.hiascend.com/document/ (aolapi); a
 *   non-contiguous self is made contiguous first (so a zero-stride
 *   expanded view would be copied in full on every call)
 *   aclnnRopeWithSinCosCache (Atlas A2/A3, CANN 8.1+, resolved optionally):
 *   positions [T] int32/int64, queryIn [T, Nq * headSize] and keyIn
 *   [T, Nk * headSize] 2-D (a row stride is allowed), cosSinCache
 *   [max_pos, rot_dim] of the query's dtype (made contiguous), mropeSection
 *   NULL outside mrope, queryOut/keyOut of the inputs' shapes (the result is
 *   copied into them, so they may be the inputs):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/83RC1alpha002/API/aolapi/context/aclnnRopeWithSinCosCache.md
 *     https://gitcode.com/cann/ops-transformer (posembedding/rope_with_sin_cos_cache)
 *   aclnnInplaceCopy (selfRef and src may be non-contiguous and of different
 *   dtypes; the copy converts):
 *     https://gitcode.com/cann/ops-math/blob/master/conversion/view_copy/docs/aclnnInplaceCopy.md
 *     https://gitcode.com/cann/ops-math/issues/3278 (dtype conversion through Cast)
 *
 * Used by reference.ascend (and vendor.ascend gemma_rms_norm):
 *   aclCreateScalar / aclDestroyScalar (libnnopbase):
 *     https://www.hiascend.com/document/detail/en/canncommercial/850/API/aolapi/operatorlist_00017.html
 *     https://www.hiascend.com/doc_center/source/zh/canncommercial/850/API/aolapi/operatorlist_00025.html
 *   aclnnCast (self, aclDataType dtype, out):
 *     https://gitcode.com/cann/ops-math/tree/master/math/cast (docs/aclnnCast.md)
 *   aclnnSilu (self and out of one dtype, non-contiguous allowed):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha001/API/aolapi/context/aclnnSilu.md
 *   aclnnGeluV2 (approximate 0 = none (erf), 1 = tanh; x and y of one dtype):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnGeluV2.md
 *   aclnnMul (broadcasting, type promotion; out any dtype the promoted type
 *   converts to):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnMul%26aclnnInplaceMul.md
 *   aclnnAdd (out = self + alpha * other, broadcasting), aclnnAdds (tensor +
 *   alpha * scalar):
 *     https://hiascend.com/document/detail/zh/canncommercial/63RC2/inferapplicationdev/aclcppdevg/aclcppdevg_03_0158.html
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnAdds.md
 *   aclnnInplaceFillScalar:
 *     https://gitcode.com/cann/ops-math/blob/master/conversion/fill/docs/aclnnInplaceFillScalar.md
 *   aclnnGemmaRmsNorm (y = x / rms(x) * (1 + gamma); CANN 8.1 and later, so
 *   resolved optionally):
 *     https://www.hiascend.com/document/detail/zh/CANNCommunityEdition/82RC1alpha002/API/aolapi/context/aclnnGemmaRmsNorm.md
 *
 * All aclnn operators use the two-phase protocol: XGetWorkspaceSize()
 * checks the arguments and returns a workspace size and a one-shot executor;
 * X() runs that executor on a stream with a device workspace at least that
 * large, and releases the executor.
 */
#ifndef FLD_ASCEND_ACL_API_H
#define FLD_ASCEND_ACL_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int acl_error;                    /* aclError; 0 = ACL_SUCCESS */
typedef int acl_nn_status;                /* aclnnStatus; 0 = OK */
typedef void *acl_stream;                 /* aclrtStream */
typedef struct acl_tensor acl_tensor;     /* opaque aclTensor */
typedef struct acl_executor acl_executor; /* opaque aclOpExecutor */
typedef struct acl_scalar acl_scalar;     /* opaque aclScalar */
typedef void *acl_context;                /* aclrtContext */

#define ACL_OK 0
/* aclInit called twice in one process (ACL_ERROR_REPEAT_INITIALIZE). */
#define ACL_ERR_REPEAT_INIT 100002

/* aclDataType */
enum { ACL_DT_FLOAT = 0, ACL_DT_FLOAT16 = 1, ACL_DT_INT32 = 3, ACL_DT_INT64 = 9, ACL_DT_BF16 = 27 };
/* aclFormat: ACL_FORMAT_ND */
#define ACL_FMT_ND 2
/* aclrtMemMallocPolicy: ACL_MEM_MALLOC_HUGE_FIRST */
#define ACL_MALLOC_HUGE_FIRST 0
/* aclrtMemcpyKind */
enum {
    ACL_COPY_HOST_TO_HOST = 0,
    ACL_COPY_HOST_TO_DEVICE = 1,
    ACL_COPY_DEVICE_TO_HOST = 2,
    ACL_COPY_DEVICE_TO_DEVICE = 3
};
/* aclnnGeluV2 approximate */
#define ACL_GELU_NONE 0
#define ACL_GELU_TANH 1
/* aclnnRotaryPositionEmbedding modes */
#define ACL_ROPE_HALF       0
#define ACL_ROPE_INTERLEAVE 1

typedef acl_error (*acl_run_fn)(void *workspace, uint64_t workspace_size, acl_executor *executor,
                                acl_stream stream);

/* X-macro lists: (return type, name, parameter list). */
#define FLD_ACL_RUNTIME_FUNCS(X)                                                                   \
    X(acl_error, aclInit, (const char *config_path))                                               \
    X(acl_error, aclrtGetDeviceCount, (uint32_t * count))                                          \
    X(acl_error, aclrtSetDevice, (int32_t device_id))                                              \
    X(acl_error, aclrtGetDevice, (int32_t * device_id))                                            \
    X(acl_error, aclrtGetCurrentContext, (acl_context * context))                                  \
    X(acl_error, aclrtSetCurrentContext, (acl_context context))                                    \
    X(acl_error, aclrtMalloc, (void **ptr, size_t size, int policy))                               \
    X(acl_error, aclrtFree, (void *ptr))                                                           \
    X(acl_error, aclrtMemcpy,                                                                      \
      (void *dst, size_t dst_max, const void *src, size_t count, int kind))                        \
    X(acl_error, aclrtMemcpyAsync,                                                                 \
      (void *dst, size_t dst_max, const void *src, size_t count, int kind, acl_stream stream))     \
    X(acl_error, aclrtSynchronizeStream, (acl_stream stream))

#define FLD_ACL_TENSOR_FUNCS(X)                                                                    \
    X(acl_tensor *, aclCreateTensor,                                                               \
      (const int64_t *view_dims, uint64_t view_ndim, int dtype, const int64_t *strides,            \
       int64_t offset, int format, const int64_t *storage_dims, uint64_t storage_ndim,             \
       void *data))                                                                                \
    X(acl_nn_status, aclDestroyTensor, (const acl_tensor *tensor))                                 \
    X(acl_scalar *, aclCreateScalar, (void *value, int dtype))                                     \
    X(acl_nn_status, aclDestroyScalar, (const acl_scalar *scalar))

#define FLD_ACL_OP_FUNCS(X)                                                                        \
    X(acl_nn_status, aclnnRmsNormGetWorkspaceSize,                                                 \
      (const acl_tensor *x, const acl_tensor *gamma, double epsilon, const acl_tensor *y_out,      \
       const acl_tensor *rstd_out, uint64_t *workspace_size, acl_executor **executor))             \
    X(acl_nn_status, aclnnRmsNorm,                                                                 \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnAddRmsNormGetWorkspaceSize,                                              \
      (const acl_tensor *x1, const acl_tensor *x2, const acl_tensor *gamma, double epsilon,        \
       const acl_tensor *y_out, const acl_tensor *rstd_out, const acl_tensor *x_out,               \
       uint64_t *workspace_size, acl_executor **executor))                                         \
    X(acl_nn_status, aclnnAddRmsNorm,                                                              \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnSwiGluGetWorkspaceSize,                                                  \
      (const acl_tensor *x, int64_t dim, const acl_tensor *out, uint64_t *workspace_size,          \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnSwiGlu,                                                                  \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnIndexSelectGetWorkspaceSize,                                             \
      (const acl_tensor *self, int64_t dim, const acl_tensor *index, acl_tensor *out,              \
       uint64_t *workspace_size, acl_executor **executor))                                         \
    X(acl_nn_status, aclnnIndexSelect,                                                             \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnRotaryPositionEmbeddingGetWorkspaceSize,                                 \
      (const acl_tensor *x, const acl_tensor *cos, const acl_tensor *sin, int64_t mode,            \
       acl_tensor *out, uint64_t *workspace_size, acl_executor **executor))                        \
    X(acl_nn_status, aclnnRotaryPositionEmbedding,                                                 \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnInplaceCopyGetWorkspaceSize,                                             \
      (acl_tensor * self_ref, const acl_tensor *src, uint64_t *workspace_size,                     \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnInplaceCopy,                                                             \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnCastGetWorkspaceSize,                                                    \
      (const acl_tensor *self, int dtype, acl_tensor *out, uint64_t *workspace_size,               \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnCast,                                                                    \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnSiluGetWorkspaceSize,                                                    \
      (const acl_tensor *self, acl_tensor *out, uint64_t *workspace_size,                          \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnSilu,                                                                    \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnGeluV2GetWorkspaceSize,                                                  \
      (const acl_tensor *x, int64_t approximate, acl_tensor *y, uint64_t *workspace_size,          \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnGeluV2,                                                                  \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnMulGetWorkspaceSize,                                                     \
      (const acl_tensor *self, const acl_tensor *other, acl_tensor *out, uint64_t *workspace_size, \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnMul,                                                                     \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnAddGetWorkspaceSize,                                                     \
      (const acl_tensor *self, const acl_tensor *other, const acl_scalar *alpha, acl_tensor *out,  \
       uint64_t *workspace_size, acl_executor **executor))                                         \
    X(acl_nn_status, aclnnAdd,                                                                     \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnAddsGetWorkspaceSize,                                                    \
      (const acl_tensor *self, const acl_scalar *other, const acl_scalar *alpha, acl_tensor *out,  \
       uint64_t *workspace_size, acl_executor **executor))                                         \
    X(acl_nn_status, aclnnAdds,                                                                    \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnInplaceFillScalarGetWorkspaceSize,                                       \
      (acl_tensor * self_ref, const acl_scalar *value, uint64_t *workspace_size,                   \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnInplaceFillScalar,                                                       \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))

/* Resolved when present (CANN 8.1+); NULL otherwise. */
#define FLD_ACL_OPTIONAL_OP_FUNCS(X)                                                               \
    X(acl_nn_status, aclnnRopeWithSinCosCacheGetWorkspaceSize,                                     \
      (const acl_tensor *positions, const acl_tensor *query_in, const acl_tensor *key_in,          \
       const acl_tensor *cos_sin_cache, const void *mrope_section, int64_t head_size,              \
       bool is_neox_style, acl_tensor *query_out, acl_tensor *key_out, uint64_t *workspace_size,   \
       acl_executor **executor))                                                                   \
    X(acl_nn_status, aclnnRopeWithSinCosCache,                                                     \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))       \
    X(acl_nn_status, aclnnGemmaRmsNormGetWorkspaceSize,                                            \
      (const acl_tensor *x, const acl_tensor *gamma, double epsilon, const acl_tensor *y_out,      \
       const acl_tensor *rstd_out, uint64_t *workspace_size, acl_executor **executor))             \
    X(acl_nn_status, aclnnGemmaRmsNorm,                                                            \
      (void *workspace, uint64_t workspace_size, acl_executor *executor, acl_stream stream))

#endif
