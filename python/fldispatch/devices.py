# SPDX-License-Identifier: Apache-2.0
"""The library's device table (core/base/devices.h, through _C.devices()) and the
names the package derives from it: every name a device goes by, PyTorch's
device type of its tensors, and the device of a PyTorch device type.

Nothing here starts the library or imports torch at import.
"""

from typing import Any

from . import _C

#: The rows, in the order of the FLD_DEVICE_MASK_* bits: dicts with name,
#: alias, type (its DLPack code), mask, codes, torch (PyTorch's device type
#: of its tensors) and torch_build (the torch.version attribute set in a
#: PyTorch built for it, or None).
ROWS = _C.devices()

#: Every name a device goes by -> its mask bit: the library's names and
#: aliases, and PyTorch's device types (one that several rows share, "cuda"
#: of PyTorch's ROCm build, is the first row's).
BITS: dict[str, int] = {}
for _row in ROWS:
    BITS[_row["name"]] = _row["mask"]
    if _row["alias"]:
        BITS[_row["alias"]] = _row["mask"]
for _row in ROWS:
    BITS.setdefault(_row["torch"], _row["mask"])
del _row

#: The mask of every device.
ALL_BITS = sum(row["mask"] for row in ROWS)

#: PyTorch's device types whose tensors some device of the table takes.
TORCH_TYPES = frozenset(row["torch"] for row in ROWS)

#: The devices a build of PyTorch itself serves ("cuda", "rocm").
TORCH_BUILT = tuple(row["name"] for row in ROWS if row["torch_build"])

_names_of_torch_types: dict[str, str] = {}


def row(name: str) -> dict[str, Any]:
    """The row of a device name or alias (KeyError for another)."""
    for r in ROWS:
        if name in (r["name"], r["alias"]):
            return r
    raise KeyError(name)


def torch_build(name: str) -> str | None:
    """The version string of the installed PyTorch's build for device name
    (torch.version.cuda, .hip), or None where it is not built for it."""
    import torch

    attribute = row(name)["torch_build"]
    return getattr(torch.version, attribute, None) if attribute else None


def library_name(torch_type: str) -> str:
    """The library's device name for PyTorch's device type torch_type: of the
    rows whose tensors PyTorch calls so, the one the installed PyTorch is
    built for ("rocm" for "cuda" on PyTorch's ROCm build), else the first;
    torch_type itself where no row has it."""
    name = _names_of_torch_types.get(torch_type)
    if name is None:
        rows = [r for r in ROWS if r["torch"] == torch_type]
        built = [r for r in rows if r["torch_build"] and torch_build(r["name"])]
        name = (built or rows)[0]["name"] if rows else torch_type
        _names_of_torch_types[torch_type] = name
    return name
