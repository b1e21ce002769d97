/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy of the process assembled from its sources (policy_sources.c: every
 * policy variable of the environment is read there).
 *
 * Precedence, highest first (docs/configuration.md):
 *   VLLM_FL_CONFIG file (complete override: every field from the file or the
 *   built-in default; policy environment variables are ignored, with a
 *   WARNING naming each ignored variable) →
 *   environment variables (each replaces its field) →
 *   platform file config/<platform>.yaml →
 *   built-in defaults.
 * Per-op orders: VLLM_FL_OP_CONFIG > VLLM_FL_PER_OP > YAML op_backends (per op).
 * custom_ops: VLLM_FL_CUSTOM_OPS replaces the YAML custom_ops list.
 */
#ifndef FLD_CORE_POLICY_SOURCES_H
#define FLD_CORE_POLICY_SOURCES_H

#include "platform.h"
#include "policy.h"

/*
 * The environment source (and the fuzzer's entry): applies every policy
 * variable of the environment that is set (each replaces its field), then
 * VLLM_FL_OP_CONFIG, then checks cross-field rules (white- and blacklist
 * both set). FLD_ECONFIG with a message naming the variable; p is then in an
 * unspecified state and must be freed by the caller.
 */
int fld__policy_apply_env(struct fld_policy *p);

/*
 * Builds the policy of the process from all sources for the given platform
 * (its platform file, if any, is plat->config_file; under VLLM_FL_CONFIG the
 * platform file is not read and plat->config_file is emptied, so that no
 * report claims it). *out is a new policy or NULL with FLD_ECONFIG and a
 * message naming the variable or file:line.
 * Reads VLLM_FL_CONFIG and VLLM_FL_OP_CONFIG with secure_getenv.
 */
int fld__policy_build(struct fld_platform *plat, struct fld_policy **out);

#endif
