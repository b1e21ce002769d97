/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host-side glue shared by the GPU plugins (cuda_plugin.c, rocm's
 * rocm_plugin.c, the test fixture tests/gpuplug/fakecuda.c): given the
 * device code's table (gpu_api.h) it decides availability, registers
 * vendor.<v> and reference.<v> for every compute op, vendor.<v>
 * attention_backend and the device hooks, and turns validated catalog
 * arguments into gpu_api.h calls on the current stream.
 *
 * gpu_plugin.c is linked into each plugin's own shared object, so its
 * state (one plugin per object) is plain static data. The files of
 * plugins/shared/gpu/ are shared by both plugins; gpu.mk says how they are
 * built.
 */
#ifndef FLD_PLUGINS_GPU_PLUGIN_H
#define FLD_PLUGINS_GPU_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include <fldispatch/plugin.h>

#include "gpu_api.h"

struct fld__gpu_plugin {
    /* The device code, or NULL when it could not be loaded: every impl and
     * the hooks are then unavailable with load_error as the reason. */
    const struct fld__gpu_api *api;
    const char *load_error;
    /*
     * Optional, with api NULL: opens the device code on first use (the first
     * availability question), not at registration, so that a process that
     * only initialises the library does not pay for loading a runtime it
     * never uses. Returns the table, or NULL with load_error filled.
     * load_note is shown in the detail line meanwhile.
     */
    const struct fld__gpu_api *(*load)(void);
    const char *load_note;
    const char *vendor; /* "cuda", "rocm": impl ids vendor.<v> and reference.<v> */
    int device_type;    /* FLD_DEVICE_CUDA, FLD_DEVICE_ROCM */
    uint32_t device_mask;
    /* attention_backend answers: standard, MLA, sparse MLA. */
    const char *attn_name, *attn_mla_name, *attn_sparse_name;
    /*
     * Optional: the reason text when api->device_count() failed with code
     * (e.g. telling a missing driver from an old one). NULL, or writing
     * nothing, gives "<runtime> runtime: <error_string(code)>".
     */
    void (*explain)(int code, char *buf, size_t size);
    /*
     * Optional: writes a runtime or driver version number as people read it
     * (CUDA: 12020 -> "12.2"). NULL prints the number.
     */
    void (*version_text)(int version, char *buf, size_t size);
    /* Optional: how to rebuild for more architectures, appended to the
     * reason when no device can run the built code. */
    const char *rebuild_hint;
    /* Optional: a note on the runtime the plugin carries for the detail
     * line (CUDA: the oldest driver it runs on), or NULL. */
    const char *(*runtime_note)(int runtime_version);
};

/*
 * Registers everything for p from register_builtins. p's strings must be
 * static; the record is copied. Always registers (an unavailable device
 * makes the plugin UNAVAILABLE, not rejected); returns the registry's status.
 */
int fld__gpu_plugin_register(fld_registry *reg, const struct fld__gpu_plugin *p);

#endif
