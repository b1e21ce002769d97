# SPDX-License-Identifier: Apache-2.0
"""bench/compare_kernels.py against stand-in `fldispatch bench --json`
tools whose times are known: the medians, the base/new ratio, the A/A
column and the order of the runs. Nothing here times anything."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "compare_kernels.py")


def fake_tool(tmp_path, name, us_by_run, log):
    """A tool that answers `bench --json ...` with one silu_and_mul line
    whose time is the next of us_by_run each time it runs, and appends its
    name to log."""
    counter = tmp_path / f"{name}.count"
    counter.write_text("0")
    path = tmp_path / name
    path.write_text(f"""#!{sys.executable}
import json, sys
assert sys.argv[1:3] == ["bench", "--json"], sys.argv
times = {us_by_run!r}
with open({str(counter)!r}) as f:
    n = int(f.read())
with open({str(counter)!r}, "w") as f:
    f.write(str(n + 1))
with open({str(log)!r}, "a") as f:
    f.write({name!r} + "\\n")
print(json.dumps({{"results": [{{"op": "silu_and_mul", "impl_id": "vendor.cpu",
    "dtype": "bf16", "shape": "4096x4096", "threads": 1, "us": times[n],
    "bw_share": 100.0 / times[n]}}]}}))
""")
    path.chmod(0o755)
    return str(path)


def run(*argv):
    done = subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def row(lines):
    rows = [ln.split() for ln in lines if ln.startswith("silu_and_mul")]
    assert len(rows) == 1, lines
    return rows[0]


def test_base_over_new_from_medians(tmp_path):
    log = tmp_path / "log"
    base = fake_tool(tmp_path, "base", [10.0, 30.0, 12.0], log)
    new = fake_tool(tmp_path, "new", [5.0, 6.0, 100.0], log)
    lines = run(base, new, "--rounds", "3", "--", "--tokens", "4096")
    r = row(lines)
    # medians 12 and 6: 2.00x; no A/A column without --aa
    assert r[5:7] == ["12.000", "6.000"]
    assert r[-1] == "2.00x"
    assert "alternated" in lines[-1]
    assert log.read_text().split() == ["base", "new", "new", "base", "base", "new"]


def test_aa_runs_the_base_again_and_rotates(tmp_path):
    log = tmp_path / "log"
    # the base tool runs twice a round; in the rotated order its runs are
    # base, again | again, base | again, base: base 10, 16, 20 and again 12, 14, 18
    base = fake_tool(tmp_path, "base", [10.0, 12.0, 14.0, 16.0, 18.0, 20.0], log)
    new = fake_tool(tmp_path, "new", [5.0, 5.0, 5.0], log)
    lines = run(base, new, "--rounds", "3", "--aa", "--", "--tokens", "4096")
    r = row(lines)
    assert r[5:7] == ["16.000", "5.000"]
    assert r[-2:] == ["3.20x", "1.14x"]  # base/new, then base / base again (16 / 14)
    assert "A/A" in lines[0] and "A/A" in lines[-1]
    assert log.read_text().split() == ["base", "new", "base",
                                       "new", "base", "base",
                                       "base", "base", "new"]


def test_a_failing_tool_is_reported(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    bad.chmod(0o755)
    done = subprocess.run([sys.executable, SCRIPT, str(bad), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "failed (3): broken" in done.stderr
