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
/* Loads one file; FLD_OK or FLD_EPLUGIN with the reason. */
int fld__load_plugin_file(const char *path, bool explicit_request);
/* Registers an in-process descriptor (the library's reference kernels, applications). */
int fld__load_plugin_descriptor(const fld_plugin_descriptor *desc, const char *path, void *dl);
/* The search path in force (':'-separated), computed at discovery. */
const char *fld__plugin_search_path(void);
void fld__discovery_shutdown(void);

#endif
