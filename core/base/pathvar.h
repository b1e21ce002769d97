/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Path variables (VLLM_FL_PLUGIN_DIR, VLLM_FL_PLUGIN_MODULES, VLLM_FL_CONFIG,
 * VLLM_FL_MANIFEST, VLLM_FL_OP_CONFIG, VLLM_FL_STATS_FILE, VLLM_FL_TRACE):
 * the one reader, so that every one follows the same two rules.
 *
 *   - Read with secure_getenv(): in a privileged (setuid/setgid) process a
 *     path variable is ignored, with one WARNING naming it.
 *   - A blank value (empty or only white space) reads as unset, as for every
 *     other variable: `VLLM_FL_PLUGIN_DIR=" "` searches the default
 *     directories, it does not replace them with a relative "directory".
 */
#ifndef FLD_CORE_PATHVAR_H
#define FLD_CORE_PATHVAR_H

/* The value of the path variable name, or NULL when it is unset, blank or ignored. */
const char *fld__path_variable(const char *name);

#endif
