# SPDX-License-Identifier: Apache-2.0
"""The code blocks of the documentation run as printed.

Every ```python and ```c block of README.md, docs/*.md and
plugins/template/README.md is taken as it is written and run:

- python: in a fresh interpreter (this one's executable and environment,
  so the package under test), in an empty directory; it must exit 0;
- c with a main(): compiled with -Wall -Wextra -Werror against include/ and
  the library of the package under test, then run; it must exit 0;
- c with FLD_PLUGIN_DEFINE: compiled into fld-<name>.so the same way, then
  loaded into a fresh interpreter: it must load, and an example must not
  change what any catalog op resolves to on cpu (an example installed
  system-wide would otherwise serve every program on the machine).

A block that cannot run as printed (a fragment inside a larger program) is
marked where it is, with an HTML comment on the line before its fence:
<!-- not-run: the reason -->. The list of such marks is kept small, and a
mark on a block that would run is an error too. ```sh blocks are commands
for the reader's own shell (make, install, pip, writes under /etc) and are
not run here.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fldispatch

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             ROOT / "plugins" / "template" / "README.md"]
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(\S.*?)\s*-->")
FENCE = re.compile(r"^```(python|c)\s*$")
# Blocks that may carry a not-run mark: keep this small.
MAX_NOT_RUN = 2
CATALOG_OPS = ("silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul",
               "rms_norm", "gemma_rms_norm", "rotary_embedding", "attention_backend")


def _blocks():
    found = []
    for path in DOCUMENTS:
        lines = path.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            end = i + 1
            while end < len(lines) and lines[end].rstrip() != "```":
                end += 1
            before = i - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            mark = NOT_RUN.search(lines[before]) if before >= 0 else None
            found.append((f"{path.relative_to(ROOT)}:{i + 1}", m.group(1),
                          "\n".join(lines[i + 1:end]) + "\n", mark.group(1) if mark else None))
            i = end + 1
    return found


BLOCKS = _blocks()


def _environment():
    """This process's environment, with the package under test first on an
    absolute PYTHONPATH (the blocks run in another directory)."""
    env = dict(os.environ)
    package_parent = str(Path(fldispatch.__file__).resolve().parent.parent)
    paths = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([package_parent, *paths])
    return env


def _run(cmd, cwd, what, timeout=300):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env=_environment())
    assert r.returncode == 0, (f"{what}: exit status {r.returncode}\n--- stdout\n{r.stdout}"
                               f"\n--- stderr\n{r.stderr}")
    return r


def _library_dir():
    return Path(fldispatch.__file__).resolve().parent / "lib"


def _compile(source, out, tmp_path, where, shared):
    cc = os.environ.get("CC", "cc")
    lib = _library_dir()
    cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"]
    if shared:
        cmd += ["-shared", "-fPIC"]
    cmd += [str(source), f"-I{ROOT / 'include'}", f"-L{lib}", "-lfldispatch",
            f"-Wl,-rpath,{lib}", "-o", str(out)]
    _run(cmd, tmp_path, f"{where}: {' '.join(cmd)}")


def test_blocks_found():
    langs = {lang for _, lang, _, _ in BLOCKS}
    assert langs == {"python", "c"}, f"no python or no c block found: {BLOCKS}"
    marked = [(where, why) for where, _, _, why in BLOCKS if why]
    assert len(marked) <= MAX_NOT_RUN, f"too many blocks marked not-run: {marked}"


@pytest.mark.parametrize("where,code,mark",
                         [(w, c, m) for w, lang, c, m in BLOCKS if lang == "python"],
                         ids=[w for w, lang, _, _ in BLOCKS if lang == "python"])
def test_python_block(where, code, mark, tmp_path):
    if mark:
        pytest.skip(f"marked not-run: {mark}")
    _run([sys.executable, "-c", code], tmp_path, f"{where} (python)")


@pytest.mark.parametrize("where,code,mark",
                         [(w, c, m) for w, lang, c, m in BLOCKS if lang == "c"],
                         ids=[w for w, lang, _, _ in BLOCKS if lang == "c"])
def test_c_block(where, code, mark, tmp_path):
    program = re.search(r"\bint\s+main\s*\(", code) is not None
    plugin = re.search(r"^FLD_PLUGIN_DEFINE\(\s*\"([a-z0-9_]+)\"", code, re.M)
    if mark:
        assert not program and not plugin, (
            f"{where} is marked not-run ({mark}) but is a whole program or plugin: run it")
        pytest.skip(f"marked not-run: {mark}")
    assert program or plugin, (
        f"{where}: a fragment (no main(), no FLD_PLUGIN_DEFINE): make it whole, or mark it "
        "<!-- not-run: why --> on the line before its fence")
    source = tmp_path / "snippet.c"
    source.write_text(code, encoding="utf-8")
    if program:
        _compile(source, tmp_path / "app", tmp_path, where, shared=False)
        _run([str(tmp_path / "app")], tmp_path, f"{where} (the program)")
        return
    assert plugin
    name = plugin.group(1)
    so = tmp_path / f"fld-{name}.so"
    _compile(source, so, tmp_path, where, shared=True)
    so.chmod(0o755)
    check = (
        "import json, fldispatch\n"
        f"ops = {CATALOG_OPS!r}\n"
        "before = {op: fldispatch.resolve(op) for op in ops}\n"
        f"fldispatch.load_plugin({str(so)!r})\n"
        f"loaded = [p for p in fldispatch.plugins() if p['name'] == {name!r}]\n"
        "after = {op: fldispatch.resolve(op) for op in ops}\n"
        "print(json.dumps({'loaded': [p['status'] for p in loaded], 'before': before, "
        "'after': after}))\n")
    r = _run([sys.executable, "-c", check], tmp_path, f"{where} (loading fld-{name}.so)")
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["loaded"] == ["loaded"], f"{where}: fld-{name}.so did not load: {result}"
    assert result["after"] == result["before"], (
        f"{where}: the example plugin '{name}' changes what programs run: "
        f"{result['before']} -> {result['after']}")
