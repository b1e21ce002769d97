#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Code of core/ and tools/ that is linked and never used.

Every function or variable an object of core/ or tools/ defines with
external linkage (nm) must be used outside its own source file: called or
named in another C, C++, CUDA or HIP source of the tree, or in a header
other than as its own declaration (a macro or a static inline function
that calls it counts). The public API (what include/fldispatch/*.h
declares, outside internal/) is the applications' to use and is left out;
so are the names each row of the catalog table (include/fldispatch/catalog.def)
derives by token pasting: its typed entry point fld_<name> (public) and its
reference kernel fld__ref_<name> (named by core/ops/catalog.c's schema rows).
A definition nothing else uses is either dead or belongs in its file as
static; both fail the check.

    python3 .ci/unused.py OBJ...     # the objects of core/ and tools/ (make lint passes them)

Prints one "file: symbol: defined with external linkage, used nowhere else"
line per finding; exit status 1 when there is one, 0 otherwise.
"""
import os
import re
import subprocess
import sys

SOURCES = (".c", ".cc", ".cu", ".hip")
HEADERS = (".h", ".cuh")
SKIP_DIRS = {"./.git", "./docs", "./bench"}  # and every build*/ tree


def defined_symbols(objects):
    """[(source file, symbol)] for each external definition of the objects."""
    out = subprocess.run(["nm", "-A", "--defined-only"] + objects, capture_output=True,
                         text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        obj, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 3 and parts[1] in "TDBRVG" and parts[2] != "main":
            found.append((source_of(obj), parts[2]))
    return found


def source_of(obj):
    """build[-x]/obj/core/names.o -> core/policy/names.c"""
    rel = obj.split("/obj/", 1)[1]
    return os.path.splitext(rel)[0] + ".c"


def tree_files():
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP_DIRS
                   and not (root == "." and d.startswith("build"))]
        for f in files:
            if f.endswith(SOURCES + HEADERS):
                yield os.path.normpath(os.path.join(root, f))


def public_names():
    names = set()
    inc = "include/fldispatch"
    for f in os.listdir(inc):
        if f.endswith(".h"):
            with open(os.path.join(inc, f), encoding="utf-8") as h:
                names.update(re.findall(r"\bfld_[a-z0-9_]+\b", h.read()))
        if f.endswith(".def"):
            with open(os.path.join(inc, f), encoding="utf-8") as h:
                for op in re.findall(r"^FLD_CATALOG_OP\(\w+,\s*(\w+),", h.read(), re.M):
                    names.update({"fld_" + op, "fld__ref_" + op})
    return names


def main():
    objects = [o for o in sys.argv[1:] if o.endswith(".o")]
    if not objects:
        print("unused.py: no objects given", file=sys.stderr)
        return 2
    symbols = defined_symbols(objects)
    public = public_names()
    wanted = {s for _, s in symbols if s not in public}
    word = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
    # Where each wanted name occurs: the files, and for headers whether as more than a
    # declaration (a declaration starts at column 0 with its type).
    uses: dict[str, set[str]] = {s: set() for s in wanted}
    for path in tree_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        header = path.endswith(HEADERS)
        for line in lines:
            for w in set(word.findall(line)) & wanted:
                if header and re.match(r"^(FLD_TOOL_API\s+)?[A-Za-z_][\w \*]*\b%s\s*[(\[;=]" % w,
                                       line):
                    continue
                uses[w].add(path)
    bad = 0
    for src, s in sorted(set(symbols)):
        if s in public:
            continue
        if not uses[s] - {src}:
            print(f"{src}: {s}: defined with external linkage, used nowhere else")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
