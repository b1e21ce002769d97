# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.utils, the part upstream's dispatch backends import.

Upstream's backends ask `use_flaggems_op(op)` whether FlagGems may serve an op
(its FlagGems backend registers only those ops) and read VENDOR_DEVICE_MAP,
the OOT lists and the per-op configuration. Here every answer comes from the
C core's effective policy (`fldispatch.config()`), which reads the same
variables (USE_FLAGGEMS, VLLM_FL_PREFER, VLLM_FL_PREFER_ENABLED,
VLLM_FL_FLAGOS_WHITELIST / _BLACKLIST, the platform file's flagos_blacklist,
VLLM_FL_OOT_*), so a backend's filter and fldispatch's selection agree.
Nothing imports flag_gems: get_flaggems_all_ops() asks for it only when called.

Installed as `vllm_fl.utils` by fldispatch.compat.alias.install().
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import fldispatch

__all__ = [
    "VENDOR_DEVICE_MAP", "OOT_OP_NAMES", "get_device_type", "get_device_name", "use_flaggems",
    "get_flag_gems_whitelist_blacklist", "use_flaggems_op", "get_op_config",
    "get_flaggems_all_ops", "get_oot_whitelist", "get_oot_blacklist", "is_oot_enabled",
]

#: Hardware vendor -> its device type and device name, the names upstream's
#: vendor backend directories go by.
VENDOR_DEVICE_MAP: Dict[str, Dict[str, str]] = {
    "nvidia": {"device_type": "cuda", "device_name": "nvidia"},
    "ascend": {"device_type": "npu", "device_name": "npu"},
    "iluvatar": {"device_type": "cuda", "device_name": "cuda"},
    "metax": {"device_type": "cuda", "device_name": "metax"},
    "mthreads": {"device_type": "musa", "device_name": "musa"},
    "sunrise": {"device_type": "ptpu", "device_name": "ptpu"},
    "hygon": {"device_type": "cuda", "device_name": "cuda"},
    "thead": {"device_type": "cuda", "device_name": "thead"},
    "enflame": {"device_type": "gcu", "device_name": "gcu"},
    "tsingmicro": {"device_type": "txda", "device_name": "txda"},
}

#: The layers upstream replaces through vLLM's CustomOp (the OOT lists name these).
OOT_OP_NAMES = ["silu_and_mul", "gelu_and_mul", "rms_norm", "rotary_embedding", "fused_moe",
                "unquantized_fused_moe_method"]


def _device_field(vendor_name: str, field: str) -> str:
    if not isinstance(vendor_name, str) or not vendor_name.strip():
        raise ValueError("vendor_name must be a non-empty string")
    info = VENDOR_DEVICE_MAP.get(vendor_name)
    if info is None:
        raise ValueError(f"vendor '{vendor_name}' is not in VENDOR_DEVICE_MAP (known: "
                         f"{', '.join(sorted(VENDOR_DEVICE_MAP))})")
    return info[field]


def get_device_type(vendor_name: str) -> str:
    return _device_field(vendor_name, "device_type")


def get_device_name(vendor_name: str) -> str:
    return _device_field(vendor_name, "device_name")


def _policy() -> Dict[str, Any]:
    """The core's effective policy fields: key -> value (per-op orders as
    "per_op.<op>" -> [token, ...])."""
    return {f["key"]: f["value"] for f in fldispatch.config()["policy"]}


def use_flaggems(default: bool = True) -> bool:
    """Whether the flagos tier may be used at all (the core's kill switch and flaggems
    switch). `default` is upstream's answer when USE_FLAGGEMS is unset, which the
    core's switch already holds."""
    p = _policy()
    return bool(p.get("enabled", True)) and bool(p.get("use_flaggems", default))


def get_flag_gems_whitelist_blacklist() -> Tuple[Optional[List[str]], Optional[List[str]]]:
    """(whitelist, blacklist) of flagos ops in force; each None when unset."""
    p = _policy()
    white = p.get("flagos_whitelist") or None
    black = p.get("flagos_blacklist") or None
    if white:
        return list(white), None
    return None, list(black) if black else None


def use_flaggems_op(op_name: str, default: bool = True) -> bool:
    """Whether FlagGems may serve `op_name`: the flagos switches, then the whitelist,
    then the blacklist, as the core's selection applies them."""
    if not use_flaggems(default=default):
        return False
    white, black = get_flag_gems_whitelist_blacklist()
    if white is not None:
        return op_name in white
    if black is not None:
        return op_name not in black
    return True


def get_op_config() -> Optional[Dict[str, str]]:
    """{op: token} of VLLM_FL_OP_CONFIG's single-token orders, or None when no per-op
    order is in force (read from the core's per-op orders)."""
    out = {key.partition(".")[2]: order[0] for key, order in _policy().items()
           if key.startswith("per_op.") and isinstance(order, list) and len(order) == 1}
    return out or None


def get_flaggems_all_ops() -> List[str]:
    """The op names FlagGems lists (empty when flag_gems does not import)."""
    try:
        import flag_gems

        return [entry[0] for entry in flag_gems._FULL_CONFIG]
    except Exception:  # noqa: BLE001 - absent or changed FlagGems: nothing listed
        return []


def get_oot_whitelist() -> Optional[List[str]]:
    white = _policy().get("oot_whitelist")
    return list(white) if white else None


def get_oot_blacklist() -> Optional[List[str]]:
    p = _policy()
    if p.get("oot_whitelist"):
        return None
    black = p.get("oot_blacklist")
    return list(black) if black else None


def is_oot_enabled() -> bool:
    p = _policy()
    return bool(p.get("enabled", True)) and bool(p.get("oot_enabled", True))
