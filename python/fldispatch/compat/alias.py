# SPDX-License-Identifier: Apache-2.0
"""Make `import vllm_fl.dispatch...` resolve to fldispatch.compat (opt-in).

    import fldispatch.compat.alias
    fldispatch.compat.alias.install()
    from vllm_fl.dispatch import OpImpl        # fldispatch.compat.types.OpImpl

Nothing happens at import: install() must be called (from the program, a
conftest, or a sitecustomize). It refuses to shadow a real vllm_fl: when one
is importable it returns False and changes nothing (force=True overrides).
After install(), `vllm_fl` is a package holding only `vllm_fl.dispatch`,
`vllm_fl.dispatch.<sub>` and `vllm_fl.utils`, the very module objects of
fldispatch.compat, fldispatch.compat.<sub> and fldispatch.compat.utils, so
patching an attribute through either name patches both. Other vllm_fl
modules (the vLLM plugin itself) do not exist. While installed, the
library's log lines go to upstream's logger `vllm_fl.dispatch` instead of
`fldispatch` (fldispatch._logbridge).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Sequence

from .. import _logbridge

__all__ = ["install", "uninstall", "installed"]

_TOP = "vllm_fl"
_ALIASED = "vllm_fl.dispatch"
_TARGET = "fldispatch.compat"
# vllm_fl modules beyond .dispatch that upstream's backends import
_OTHERS = {"vllm_fl.utils": "fldispatch.compat.utils"}
# where the library's log lines go while the alias is installed: upstream's logger
_LOGGER = "vllm_fl.dispatch"


class _Loader(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        if self._target is None:
            top = types.ModuleType(spec.name, "fldispatch's stand-in for vllm_fl (only .dispatch)")
            top.__path__ = []
            top.__fldispatch_alias__ = True  # type: ignore[attr-defined]  # the marker install() reads
            return top
        return importlib.import_module(self._target)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name == _TOP:
            target_name = None
        elif name in _OTHERS:
            target_name = _OTHERS[name]
        elif name == _ALIASED or name.startswith(_ALIASED + "."):
            target_name = _TARGET + name[len(_ALIASED):]
            if importlib.util.find_spec(target_name) is None:
                return None
        else:
            return None
        is_pkg = target_name is None or target_name == _TARGET
        return importlib.machinery.ModuleSpec(name, _Loader(target_name), is_package=is_pkg)


_finder = _Finder()


def installed() -> bool:
    return _finder in sys.meta_path


def install(force: bool = False) -> bool:
    """Route vllm_fl.dispatch to fldispatch.compat; False when a real vllm_fl is there."""
    if installed():
        return True
    if not force:
        mod = sys.modules.get(_TOP)
        if mod is not None and not getattr(mod, "__fldispatch_alias__", False):
            return False
        if mod is None and importlib.util.find_spec(_TOP) is not None:
            return False
    for name in [n for n in sys.modules if n == _TOP or n.startswith(_TOP + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _finder)
    _logbridge.route_to(_LOGGER)
    return True


def uninstall() -> None:
    """Undo install(): the vllm_fl names are forgotten."""
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _logbridge.route_to("fldispatch")
    for name in [n for n in sys.modules if n == _TOP or n.startswith(_TOP + ".")]:
        del sys.modules[name]
