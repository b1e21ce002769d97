/* Test helper: a clean fldispatch environment. */
#ifndef FLD_TESTS_UTIL_ENV_H
#define FLD_TESTS_UTIL_ENV_H

/*
 * Unsets every variable that steers fldispatch: all VLLM_FL_*, USE_FLAGGEMS,
 * and hwloc's HWLOC_XMLFILE / HWLOC_FORCE_XMLFILE. Tests then set what they
 * need, so a variable left in the caller's environment cannot change them.
 */
void tt_clear_fld_environment(void);

#endif
