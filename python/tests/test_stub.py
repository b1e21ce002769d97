# SPDX-License-Identifier: Apache-2.0
"""fldispatch's stubs, the types that users' type checkers (and make lint's
mypy) read, against the extension itself.

_C.pyi declares every name the extension defines but the catalog's ops
(nothing it lacks), each function with its parameters (names, kinds,
defaults), each error class with its bases. _ops.pyi, the catalog's op
functions, is made from the catalog's schemas (_C.catalog_ops(): names,
types, defaults, result) and docs; it is what `python3
python/tests/test_stub.py --write` writes with the built package on
PYTHONPATH, and each op's parameters are the extension's. The package
ships the stubs and the PEP 561 marker beside the extension."""

import ast
import inspect
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

import fldispatch
from fldispatch import _C

PACKAGE = Path(fldispatch.__file__).parent
SOURCE = Path(__file__).resolve().parents[1] / "fldispatch"

KINDS = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}


def _declared(stub):
    """{name: its node} of a stub's top level."""
    names: dict[str, ast.stmt] = {}
    for node in stub.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


C_STUB = ast.parse((PACKAGE / "_C.pyi").read_text())
DECLARED = _declared(C_STUB)
OPS_DECLARED = _declared(ast.parse((PACKAGE / "_ops.pyi").read_text())) if (PACKAGE / "_ops.pyi").exists() else {}
OPS = {op for op, _schema in _C.catalog_ops()}
DEFINED = {n for n in dir(_C) if not (n.startswith("__") and n.endswith("__"))} - OPS

# ---- _ops.pyi from the catalog's schemas -------------------------------------
# A schema's argument types as Python's (a Tensor: any DLPack producer), and
# its results.
SCHEMA_TYPES = {"Tensor": "Any", "float": "float", "int": "int", "bool": "bool", "str": "str"}
SCHEMA_RESULTS = {"()": "None", "str": "str"}
SCHEMA_ARGUMENT = re.compile(r"(?P<type>\w+)(?:\([a-z]!?\))?(?P<optional>\?)? (?P<name>\w+)(?:=(?P<default>.+))?")
OPS_HEADER = '''# SPDX-License-Identifier: Apache-2.0
"""The catalog's op functions (fldispatch.rms_norm, ...: fldispatch._C's) as
a type checker sees them, made from the catalog's schemas and docs
(<fldispatch/catalog.def>, _C.catalog_ops(), _C.catalog()). Written by
`python3 python/tests/test_stub.py --write` with the built package on
PYTHONPATH; python/tests/test_stub.py holds it to the catalog. A Tensor is
Any: any DLPack producer."""

from typing import Any
'''
WIDTH = 110


def _op_stub(op, schema, doc):
    """The stub of one op: its def from the schema, the catalog's doc."""
    arguments, result = schema.rsplit(" -> ", 1)
    params = []
    for text in arguments[1:-1].split(", ") if arguments != "()" else []:
        m = SCHEMA_ARGUMENT.fullmatch(text)
        assert m and m["type"] in SCHEMA_TYPES, f"{op}: no Python type for {text!r}"
        kind = SCHEMA_TYPES[m["type"]] + (" | None" if m["optional"] else "")
        params.append(f"{m['name']}: {kind}" + (f" = {m['default']}" if m["default"] else ""))
    assert result in SCHEMA_RESULTS, f"{op}: no Python type for the result {result!r}"
    line = f"def {op}({', '.join(params)}) -> {SCHEMA_RESULTS[result]}:"
    if len(line) > WIDTH:
        line = f"def {op}(\n" + "".join(f"    {p},\n" for p in params) + \
            f") -> {SCHEMA_RESULTS[result]}:"
    body = doc.replace("\n", "\n    ")
    return f'{line}\n    """{body}"""\n'


def ops_stub():
    """_ops.pyi as the catalog makes it."""
    docs = {op: doc for op, _family, doc in _C.catalog()}
    return OPS_HEADER + "".join(f"\n\n{_op_stub(op, schema, docs[op])}" for op, schema in _C.catalog_ops())


def _stub_parameters(fn):
    """[(name, kind, default)] of a stub function; default is inspect's empty,
    `...` (some default), or the literal."""
    a = fn.args
    out: list[tuple[str, inspect._ParameterKind, object]] = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + a.defaults
    for field, kind in KINDS.items():
        for p in getattr(a, field):
            if field == "kwonlyargs":
                d = a.kw_defaults[a.kwonlyargs.index(p)]
            else:
                d = defaults[positional.index(p)]
            out.append((p.arg, kind, _default(d)))
        if field == "args" and a.vararg:
            out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.empty))
    if a.kwarg:
        out.append((a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.empty))
    return out


def _default(node):
    if node is None:
        return inspect.Parameter.empty
    value = ast.literal_eval(node)
    return ... if value is Ellipsis else value


def test_the_package_carries_its_types():
    for name in ("py.typed", "_C.pyi", "_ops.pyi"):
        assert (PACKAGE / name).is_file(), name


def test_the_stub_declares_every_name_of_the_extension_and_no_other():
    assert sorted(DEFINED - set(DECLARED)) == []
    assert sorted(set(DECLARED) - DEFINED) == []


def test_the_ops_stub_is_made_from_the_catalog():
    assert (SOURCE / "_ops.pyi").read_text() == ops_stub(), \
        "the catalog changed: python3 python/tests/test_stub.py --write (with the built package on PYTHONPATH)"
    assert set(OPS_DECLARED) == OPS
    # ... and the extension's stub takes the ops from it
    assert any(isinstance(node, ast.ImportFrom) and node.module == "_ops" and node.level == 1
               and [a.name for a in node.names] == ["*"] for node in C_STUB.body)


@pytest.mark.parametrize("name", sorted(n for n in DEFINED | OPS if inspect.isbuiltin(getattr(_C, n))))
def test_each_function_has_the_parameters_of_the_extension(name):
    stub = DECLARED.get(name) or OPS_DECLARED[name]
    assert isinstance(stub, ast.FunctionDef), name
    runtime = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(_C, name)).parameters.values()]
    declared = _stub_parameters(stub)
    assert [(n, k) for n, k, _d in declared] == [(n, k) for n, k, _d in runtime]
    for (n, _k, want), (_n, _k2, have) in zip(declared, runtime):
        if want is ...:
            assert have is not inspect.Parameter.empty, (name, n)
        else:
            assert want == have, (name, n)


@pytest.mark.parametrize("name", sorted(n for n in DEFINED if isinstance(getattr(_C, n), type)))
def test_each_class_has_the_bases_of_the_extension(name):
    stub = DECLARED[name]
    assert isinstance(stub, ast.ClassDef), name
    assert [ast.unparse(b) for b in stub.bases] == \
        [b.__name__ for b in getattr(_C, name).__bases__ if b is not object]


@pytest.mark.parametrize("name", sorted(n for n in DEFINED if isinstance(getattr(_C, n), type)
                                         and issubclass(getattr(_C, n), _C.Error)))
def test_each_error_class_declares_the_status_it_has(name):
    stub = DECLARED[name]
    assert isinstance(stub, ast.ClassDef), name
    declared = [ast.unparse(node.annotation) for node in stub.body
                if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "status"]
    status = getattr(_C, name)("x").status
    assert declared == ["int | None" if status is None else "int"], (name, status)


@pytest.mark.parametrize("name", sorted(n for n in DEFINED if isinstance(getattr(_C, n), int)))
def test_each_constant_is_an_int(name):
    stub = DECLARED[name]
    assert isinstance(stub, ast.AnnAssign) and ast.unparse(stub.annotation) == "int"


def _positional_only(name):
    params = list(inspect.signature(getattr(_C, name)).parameters.values())
    return bool(params) and params[0].kind is inspect.Parameter.POSITIONAL_ONLY


@pytest.mark.parametrize("name", sorted(n for n in DEFINED | OPS
                                        if inspect.isbuiltin(getattr(_C, n)) and _positional_only(n)))
def test_a_positional_only_parameter_is_refused_by_keyword(name):
    """What the signatures (and so the stub) mark positional-only is: the call
    fails before the function runs."""
    first = next(iter(inspect.signature(getattr(_C, name)).parameters))
    with pytest.raises((TypeError, _C.InvalidArgumentError)):
        getattr(_C, name)(**{first: None})


# Functions of no parameters that only read: called, their result's type is
# held to the stub's return annotation (its outer type: list, tuple, dict,
# str, int, float, bool, None).
READERS = ("catalog", "catalog_ops", "signatures", "devices", "dtypes", "kinds", "policy_fields",
           "variables", "plugins", "impls", "config", "stats", "failed_impls", "version",
           "policy_describe", "policy_depth", "stats_mode", "stats_summary", "get_log_level",
           "last_error", "_stats_file_glob", "_stats_interval")


def _outer_types(annotation):
    """{'list', 'str', ...} of an annotation such as `tuple[dict[str, Any], ...]` or `str | None`."""
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _outer_types(annotation.left) | _outer_types(annotation.right)
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return {"NoneType" if ast.unparse(annotation) == "None" else ast.unparse(annotation)}


@pytest.mark.parametrize("name", READERS)
def test_what_a_reader_returns_is_of_the_declared_type(name):
    declared = _outer_types(DECLARED[name].returns)
    assert type(getattr(_C, name)()).__name__ in declared


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python3 python/tests/test_stub.py --write   (the built package on PYTHONPATH)")
    # a new file beside it, renamed over it: never through a link planted at its name
    target = SOURCE / "_ops.pyi"
    with tempfile.NamedTemporaryFile("w", dir=SOURCE, prefix=".ops-", suffix=".pyi", delete=False) as f:
        f.write(ops_stub())
    os.chmod(f.name, 0o644)
    os.replace(f.name, target)
    print(f"wrote {target}")
