# SPDX-License-Identifier: Apache-2.0
"""fldispatch/_C.pyi, the types of the extension that users' type checkers
(and make lint's mypy) read, against the extension itself: every name it
defines is declared (the catalog's ops aside, which the stub's module
__getattr__ types), nothing is declared that it lacks, each function with
its parameters (names, kinds, defaults), each error class with its bases.
The package ships the stub and the PEP 561 marker beside the extension."""

import ast
import inspect
from pathlib import Path

import pytest

import fldispatch
from fldispatch import _C

PACKAGE = Path(fldispatch.__file__).parent
STUB = ast.parse((PACKAGE / "_C.pyi").read_text())

KINDS = {
    "posonlyargs": inspect.Parameter.POSITIONAL_ONLY,
    "args": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "kwonlyargs": inspect.Parameter.KEYWORD_ONLY,
}


def _declared():
    """{name: its node} of the stub's top level."""
    names = {}
    for node in STUB.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


DECLARED = _declared()
OPS = {op for op, _schema in _C.catalog_ops()}
DEFINED = {n for n in dir(_C) if not (n.startswith("__") and n.endswith("__"))} - OPS


def _stub_parameters(fn):
    """[(name, kind, default)] of a stub function; default is inspect's empty,
    `...` (some default), or the literal."""
    a = fn.args
    out = []
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
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_C.pyi").is_file()


def test_the_stub_declares_every_name_of_the_extension_and_no_other():
    assert sorted(DEFINED - set(DECLARED)) == []
    # the module __getattr__ stands for the catalog's ops
    assert sorted(set(DECLARED) - DEFINED - {"__getattr__"}) == []


def test_the_catalogs_ops_are_left_to_the_module_getattr():
    assert "__getattr__" in DECLARED
    assert not OPS & set(DECLARED)
    assert OPS and all(callable(getattr(_C, op)) for op in OPS)


@pytest.mark.parametrize("name", sorted(n for n in DEFINED if inspect.isbuiltin(getattr(_C, n))))
def test_each_function_has_the_parameters_of_the_extension(name):
    stub = DECLARED[name]
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


@pytest.mark.parametrize("name", sorted(n for n in DEFINED if isinstance(getattr(_C, n), int)))
def test_each_constant_is_an_int(name):
    stub = DECLARED[name]
    assert isinstance(stub, ast.AnnAssign) and ast.unparse(stub.annotation) == "int"


def _positional_only(name):
    params = list(inspect.signature(getattr(_C, name)).parameters.values())
    return bool(params) and params[0].kind is inspect.Parameter.POSITIONAL_ONLY


@pytest.mark.parametrize("name", sorted(n for n in DEFINED
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
