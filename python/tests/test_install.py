# SPDX-License-Identifier: Apache-2.0
"""What `pip install ./python` decides, without running pip (test_pip_install.py,
make check-pip, runs it): make's job count, which GPU plugins it builds,
which torch the native kernels are compiled for (also from inside pip's build
isolation), and the line `import fldispatch.torch` prints when the native
kernels are not in use."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

import fldispatch
import fldispatch.native_abi

HERE = Path(__file__).resolve().parent
SETUP = runpy.run_path(str(HERE.parent / "setup.py"), run_name="fldispatch_setup")
build_jobs, gpu_plan = SETUP["build_jobs"], SETUP["gpu_plan"]
torch_for_build, in_pip_build_isolation = SETUP["torch_for_build"], SETUP["in_pip_build_isolation"]


def test_make_runs_one_job_per_available_cpu():
    assert build_jobs({}) == [f"-j{len(os.sched_getaffinity(0))}"]


def test_the_job_count_can_be_set_and_a_bad_one_is_refused():
    assert build_jobs({"FLDISPATCH_BUILD_JOBS": "3", "MAKEFLAGS": "-j9"}) == ["-j3"]
    for bad in ("0", "-1", "two", "2.5"):
        with pytest.raises(RuntimeError, match="FLDISPATCH_BUILD_JOBS="):
            build_jobs({"FLDISPATCH_BUILD_JOBS": bad})


@pytest.mark.parametrize("makeflags,jobs", [("-j4", "-j4"), (" -j2 --jobserver-auth=fifo:/tmp/x", "-j2"),
                                            ("j --jobserver-fds=3,4", "-j"), ("--jobs=3", "-j3"),
                                            ("--jobs 5", "-j5"), ("ikj", "-j")])
def test_the_jobs_makeflags_sets_are_given_to_make(makeflags, jobs):
    assert build_jobs({"MAKEFLAGS": makeflags}) == [jobs]


@pytest.mark.parametrize("makeflags", ["k", "-k", "--keep-going", "CFLAGS=-j", "s -- V=1"])
def test_makeflags_without_jobs_get_the_cpu_count(makeflags):
    assert build_jobs({"MAKEFLAGS": makeflags}) == build_jobs({})


def _exists(*present):
    return lambda path: path in present


def test_gpu_plugins_are_skipped_with_a_reason_where_no_gpu_can_run():
    skip = gpu_plan({}, exists=_exists())
    assert set(skip) == {"cuda", "rocm"}
    assert "no NVIDIA driver" in skip["cuda"] and "FLDISPATCH_BUILD_GPU=1" in skip["cuda"]
    assert "/dev/kfd" in skip["rocm"] and "FLDISPATCH_BUILD_GPU=1" in skip["rocm"]


def test_a_gpu_plugin_is_built_where_its_driver_is():
    assert set(gpu_plan({}, exists=_exists("/dev/nvidiactl"))) == {"rocm"}
    assert set(gpu_plan({}, exists=_exists("/proc/driver/nvidia/version"))) == {"rocm"}
    assert set(gpu_plan({}, exists=_exists("/dev/kfd"))) == {"cuda"}


def test_the_variable_forces_gpu_plugins_on_or_off():
    assert gpu_plan({"FLDISPATCH_BUILD_GPU": "1"}, exists=_exists()) == {}
    assert gpu_plan({"FLDISPATCH_BUILD_GPU": "auto"}, exists=_exists("/dev/kfd")) == {
        "cuda": gpu_plan({}, exists=_exists())["cuda"]}
    off = gpu_plan({"FLDISPATCH_BUILD_GPU": "0"}, exists=_exists("/dev/nvidiactl", "/dev/kfd"))
    assert off == {"cuda": "FLDISPATCH_BUILD_GPU=0", "rocm": "FLDISPATCH_BUILD_GPU=0"}
    with pytest.raises(RuntimeError, match="FLDISPATCH_BUILD_GPU='yes'"):
        gpu_plan({"FLDISPATCH_BUILD_GPU": "yes"})


def test_pip_build_isolation_is_recognised_by_its_directory():
    assert in_pip_build_isolation({"PYTHONPATH": "/tmp/pip-build-env-k2j1/site"})
    assert not in_pip_build_isolation({"PYTHONPATH": "/opt/lib/python"})
    assert not in_pip_build_isolation({})


def _hiding_site(tmp_path, name):
    """A PYTHONPATH directory whose sitecustomize hides torch, as pip's build
    environment hides the target environment's site-packages."""
    site = tmp_path / name / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    return str(site)


def test_the_native_kernels_are_built_for_the_target_environments_torch(tmp_path):
    # From inside pip's isolation, torch is found where the package will run.
    env = dict(os.environ, PYTHONPATH=_hiding_site(tmp_path, "pip-build-env-x1"), PYTHONNOUSERSITE="1")
    env.pop("FLDISPATCH_TORCH_NATIVE", None)
    env.pop("FLDISPATCH_TORCH_PYTHON", None)
    info, why = torch_for_build(env)
    assert why is None
    assert info["record"] == fldispatch.native_abi.record()
    assert any(Path(p, "torch", "library.h").is_file() for p in info["include"]), info["include"]


def test_a_python_without_torch_is_a_reason_not_to_build(tmp_path):
    env = dict(os.environ, PYTHONPATH=_hiding_site(tmp_path, "elsewhere"))
    env.pop("FLDISPATCH_TORCH_NATIVE", None)
    env.pop("FLDISPATCH_TORCH_PYTHON", None)
    info, why = torch_for_build(env)
    assert info is None and f"torch is not importable by {sys.executable}" in why
    info, why = torch_for_build({"FLDISPATCH_TORCH_PYTHON": str(tmp_path / "no-python")})
    assert info is None and "no-python" in why
    assert torch_for_build({"FLDISPATCH_TORCH_NATIVE": "0"}) == (
        None, "FLDISPATCH_TORCH_NATIVE=0 at build time")


def test_a_build_that_left_them_out_says_why(tmp_path, monkeypatch):
    import fldispatch.torch as ft

    monkeypatch.delenv("FLDISPATCH_TORCH_NATIVE", raising=False)
    (tmp_path / "_torch_ops.why").write_text("no C++ compiler (g++; set CXX=)\n")
    assert ft._native_mismatch(str(tmp_path / "_torch_ops.so")) == \
        "not built: no C++ compiler (g++; set CXX=)"


def test_the_hint_names_the_way_to_the_native_kernels(tmp_path):
    import fldispatch.torch as ft

    assert "pip install --force-reinstall --no-deps ./python" in ft._native_hint("x", str(tmp_path))
    (tmp_path / "lib").symlink_to(tmp_path)
    assert "make python-torch-native" in ft._native_hint("x", str(tmp_path))


def _package_without_native_kernels(tmp_path):
    """The package this test runs, linked file by file, less its native kernels."""
    real = Path(fldispatch.__file__).resolve().parent
    copy = tmp_path / "fldispatch"
    copy.mkdir()
    for entry in real.iterdir():
        if not entry.name.startswith("_torch_ops.") and entry.name != "__pycache__":
            (copy / entry.name).symlink_to(entry.resolve())
    return tmp_path


@pytest.mark.parametrize("off", [False, True])
def test_import_says_in_one_line_when_the_native_kernels_are_not_in_use(tmp_path, off):
    env = dict(os.environ, PYTHONPATH=str(_package_without_native_kernels(tmp_path)))
    env.pop("FLDISPATCH_TORCH_NATIVE", None)
    if off:
        env["FLDISPATCH_TORCH_NATIVE"] = "0"
    r = subprocess.run([sys.executable, "-c", "import fldispatch.torch as t; print(t.NATIVE)"],
                       env=env, capture_output=True, text=True, timeout=300, check=True)
    assert r.stdout.strip() == "False"
    lines = [line for line in r.stderr.splitlines() if "native kernels are not in use" in line]
    if off:
        assert lines == []  # turned off on purpose: logged at INFO only
    else:
        assert len(lines) == 1, r.stderr
        assert "(not built (_torch_ops.so absent))" in lines[0]
