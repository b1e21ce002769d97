# SPDX-License-Identifier: Apache-2.0
"""The library's tables read from the source tree, for the tests that hold the
documentation and the code to them: the policy-field table
(core/policy/policy_table.h) and the variable table (core/policy/variables.h)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICY_TABLE = ROOT / "core" / "policy" / "policy_table.h"
VARIABLE_TABLE = ROOT / "core" / "policy" / "variables.h"


def _macro_body(path, macro):
    """The body of `#define macro(X) ...` in path, its continuation lines joined."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^#define " + re.escape(macro) + r"\(X\)((?:.*\\\n)*.*)$", text, re.M)
    assert m, f"{path}: no #define {macro}(X)"
    return m.group(1).replace("\\\n", " ")


def policy_rows(path=POLICY_TABLE):
    """[{id, key, env, yaml, kind}] in row order."""
    body = _macro_body(path, "FLD_POLICY_FIELDS")
    rows = [dict(zip(("id", "key", "env", "yaml", "kind"), m.groups())) for m in re.finditer(
        r'X\(\s*(\w+)\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*(\w+)\s*,', body)]
    assert len(rows) == body.count("X("), f"{path}: a row of FLD_POLICY_FIELDS was not read"
    return rows


def variable_rows(path=VARIABLE_TABLE):
    """[{name, reader, use}] of FLD_VARIABLES, in row order."""
    body = _macro_body(path, "FLD_VARIABLES")
    rows = [dict(zip(("name", "reader", "use"), m.groups())) for m in re.finditer(
        r'X\(\s*"([^"]+)"\s*,\s*(\w+)\s*,\s*(\w+)\s*\)', body)]
    assert len(rows) == body.count("X("), f"{path}: a row of FLD_VARIABLES was not read"
    return rows


def upstream_variables(path=VARIABLE_TABLE):
    """The names of FLD_UPSTREAM_VARIABLES (read by vllm-plugin-FL, not by fldispatch)."""
    body = _macro_body(path, "FLD_UPSTREAM_VARIABLES")
    names = re.findall(r'X\(\s*"([^"]+)"', body)
    assert len(names) == body.count("X("), f"{path}: a row of FLD_UPSTREAM_VARIABLES was not read"
    return names
