# SPDX-License-Identifier: Apache-2.0
"""The README's install, `pip install ./python`, as a user runs it: into a
fresh virtual environment that sees this Python's torch (make check-pip runs
this; it builds the package, a few minutes on two cores, so make check
leaves it out). Asserted on the installed package:
- it carries the tool: `python -m fldispatch list --json` runs in the
  Python process (_tool.so) and lists what the build tree's lists;
- it carries its types (py.typed, the extension's stubs _C.pyi and _ops.pyi);
- its native torch kernels are in use (fldispatch.torch.NATIVE), built
  under pip's build isolation for the environment's torch;
- a GPU plugin whose GPU cannot run here was not built, with a line saying
  why (FLDISPATCH_BUILD_GPU)."""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("FLDPY_PIP_INSTALL") != "1":
    pytest.skip("pip-installs the package into a new environment: make check-pip runs it",
                allow_module_level=True)

PYDIR = Path(__file__).resolve().parents[2]
SETUP = runpy.run_path(str(PYDIR / "setup.py"), run_name="fldispatch_setup")
# What a user's shell would not have: the tests' variables and the build tree.
DROP = ("PYTHONPATH", "FLDISPATCH_BUILD_GPU", "FLDISPATCH_BUILD_JOBS", "FLDISPATCH_TORCH_NATIVE",
        "FLDISPATCH_TORCH_PYTHON", "FLDISPATCH_SOURCE_DIR", "VLLM_FL_PLUGIN_DIR")


def _env():
    env = {k: v for k, v in os.environ.items() if k not in DROP}
    env["VLLM_FL_PLATFORM"] = "cpu"
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv python, installed package directory, pip's output)."""
    venv = tmp_path_factory.mktemp("pip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    r = subprocess.run([python, "-m", "pip", "install", "-v", "--no-deps", str(PYDIR)], env=_env(),
                       cwd=str(venv), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    where = subprocess.run([python, "-c", "import fldispatch, os; print(os.path.dirname(fldispatch.__file__))"],
                           env=_env(), cwd=str(venv), capture_output=True, text=True, check=True)
    package = Path(where.stdout.strip())
    assert package.is_relative_to(venv), package
    return python, package, r.stdout + r.stderr


def _run(python, *args, **kw):
    return subprocess.run([python, *args], env=_env(), cwd="/", capture_output=True, text=True, **kw)


def _listing(out):
    """{plugin: (status, its (op, impl_id) pairs)} of `list --json`; paths left out."""
    doc = json.loads(out)
    return {p["name"]: (p["status"], sorted((i["op"], i["impl_id"]) for i in doc["impls"]
                                            if i["plugin"] == p["name"]))
            for p in doc["plugins"]}


def test_the_package_carries_the_tool_and_lists_as_the_tree(installed):
    python, package, _ = installed
    assert (package / "_tool.so").is_file() and (package / "bin" / "fldispatch").is_file()
    mine = _run(python, "-m", "fldispatch", "list", "--json", check=True)
    tree = subprocess.run([sys.executable, "-m", "fldispatch", "list", "--json"],
                          env=dict(_env(), PYTHONPATH=os.environ.get("PYTHONPATH", "")), cwd="/",
                          capture_output=True, text=True, check=True)
    skipped = set(SETUP["gpu_plan"]())
    want = {k: v for k, v in _listing(tree.stdout).items() if k not in skipped}
    assert _listing(mine.stdout) == want
    # In the Python process: the Python tier (flagos) is listed, as in the tree.
    assert "flagos" in want


def test_the_package_carries_its_types(installed):
    _, package, _ = installed
    assert (package / "py.typed").is_file()
    for stub in ("_C.pyi", "_ops.pyi"):
        assert (package / stub).read_text() == (PYDIR / "fldispatch" / stub).read_text(), stub


def test_the_native_torch_kernels_are_in_use(installed):
    python, package, _ = installed
    r = _run(python, "-c", "import fldispatch.torch as t; print(t.NATIVE, t.NATIVE_REASON)",
             check=True)
    assert r.stdout.split() == ["True", "None"], r.stdout + r.stderr
    assert "not in use" not in r.stderr
    record = _run(python, "-c", "import fldispatch.native_abi as a; print(a.record())", check=True)
    assert (package / "_torch_ops.abi").read_text() == record.stdout


def test_gpu_plugins_that_cannot_run_here_are_skipped_with_a_reason(installed):
    _, package, log = installed
    skipped = SETUP["gpu_plan"]()
    if not skipped:
        pytest.skip("this machine has a GPU driver for every GPU plugin")
    plugins = package / "lib" / "fldispatch" / "plugins"
    for plugin, reason in skipped.items():
        assert f"fldispatch: not building plugin '{plugin}': {reason}" in log
        assert not (plugins / f"fld-{plugin}.so").exists()
    assert (plugins / "fld-cpu.so").is_file()
