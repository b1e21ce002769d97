/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Device memory for tools (fld_device_*): the host serves the CPU itself and
 * forwards every other device type to the device hooks of the first loaded
 * plugin, in load order, whose hooks for it are available (found here for
 * device graphs too: device_hooks.h). A hook runs marked (reentry.h): a
 * call from it back into the library is refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "device_hooks.h"
#include "devices.h"
#include "error.h"
#include "inflight.h"
#include "host.h"
#include "ops.h"
#include "registry.h"

static const char *copy_kind_name(fld_copy_kind kind)
{
    switch (kind) {
    case FLD_COPY_HOST_TO_DEVICE:
        return "CPU memory to device";
    case FLD_COPY_DEVICE_TO_HOST:
        return "device to CPU memory";
    case FLD_COPY_DEVICE_TO_DEVICE:
        return "device to device";
    }
    return "?";
}

int fld__device_provider_find(const char *fn, const char *service, int device_type,
                              struct fld__hook_provider *out)
{
    int rc = fld__ensure_init_from(fn);
    if (rc)
        return rc;
    int dev = fld__device_index(device_type);
    if (dev < 0)
        return fld__fail(FLD_EINVAL, "%s: unknown device type %d (valid: %s)", fn, device_type,
                         fld__device_text(FLD_DEVICE_TEXT_CODES));
    if (dev == FLD_DEV_CPU) {
        *out = (struct fld__hook_provider){NULL, "(built-in)"};
        return FLD_OK;
    }
    char why[768] = "";
    size_t len = 0;
    unsigned seen = 0;
    fld__lock();
    for (struct fld_plugin_rec *p = fld__plugins_first(); p; p = p->next) {
        struct fld_hook_rec *h = p->hooks[dev];
        if (!h || p->status != FLD_PLUGIN_LOADED)
            continue;
        const char *reason;
        if (fld__hooks_available(h, p->name, &reason)) {
            *out = (struct fld__hook_provider){&h->hooks, p->name};
            fld__unlock();
            return FLD_OK;
        }
        seen++;
        if (len < sizeof why)
            len += (size_t)snprintf(why + len, sizeof why - len, "%splugin '%s' (%s): %s",
                                    seen > 1 ? "; " : "", p->name, p->path, reason);
    }
    fld__unlock();
    const char *name = fld_device_name(device_type);
    if (!seen)
        return fld__fail(FLD_ENOTFOUND,
                         "%s: no loaded plugin provides %s for %s (run 'fldispatch list' to see "
                         "which plugins loaded)",
                         fn, service, name);
    return fld__fail(FLD_EUNAVAILABLE, "%s: %s is unavailable: %s", fn, name, why);
}

int fld__device_hook_result(int rc, const char *fn, const struct fld__hook_provider *p)
{
    if (rc == FLD_OK)
        return FLD_OK;
    char msg[512];
    fld__error_copy(msg, sizeof msg);
    if (!msg[0])
        return fld__fail(rc < 0 ? rc : FLD_EIMPL, "%s: plugin '%s' failed (%s)", fn, p->plugin,
                         fld_strerror(rc < 0 ? rc : FLD_EIMPL));
    fld__error_prefix("%s: plugin '%s'", fn, p->plugin);
    return rc < 0 ? rc : FLD_EIMPL;
}

int fld__device_hook_missing(const char *fn, const struct fld__hook_provider *p, const char *hook)
{
    return fld__fail(FLD_EUNSUPPORTED, "%s: plugin '%s' has no '%s' device hook", fn, p->plugin,
                     hook);
}

static int check_device_id(const char *fn, DLDevice device)
{
    if (device.device_id < 0)
        return fld__fail(FLD_EINVAL, "%s: device_id %d is negative", fn, device.device_id);
    return FLD_OK;
}

int fld_device_alloc(DLDevice device, size_t bytes, void **ptr)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_alloc";
    if (!ptr)
        return fld__fail(FLD_EINVAL, "%s: argument 'ptr' is NULL", fn);
    *ptr = NULL;
    if (bytes == 0)
        return fld__fail(FLD_EINVAL, "%s: bytes is 0", fn);
    struct fld__hook_provider p;
    int rc = check_device_id(fn, device);
    if (rc || (rc = fld__device_provider_find(fn, "device memory", device.device_type, &p)))
        return rc;
    if (!p.hooks) {
        /* 64-byte alignment: the widest vector loads of any CPU kernel. */
        size_t rounded = (bytes + 63) & ~(size_t)63;
        if (rounded < bytes || posix_memalign(ptr, 64, rounded)) {
            *ptr = NULL;
            return fld__fail(FLD_ENOMEM, "%s: out of CPU memory for %zu bytes", fn, bytes);
        }
        return FLD_OK;
    }
    if (!p.hooks->alloc)
        return fld__device_hook_missing(fn, &p, "alloc");
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "alloc");
    rc = p.hooks->alloc(device.device_id, bytes, ptr);
    fld__callout_leave(&hook);
    if (rc == FLD_OK && !*ptr)
        return fld__fail(FLD_EIMPL, "%s: plugin '%s' returned FLD_OK and a NULL pointer", fn,
                         p.plugin);
    if (rc != FLD_OK)
        *ptr = NULL;
    return fld__device_hook_result(rc, fn, &p);
}

int fld_device_free(DLDevice device, void *ptr)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_free";
    struct fld__hook_provider p;
    int rc = check_device_id(fn, device);
    if (rc || (rc = fld__device_provider_find(fn, "device memory", device.device_type, &p)))
        return rc;
    if (!ptr)
        return FLD_OK;
    if (!p.hooks) {
        free(ptr);
        return FLD_OK;
    }
    if (!p.hooks->free)
        return fld__device_hook_missing(fn, &p, "free");
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "free");
    rc = p.hooks->free(device.device_id, ptr);
    fld__callout_leave(&hook);
    return fld__device_hook_result(rc, fn, &p);
}

int fld_device_copy(DLDevice device, void *dst, const void *src, size_t bytes, fld_copy_kind kind)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_copy";
    if ((unsigned)kind > FLD_COPY_DEVICE_TO_DEVICE)
        return fld__fail(FLD_EINVAL,
                         "%s: unknown copy kind %d (valid: 0 FLD_COPY_HOST_TO_DEVICE, 1 "
                         "FLD_COPY_DEVICE_TO_HOST, 2 FLD_COPY_DEVICE_TO_DEVICE)",
                         fn, (int)kind);
    if (bytes && (!dst || !src))
        return fld__fail(FLD_EINVAL, "%s: argument '%s' is NULL (%s, %zu bytes)", fn,
                         dst ? "src" : "dst", copy_kind_name(kind), bytes);
    struct fld__hook_provider p;
    int rc = check_device_id(fn, device);
    if (rc || (rc = fld__device_provider_find(fn, "device memory", device.device_type, &p)))
        return rc;
    if (bytes == 0)
        return FLD_OK;
    if (!p.hooks) {
        memmove(dst, src, bytes);
        return FLD_OK;
    }
    if (!p.hooks->copy)
        return fld__device_hook_missing(fn, &p, "copy");
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "copy");
    rc = p.hooks->copy(device.device_id, dst, src, bytes, kind);
    fld__callout_leave(&hook);
    return fld__device_hook_result(rc, fn, &p);
}

int fld_device_synchronize(DLDevice device)
{
    FLD_CALL_SCOPE();
    static const char fn[] = "fld_device_synchronize";
    struct fld__hook_provider p;
    int rc = check_device_id(fn, device);
    if (rc || (rc = fld__device_provider_find(fn, "device memory", device.device_type, &p)))
        return rc;
    if (!p.hooks)
        return FLD_OK;
    if (!p.hooks->synchronize)
        return fld__device_hook_missing(fn, &p, "synchronize");
    fld_set_error("%s", "");
    struct fld_callout hook;
    fld__callout_enter(&hook, FLD_CALLOUT_PLUGIN_HOOK, p.plugin, "synchronize");
    rc = p.hooks->synchronize(device.device_id);
    fld__callout_leave(&hook);
    return fld__device_hook_result(rc, fn, &p);
}

int fld_device_provider(int device_type, const char **plugin)
{
    FLD_CALL_SCOPE();
    if (!plugin)
        return fld__fail(FLD_EINVAL, "fld_device_provider: argument 'plugin' is NULL");
    *plugin = NULL;
    struct fld__hook_provider p;
    int rc = fld__device_provider_find("fld_device_provider", "device memory", device_type, &p);
    if (rc == FLD_OK)
        *plugin = p.plugin;
    return rc;
}
