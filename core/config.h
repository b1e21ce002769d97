/*
 * Configuration files (config.c) and the assembly of the policy from its
 * layers (layers.c: every policy variable of the environment is read there).
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
 *
 * YAML files are parsed with libyaml against a strict schema: an unknown
 * key, a wrong type, an invalid token, a duplicate key or a document that is
 * not a mapping is FLD_ECONFIG with "file:line:column: ..." and the valid
 * choices. Booleans are YAML booleans (true/false, yes/no, on/off), never the
 * truthiness of a string.
 */
#ifndef FLD_CORE_CONFIG_H
#define FLD_CORE_CONFIG_H

#include "platform.h"
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
 * The environment layer (layers.c, and the fuzzer's entry): applies every
 * policy variable of the environment that is set (each replaces its field),
 * then VLLM_FL_OP_CONFIG, then checks cross-field rules (white- and
 * blacklist both set). FLD_ECONFIG with a message naming the variable; p is
 * then in an unspecified state and must be freed by the caller.
 */
int fld__policy_apply_env(struct fld_policy *p);

/*
 * Builds the policy of the process from all layers for the given platform
 * (its platform file, if any, is plat->config_file; under VLLM_FL_CONFIG the
 * platform file is not read and plat->config_file is emptied, so that no
 * report claims it). *out is a new policy or NULL with FLD_ECONFIG and a
 * message naming the variable or file:line.
 * Reads VLLM_FL_CONFIG and VLLM_FL_OP_CONFIG with secure_getenv.
 */
int fld__policy_build(struct fld_platform *plat, struct fld_policy **out);

#endif
