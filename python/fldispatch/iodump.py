# SPDX-License-Identifier: Apache-2.0
"""fldispatch.iodump: the IO dump under its documented name.

The IO dump keeps vllm-plugin-FL's layout and API, so its code is the
compatibility layer's: fldispatch/compat/io_dumper.py (upstream's
vllm_fl.dispatch.io_dumper). It runs once, as this module, and
fldispatch.compat names the same module object io_dumper, so state read or
patched through either name is the same.

It is loaded from its file rather than imported from fldispatch.compat:
that package, once imported, has upstream-group plugins register through
its OpRegistry view, and the IO dump (which VLLM_FL_IO_DUMP switches on
while fldispatch itself is imported) must not decide that.
"""

import importlib.util
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # What this module is once it has run: io_dumper.py's names.
    from .compat.io_dumper import *  # noqa: F403


def _load() -> None:
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compat", "io_dumper.py")
    spec = importlib.util.spec_from_file_location(__name__, path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    # In place of this stub before it runs, as the import system expects of
    # a module that replaces itself; a failure removes it again.
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


_load()
