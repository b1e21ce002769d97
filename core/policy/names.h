/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Names checked against what is registered: the op names, vendor names and
 * impl ids a configuration mentions, and the VLLM_FL_* variables of the
 * environment, each reported once with where it came from and the closest
 * known names ("did you mean 'rms_norm'?").
 *
 * A name that matches nothing is a WARNING, or FLD_ECONFIG when the policy
 * is strict. Lists that name operators of other systems (flagos_* name
 * FlagGems operators, oot_* name vLLM layers) are reported only where a name
 * is close to a known one: most of their names are never registered here.
 */
#ifndef FLD_CORE_NAMES_H
#define FLD_CORE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#include <fldispatch/internal/tool_api.h> /* fld__did_you_mean(), exported for the tool */

struct fld_policy;

/*
 * Checks every name p mentions (per-op orders and their tokens, vendor
 * lists, op lists, custom_ops) against the registry. Host lock held, after
 * plugin discovery. FLD_OK, or FLD_ECONFIG for the first unknown name when
 * p->strict (the others are not logged then); FLD_ENOMEM.
 */
int fld__names_check_policy(const struct fld_policy *p);

/*
 * Checks the VLLM_FL_* variables of the environment: one the library, its
 * plugins (VLLM_FL_<PLUGIN>_*, for every plugin found) or vllm-plugin-FL do
 * not read is reported like an unknown name. Host lock held.
 */
int fld__names_check_environment(bool strict);

/* fld__did_you_mean(name, candidates, n, buf, size) is declared in
 * <fldispatch/internal/tool_api.h>: the tool suggests with it too. */

/* fld__did_you_mean() among the registered op names. Host lock held. */
const char *fld__did_you_mean_op(const char *name, char *buf, size_t size);

#endif
