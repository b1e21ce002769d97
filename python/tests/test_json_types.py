# SPDX-License-Identifier: Apache-2.0
"""fldispatch.json_types, the types of explain(), plugins(), impls(),
config() and stats(), against the JSON schemas of the tool's --json
(docs/schemas) and against what the functions return: each class has the
keys of its schema object, each key the Python type its schema gives, and
each result exactly those keys."""

import json
from pathlib import Path

import pytest

import fldispatch
from fldispatch import json_types

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"

# (class, schema file, the object in it: a path of property names, "[]" for
# an array's items, "$defs/NAME"; the keys the schema has that Python leaves out)
OBJECTS = [
    (json_types.Explanation, "resolve", (), {"rows"}),
    (json_types.Rejection, "resolve", ("rejected", "[]"), set()),
    (json_types.PluginRecord, "list", ("$defs/plugin",), set()),
    (json_types.ImplRecord, "list", ("$defs/impl",), set()),
    (json_types.Configuration, "config", (), set()),
    (json_types.Platform, "config", ("platform",), set()),
    (json_types.PolicyEntry, "config", ("$defs/field",), set()),
]
# The classes that stand for the schemas' named and inline objects.
NAMES = {("resolve", ("rejected", "[]")): "Rejection", ("list", ("$defs/plugin",)): "PluginRecord",
         ("list", ("$defs/impl",)): "ImplRecord", ("config", ("platform",)): "Platform",
         ("config", ("$defs/field",)): "PolicyEntry"}
JSON_TYPES = {"string": "str", "integer": "int", "boolean": "bool", "null": "None"}


def _schema(name):
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def _object(doc, path):
    node = doc
    for step in path:
        if step.startswith("$defs/"):
            node = doc["$defs"][step[len("$defs/"):]]
        elif step == "[]":
            node = node["items"]
        else:
            node = node["properties"][step]
    return node


def _python_type(name, doc, path, node):
    """The annotation (as json_types writes it) of a schema node at path."""
    if "$ref" in node:
        ref = ("$defs/" + node["$ref"].rsplit("/", 1)[1],)
        target = _object(doc, ref)
        return NAMES[(name, ref)] if "properties" in target else _python_type(name, doc, ref, target)
    if "properties" in node:
        return NAMES[(name, path)]
    if "const" in node:
        return type(node["const"]).__name__
    if "enum" in node:
        kinds = {type(v).__name__ for v in node["enum"]}
        assert len(kinds) == 1, node
        return kinds.pop()
    if "anyOf" in node:
        kinds = {_python_type(name, doc, path, n) for n in node["anyOf"]}
        assert len(kinds) == 1, node
        return kinds.pop()
    if "type" not in node:
        return "Any"
    parts = []
    for kind in [node["type"]] if isinstance(node["type"], str) else node["type"]:
        if kind == "array":
            parts.append(f"list[{_python_type(name, doc, path + ('[]',), node['items'])}]")
        elif kind == "object":
            parts.append(NAMES[(name, path)])
        else:
            parts.append(JSON_TYPES[kind])
    return " | ".join(parts)


def _annotations(cls):
    """{key: its annotation as written} (json_types's are strings: TypedDict keeps them as ForwardRefs)."""
    return {k: getattr(v, "__forward_arg__", v) for k, v in cls.__annotations__.items()}


@pytest.mark.parametrize("cls, name, path, left_out", OBJECTS, ids=[o[0].__name__ for o in OBJECTS])
def test_each_class_is_its_schema_object(cls, name, path, left_out):
    doc = _schema(name)
    node = _object(doc, path)
    props = node["properties"]
    assert set(node.get("required", props)) - left_out <= set(props)
    want = {key: _python_type(name, doc, path + (key,), sub) for key, sub in props.items()
            if key not in left_out}
    assert _annotations(cls) == want
    assert cls.__total__


def test_every_class_is_named_in_all():
    classes = {n for n, v in vars(json_types).items() if isinstance(v, type) and v.__module__ == json_types.__name__}
    assert classes == set(json_types.__all__)


def test_what_the_functions_return_has_the_keys_of_the_classes():
    e = fldispatch.explain("rms_norm")
    assert set(e) == set(json_types.Explanation.__annotations__)
    with fldispatch.policy(prefer="reference", deny_vendors="cpu"):
        rejected = fldispatch.explain("rms_norm")["rejected"]
    assert rejected and all(set(r) == set(json_types.Rejection.__annotations__) for r in rejected)
    assert all(set(p) == set(json_types.PluginRecord.__annotations__) for p in fldispatch.plugins())
    assert all(set(m) == set(json_types.ImplRecord.__annotations__) for m in fldispatch.impls())
    c = fldispatch.config()
    assert set(c) == set(json_types.Configuration.__annotations__)
    assert set(c["platform"]) == set(json_types.Platform.__annotations__)
    assert all(set(f) == set(json_types.PolicyEntry.__annotations__) for f in c["policy"])


def test_the_call_counters_have_the_keys_of_call_counts():
    torch = pytest.importorskip("torch")
    mode = fldispatch.stats_mode()
    fldispatch.stats_enable("calls")
    try:
        fldispatch.silu_and_mul(torch.empty(2, 4), torch.randn(2, 8))
        rows = fldispatch.stats()
    finally:
        fldispatch.stats_reset()
        fldispatch.stats_enable(mode)
    assert rows and all(set(r) == set(json_types.CallCounts.__annotations__) for r in rows)
    assert all(isinstance(r[k], int) for r in rows for k in ("calls", "fallbacks", "failures", "total_ns"))
