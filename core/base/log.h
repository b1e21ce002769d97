/* SPDX-License-Identifier: Apache-2.0 */
/* Logging: level, stderr or callback sink, VLLM_FL_LOG_LEVEL / VLLM_FL_DISPATCH_DEBUG. */
#ifndef FLD_CORE_LOG_H
#define FLD_CORE_LOG_H

#include <stdbool.h>

void fld__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True when VLLM_FL_DISPATCH_DEBUG asks for per-call dispatch lines. */
bool fld__dispatch_debug(void);

/*
 * Reads VLLM_FL_LOG_LEVEL and VLLM_FL_DISPATCH_DEBUG into a pending state;
 * FLD_ECONFIG naming the variable on an invalid value (nothing applied).
 * fld__log_commit_env() then applies what was read, unless the level was set
 * programmatically since the last reload.
 */
struct fld_log_env {
    int level;
    bool level_set;
    bool dispatch_debug;
};
int fld__log_read_env(struct fld_log_env *out);
void fld__log_commit_env(const struct fld_log_env *env);
/* Frees replaced log sinks (fld_shutdown; no other thread may be logging). */
void fld__log_shutdown(void);
/* Forgets a programmatic level (fld_reload puts the environment back in force). */
void fld__log_reset_override(void);

#endif
