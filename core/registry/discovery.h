/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Plugin discovery and loading: the search path (VLLM_FL_PLUGIN_DIR, or the
 * library-relative and compiled-in directories), VLLM_FL_PLUGIN_MODULES,
 * the order of the checks on each file (the checks themselves, shared with
 * the probe, are plugin_file.h), dlopen, and registration. Host lock held.
 */
#ifndef FLD_CORE_DISCOVERY_H
#define FLD_CORE_DISCOVERY_H

#include <fldispatch/plugin.h>

/* Loads every plugin of the search path and of VLLM_FL_PLUGIN_MODULES not loaded yet. */
void fld__discover_plugins(void);
/* Registers an in-process descriptor (the library's reference kernels, applications). */
int fld__load_plugin_descriptor(const fld_plugin_descriptor *desc, const char *path, void *dl);
void fld__discovery_shutdown(void);

#endif
