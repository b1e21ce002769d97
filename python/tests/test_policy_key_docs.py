# SPDX-License-Identifier: Apache-2.0
"""The documentation's lists of policy keys are the policy-field table's
(core/policy/policy_table.h): a key, YAML key or variable missing from one of them,
or one that is not a field, fails here. The lists:

- include/fldispatch/fldispatch.h: fld_policy_set()'s keys with their
  variables, and fld_policy_load_file()'s YAML keys;
- docs/configuration.md: the table of policy fields (keys and variables),
  the table of YAML keys, and the order of fld_foreach_config_field();
- docs/user-guide.md: fld_policy_set()'s keys ("Programmatic policy").
(The tables of variables are held to the table by test_variables.py.)
"""

import re

from source_tables import ROOT, policy_rows

ROWS = policy_rows()
KEYS = [r["key"] for r in ROWS]
YAML_KEYS = [r["yaml"] for r in ROWS]
ENVS = [r["env"] for r in ROWS]
HEADER = (ROOT / "include" / "fldispatch" / "fldispatch.h").read_text(encoding="utf-8")
CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
GUIDE = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")
WORD = r"[a-z][a-z_]*"


def comment_before(text, declaration):
    """The block comment right before the declaration's line."""
    end = text.index(declaration)
    start = text.rindex("/*", 0, end)
    return text[start:end]


def section(markdown, title):
    markdown = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)  # code blocks hold no titles
    m = re.search(r"^(#+) " + re.escape(title) + r"\n(.*?)(?=^#{1,3} |\Z)", markdown, re.S | re.M)
    assert m, f"no section '{title}'"
    return m.group(2)


def same(listed, want, where):
    listed, want = list(listed), list(want)
    missing = [k for k in want if k not in listed]
    extra = [k for k in listed if k not in want]
    twice = sorted({k for k in listed if listed.count(k) > 1})
    assert not (missing or extra or twice), (
        f"{where}: missing {missing}, not a policy field {extra}, twice {twice} "
        f"(core/policy/policy_table.h has {want})")


def test_fld_policy_set_keys_in_the_header():
    text = comment_before(HEADER, "FLD_API int fld_policy_set(")
    pairs = re.findall(r"^ \*   (" + WORD + r") .*\[(\w+)\]\s*$", text, re.M)
    same([k for k, _ in pairs], KEYS, "fldispatch.h, fld_policy_set()'s keys")
    for key, env in pairs:
        assert env == ENVS[KEYS.index(key)], f"fldispatch.h: {key} is set by {env}?"


def test_fld_policy_load_file_keys_in_the_header():
    text = comment_before(HEADER, "FLD_API int fld_policy_load_file(")
    m = re.search(r"Keys: (.*?)\(see", text, re.S)
    assert m, "fldispatch.h: fld_policy_load_file() names no keys"
    keys = re.findall(WORD, m.group(1).replace("*", " "))
    same([k for k in keys if k != "and"], YAML_KEYS, "fldispatch.h, fld_policy_load_file()'s keys")


def test_policy_fields_table_in_configuration_md():
    keys, envs = [], []
    for line in section(CONFIGURATION, "Policy fields").splitlines():
        cells = line.split("|")
        if not line.startswith("| `") or len(cells) < 3:
            continue
        keys += [k for k in re.findall(r"`(" + WORD + r")`", cells[1]) if not k.startswith("fld_")]
        envs += re.findall(r"`(\w+)`", cells[2])
    same(keys, dict.fromkeys(YAML_KEYS + KEYS), "configuration.md, the policy fields' keys")
    # VLLM_FL_OP_CONFIG is a path variable that sets the per-op orders too.
    same([e for e in envs if e != "VLLM_FL_OP_CONFIG"], ENVS,
         "configuration.md, the policy fields' variables")


def test_yaml_key_table_in_configuration_md():
    text = section(CONFIGURATION, "YAML policy files")
    table = re.search(r"^\| key \| YAML type \|\n\|---\|---\|\n((?:\|.*\n)+)", text, re.M)
    assert table, "configuration.md: no '| key | YAML type |' table"
    keys = [k for line in table.group(1).splitlines()
            for k in re.findall(r"`(" + WORD + r")`", line.split("|")[1])]
    same(keys, YAML_KEYS, "configuration.md, the YAML keys' table")


def test_config_field_order_in_configuration_md():
    m = re.search(r"one call per field, in the\s+order (.*?),\s+then one `op_backends\.<op>`",
                  CONFIGURATION, re.S)
    assert m, "configuration.md: the order of fld_foreach_config_field() is not given"
    listed = re.findall(r"`(" + WORD + r")`", m.group(1))
    # The report gives the fields in row order, the per-op orders (ORDERS) last.
    want = [r["yaml"] for r in ROWS if r["kind"] != "ORDERS"]
    assert listed == want, f"configuration.md: fld_foreach_config_field() order {listed}, " \
                           f"the table's {want}"


def test_fld_policy_set_keys_in_the_user_guide():
    m = re.search(r"`fld_policy_set\(key, value\)` sets one field .*?\(keys\s+(.*?); the variable",
                  GUIDE, re.S)
    assert m, "user-guide.md: fld_policy_set()'s keys are not listed"
    same(re.findall(r"`(" + WORD + r")`", m.group(1)), KEYS, "user-guide.md, fld_policy_set()'s keys")
