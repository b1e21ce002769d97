/* SPDX-License-Identifier: Apache-2.0 */
/* Test helper: a clean fldispatch environment. */
#ifndef FLD_TESTS_UTIL_ENV_H
#define FLD_TESTS_UTIL_ENV_H

#include <stdbool.h>

/*
 * Whether the variable of entry ("NAME=value", or a bare "NAME") steers
 * fldispatch: every VLLM_FL_* (the library's and the plugins'),
 * USE_FLAGGEMS, FLD_TEMPLATE_ENABLE (the template plugin) and every HWLOC_*
 * (what hwloc reports as the machine). The one definition both the clean
 * environment below and the tool runner (tool.h) use.
 */
bool tt_steers_fldispatch(const char *entry);

/*
 * Unsets every variable that steers fldispatch (tt_steers_fldispatch()).
 * Tests then set what they need, so a variable left in the caller's
 * environment cannot change them.
 */
void tt_clear_fld_environment(void);

#endif
