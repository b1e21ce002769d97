/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Crash isolation: loading a plugin in a child process (dlopen, descriptor
 * checks, register_builtins into a scratch registry, every availability
 * check) and judging it from outside: ok, unavailable, rejected, crashed (by
 * which signal, at which stage), hung (past a timeout) or exited.
 *
 * Two users: `fldispatch doctor` (tools/cmd_doctor.c), which probes every
 * plugin file and prints the verdicts, and discovery with
 * VLLM_FL_PLUGIN_PROBE=1, which probes each plugin before dlopening it in
 * process, skips the ones that crashed, hung or exited, and remembers the
 * verdicts in a cache keyed by the file's identity (docs/doctor.md).
 *
 * What the tool uses (the probe's result and its functions, marked
 * FLD_TOOL_API: exported for the tool alone) is declared in
 * <fldispatch/internal/tool_api.h>; this header adds what probe.c and
 * probe_gate.c share. Discovery's side of the probe is probe_gate.h.
 */
#ifndef FLD_CORE_PROBE_H
#define FLD_CORE_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include <fldispatch/internal/tool_api.h>

/* Shared by probe.c and probe_gate.c. */
bool fld__probe_state_from_name(const char *s, enum fld_probe_state *out);
/* Splits line at tabs into at most max fields; the last keeps its tabs. */
size_t fld__probe_split(char *line, char **fields, size_t max);
/* True in a probe child, which never probes plugins itself. */
bool fld__probe_in_child(void);

#endif
