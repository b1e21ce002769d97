# SPDX-License-Identifier: Apache-2.0
"""The dicts fldispatch's introspection returns, as a type checker sees them.

explain(), plugins(), impls() and config() return the objects of
`fldispatch resolve/list/config --json` (docs/json-output.md), whose
schemas are docs/schemas/*.schema.json; each class here is one object of
those schemas, key for key, and python/tests/test_json_types.py holds them
to the schemas and to what the functions return. stats() returns the
library's call counters (CallCounts), which no schema describes.

    from fldispatch.json_types import Explanation

    def winner(op: str) -> str | None:
        e: Explanation = fldispatch.explain(op)
        return e["selected"]
"""

from __future__ import annotations

from typing import Any, TypedDict

__all__ = ["Rejection", "Explanation", "PluginRecord", "ImplRecord", "Platform", "PolicyEntry",
           "Configuration", "CallCounts"]


class Rejection(TypedDict):
    """An implementation explain() dropped, and why."""

    impl_id: str
    reason: str


class Explanation(TypedDict):
    """explain(op, device, dtype): `fldispatch resolve OP --json`
    (docs/schemas/resolve.schema.json; without its `rows`, which explain()
    takes no argument for)."""

    schema: int
    op: str
    device: str
    dtype: str
    selected: str | None
    candidates: list[str]
    rejected: list[Rejection]
    order: list[str] | None
    order_source: str | None
    policy_summary: str


class PluginRecord(TypedDict):
    """One of plugins(): an object of `fldispatch list --json`'s "plugins"
    (docs/schemas/list.schema.json, $defs/plugin)."""

    name: str
    path: str | None
    builtin: bool
    version: str | None
    abi_major: int
    abi_minor: int
    in_tree: bool
    status: str
    reason: str | None
    impl_count: int
    detail: str | None
    hook_devices: list[str]


class ImplRecord(TypedDict):
    """One of impls(): an object of `fldispatch list --json`'s "impls"
    (docs/schemas/list.schema.json, $defs/impl)."""

    op: str
    impl_id: str
    kind: str
    vendor: str | None
    priority: int
    devices: list[str]
    dtypes: list[str]
    plugin: str
    in_tree: bool
    available: bool
    reason: str | None


class Platform(TypedDict):
    """config()'s "platform"."""

    name: str
    detected_by: str
    config_file: str | None
    config_path: list[str]


class PolicyEntry(TypedDict):
    """One of config()'s "policy": a field, its value (a bool for a switch, a
    list for a list, a str, or None) and where the value comes from
    (docs/schemas/config.schema.json, $defs/field)."""

    key: str
    value: Any
    source: str


class Configuration(TypedDict):
    """config(): `fldispatch config --json` (docs/schemas/config.schema.json)."""

    schema: int
    platform: Platform
    policy: list[PolicyEntry]
    policy_summary: str
    plugin_path: list[str]


class CallCounts(TypedDict):
    """One of stats(): the counters of one (op, impl_id, device, dtype) that
    ran (dtype "f32", "f16" or "bf16"; total_ns counted when the mode is
    "time")."""

    op: str
    impl_id: str
    device: str
    dtype: str
    calls: int
    fallbacks: int
    failures: int
    total_ns: int
