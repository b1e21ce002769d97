/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Files written whole or not at all, never through a planted link: the
 * stats JSON (VLLM_FL_STATS_FILE), the trace (VLLM_FL_TRACE) and the
 * manifests of `fldispatch freeze`. The functions are declared in
 * <fldispatch/internal/tool_api.h> (the tool writes its manifests with them).
 */
#ifndef FLD_CORE_ATOMIC_FILE_H
#define FLD_CORE_ATOMIC_FILE_H

#include <fldispatch/internal/tool_api.h>

#endif
