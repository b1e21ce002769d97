/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device copies of the tool's tensors in CPU memory (see device_tensors.h).
 * Every transfer goes through fld_device_copy(); copies to and from the
 * device have finished when it returns, so the CPU buffers may be reused at
 * once.
 */
#include "device_tensors.h"

#include <fldispatch/plugin.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Byte i of the guard pattern: not a plausible float, and not a constant byte a memset could write.
 */
static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xa5u ^ (unsigned)(i * 29u));
}

static void fill_guard(unsigned char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = guard_byte(i);
}

int dev_tensor_upload(struct dev_tensor *d, DLDevice device, const struct tool_tensor *src,
                      size_t guard)
{
    memset(d, 0, sizeof *d);
    const size_t storage = src->bytes;
    size_t total = storage + 2 * guard;
    if (total == 0)
        total = 64; /* a valid pointer for an empty tensor */
    void *base = NULL;
    int rc = fld_device_alloc(device, total, &base);
    if (rc != FLD_OK)
        return rc;
    unsigned char *pattern = NULL;
    if (guard) {
        pattern = malloc(guard);
        if (!pattern) {
            fld_device_free(device, base);
            fld_set_error("out of CPU memory for a %zu-byte guard pattern", guard);
            return FLD_ENOMEM;
        }
        fill_guard(pattern, guard);
        rc = fld_device_copy(device, base, pattern, guard, FLD_COPY_HOST_TO_DEVICE);
        if (rc == FLD_OK)
            rc = fld_device_copy(device, (char *)base + guard + storage, pattern, guard,
                                 FLD_COPY_HOST_TO_DEVICE);
        free(pattern);
    }
    if (rc == FLD_OK && storage)
        rc = fld_device_copy(device, (char *)base + guard, src->alloc, storage,
                             FLD_COPY_HOST_TO_DEVICE);
    if (rc != FLD_OK) {
        fld_device_free(device, base);
        return rc;
    }
    d->base = base;
    d->bytes = storage;
    d->guard = guard;
    d->device = device;
    d->t = src->t;
    memcpy(d->shape, src->shape, sizeof d->shape);
    memcpy(d->strides, src->strides, sizeof d->strides);
    d->t.shape = d->shape;
    d->t.strides = d->strides;
    d->t.device = device;
    d->t.data = (char *)base + guard;
    return FLD_OK;
}

int dev_tensor_download(const struct dev_tensor *d, struct tool_tensor *dst)
{
    size_t n = d->bytes < dst->bytes ? d->bytes : dst->bytes;
    if (!d->base || n == 0)
        return FLD_OK;
    return fld_device_copy(d->device, dst->alloc, (const char *)d->base + d->guard, n,
                           FLD_COPY_DEVICE_TO_HOST);
}

int dev_tensor_check_guards(const struct dev_tensor *d, bool *intact, const char **where)
{
    *intact = true;
    *where = NULL;
    if (!d->base || d->guard == 0)
        return FLD_OK;
    unsigned char *buf = malloc(d->guard);
    if (!buf) {
        fld_set_error("out of CPU memory reading %zu guard bytes", d->guard);
        return FLD_ENOMEM;
    }
    int rc = FLD_OK;
    for (int side = 0; side < 2 && rc == FLD_OK && *intact; side++) {
        const char *src = (const char *)d->base + (side ? d->guard + d->bytes : 0);
        rc = fld_device_copy(d->device, buf, src, d->guard, FLD_COPY_DEVICE_TO_HOST);
        for (size_t i = 0; rc == FLD_OK && i < d->guard; i++)
            if (buf[i] != guard_byte(i)) {
                *intact = false;
                *where = side ? "after" : "before";
                break;
            }
    }
    free(buf);
    return rc;
}

void dev_tensor_free(struct dev_tensor *d)
{
    if (d->base)
        fld_device_free(d->device, d->base);
    memset(d, 0, sizeof *d);
}

const char *dev_provider(int device_type)
{
    const char *plugin = NULL;
    if (fld_device_provider(device_type, &plugin) != FLD_OK)
        return NULL;
    return plugin;
}
