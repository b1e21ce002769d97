# SPDX-License-Identifier: Apache-2.0
"""A property test of the names that enter the registry from Python: op
names, impl ids and vendor names drawn by a seeded generator (NUL inside,
lone surrogates, control characters, very long, keywords, non-ASCII,
valid ones). Each valid name registers and is found under exactly that
name; each invalid one raises ValueError naming it and leaves nothing
behind; nothing crashes. The rule checked against: the library's names are
[A-Za-z0-9_.] for ops and [A-Za-z0-9_.-] for impl ids and vendors, at most
96 characters (core/registry/registry.c), an impl id is "<kind>.<name>".

FLDPY_NAMES_SEED picks another seed and FLDPY_NAMES_CASES the number of
cases (the default run is short; fuzz-smoke may run more)."""

import keyword
import os
import random
import re
import string

import pytest

import fldispatch

SEED = int(os.environ.get("FLDPY_NAMES_SEED", "20261125"))
CASES = int(os.environ.get("FLDPY_NAMES_CASES", "400"))
MAX_LEN = 96
OP_CHARS = set(string.ascii_letters + string.digits + "_.")
ID_CHARS = OP_CHARS | {"-"}

PIECES = ["rms_norm", "silu_and_mul", "vendor", "op", "x", "\x00", "\udc80", "\ud800", "é",
          "\u2028", "\x1b[31m", "/", " ", "-", ".", "_", "9", "😀", "\t", "\x7f", "ß"]


def random_name(rng):
    """A name from one of several families."""
    family = rng.randrange(8)
    if family == 0:  # a valid one
        n = rng.randrange(1, 20)
        return "pn_" + "".join(rng.choice(string.ascii_letters + string.digits + "_")
                               for _ in range(n))
    if family == 1:  # a keyword (valid as a name: names are not Python identifiers)
        return rng.choice(list(keyword.kwlist) + ["None", "def", "class"])
    if family == 2:  # around the length limit
        return "pl_" + "a" * rng.choice([MAX_LEN - 4, MAX_LEN - 3, MAX_LEN - 2, 200, 5000])
    if family == 3:  # a valid name with a NUL inside or at the end
        base = "pz_" + "".join(rng.choice(string.ascii_lowercase) for _ in range(6))
        cut = rng.randrange(len(base) + 1)
        return base[:cut] + "\x00" + rng.choice(["", "zzz", "\x00"]) + base[cut:]
    if family == 4:  # random code points, surrogates included
        return "".join(chr(rng.choice([rng.randrange(0, 0x80), rng.randrange(0x80, 0x800),
                                       rng.randrange(0xD800, 0xE000),
                                       rng.randrange(0x10000, 0x110000)]))
                       for _ in range(rng.randrange(1, 12)))
    if family == 5:  # pieces glued together
        return "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 5)))
    if family == 6:
        return ""
    return "pd_" + "".join(rng.choice(string.ascii_lowercase + ".") for _ in range(8))


def valid(name, chars):
    return 0 < len(name) <= MAX_LEN and all(c in chars for c in name)


def listed(predicate):
    return [m for m in fldispatch.impls() if predicate(m)]


def check_refused(exc_info, name):
    """The message names the value: its repr (NUL, surrogates), or the name
    with unprintable characters escaped (the library's messages escape
    them), so every printable run of its start is in the message."""
    assert isinstance(exc_info.value, ValueError)
    text = str(exc_info.value)
    if repr(name)[1:40] in text:
        return
    runs = re.findall(r"[^\\\s\x00-\x1f\x7f-\x9f\u2028\u2029]+", name[:40])
    assert all(run in text for run in runs), (name, text)


def test_random_names_register_or_raise_value_error_naming_them():
    rng = random.Random(SEED)
    seen_ops = set()
    for case in range(CASES):
        field = rng.choice(["op", "impl_id", "vendor"])
        name = random_name(rng)
        op, tail, vendor = f"pn_case_{SEED}_{case}", f"c{case}", "pnv"
        if field == "op":
            op = name if name not in seen_ops else f"{name}{case}"
            name = op
            ok = valid(op, OP_CHARS)
        elif field == "impl_id":
            tail = name
            ok = valid("vendor." + tail, ID_CHARS) and tail != ""
        else:
            vendor = name
            ok = valid(vendor, ID_CHARS)
        impl_id = "vendor." + tail
        before = len(fldispatch.impls())
        if ok:
            fldispatch.register_impl(op, lambda: "ran", impl_id=impl_id, kind="vendor",
                                     vendor=vendor, plugin="pytest_names")
            seen_ops.add(op)
            found = listed(lambda m, o=op, i=impl_id: m["op"] == o and m["impl_id"] == i)
            assert len(found) == 1 and found[0]["vendor"] == vendor, (field, name)
            assert fldispatch.resolve(op) == impl_id
            assert fldispatch.call_op(op) == "ran"
            assert len(fldispatch.impls()) == before + 1
        else:
            with pytest.raises(ValueError) as e:
                fldispatch.register_impl(op, lambda: "ran", impl_id=impl_id, kind="vendor",
                                         vendor=vendor, plugin="pytest_names")
            check_refused(e, name)
            assert len(fldispatch.impls()) == before, (field, name)
            with pytest.raises((ValueError, fldispatch.NotFoundError)):
                fldispatch.resolve(op)


def test_random_names_in_a_registering_block_are_all_or_nothing():
    rng = random.Random(SEED + 1)
    for case in range(max(CASES // 10, 10)):
        good = f"pn_batch_{SEED}_{case}"
        bad = random_name(rng)
        if valid(bad, OP_CHARS):
            continue
        before = len(fldispatch.impls())
        with pytest.raises(ValueError) as e:
            with fldispatch.registering(f"pytest_batch_{case}"):
                fldispatch.register_impl(good, len, impl_id="reference.ok", kind="reference")
                fldispatch.register_impl(bad, len, impl_id="reference.bad", kind="reference")
        check_refused(e, bad)
        assert len(fldispatch.impls()) == before
        assert not listed(lambda m, g=good: m["op"] == g)


def test_random_names_at_the_lookup_functions():
    """resolve/explain/call_op/policy with hostile names: a ValueError or a
    NotFoundError (an unknown but well-formed name), never a crash or a
    match of another name."""
    rng = random.Random(SEED + 2)
    for _ in range(max(CASES // 4, 20)):
        name = random_name(rng)
        known = name in {m["op"] for m in fldispatch.impls()} or name in fldispatch.OPS
        for call in (fldispatch.resolve, fldispatch.explain, fldispatch.call_op):
            try:
                call(name)
            except (ValueError, fldispatch.NotFoundError):
                continue
            except TypeError:  # a catalog op called without its arguments
                assert name in fldispatch.OPS and call is fldispatch.call_op
                continue
            assert known, name
        try:
            with fldispatch.policy(deny_vendors=name or "x"):
                pass
        except ValueError:
            pass
