# SPDX-License-Identifier: Apache-2.0
"""fldispatch's variables in vLLM's table: its compile-cache key and its environment check.

vLLM keys its compile cache (and its AOT artifacts) by, among others, every
variable of its table vllm.envs.environment_variables (envs.compile_factors()
hashes each one's value but a few it knows to be irrelevant), and checks
the VLLM_* variables set against the same table. register_variables() adds
fldispatch's own there:

- every VLLM_FL_* variable that may change a compiled graph (which layers the
  plugin replaces and which of them run fldispatch's op in the mode
  (VLLM_FL_OOT_FORCE), which IR ops it serves, the policy and plugins that decide
  what its provider accepts), with its value from the environment: the
  policy fields' variables and the rows of the library's variable table
  (_C.variables(), core/policy/variables.h) whose compile column is GRAPH, and any
  other VLLM_FL_* variable set, but those the table marks NEVER (the
  variables that only observe: counters, trace, IO dump, log level);
- the NEVER rows named VLLM_*, with a getter that gives None whatever their
  value: vLLM then knows them (its environment check warns about any
  VLLM_* name its table lacks, and refuses to start on one under
  --fail-on-environ-validation), and their values stay out of the key, so
  turning the counters on recompiles nothing. fldispatch reads them itself,
  and reports a VLLM_FL_* name it does not know;
- VLLM_FL_FINGERPRINT, which no one sets: its value is fldispatch.vllm_ir's
  fingerprint(), a hash of the library's policy with its sources, the
  plugins, the manifest's content and the layers the OOT switches replace,
  so a platform file or a plugin directory that changes any of them
  changes the key too (setting the variable in the environment changes
  nothing).

The IR provider's uuid, which vLLM hashes for the providers its priority
lists name, carries the same fingerprint.
"""

import os
from collections.abc import Callable

from . import _C, vllm_ir
from .vllm_state import DECIDED

FINGERPRINT = "VLLM_FL_FINGERPRINT"

# Variables that change what the plugin puts in a graph or what its IR
# provider accepts: the variable table's GRAPH rows and the policy's variables.
GRAPH_VARIABLES = tuple(
    [v["name"] for v in _C.variables() if v["compile"] == "GRAPH"]
    + [env.strip() for f in _C.policy_fields() for env in (f.get("env") or "").split(",")
       if env.strip()])

# Variables that only observe or tune timing: never in the key.
NEUTRAL_VARIABLES = frozenset(v["name"] for v in _C.variables() if v["compile"] == "NEVER")


def graph_variables() -> list[str]:
    """The VLLM_FL_* names that enter vLLM's compile-cache key: GRAPH_VARIABLES,
    and any other VLLM_FL_* set in the environment that is not a neutral
    one."""
    names = set(GRAPH_VARIABLES)
    names.update(n for n in os.environ if n.startswith("VLLM_FL_"))
    return sorted(n for n in names if n != FINGERPRINT and n not in NEUTRAL_VARIABLES)


def _env_getter(name: str) -> Callable[[], str | None]:
    return lambda: os.environ.get(name)


def known_variables() -> list[str]:
    """The VLLM_* names of the variables that only observe (the variable
    table's NEVER rows): vLLM's table holds them, valueless."""
    return sorted(n for n in NEUTRAL_VARIABLES if n.startswith("VLLM_"))


def _no_value() -> None:
    return None


def register_variables() -> list[str]:
    """Adds fldispatch's variables and VLLM_FL_FINGERPRINT to vLLM's variable
    table (none where the installed vLLM has no such table): those of the
    compile-cache key with their values, the observing ones valueless.
    Returns the names added."""
    try:
        import vllm.envs as envs

        table = envs.environment_variables
    except (ImportError, AttributeError):
        return []

    added: list[str] = []
    for name in graph_variables():
        if name not in table:
            table[name] = _env_getter(name)
            added.append(name)
    for name in known_variables():
        if name not in table:
            table[name] = _no_value
            added.append(name)
    if FINGERPRINT not in table:
        table[FINGERPRINT] = lambda: vllm_ir.fingerprint(DECIDED.served_by_ir_op)
        added.append(FINGERPRINT)
    return added
