# SPDX-License-Identifier: Apache-2.0
"""The library's tables read from the source tree, for the tests that hold the
documentation and the code to them: the policy-field table
(core/policy/policy_table.h), the variable table
(core/policy/variables.h), the device table (core/base/devices.h), the kinds (include/fldispatch/plugin.h) and the
catalog (include/fldispatch/catalog.def)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POLICY_TABLE = ROOT / "core" / "policy" / "policy_table.h"
VARIABLE_TABLE = ROOT / "core" / "policy" / "variables.h"
DEVICE_TABLE = ROOT / "core" / "base" / "devices.h"
PLUGIN_HEADER = ROOT / "include" / "fldispatch" / "plugin.h"
CATALOG = ROOT / "include" / "fldispatch" / "catalog.def"


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
    """[{name, reader, use, compile}] of FLD_VARIABLES, in row order."""
    body = _macro_body(path, "FLD_VARIABLES")
    rows = [dict(zip(("name", "reader", "use", "compile"), m.groups())) for m in re.finditer(
        r'X\(\s*"([^"]+)"\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*\)', body)]
    assert len(rows) == body.count("X("), f"{path}: a row of FLD_VARIABLES was not read"
    return rows


def upstream_variables(path=VARIABLE_TABLE):
    """The names of FLD_UPSTREAM_VARIABLES (read by vllm-plugin-FL, not by fldispatch)."""
    body = _macro_body(path, "FLD_UPSTREAM_VARIABLES")
    names = re.findall(r'X\(\s*"([^"]+)"', body)
    assert len(names) == body.count("X("), f"{path}: a row of FLD_UPSTREAM_VARIABLES was not read"
    return names


def _c_string(token):
    """None for NULL, else the text of a C string literal."""
    return None if token == "NULL" else token.strip('"')


def device_rows(path=DEVICE_TABLE):
    """[{name, alias, platform, vendor, torch, torch_build}] of FLD_DEVICE_TABLE, in row order."""
    body = _macro_body(path, "FLD_DEVICE_TABLE")
    keys = ("name", "alias", "platform", "vendor", "torch", "torch_build")
    literal = r'\s*("[^"]*"|NULL)\s*'
    rows = [dict(zip(keys, map(_c_string, m.groups()))) for m in re.finditer(
        r"X\(\s*\w+\s*,\s*\w+\s*," + ",".join([literal] * len(keys)) + r"\)", body)]
    assert len(rows) == body.count("X("), f"{path}: a row of FLD_DEVICE_TABLE was not read"
    return rows


def kinds(path=PLUGIN_HEADER):
    """{KIND: (code, default priority)} of the FLD_KIND_* and FLD_PRIORITY_* enumerators."""
    text = path.read_text(encoding="utf-8")
    codes = dict(re.findall(r"\bFLD_KIND_(\w+)\s*=\s*(\d+)", text))
    priorities = dict(re.findall(r"\bFLD_PRIORITY_(\w+)\s*=\s*(\d+)", text))
    assert codes and set(codes) == set(priorities), f"{path}: FLD_KIND_* and FLD_PRIORITY_* differ"
    return {kind: (int(codes[kind]), int(priorities[kind])) for kind in codes}


def catalog_rows(path=CATALOG):
    """[(op, family)] of the catalog's FLD_CATALOG_OP rows, in row order."""
    text = path.read_text(encoding="utf-8")
    rows = re.findall(r"^FLD_CATALOG_OP\(\s*\w+\s*,\s*(\w+)\s*,\s*(\w+)\s*,", text, re.M)
    assert len(rows) == len(re.findall(r"^FLD_CATALOG_OP\(", text, re.M)), \
        f"{path}: a row of the catalog was not read"
    return rows
