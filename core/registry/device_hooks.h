/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The device hooks' provider of a device type, shared by device memory
 * (device_memory.c) and device graphs (device_graph.c): the first loaded
 * plugin, in load order, whose hooks for it are available.
 */
#ifndef FLD_CORE_DEVICE_HOOKS_H
#define FLD_CORE_DEVICE_HOOKS_H

#include <fldispatch/plugin.h>

/* What serves one call: the hook record (NULL for the CPU) and its plugin. */
struct fld__hook_provider {
    const fld_device_hooks *hooks;
    const char *plugin;
};

/*
 * Finds the provider of device_type for the public function fn, which needs
 * service of it ("device memory"). On failure the message names every
 * plugin that registered hooks for it and why each cannot serve.
 */
int fld__device_provider_find(const char *fn, const char *service, int device_type,
                              struct fld__hook_provider *out);
/* Runs a hook's result through: a failing hook without a message gets one. */
int fld__device_hook_result(int rc, const char *fn, const struct fld__hook_provider *p);
/* FLD_EUNSUPPORTED: the provider has no hook of that name. */
int fld__device_hook_missing(const char *fn, const struct fld__hook_provider *p, const char *hook);

#endif
