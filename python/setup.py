# SPDX-License-Identifier: Apache-2.0
"""Builds the fldispatch wheel: libfldispatch and its plugins from the C
sources (with the project's own Makefile), then the extension fldispatch._C.

The wheel carries the library like an installation prefix inside the
package, so nothing needs LD_LIBRARY_PATH:

    fldispatch/_C.abi3.so                       rpath $ORIGIN/lib
    fldispatch/lib/libfldispatch.so.0
    fldispatch/lib/fldispatch/plugins/fld-*.so  found next to the library
    fldispatch/share/fldispatch/config/*.yaml   platform files (<lib>/../share)
    fldispatch/bin/fldispatch                   the command-line tool
    fldispatch/_torch_ops.so, _torch_ops.abi    the native torch.ops CPU kernels and
                                                the torch and Python they are bound to
                                                (only where torch is importable at
                                                build time: pip install
                                                --no-build-isolation; off with
                                                FLDISPATCH_TORCH_NATIVE=0)

The C sources are looked for in FLDISPATCH_SOURCE_DIR, then in the
repository around this directory (pip >= 21.3 builds `pip install ./python`
in place), then in _csrc/ (an sdist made by this setup.py copies them there).
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent

# What an sdist must carry to build the library (the Makefile reads
# plugins/*/plugin.mk and tests/*/tests.mk when present).
C_TREE = ["Makefile", "fldispatch.pc.in", "include", "core", "plugins", "tools", "config"]


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


class BuildWithLibrary(build_ext):
    """Runs the C build into build_temp, then builds the extension against
    it and copies the library, plugins, platform files and tool next to it."""

    def run(self):
        src = c_source_dir()
        tree = Path(self.build_temp).resolve() / "libfldispatch"
        jobs = str(min(os.cpu_count() or 1, 8))
        cmd = ["make", "-C", str(src), f"-j{jobs}", f"B={tree}",
               f"CFLAGS={os.environ.get('CFLAGS', '-O2')}", "lib", "plugins", "configs", "tool"]
        print("fldispatch: " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        for ext in self.extensions:
            ext.include_dirs.append(str(src / "include"))
            ext.library_dirs.append(str(tree / "lib"))
        super().run()
        package_dir = Path(self.get_ext_fullpath("fldispatch._C")).parent
        self._copy_runtime(tree, package_dir)
        self._build_torch_native(src, tree, package_dir)

    @staticmethod
    def _build_torch_native(src: Path, tree: Path, package_dir: Path):
        """The native torch.ops CPU kernels (python/native/torch_ops.cpp), when
        torch is importable here; otherwise a line says why, and fldispatch.torch
        keeps its Python-level CPU kernels."""
        so, abi = package_dir / "_torch_ops.so", package_dir / "_torch_ops.abi"
        for f in (so, abi):
            f.unlink(missing_ok=True)
        if os.environ.get("FLDISPATCH_TORCH_NATIVE", "1") == "0":
            print("fldispatch: FLDISPATCH_TORCH_NATIVE=0: native torch kernels not built", flush=True)
            return
        try:
            import torch
            import torch.utils.cpp_extension as cpp
        except Exception as e:  # noqa: BLE001 (any failure to import means: no torch here)
            print(f"fldispatch: torch is not importable while building ({e}): native torch "
                  "kernels not built (build with --no-build-isolation in an environment that "
                  "has torch to get them)", flush=True)
            return
        torch_lib = Path(torch.__file__).parent / "lib"
        cmd = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-fPIC", "-shared",
               "-fvisibility=hidden", f"-I{src / 'include'}",
               f"-I{sysconfig.get_paths()['include']}"]
        cmd += [f"-I{p}" for p in cpp.include_paths()]
        cmd += [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
                str(HERE / "native" / "torch_ops.cpp"), "-o", str(so), f"-L{torch_lib}", "-lc10",
                "-ltorch_cpu", "-ltorch_python", f"-L{tree / 'lib'}", "-lfldispatch",
                f"-Wl,-rpath,{torch_lib}", "-Wl,-rpath,$ORIGIN/lib"]
        print("fldispatch: building the native torch kernels: " + " ".join(cmd[:1] + cmd[-8:-7]),
              flush=True)
        if subprocess.run(cmd, check=False).returncode != 0:
            so.unlink(missing_ok=True)
            print("fldispatch: the native torch kernels failed to build (above); the package "
                  "uses its Python-level CPU kernels", flush=True)
            return
        spec = importlib.util.spec_from_file_location("fldispatch_native_abi",
                                                      HERE / "fldispatch" / "native_abi.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        abi.write_text(module.record() + "\n")

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
                dest.mkdir(parents=True, exist_ok=True)
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

setup(
    version=library_version(),
    ext_modules=[extension],
    cmdclass={"build_ext": BuildWithLibrary, "sdist": SdistWithSources},
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
