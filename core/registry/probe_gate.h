/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Discovery's side of the crash-isolating probe (probe_gate.c): its
 * configuration (VLLM_FL_PLUGIN_PROBE, VLLM_FL_PLUGIN_PROBE_TIMEOUT), the
 * on-disk verdict cache and the gate each plugin file passes before it is
 * dlopened in process. Host lock held; not exported.
 */
#ifndef FLD_CORE_PROBE_GATE_H
#define FLD_CORE_PROBE_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* One discovery pass: reads VLLM_FL_PLUGIN_PROBE* and the cache once, writes
 * the cache at the end if a probe added to it. */
void fld__probe_session_begin(void);
void fld__probe_session_end(void);

/*
 * Whether the plugin file at path (already judged secure; st its stat) may be
 * dlopened in process: true when probing is off, the plugin probed (or was
 * remembered) as loadable, or the probe could not run. false when it crashed,
 * hung or exited, with the reason in why.
 */
bool fld__probe_gate(const char *path, const struct stat *st, char *why, size_t size);

#endif
