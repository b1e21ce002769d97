/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device copies of the tool's CPU tensors (tensors.h), for verify and
 * bench on devices other than the CPU, through the library's device memory
 * API (fld_device_alloc/copy/free, served by the device plugin's hooks).
 *
 * A device tensor has the CPU tensor's shape, strides, byte_offset (0) and
 * storage size, padding included. verify asks for guard regions on both
 * sides of the storage: they hold a pattern, are not part of the tensor, and
 * must be intact after a call (a kernel that writes past either end of a
 * tensor fails instead of corrupting a neighbour unseen).
 */
#ifndef FLD_TOOLS_DEVICE_TENSORS_H
#define FLD_TOOLS_DEVICE_TENSORS_H

#include <stdbool.h>
#include <stddef.h>

#include "tensors.h"

/* Guard bytes verify puts on each side: a multiple of every alignment a kernel may assume. */
#define DEV_GUARD_BYTES 256

struct dev_tensor {
    DLTensor t; /* the device view: pass &dt.t to the library */
    int64_t shape[TOOL_MAX_DIMS];
    int64_t strides[TOOL_MAX_DIMS];
    DLDevice device;
    void *base;   /* the allocation: guard, storage, guard; NULL when empty */
    size_t bytes; /* storage bytes (the CPU tensor's) */
    size_t guard; /* bytes on each side */
};

/*
 * Allocates a device tensor laid out as src (with guard bytes on each side,
 * 0 for none) and copies src's storage, padding included, into it. An empty
 * tensor with no guard gets a minimal allocation so its data pointer is
 * valid. FLD_OK, or the library's status with fld_last_error() set (d left
 * empty).
 */
int dev_tensor_upload(struct dev_tensor *d, DLDevice device, const struct tool_tensor *src,
                      size_t guard);

/* Copies the device storage back into dst (same layout); FLD_OK or the library's status. */
int dev_tensor_download(const struct dev_tensor *d, struct tool_tensor *dst);

/*
 * Whether both guard regions still hold the pattern: *intact false and
 * *where "before"/"after" when not. FLD_OK, or the library's status of the
 * copy that reads them.
 */
int dev_tensor_check_guards(const struct dev_tensor *d, bool *intact, const char **where);

/* Frees the device memory (idempotent). */
void dev_tensor_free(struct dev_tensor *d);

/* The name the provider of a device type goes by, or NULL and the reason in fld_last_error(). */
const char *dev_provider(int device_type);

#endif
