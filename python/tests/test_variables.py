# SPDX-License-Identifier: Apache-2.0
"""Every environment variable fldispatch reads is in one table, and the
documentation lists that table.

The table is core/policy/variables.h (FLD_VARIABLES) joined with the policy fields'
variables (core/policy/policy_table.h); the library's unknown-variable check
(core/policy/names.c) is built from the same rows. This test reads the sources of
the library, the plugins, the tool and the Python package (not tests/ nor
bench/) for the variables they read:

- C: a string literal "VLLM_FL_...", "FLD_..." or "FLDISPATCH_..." in a file
  that calls getenv(), secure_getenv() or fld__path_variable(), or the value
  of a #define whose name is passed to one of them;
- Python: such a literal in a file that uses os.environ or os.getenv(), or
  the value of a module constant passed to os.environ.get().

A name read and not in the table fails, and so does a row that nothing in
its reader's directory reads. docs/configuration.md must list every row and
policy variable, and nothing else, in its tables; the user guide's table of
environment variables the library's own and the policy's.
"""

import re

import pytest

from source_tables import ROOT, policy_rows, upstream_variables, variable_rows

# Where each reader of the table reads (a file or a directory, from ROOT).
READER_PLACES = {
    "LIBRARY": "core/",
    "CPU": "plugins/cpu/",
    "TEMPLATE": "plugins/template/",
    "TOOL": "tools/",
    "PYTHON": "python/fldispatch/",
    "BUILD": "python/setup.py",
}
SOURCE_PLACES = ("core", "plugins", "tools", "include", "python/src", "python/native",
                 "python/fldispatch", "python/setup.py")
C_SUFFIXES = {".c", ".h", ".cpp", ".cc", ".cu", ".cuh", ".hip"}
# The tables themselves name every variable without reading any.
TABLE_FILES = {"core/policy/variables.h", "core/policy/policy_table.h"}
# Names that appear where variables are read but are not read from the environment.
NOT_READ = {
    # a key fldispatch adds to vLLM's own variable table; its value is computed
    # (python/fldispatch/vllm_compile.py), never taken from the environment
    "VLLM_FL_FINGERPRINT",
}

NAME = r"(?:VLLM_FL|FLDISPATCH|FLD)_[A-Z0-9_]*[A-Z0-9]"
LITERAL = re.compile(r"""["'](""" + NAME + r""")["']""")
C_READER = re.compile(r"\b(?:secure_getenv|getenv|fld__path_variable)\s*\(\s*(\w*)")
PY_READER = re.compile(r"\bos\.environ\b|\benviron\.get\b|\bos\.getenv\b|\b_os\.environ\b")
C_CONSTANT = re.compile(r'^\s*#\s*define\s+(\w+)\s+"(' + NAME + r')"', re.M)
PY_CONSTANT = re.compile(r'^(\w+)\s*=\s*["\'](' + NAME + r')["\']', re.M)
PY_GET = re.compile(r"environ\.get\(\s*(\w+)|getenv\(\s*(\w+)|environ\[\s*(\w+)\s*\]")


def source_files(root):
    for place in SOURCE_PLACES:
        path = root / place
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in found:
            if f.is_file() and (f.suffix in C_SUFFIXES or f.suffix == ".py"):
                yield f


def reads(root=ROOT):
    """{name: {relative path of a file that reads it}} over the sources under root."""
    texts = {}
    for f in source_files(root):
        rel = f.relative_to(root).as_posix()
        if rel not in TABLE_FILES:
            texts[rel] = f.read_text(encoding="utf-8", errors="replace")
    # Constants passed to a reader by name: getenv(ENV_THREADS), os.environ.get(PLUGIN_MODULES_ENV).
    passed: set[str] = set()
    for rel, text in texts.items():
        if rel.endswith(".py"):
            passed.update(n for m in PY_GET.finditer(text) for n in m.groups() if n)
        else:
            passed.update(m.group(1) for m in C_READER.finditer(text) if m.group(1))
    found: dict[str, set[str]] = {}
    for rel, text in texts.items():
        python = rel.endswith(".py")
        if (PY_READER if python else C_READER).search(text):
            names = LITERAL.findall(text)
        else:
            names = []
        for m in (PY_CONSTANT if python else C_CONSTANT).finditer(text):
            if m.group(1) in passed:
                names.append(m.group(2))
        for name in names:
            found.setdefault(name, set()).add(rel)
    return found


READS = reads()
ROWS = variable_rows()
TABLE = {r["name"]: r for r in ROWS}
POLICY = [r["env"] for r in policy_rows()]
UPSTREAM = upstream_variables()


def test_the_scanner_finds_reads(tmp_path):
    """The scanner on a small tree: what counts as a read and what does not."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "a.c").write_text('x = getenv("VLLM_FL_A"); y = "VLLM_FL_B";\n')
    (tmp_path / "core" / "b.c").write_text('puts("VLLM_FL_C"); /* no reader here */\n')
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "c.h").write_text('#define ENV_D "FLD_D"\n#define ENV_E "FLD_E"\n')
    (tmp_path / "tools" / "c.c").write_text("v = secure_getenv(ENV_D);\n")
    (tmp_path / "python" / "fldispatch").mkdir(parents=True)
    (tmp_path / "python" / "fldispatch" / "m.py").write_text(
        'import os\nK = "FLDISPATCH_F"\nv = os.environ.get(K)\nw = "VLLM_FL_G"\n')
    (tmp_path / "python" / "fldispatch" / "n.py").write_text('NAME = "VLLM_FL_H"\n')
    assert sorted(reads(tmp_path)) == ["FLDISPATCH_F", "FLD_D", "VLLM_FL_A", "VLLM_FL_B",
                                       "VLLM_FL_G"]


def test_every_variable_read_is_in_the_table():
    known = set(TABLE) | set(POLICY) | set(UPSTREAM) | NOT_READ
    unknown = {name: sorted(files) for name, files in READS.items() if name not in known}
    assert not unknown, (f"read but not in core/policy/variables.h (FLD_VARIABLES) nor the policy "
                         f"table: {unknown}")


def test_every_row_is_read_where_the_table_says():
    for row in ROWS:
        place = READER_PLACES.get(row["reader"])
        assert place, f"core/policy/variables.h: {row['name']}: unknown reader {row['reader']}"
        files = READS.get(row["name"], set())
        assert any(f == place or f.startswith(place) for f in files), (
            f"core/policy/variables.h lists {row['name']} as read by {row['reader']} ({place}), "
            f"but nothing there reads it (read in: {sorted(files) or 'nothing'})")
        assert row["use"] in ("USER", "TEST"), f"{row['name']}: use {row['use']}"


def test_the_tables_do_not_overlap():
    assert len(TABLE) == len(ROWS), "a variable listed twice in core/policy/variables.h"
    assert not set(TABLE) & set(POLICY), "a policy variable listed in core/policy/variables.h too"
    assert not set(TABLE) & set(UPSTREAM), "a variable both read and listed as upstream's only"
    assert not NOT_READ & set(TABLE)


def test_the_policy_variables_are_read_from_the_table():
    # core/policy/policy_sources.c reads every policy field's variable through the table's env column.
    assert re.search(r"getenv\(\s*fld__policy_field_env\(", (ROOT / "core" / "policy" / "policy_sources.c").read_text())


# ---- the documentation ----------------------------------------------------------

def table_names(markdown, section=None):
    """The variable names in the first column of the Markdown tables of the text
    (of one '## ' section when named)."""
    if section:
        m = re.search(r"^## " + re.escape(section) + r"\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
        assert m, f"no section '## {section}'"
        markdown = m.group(1)
    names = set()
    for line in markdown.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names.update(re.findall(r"`(" + NAME + r"|USE_FLAGGEMS)`", first))
    return names


CONFIGURATION = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
GUIDE = (ROOT / "docs" / "user-guide.md").read_text(encoding="utf-8")


def test_configuration_md_lists_every_variable():
    listed = table_names(CONFIGURATION)
    missing = [n for n in [*POLICY, *TABLE] if n not in listed]
    assert not missing, f"docs/configuration.md: no table row for {missing}"


def test_configuration_md_lists_no_other_variable():
    extra = sorted(table_names(CONFIGURATION) - set(POLICY) - set(TABLE))
    assert not extra, f"docs/configuration.md lists variables fldispatch does not read: {extra}"


def test_the_user_guide_lists_the_library_variables():
    listed = table_names(GUIDE, "Environment variables")
    want = set(POLICY) | {r["name"] for r in ROWS if r["reader"] == "LIBRARY" and r["use"] == "USER"}
    assert not want - listed, f"docs/user-guide.md: no row for {sorted(want - listed)}"
    assert not listed - want, (f"docs/user-guide.md lists {sorted(listed - want)}, which are not "
                               f"the library's (see docs/configuration.md)")


@pytest.mark.parametrize("name", UPSTREAM)
def test_the_upstream_variables_are_documented_as_such(name):
    # configuration.md says which of vllm-plugin-FL's variables fldispatch ignores.
    short = name.replace("VLLM_FL_IO_DUMP", "")
    assert f"`{name}`" in CONFIGURATION or f"`{short}`" in CONFIGURATION, (
        f"docs/configuration.md does not name {name}, which fldispatch does not read")
