/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What DLPack 1.x adds to the 0.6 header Debian ships (libdlpack-dev 0.6):
 * the versioned managed tensor with its flags (DLPack 1.0), and the C
 * exchange API that array libraries publish as
 * type(tensor).__dlpack_c_exchange_api__ (DLPack 1.3). Declared here, under
 * fldpy_ names, so that this file never clashes with a newer <dlpack/dlpack.h>;
 * the layouts are those of the DLPack 1.x specification. DLTensor itself is
 * ABI-identical between 0.6 and 1.x and comes from <dlpack/dlpack.h>.
 */
#ifndef FLDPY_DLPACK1_H
#define FLDPY_DLPACK1_H

#include <stdint.h>

#include <dlpack/dlpack.h>

/* The DLPack version this header describes; asked for with max_version. */
#define FLDPY_DLPACK_MAJOR 1
#define FLDPY_DLPACK_MINOR 3

/* Capsule names of the Python protocol: a fresh capsule, and the name the
 * consumer gives it once it owns the tensor (the capsule's destructor then
 * leaves the tensor alone). */
#define FLDPY_CAPSULE_LEGACY         "dltensor"
#define FLDPY_CAPSULE_LEGACY_USED    "used_dltensor"
#define FLDPY_CAPSULE_VERSIONED      "dltensor_versioned"
#define FLDPY_CAPSULE_VERSIONED_USED "used_dltensor_versioned"
#define FLDPY_CAPSULE_EXCHANGE_API   "dlpack_exchange_api"

/* Flags of fldpy_dl_managed_versioned.flags. */
#define FLDPY_DLPACK_FLAG_READ_ONLY (1ull << 0) /* the consumer must not write */
#define FLDPY_DLPACK_FLAG_IS_COPIED (1ull << 1) /* the producer made a copy */

typedef struct fldpy_dl_version {
    uint32_t major;
    uint32_t minor;
} fldpy_dl_version;

/* DLManagedTensorVersioned (DLPack 1.0). */
typedef struct fldpy_dl_managed_versioned {
    fldpy_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct fldpy_dl_managed_versioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} fldpy_dl_managed_versioned;

/* The function table of DLPackExchangeAPI (DLPack 1.3). Every function
 * returns 0, or -1 with a Python exception set, and needs the GIL. */
typedef int (*fldpy_dl_allocator_fn)(DLTensor *prototype, fldpy_dl_managed_versioned **out,
                                     void *error_ctx,
                                     void (*set_error)(void *error_ctx, const char *kind,
                                                       const char *message));
typedef int (*fldpy_dl_managed_from_py_fn)(void *py_object, fldpy_dl_managed_versioned **out);
typedef int (*fldpy_dl_managed_to_py_fn)(fldpy_dl_managed_versioned *tensor, void **out_py_object);
/* Fills *out with a non-owning view, valid until control returns to Python. */
typedef int (*fldpy_dl_tensor_from_py_fn)(void *py_object, DLTensor *out);
/* The producer's current work stream for a device (NULL for the CPU). */
typedef int (*fldpy_dl_current_stream_fn)(int device_type, int32_t device_id, void **out_stream);

typedef struct fldpy_dl_exchange_header {
    fldpy_dl_version version;
    struct fldpy_dl_exchange_header *prev_api; /* an older table, or NULL */
} fldpy_dl_exchange_header;

typedef struct fldpy_dl_exchange_api {
    fldpy_dl_exchange_header header;
    fldpy_dl_allocator_fn managed_tensor_allocator;
    fldpy_dl_managed_from_py_fn managed_tensor_from_py_object_no_sync;
    fldpy_dl_managed_to_py_fn managed_tensor_to_py_object_no_sync;
    fldpy_dl_tensor_from_py_fn dltensor_from_py_object_no_sync; /* may be NULL */
    fldpy_dl_current_stream_fn current_work_stream;
} fldpy_dl_exchange_api;

#endif /* FLDPY_DLPACK1_H */
