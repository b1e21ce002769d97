#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The import graph of the Python package python/fldispatch, and its cycles.

A module is a .py file of the package, by its dotted name (fldispatch.vllm;
an __init__.py is its package, fldispatch.compat). Module a depends on
module b when a imports b anywhere in its file, at the top or inside a
function: `import fldispatch.b`, `from fldispatch import b`, `from . import
b`, `from .b import name`, `from .. import b`, and importlib.import_module
with a constant name; not what a type checker alone follows, the imports
under `if TYPE_CHECKING:` (they never run). `from P import name`, where P.name is not a module of
the package, depends on P itself. Importing a module runs the packages above
it first, so a depends on those too, but for the packages above a itself:
they have run before a starts (`from . import _C` in fldispatch.vllm adds
no edge). The compiled extension (fldispatch._C) has no Python imports and
is not a module of the graph. A cycle is a strongly connected set of
modules: each reaches every other.

    python3 .ci/import-graph.py            # per module, and the cycles
    python3 .ci/import-graph.py --edges    # one "a -> b" line per dependency, and why
    python3 .ci/import-graph.py --check    # make lint's check (below)

--check fails on any cycle but those KNOWN_CYCLES lists, each exactly (a
cycle that grows, a new one, or one that shrank or went away while its entry
stayed, fails). It prints one line saying what it checked, and exits 1 on a
failure, with one path around each cycle at fault. --self-test checks the
rules and the check on made-up packages (make lint runs it).
"""
import argparse
import ast
import importlib.util
import io
import os
import signal
import sys
from typing import TypeGuard, cast

PACKAGE = "fldispatch"

# Cycles --check lets through, one line each, exactly. The vLLM plugin's
# modules import each other (inside functions): a cycle to remove, after
# which this list is empty.
KNOWN_CYCLES: tuple[frozenset[str], ...] = tuple(frozenset(c.split()) for c in cast("tuple[str, ...]", (
)))


def _load_include_graph():
    """.ci/include-graph.py, for its cycle search and its verdict on the
    known cycles (cycles, judge_known, report_known)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include-graph.py")
    spec = importlib.util.spec_from_file_location("fld_include_graph", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_include_graph = _load_include_graph()
cycles = _include_graph.cycles


def package_modules(root, package=PACKAGE):
    """{dotted name: (path relative to root, is a package)} for the .py files
    under root/package."""
    out = {}
    for folder, dirs, files in os.walk(os.path.join(root, package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)
            parts = rel[:-3].split(os.sep)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            out[".".join(parts)] = (rel, is_package)
    return out


def _above(name):
    """The packages above a dotted name, outermost first: a.b.c -> a, a.b."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(node: ast.AST) -> TypeGuard[ast.If]:
    """Whether node is `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`)."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def imports_of(tree, module, is_package):
    """(dotted name, line, text) for every import in the parsed file of
    module: the names imported, relative ones resolved, `from P import n` as
    both P.n and P."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    for_types_only = {id(inner) for node in ast.walk(tree) if _is_type_checking(node)
                      for stmt in node.body for inner in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in for_types_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1] if node.level > 1 else here
                if node.level - 1 > len(here):
                    continue
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module
            text = f"from {'.' * node.level}{node.module or ''} import "
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}", node.lineno, text + alias.name
                yield base, node.lineno, text + alias.name
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) == "import_module")):
            name = node.args[0].value
            yield name, node.lineno, f"import_module({name!r})"


def graph(root, package=PACKAGE):
    """{module: set(modules it imports)} and {(a, b): why} for the package."""
    mods = package_modules(root, package)
    deps: dict[str, set[str]] = {m: set() for m in mods}
    why = {}
    for module, (rel, is_package) in mods.items():
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        skip = set(_above(module)) | {module}
        for name, line, text in imports_of(tree, module, is_package):
            for target in _above(name) + [name]:
                if target in mods and target not in skip and target not in deps[module]:
                    deps[module].add(target)
                    why[(module, target)] = f"{rel}:{line}: {text}"
    return deps, why


def check(root, known=None, package=PACKAGE, out=None, err=None):
    """make lint's check (see the top); known defaults to KNOWN_CYCLES.
    Prints one line to out, what failed to err; returns 0, or 1 on a
    failure."""
    known = KNOWN_CYCLES if known is None else known
    out = out or sys.stdout
    err = err or sys.stderr
    deps, why = graph(root, package)
    found = [frozenset(c) for c in cycles(deps)]
    let_through, at_fault, stale, parts = _include_graph.judge_known(found, known)
    n_deps = sum(len(d) for d in deps.values())
    if not parts:
        parts.append("no cycle")
    failed = bool(at_fault or stale)
    print(f"python import graph: {len(deps)} modules of {package}, {n_deps} imports, "
          + ", ".join(parts) + (": FAILED" if failed else ""), file=out)
    _include_graph.report_known("python import graph", deps, why, known, found, at_fault, stale, err)
    return 1 if failed else 0


def self_test():
    """Imports are seen in every form (absolute, relative at each level,
    inside functions, import_module) but those for a type checker alone
    (under `if TYPE_CHECKING:`); the packages above the importer add no
    edge, those above the imported module do. The check fails on a cycle
    that is not known, and on a known one grown, shrunk or gone."""
    import shutil
    import tempfile

    def tree(files):
        root = tempfile.mkdtemp()
        for name, text in files.items():
            path = os.path.join(root, "pkg", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return root

    def run_check(root, known=()):
        out, err = io.StringIO(), io.StringIO()
        rc = check(root, known, "pkg", out, err)
        return rc, out.getvalue(), err.getvalue()

    roots = []
    try:
        root = tree({
            "__init__.py": "from . import _C\nfrom ._C import thing\nfrom .a import f\n",
            "a.py": "import os\nfrom . import _C\n\ndef f():\n    from .sub import deep\n",
            "b.py": "import pkg\nimport pkg.a\n",
            "c.py": "def g():\n    import importlib\n    return importlib.import_module('pkg.b')\n",
            "sub/__init__.py": "",
            "d.py": "name = 1\n",
            "sub/deep.py": "from .. import a\nfrom ..d import name\nfrom . import leaf\n",
            "sub/leaf.py": "from pkg.sub import deep\n",
            "e.py": "import typing\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                    "    from .b import x\nif typing.TYPE_CHECKING:\n    import pkg.c\n"
                    "else:\n    from . import d\n",
        })
        roots.append(root)
        deps, why = graph(root, "pkg")
        assert deps == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.sub", "pkg.sub.deep"}, "pkg.b": {"pkg.a"},
                        "pkg.c": {"pkg.b"}, "pkg.d": set(), "pkg.sub": set(),
                        "pkg.sub.deep": {"pkg.a", "pkg.d", "pkg.sub.leaf"},
                        "pkg.sub.leaf": {"pkg.sub.deep"}, "pkg.e": {"pkg.d"}}, deps
        assert why[("pkg.a", "pkg.sub.deep")] == "pkg/a.py:5: from .sub import deep", why
        assert why[("pkg.c", "pkg.b")] == "pkg/c.py:3: import_module('pkg.b')", why
        assert cycles(deps) == [["pkg.a", "pkg.sub.deep", "pkg.sub.leaf"]], cycles(deps)

        # Strict without known cycles; the known cycle exactly is let through, and said so.
        rc, out, err = run_check(root)
        assert rc == 1 and "1 cycle not in KNOWN_CYCLES: FAILED" in out, out
        assert "a cycle that KNOWN_CYCLES does not list (3 modules: pkg.a pkg.sub.deep " \
               "pkg.sub.leaf)" in err, err
        assert "e.g.\n    pkg.a -> pkg.sub.deep: pkg/a.py:5: from .sub import deep\n" \
               "    pkg.sub.deep -> pkg.a: pkg/sub/deep.py:1: from .. import a\n" in err, err
        assert why[("pkg.sub.leaf", "pkg.sub.deep")] == "pkg/sub/leaf.py:1: from pkg.sub import deep", why
        three = frozenset({"pkg.a", "pkg.sub.deep", "pkg.sub.leaf"})
        rc, out, err = run_check(root, known=(three,))
        assert rc == 0 and not err, (out, err)
        assert out.splitlines() == [
            "python import graph: 9 modules of pkg, 10 imports, 1 known cycle let through "
            "(3 modules: pkg.a pkg.sub.deep pkg.sub.leaf)"], out

        # A known cycle grown, shrunk, or gone.
        rc, out, err = run_check(root, known=(frozenset({"pkg.sub.deep", "pkg.sub.leaf"}),))
        assert rc == 1 and "a known cycle grew by pkg.a (3 modules:" in err, err
        assert "pkg.a -> pkg.sub.deep: pkg/a.py:5: from .sub import deep" in err, err
        rc, out, err = run_check(root, known=(three | {"pkg.d"}, frozenset({"pkg.x", "pkg.y"})))
        assert rc == 1 and "2 stale KNOWN_CYCLES entries: FAILED" in out, out
        assert "; the graph has 3 modules: pkg.a pkg.sub.deep pkg.sub.leaf: shrink the entry" in err, err
        assert "KNOWN_CYCLES lists a cycle of 2 modules: pkg.x pkg.y; the graph has no cycle " \
               "among them: delete the entry" in err, err

        # No cycle: one line, status 0.
        root = tree({"__init__.py": "from .a import x\n", "a.py": "import pkg\nfrom . import b\n",
                     "b.py": "from pkg import _C\n"})
        roots.append(root)
        rc, out, err = run_check(root)
        assert (rc, out, err) == (0, "python import graph: 3 modules of pkg, 2 imports, no cycle\n", ""), \
            (rc, out, err)
    finally:
        for root in roots:
            shutil.rmtree(root)
    return 0


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", "python"),
                    help="the folder that holds the package (default: python/)")
    ap.add_argument("--edges", action="store_true", help='one "a -> b" line per dependency, and why')
    ap.add_argument("--check", action="store_true", help="make lint's check: no cycle but KNOWN_CYCLES")
    ap.add_argument("--self-test", action="store_true",
                    help="check the graph's rules and the check on small made-up packages, then exit")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.check:
        return check(args.root)
    deps, why = graph(args.root)
    if args.edges:
        for a in sorted(deps):
            for b in sorted(deps[a]):
                print(f"{a} -> {b}  ({why[(a, b)]})")
        return 0
    users = {m: sorted(a for a in deps if m in deps[a]) for m in deps}
    print(f"{len(deps)} modules, {sum(len(d) for d in deps.values())} imports")
    for m in sorted(deps):
        print(f"  {m:36} imports {len(deps[m]):2}, imported by {len(users[m]):2}")
    comps = cycles(deps)
    print(f"{len(comps)} cycle(s)")
    for c in comps:
        known = frozenset(c) in KNOWN_CYCLES
        print(f"  {len(c)} modules{' (known)' if known else ''}: {' '.join(c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
