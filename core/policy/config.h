/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Policy files (config.c): the schema of a YAML policy file (the platform
 * file config/<platform>.yaml, VLLM_FL_CONFIG's file, fld_policy_load_file(),
 * fld_policy_push_file()) and of VLLM_FL_OP_CONFIG's JSON file. The sources
 * they are and their precedence: policy_sources.h.
 *
 * YAML files are parsed with libyaml against a strict schema: an unknown
 * key, a wrong type, an invalid token, a duplicate key or a document that is
 * not a mapping is FLD_ECONFIG with "file:line:column: ..." and the valid
 * choices. Booleans are YAML booleans (true/false, yes/no, on/off), never the
 * truthiness of a string. The keys are the policy-field table's YAML keys
 * (policy_table.h).
 */
#ifndef FLD_CORE_CONFIG_H
#define FLD_CORE_CONFIG_H

#include "policy.h"

/*
 * Applies a YAML policy file onto p: each key present replaces its field and
 * records "<label>:<line>" as the field's source (label is the path as the
 * user should see it). FLD_ECONFIG with "path:line:column: message" on any
 * error, also when the file cannot be read ("cannot open '<path>':
 * <strerror>"). On error p is unchanged.
 */
int fld__config_apply_file(struct fld_policy *p, const char *path, const char *label);

/*
 * Reads the JSON object op -> token ("a|b" allowed) at path (strict JSON)
 * and makes it p's per-op orders, replacing every order of the lower sources
 * (VLLM_FL_PER_OP, op_backends) as vllm-plugin-FL does. FLD_ECONFIG with
 * "VLLM_FL_OP_CONFIG: ..." naming the file and line; p unchanged on error.
 */
int fld__op_config_apply(struct fld_policy *p, const char *path);

#endif
