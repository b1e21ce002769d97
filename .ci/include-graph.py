#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The dependency graph of core/, by module, and its cycles.

A module is a file stem: core/registry/registry.c and
core/registry/registry.h are module "registry". core/'s folders group the
modules (core/README.md); a module is named by its stem alone, whichever
folder holds it, and two files of one name in two folders are an error.
Module a depends on module b when a's .c or .h includes b.h ("b.h" in
quotes; system and public headers are left out), and when a uses a function
or variable that b's .c defines (an fld_ or fld__ name defined at file
scope, not static), whichever header declares it: a call is seen even when
its declaration lives in a header named after another module. A use is a
name in a's .c, or in the body of a static inline function or a macro of a's
.h (code that every includer of a.h compiles); a header's prototypes
declare, they do not use. A cycle is a strongly connected set of modules:
each reaches every other. core/README.md describes the levels these cycles
would cut across.

The documented upward calls (UPWARD below: a level calling up into the
module that starts it) are left out of the graph; any other call up shows
as a cycle.

    python3 .ci/include-graph.py            # summary: per module, and the cycles
    python3 .ci/include-graph.py --dot      # the graph for graphviz (dot -Tsvg)
    python3 .ci/include-graph.py --edges    # one "a -> b" line per dependency, and why
    python3 .ci/include-graph.py --check    # make lint's check (below)

--check checks both graphs: the includes alone must have no cycle; the
includes and uses together none but those KNOWN_CYCLES lists, each exactly
(a cycle that grows, a new one, or one that shrank or went away while its
entry stayed, fails), and every UPWARD call must still be made. It prints
one line per graph saying what it checked, and exits 1 on a failure, with
one path around each cycle at fault. With KNOWN_CYCLES empty it fails on
any cycle. --self-test checks the rules and the check on made-up cores
(make lint runs it). --includes-only draws the include graph alone.
"""
import argparse
import io
import os
import re
import signal
import sys
from typing import cast

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
# A function defined at file scope: a line that starts with its type, the
# name, the parameters, then the body's brace (attributes allowed between).
FUNCTION = re.compile(r"^(?!static\b)[A-Za-z_][^;{}()\n]*?\b(fld_\w+)\s*\([^;{}]*?\)\s*"
                      r"(?:__attribute__\s*\(\(.*?\)\)\s*)?\{", re.M | re.S)
# A variable defined at file scope (not static, not extern).
VARIABLE = re.compile(r"^(?!static\b|extern\b|typedef\b|struct\s+\w+\s*\{|enum\b|#)"
                      r"[A-Za-z_][^;{}()=\n]*?\b(fld_\w+)\s*(?:\[[^\]]*\])*\s*(?:=|;)", re.M)
NAME = re.compile(r"\bfld_\w+\b")
# In a header: the start of a static inline function, and a macro's body
# (its continuation lines included).
INLINE = re.compile(r"^[ \t]*static\s+(?:__)?inline\b[^;{]*\{", re.M)
MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)\n]*\))?((?:\\\n|[^\n])*)", re.M)

# (level, module above it): the documented upward calls (core/README.md,
# "The include graph"). Each must still be made (--check).
UPWARD = {
    ("host", "lifecycle"),  # fld__ensure_init_from() (host.h) -> fld__init_from() (lifecycle.c)
}

# Cycles --check would let through, one line each, exactly: none. core/ has
# no cycle by includes or by uses of definitions, so any cycle fails; a line
# here would be a reviewed exception, listed in core/README.md too.
KNOWN_CYCLES: tuple[frozenset[str], ...] = tuple(frozenset(c.split()) for c in cast("tuple[str, ...]", (
)))


def strip(text):
    """text without comments, string and character literals."""
    return COMMENT.sub(lambda m: " " if m.group(0).startswith("/") else '""', text)


def definitions(core, sources):
    """{name: module} of the non-static functions and variables core's .c files define."""
    defined: dict[str, str] = {}
    for name, text in sources.items():
        stem, ext = os.path.splitext(name)
        if ext != ".c":
            continue
        for m in FUNCTION.finditer(text):
            defined.setdefault(m.group(1), stem)
        for m in VARIABLE.finditer(text):
            defined.setdefault(m.group(1), stem)
    return defined


def header_code(text):
    """The code of a header that its includers compile: the bodies of its
    static inline functions and of its macros (text already stripped)."""
    parts = [m.group(1) for m in MACRO.finditer(text)]
    for m in INLINE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        parts.append(text[m.end():i])
    return "\n".join(parts)


def source_files(core):
    """{file name: its path} of the .c and .h files in core and its folders."""
    paths: dict[str, str] = {}
    for root, dirs, files in os.walk(core):
        dirs.sort()
        for name in sorted(files):
            if os.path.splitext(name)[1] not in (".c", ".h"):
                continue
            path = os.path.join(root, name)
            if name in paths:
                sys.exit(f"core include graph: {paths[name]} and {path}: one module name, two files")
            paths[name] = path
    return paths


def graph(core, calls=True, upward=None):
    """(deps, why, upward_made): deps {module: set(modules it depends on)}
    for the C files of core, by include and (calls) by the definitions its
    .c and its header's code use; why {(a, b): the first reason seen}; the
    calls of upward (default UPWARD) that are made, which deps leaves out."""
    upward = UPWARD if upward is None else upward
    deps: dict[str, set[str]]
    why: dict[tuple[str, str], str]
    deps, why, sources, made = {}, {}, {}, set()

    def edge(a, b, reason):
        if (a, b) in upward:
            made.add((a, b))
            return
        deps[a].add(b)
        why.setdefault((a, b), reason)

    paths = source_files(core)
    for name in sorted(paths):
        stem, ext = os.path.splitext(name)
        deps.setdefault(stem, set())
        with open(paths[name], encoding="utf-8") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            base = os.path.basename(inc)
            target, text_ext = os.path.splitext(base)
            if text_ext == ".h" and base in paths and target != stem:
                edge(stem, target, f"{name} includes {base}")
        sources[name] = strip(text)
    if calls:
        defined = definitions(core, sources)
        for name, text in sorted(sources.items()):
            stem, ext = os.path.splitext(name)
            code = text if ext == ".c" else header_code(text)
            for used in sorted(set(NAME.findall(code))):
                target = defined.get(used)
                if target and target != stem:
                    edge(stem, target, f"{name} uses {used}, defined in {target}.c")
    return deps, why, made


def modules(core, calls=True):
    """{module: set(modules it depends on)} for the C files of core: by
    include, and (calls) by the definitions it uses; UPWARD left out."""
    return graph(core, calls)[0]


def cycles(deps):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(deps[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(deps):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def shortest_loop(deps, comp, through=None):
    """A shortest path around the cycle comp, as [a, b, ..., a], through one
    of the modules through (default: any)."""
    inside, best = set(comp), None
    for start in sorted(through or comp):
        prev, frontier = {start: None}, [start]
        while frontier and start not in [w for v in frontier for w in deps[v] if w in inside]:
            nxt = []
            for v in frontier:
                for w in sorted(deps[v] & inside):
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        last = next((v for v in frontier if start in deps[v]), None)
        if last is None:
            continue
        back = []  # last, ..., start
        while last is not None:
            back.append(last)
            last = prev[last]
        path = back[::-1] + [start]
        if best is None or len(path) < len(best):
            best = path
    return best


def loop_text(deps, why, comp, through=None):
    path = shortest_loop(deps, comp, through)
    return "\n".join(f"    {a} -> {b}: {why[(a, b)]}" for a, b in zip(path, path[1:]))


def names(comp):
    return f"{len(comp)} modules: {' '.join(sorted(comp))}"


def judge_known(found, known):
    """The cycles found held to a KNOWN_CYCLES list: (let through, at fault,
    stale entries, the summary line's parts for them). An entry within a
    bigger cycle is at fault as grown, not stale."""
    let_through = [c for c in found if c in known]
    at_fault = [c for c in found if c not in known]
    stale = [k for k in known if not any(k <= c for c in found)]
    parts = [f"{len(let_through)} known cycle{'' if len(let_through) == 1 else 's'} let through "
             f"({'; '.join(names(c) for c in let_through)})"] if let_through else []
    if at_fault:
        parts.append(f"{len(at_fault)} cycle{'' if len(at_fault) == 1 else 's'} not in KNOWN_CYCLES")
    if stale:
        parts.append(f"{len(stale)} stale KNOWN_CYCLES entr{'y' if len(stale) == 1 else 'ies'}")
    return let_through, at_fault, stale, parts


def report_known(label, deps, why, known, found, at_fault, stale, err):
    """Prints to err, under label, one path around each cycle at fault and
    what to do with each stale KNOWN_CYCLES entry."""
    for c in at_fault:
        grown = [k for k in known if k < c]
        what = (f"a known cycle grew by {' '.join(sorted(c - grown[0]))}" if grown
                else "a cycle that KNOWN_CYCLES does not list")
        new = c - grown[0] if grown else None
        print(f"{label}: {what} ({names(c)}), e.g.\n{loop_text(deps, why, c, new)}", file=err)
    for k in stale:
        now = [c for c in found if c < k]
        print(f"{label}: KNOWN_CYCLES lists a cycle of {names(k)}; the graph has "
              f"{'; '.join(names(c) for c in now) if now else 'no cycle among them'}: "
              f"{'shrink' if now else 'delete'} the entry", file=err)


def check(core, known=None, upward=None, out=None, err=None):
    """make lint's check of core (see the top); known and upward default to
    KNOWN_CYCLES and UPWARD. Prints one line per graph to out, what failed to
    err; returns 0, or 1 on a failure."""
    known = KNOWN_CYCLES if known is None else known
    upward = UPWARD if upward is None else upward
    out = out or sys.stdout
    err = err or sys.stderr
    failed = False

    inc, inc_why, _ = graph(core, calls=False, upward=set())
    inc_cycles = cycles(inc)
    n_inc = sum(len(d) for d in inc.values())
    if inc_cycles:
        failed = True
        print(f"core include graph: {len(inc)} modules, {n_inc} edges by includes, "
              f"{len(inc_cycles)} cycle(s): FAILED", file=out)
        for c in inc_cycles:
            print(f"core include graph: a cycle by includes ({names(c)}), e.g.\n"
                  f"{loop_text(inc, inc_why, c)}", file=err)
    else:
        print(f"core include graph: {len(inc)} modules, {n_inc} edges by includes, no cycle",
              file=out)

    deps, why, made = graph(core, calls=True, upward=upward)
    found = [frozenset(c) for c in cycles(deps)]
    n_deps = sum(len(d) for d in deps.values())
    let_through, at_fault, stale, parts = judge_known(found, known)
    unmade = sorted(set(upward) - made)
    calls = ", ".join(f"{a} -> {b}" for a, b in sorted(made))
    text = (f"core include graph: {len(deps)} modules, {n_deps} edges by includes and uses of "
            f"definitions, {len(made)} declared upward call{'' if len(made) == 1 else 's'}"
            f"{f' ({calls})' if made else ''}, ")
    if unmade:
        parts.append(f"{len(unmade)} UPWARD call{'' if len(unmade) == 1 else 's'} no longer made")
    if not found and not parts:
        parts.append("no cycle")
    failed = failed or bool(at_fault or stale or unmade)
    print(text + ", ".join(parts) + (": FAILED" if at_fault or stale or unmade else ""), file=out)
    report_known("core include graph", deps, why, known, found, at_fault, stale, err)
    for a, b in unmade:
        print(f"core include graph: UPWARD lists {a} -> {b}, which {a} no longer uses: delete it",
              file=err)
    return 1 if failed else 0


def self_test():
    """The uses are seen through a header named after another module, and in
    a header's inline functions and macros; a static function, a prototype
    and a comment are not definitions or uses. The check fails on a cycle by
    includes, on a cycle by uses that is not known, on a known one grown,
    shrunk or gone, and on an upward call no longer made."""
    import tempfile

    def tree(files):
        core = tempfile.mkdtemp()
        for name, text in files.items():
            with open(os.path.join(core, name), "w", encoding="utf-8") as f:
                f.write(text)
        return core

    def run_check(core, known=(), upward=frozenset()):
        out, err = io.StringIO(), io.StringIO()
        rc = check(core, known, upward, out, err)
        return rc, out.getvalue(), err.getvalue()

    def fn(name, body="return 0;"):
        return f"int {name}(void)\n{{\n    {body}\n}}\n"

    cores = []
    try:
        core = tree({
            "x.h": "int fld__b(void);\nint fld__x(void);\n",
            "x.c": '#include "x.h"\n' + fn("fld__x"),
            "b.c": '#include "a.h"\n' + fn("fld__b", "return fld__a;")
                   + "static int fld__hidden(void)\n{\n    return 1;\n}\n",
            "a.h": "extern int fld__a;\n",
            "a.c": '#include "x.h"\nint fld__a = 1;\n/* fld__x() */\n'
                   "static int use(void)\n{\n    return fld__b();\n}\n",
            "c.c": "static int fld__hidden(void);\n" + fn("fld__c", "return fld__hidden();"),
        })
        cores.append(core)
        deps, inc = modules(core), modules(core, calls=False)
        assert deps == {"a": {"x", "b"}, "b": {"a"}, "c": set(), "x": set()}, deps
        assert inc == {"a": {"x"}, "b": {"a"}, "c": set(), "x": set()}, inc
        assert cycles(deps) == [["a", "b"]] and cycles(inc) == [], (cycles(deps), cycles(inc))

        # Strict without known cycles; a known cycle exactly is let through, and said so.
        rc, out, err = run_check(core)
        assert rc == 1 and "1 cycle not in KNOWN_CYCLES: FAILED" in out, out
        assert "a cycle that KNOWN_CYCLES does not list (2 modules: a b)" in err, err
        assert "a -> b: a.c uses fld__b, defined in b.c" in err and "b -> a: b.c includes a.h" in err, err
        rc, out, err = run_check(core, known=(frozenset("ab"),))
        assert rc == 0 and not err, (out, err)
        assert out.splitlines() == [
            "core include graph: 4 modules, 2 edges by includes, no cycle",
            "core include graph: 4 modules, 3 edges by includes and uses of definitions, "
            "0 declared upward calls, 1 known cycle let through (2 modules: a b)"], out

        # A known cycle grown (c -> a -> b -> c), and one that is gone.
        with open(os.path.join(core, "c.c"), "a", encoding="utf-8") as f:
            f.write("static int more(void)\n{\n    return fld__a;\n}\n")
        with open(os.path.join(core, "b.c"), "a", encoding="utf-8") as f:
            f.write(fn("fld__b2", "return fld__c();"))
        rc, out, err = run_check(core, known=(frozenset("ab"),))
        assert rc == 1 and "a known cycle grew by c (3 modules: a b c)" in err, err
        assert "b -> c: b.c uses fld__c, defined in c.c" in err, err
        assert "stale" not in out and "KNOWN_CYCLES lists" not in err, (out, err)
        rc, out, err = run_check(core, known=(frozenset("abc"), frozenset("xy")))
        assert rc == 1 and "1 stale KNOWN_CYCLES entry: FAILED" in out, out
        assert "KNOWN_CYCLES lists a cycle of 2 modules: x y; the graph has no cycle among " \
               "them: delete the entry" in err, err

        # A known cycle that shrank: the entry must shrink with it.
        core = tree({
            "a.c": fn("fld__a", "return fld__b();"), "b.c": fn("fld__b", "return fld__a();"),
            "c.c": fn("fld__c", "return fld__a();")})
        cores.append(core)
        rc, out, err = run_check(core, known=(frozenset("abc"),))
        assert rc == 1 and "the graph has 2 modules: a b: shrink the entry" in err, err

        # A cycle by includes fails even where the uses' cycle is known; a
        # use in a header's inline function or macro is its module's.
        core = tree({
            "p.h": '#include "q.h"\nstatic inline int p(void)\n{\n    return fld__up();\n}\n',
            "q.h": '#include "p.h"\n#define Q() \\\n    fld__m()\n',
            "m.c": fn("fld__m"), "top.c": fn("fld__up")})
        cores.append(core)
        rc, out, err = run_check(core, known=(frozenset("pq"),), upward={("p", "top")})
        assert rc == 1 and "2 edges by includes, 1 cycle(s): FAILED" in out, out
        assert "a cycle by includes (2 modules: p q)" in err, err
        assert "1 declared upward call (p -> top), 1 known cycle let through" in out, out
        assert graph(core, upward=set())[0] == {"p": {"q", "top"}, "q": {"p", "m"}, "m": set(),
                                                "top": set()}
        # An upward call no longer made.
        rc, out, err = run_check(core, known=(frozenset("pq"),), upward={("m", "top")})
        assert rc == 1 and "UPWARD lists m -> top, which m no longer uses: delete it" in err, err
    finally:
        import shutil
        for core in cores:
            shutil.rmtree(core)
    return 0


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", default=os.path.join(os.path.dirname(__file__), "..", "core"))
    ap.add_argument("--dot", action="store_true")
    ap.add_argument("--edges", action="store_true", help='one "a -> b" line per dependency, and why')
    ap.add_argument("--check", action="store_true",
                    help="make lint's check: no cycle by includes, and none by uses but KNOWN_CYCLES")
    ap.add_argument("--includes-only", action="store_true",
                    help="the include graph alone, without the uses of definitions")
    ap.add_argument("--self-test", action="store_true",
                    help="check the graph's rules and the check on small made-up cores, then exit")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if args.check:
        return check(args.core)
    deps, why, _ = graph(args.core, calls=not args.includes_only)
    comps = cycles(deps)
    if args.dot:
        print("digraph core {")
        for a in sorted(deps):
            for b in sorted(deps[a]):
                print(f'  "{a}" -> "{b}";')
        print("}")
    elif args.edges:
        for a in sorted(deps):
            for b in sorted(deps[a]):
                print(f"{a} -> {b}  ({why[(a, b)]})")
    else:
        users = {m: sorted(a for a in deps if m in deps[a]) for m in deps}
        print(f"{len(deps)} modules, {sum(len(d) for d in deps.values())} dependencies")
        for m in sorted(deps):
            print(f"  {m:22} includes {len(deps[m]):2}, included by {len(users[m]):2}")
        print(f"{len(comps)} cycle(s)")
        for c in comps:
            known = frozenset(c) in KNOWN_CYCLES
            print(f"  {len(c)} modules{' (known)' if known else ''}: {' '.join(c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
