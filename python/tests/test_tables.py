# SPDX-License-Identifier: Apache-2.0
"""The tables the Python package derives from the library (_C.catalog(),
_C.devices(), _C.kinds(), _C.variables()) against their C sources, read
from the tree: a row added, changed or dropped there is one here."""

import os

import pytest

import fldispatch
from fldispatch import _C, devices, registry
from source_tables import catalog_rows, device_rows, kinds, variable_rows


def test_the_catalog_with_its_families_is_catalog_def():
    assert [(op, family) for op, family, _doc in _C.catalog()] == catalog_rows()
    assert [op for op, _family, _doc in _C.catalog()] == list(fldispatch.OPS)


def test_the_device_rows_are_the_device_table():
    keys = ("name", "alias", "torch", "torch_build")
    assert [{k: r[k] for k in keys} for r in devices.ROWS] == \
        [{k: r[k] for k in keys} for r in device_rows()]
    assert [r["mask"] for r in devices.ROWS] == [1 << i for i in range(len(devices.ROWS))]
    assert devices.ALL_BITS == registry.ALL_DEVICES == (1 << len(devices.ROWS)) - 1


def test_every_name_of_a_device_is_a_registration_name():
    rows = device_rows()
    names = {r["name"] for r in rows} | {r["alias"] for r in rows if r["alias"]} | \
        {r["torch"] for r in rows}
    assert set(registry.DEVICE_BITS) == names
    for i, r in enumerate(rows):
        assert registry.DEVICE_BITS[r["name"]] == 1 << i
        if r["alias"]:
            assert registry.DEVICE_BITS[r["alias"]] == 1 << i
    # a torch device type several rows share names the first of them
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        first.setdefault(r["torch"], 1 << i)
    assert {t: registry.DEVICE_BITS[t] for t in first} == first


def test_torch_device_types_name_the_library_device_of_this_pytorch():
    import torch

    assert devices.TORCH_TYPES == {r["torch"] for r in device_rows()}
    assert devices.TORCH_BUILT == tuple(r["name"] for r in device_rows() if r["torch_build"])
    for torch_type in devices.TORCH_TYPES:
        rows = [r for r in device_rows() if r["torch"] == torch_type]
        built = [r["name"] for r in rows
                 if r["torch_build"] and getattr(torch.version, r["torch_build"], None)]
        assert devices.library_name(torch_type) == (built or [rows[0]["name"]])[0]
    assert devices.library_name("cpu") == "cpu"
    assert devices.library_name("meta") == "meta"  # no row: the name itself


def test_the_kinds_are_plugin_h():
    header = kinds()
    assert sorted((k["code"], k["priority"]) for k in _C.kinds()) == sorted(header.values())
    assert registry.DEFAULT_PRIORITY == {code: prio for code, prio in header.values()}
    # each kind by its policy token and its impl_id prefix (contract section 6)
    by_token = {k["token"]: k for k in _C.kinds()}
    assert set(by_token) == {"flagos", "vendor", "reference"}
    assert by_token["flagos"]["code"] == header["DEFAULT"][0]
    assert by_token["flagos"]["prefix"] == "default"
    for k in _C.kinds():
        assert registry.KIND_CODES[k["token"]] == registry.KIND_CODES[k["prefix"]] == k["code"]
        assert registry.KIND_PREFIX[k["code"]] == k["prefix"]


def test_the_variable_rows_are_the_variable_table():
    assert [dict(v) for v in _C.variables()] == variable_rows()
    assert {v["compile"] for v in _C.variables()} <= {"GRAPH", "WHEN_SET", "NEVER"}


def test_the_compile_key_takes_the_graph_rows_and_the_policys_variables(monkeypatch):
    from fldispatch import vllm_compile

    rows = variable_rows()
    policy = {env.strip() for f in _C.policy_fields() for env in (f["env"] or "").split(",")
              if env.strip()}
    for name in list(os.environ):
        if name.startswith("VLLM_FL_"):
            monkeypatch.delenv(name)
    graph = {r["name"] for r in rows if r["compile"] == "GRAPH"}
    assert set(vllm_compile.graph_variables()) == graph | policy
    never = [r["name"] for r in rows if r["compile"] == "NEVER" and r["name"].startswith("VLLM_FL_")]
    when_set = [r["name"] for r in rows if r["compile"] == "WHEN_SET"]
    assert never and when_set
    for name in never + when_set + ["VLLM_FL_NOT_A_ROW"]:
        monkeypatch.setenv(name, "")
    assert set(vllm_compile.graph_variables()) == \
        graph | policy | set(when_set) | {"VLLM_FL_NOT_A_ROW"}


@pytest.mark.parametrize("name", ["VLLM_FL_STATS", "VLLM_FL_IO_DUMP", "VLLM_FL_LOG_LEVEL",
                                  "VLLM_FL_TRACE"])
def test_observing_variables_stay_out_of_the_compile_key(monkeypatch, name):
    from fldispatch import vllm_compile

    monkeypatch.setenv(name, "1")
    assert name not in vllm_compile.graph_variables()


def test_the_flagos_tier_serves_catalog_ops():
    from fldispatch import flagos

    assert flagos.OPS and set(flagos.OPS) <= set(op for op, _f, _d in _C.catalog())


def test_the_vllm_plugins_tables_name_catalog_ops():
    """The vLLM plugin's tables (fldispatch.vllm_layers) against the catalog:
    each layer's op is a catalog op of a family the mode tables have a
    column for, each IR op's is a catalog op with a call, and the
    activation ops are the catalog's gated ones."""
    from fldispatch import vllm_ir, vllm_layers, vllm_path

    families = dict(catalog_rows())
    for oot in vllm_layers.LAYERS:
        assert families[oot] in vllm_layers.MODE_COLUMNS, oot
        assert vllm_path.FAMILIES[oot] == vllm_layers.MODE_COLUMNS[families[oot]]
    for name, row in vllm_layers.IR_OPS.items():
        assert row.op in families and row.oot in vllm_layers.LAYERS, name
        assert set(row.layers) <= set(vllm_layers.LAYERS), name
    assert set(vllm_ir.CALLS) == set(vllm_layers.IR_OPS)
    assert vllm_layers.ACTIVATIONS == tuple(op for op, family in catalog_rows() if family == "GATED")
    assert set(vllm_layers.GELU_APPROXIMATE.values()) <= set(vllm_layers.ACTIVATIONS)
    for mode, columns in vllm_path.MODE_TABLE.items():
        assert set(columns) == set(vllm_layers.MODE_COLUMNS.values()), mode
