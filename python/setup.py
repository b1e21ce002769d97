# SPDX-License-Identifier: Apache-2.0
"""Builds the fldispatch wheel: libfldispatch and its plugins from the C
sources (with the project's own Makefile), then the extension fldispatch._C.

The wheel carries the library like an installation prefix inside the
package, so nothing needs LD_LIBRARY_PATH:

    fldispatch/_C.abi3.so                       rpath $ORIGIN/lib
    fldispatch/_tool.so                         the command-line tool as a shared
                                                object: python -m fldispatch list,
                                                resolve, config, verify, tune run in
                                                the Python process
    fldispatch/lib/libfldispatch.so.0
    fldispatch/lib/fldispatch/plugins/fld-*.so  found next to the library
    fldispatch/share/fldispatch/config/*.yaml   platform files (<lib>/../share)
    fldispatch/bin/fldispatch                   the command-line tool
    fldispatch/_torch_ops.so, _torch_ops.abi    the native torch.ops CPU and CUDA kernels and
                                                the torch and Python they are bound to,
                                                where the target environment has torch
                                                (off with FLDISPATCH_TORCH_NATIVE=0);
                                                otherwise _torch_ops.why says why not

Environment variables read here:

    FLDISPATCH_BUILD_JOBS   make's -j (default: the -j of MAKEFLAGS, else one
                            job per CPU this process may use)
    FLDISPATCH_BUILD_GPU    1: build the cuda and rocm plugins wherever their
                            compilers are found; 0: never; auto (default): only
                            where their GPUs can run (an NVIDIA driver:
                            /proc/driver/nvidia/version or /dev/nvidiactl; an
                            AMD one: /dev/kfd)
    FLDISPATCH_TORCH_NATIVE 0: no native torch kernels
    FLDISPATCH_TORCH_PYTHON the Python whose torch the native kernels are built
                            for (default: this build's interpreter, outside pip's
                            build isolation)
    FLDISPATCH_SOURCE_DIR   where the C sources are
    CFLAGS, CXX             the C flags (default -O2) and the C++ compiler (g++)

The C sources are looked for in FLDISPATCH_SOURCE_DIR, then in the
repository around this directory (pip >= 21.3 builds `pip install ./python`
in place), then in _csrc/ (an sdist made by this setup.py copies them there).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent

# What an sdist must carry to build the library (the Makefile reads
# plugins/*/plugin.mk, tests/*/tests.mk and python/python.mk when present).
C_TREE = ["Makefile", "fldispatch.pc.in", "include", "core", "plugins", "tools", "config",
          "python/python.mk"]

# The GPU plugins, what says their GPU can run on this machine, and its name.
GPU_PLUGINS = {
    "cuda": (("/proc/driver/nvidia/version", "/dev/nvidiactl"), "NVIDIA driver"),
    "rocm": (("/dev/kfd",), "AMD GPU driver (/dev/kfd)"),
}


def say(line: str):
    print("fldispatch: " + line, flush=True)


def c_source_dir() -> Path:
    candidates = []
    if os.environ.get("FLDISPATCH_SOURCE_DIR"):
        candidates.append(Path(os.environ["FLDISPATCH_SOURCE_DIR"]))
    candidates += [HERE.parent, HERE / "_csrc"]
    for c in candidates:
        if (c / "Makefile").is_file() and (c / "include" / "fldispatch" / "fldispatch.h").is_file():
            return c.resolve()
    raise RuntimeError(
        "fldispatch: the C sources were not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Build from a checkout of the repository (pip install ./python), "
        "or set FLDISPATCH_SOURCE_DIR to one."
    )


def library_version() -> str:
    header = (c_source_dir() / "include" / "fldispatch" / "fldispatch.h").read_text()
    m = re.search(r'#define FLD_VERSION_STRING "([^"]+)"', header)
    if not m:
        raise RuntimeError("fldispatch: FLD_VERSION_STRING not found in fldispatch.h")
    return m.group(1)


def makeflags_jobs(makeflags: str):
    """The -j that MAKEFLAGS (as make or a user exports it) sets: None when
    it sets none, "" for -j without a number, else the number."""
    words = makeflags.split()
    if words and not words[0].startswith("-") and "=" not in words[0] and "j" in words[0]:
        words[0] = "-j"  # make's own form: the single-letter flags first, without a dash
    jobs = None
    for i, w in enumerate(words):
        m = re.fullmatch(r"(?:-j|--jobs=?)(\d*)", w)
        if m:
            jobs = m.group(1)
            if not jobs and i + 1 < len(words) and words[i + 1].isdigit():
                jobs = words[i + 1]
    return jobs


def build_jobs(env=os.environ) -> list:
    """make's -j argument: FLDISPATCH_BUILD_JOBS, else the -j of MAKEFLAGS
    (given again on the command line: a jobserver of a make that ran pip is
    not reachable from here), else one job per CPU this process may run on."""
    value = env.get("FLDISPATCH_BUILD_JOBS", "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise RuntimeError(f"fldispatch: FLDISPATCH_BUILD_JOBS={value!r} is not a positive "
                               "whole number of make jobs")
        return [f"-j{int(value)}"]
    jobs = makeflags_jobs(env.get("MAKEFLAGS", ""))
    if jobs is not None:
        return [f"-j{jobs}"]
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return [f"-j{max(cpus, 1)}"]


def gpu_plan(env=os.environ, exists=os.path.exists) -> dict:
    """{plugin: reason not to build it} for the GPU plugins this build leaves
    out (FLDISPATCH_BUILD_GPU; see the module's docstring)."""
    mode = env.get("FLDISPATCH_BUILD_GPU", "auto").strip().lower() or "auto"
    if mode not in ("0", "1", "auto"):
        raise RuntimeError(f"fldispatch: FLDISPATCH_BUILD_GPU={mode!r} is not one of 0, 1, auto")
    if mode == "1":
        return {}
    if mode == "0":
        return {p: "FLDISPATCH_BUILD_GPU=0" for p in GPU_PLUGINS}
    skip = {}
    for plugin, (marks, what) in GPU_PLUGINS.items():
        if not any(exists(m) for m in marks):
            skip[plugin] = f"no {what} on this machine (FLDISPATCH_BUILD_GPU=1 builds it anyway)"
    return skip


def in_pip_build_isolation(env=os.environ) -> bool:
    """Whether this runs in pip's isolated build environment: pip points
    PYTHONPATH at its pip-build-env-* directory, whose sitecustomize hides
    the target environment's site-packages (and sets PYTHONNOUSERSITE)."""
    return any(Path(p).parent.name.startswith("pip-build-env-")
               for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)


# Run by the Python whose torch the native kernels are for; prints what the
# compile needs and the ABI record (fldispatch/native_abi.py, given as argv[1]).
TORCH_PROBE = r"""
import json, os, runpy, sys, sysconfig
import torch, torch.utils.cpp_extension as c
print(json.dumps({
    "include": c.include_paths(),
    "python_include": sysconfig.get_paths()["include"],
    "lib": os.path.join(os.path.dirname(torch.__file__), "lib"),
    "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
    "record": runpy.run_path(sys.argv[1])["record"](),
}))
"""


def torch_for_build(env=os.environ):
    """(what the native torch kernels compile with, None), or (None, why not).

    The torch is the one the installed package will run with: that of
    FLDISPATCH_TORCH_PYTHON, else of this interpreter run outside pip's build
    isolation (whose PYTHONPATH and PYTHONNOUSERSITE hide the target
    environment's packages from this process)."""
    if env.get("FLDISPATCH_TORCH_NATIVE", "1") == "0":
        return None, "FLDISPATCH_TORCH_NATIVE=0 at build time"
    python = env.get("FLDISPATCH_TORCH_PYTHON") or sys.executable
    child_env = dict(env)
    if in_pip_build_isolation(env):
        for name in ("PYTHONPATH", "PYTHONNOUSERSITE"):
            child_env.pop(name, None)
    try:
        r = subprocess.run([python, "-c", TORCH_PROBE, str(HERE / "fldispatch" / "native_abi.py")],
                           env=child_env, capture_output=True, text=True, check=False)
    except OSError as e:
        return None, f"cannot run {python} to find its torch: {e.strerror}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"torch is not importable by {python} ({last})"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


class BuildWithLibrary(build_ext):
    """Runs the C build into build_temp (in parallel with the compile of the
    native torch kernels), then builds the extension against it and copies
    the library, plugins, platform files, tool and kernels next to it."""

    def run(self):
        src = c_source_dir()
        temp = Path(self.build_temp).resolve()
        tree = temp / "libfldispatch"
        torch_info, torch_why = torch_for_build()
        torch_obj = temp / "torch_ops.o"
        torch_cc = self._start_torch_compile(src, torch_info, torch_obj) if torch_info else None
        if torch_cc is None and torch_info:
            torch_why = f"no C++ compiler ({os.environ.get('CXX', 'g++')}; set CXX=)"
        cmd = ["make", "-C", str(src), *build_jobs(), f"B={tree}",
               f"CFLAGS={os.environ.get('CFLAGS', '-O2')}"]
        for plugin, reason in gpu_plan().items():
            cmd.append(f"PLUGIN_SKIP_{plugin}={reason}")
        cmd += ["lib", "plugins", "configs", "tool", str(tree / "python" / "fldispatch" / "_tool.so")]
        say(shlex.join(cmd))
        try:
            subprocess.run(cmd, check=True)
        finally:
            torch_rc = torch_cc.wait() if torch_cc else None
        for ext in self.extensions:
            ext.include_dirs.append(str(src / "include"))
            ext.library_dirs.append(str(tree / "lib"))
        super().run()
        package_dir = Path(self.get_ext_fullpath("fldispatch._C")).parent
        self._copy_runtime(tree, package_dir)
        if torch_rc is not None and torch_rc != 0:
            torch_why = "the C++ compile of native/torch_ops.cpp failed (its output is above)"
        self._link_torch_native(tree, package_dir, torch_info if torch_rc == 0 else None,
                                torch_obj, torch_why)

    @staticmethod
    def _start_torch_compile(src: Path, info: dict, obj: Path):
        cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-fopenmp", "-fPIC",
               "-fvisibility=hidden",
               f"-I{src / 'include'}", f"-I{info['python_include']}"]
        cmd += [f"-I{p}" for p in info["include"]]
        cmd += [f"-D_GLIBCXX_USE_CXX11_ABI={info['cxx11_abi']}", "-c",
                str(HERE / "native" / "torch_ops.cpp"), "-o", str(obj)]
        say(f"compiling the native torch kernels for {info['record']} beside the C build")
        obj.parent.mkdir(parents=True, exist_ok=True)
        try:
            return subprocess.Popen(cmd)
        except OSError:
            return None

    @staticmethod
    def _link_torch_native(tree: Path, package_dir: Path, info, obj: Path, why):
        """The native torch.ops CPU and CUDA kernels (python/native/torch_ops.cpp) and
        their ABI record, or _torch_ops.why saying why they are not there;
        fldispatch.torch then keeps its Python-level kernels and says so."""
        so, abi, why_file = (package_dir / n for n in ("_torch_ops.so", "_torch_ops.abi",
                                                        "_torch_ops.why"))
        for f in (so, abi, why_file):
            f.unlink(missing_ok=True)
        if info is not None:
            cmd = [os.environ.get("CXX", "g++"), "-shared", "-fopenmp", str(obj), "-o", str(so),
                   f"-L{info['lib']}", "-lc10", "-ltorch_cpu", "-ltorch_python",
                   f"-L{tree / 'lib'}", "-lfldispatch", f"-Wl,-rpath,{info['lib']}",
                   "-Wl,-rpath,$ORIGIN/lib"]
            if subprocess.run(cmd, check=False).returncode == 0:
                abi.write_text(info["record"] + "\n")
                say(f"native torch kernels built for {info['record']}")
                return
            so.unlink(missing_ok=True)
            why = "linking native/torch_ops.cpp failed (its output is above)"
        why_file.write_text(why + "\n")
        say(f"native torch kernels not built: {why}; fldispatch.torch uses its Python-level "
            "kernels")

    @staticmethod
    def _copy_runtime(tree: Path, package_dir: Path):
        lib = package_dir / "lib"
        for sub in ("lib", "share", "bin"):
            shutil.rmtree(package_dir / sub, ignore_errors=True)
        (lib / "fldispatch").mkdir(parents=True)
        # The soname file only: the extension and the plugins ask for it by soname.
        shutil.copy2(tree / "lib" / "libfldispatch.so.0", lib / "libfldispatch.so.0",
                     follow_symlinks=True)
        shutil.copytree(tree / "lib" / "fldispatch" / "plugins", lib / "fldispatch" / "plugins",
                        symlinks=False)
        shutil.copytree(tree / "share", package_dir / "share")
        (package_dir / "bin").mkdir()
        shutil.copy2(tree / "bin" / "fldispatch", package_dir / "bin" / "fldispatch")
        shutil.copy2(tree / "python" / "fldispatch" / "_tool.so", package_dir / "_tool.so")


class SdistWithSources(sdist):
    """Puts the C sources into the sdist under _csrc/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        src = c_source_dir()
        dest = Path(base_dir) / "_csrc"
        for name in C_TREE:
            path = src / name
            if path.is_dir():
                shutil.copytree(path, dest / name)
            else:
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest / name)


# The flags of the in-tree build (python/python.mk) as well: C11, the
# limited API of Python 3.10 (one abi3 wheel for every CPython >= 3.10).
extension = Extension(
    "fldispatch._C",
    sources=sorted(str(p.relative_to(HERE)) for p in (HERE / "src").glob("*.c")),
    depends=sorted(str(p.relative_to(HERE)) for p in (HERE / "src").glob("*.h")),
    libraries=["fldispatch"],
    define_macros=[("Py_LIMITED_API", "0x030A0000"), ("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra",
                        "-Wno-unused-parameter"],
    extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
    py_limited_api=True,
)

# setuptools runs this file as __main__; the tests load it under another name
# for its functions (python/tests/test_install.py).
if __name__ == "__main__":
    setup(
        version=library_version(),
        ext_modules=[extension],
        cmdclass={"build_ext": BuildWithLibrary, "sdist": SdistWithSources},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},
    )
