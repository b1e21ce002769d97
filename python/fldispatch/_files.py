# SPDX-License-Identifier: Apache-2.0
"""Writing a file whole: what the package's writers (the IO dump, the GPU
tune's manifest) share."""

import os
import tempfile
from typing import Any, Callable, Optional


def write_replacing(path: str, write: Callable[[Any], None], binary: bool = False,
                    mode: Optional[int] = None) -> None:
    """Writes path whole or not at all: a temporary file created exclusively
    beside it (a random name, so never a planted link; private unless mode
    says otherwise), filled by write(f), flushed and fsynced, then renamed
    over path."""
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory or ".")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
