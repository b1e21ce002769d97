/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How this copy of the library is linked, and what that means for plugins.
 *
 * Plugins link against the shared library (libfldispatch.so.N) and call back
 * into it (fld_registry_register, fld_log, ...). In a program that carries
 * libfldispatch.a instead, those calls reach this copy only when the program
 * exports the library's functions (-rdynamic): otherwise the loader maps a
 * second copy for the plugin, whose registry, log and error state are not
 * this one's. Discovery asks here before it maps a plugin.
 */
#ifndef FLD_CORE_LINKAGE_H
#define FLD_CORE_LINKAGE_H

#include <stdbool.h>
#include <stddef.h>

/* True when this code is the shared library libfldispatch.so.N, false when
 * it is a copy of libfldispatch.a inside a program or another object. */
bool fld__linkage_shared(void);

/* The file this copy of the library was loaded from, "" when unknown. */
void fld__linkage_object(char *out, size_t size);

/* Whether a plugin's calls into the library reach this copy; when not, why
 * (naming the file and the fix) in why. */
bool fld__linkage_plugins_reach_here(char *why, size_t size);

#endif
