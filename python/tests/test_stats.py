# SPDX-License-Identifier: Apache-2.0
"""fldispatch.stats(), stats_reset(), stats_summary() and friends: the library's
call counters seen from Python, Python-side records into the same table, and
the file a multiprocessing worker writes at its exit."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fldispatch

KEYS = {"op", "impl_id", "device", "dtype", "calls", "fallbacks", "failures", "total_ns"}


def call_silu(n):
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(2, 16)
    out = np.zeros((2, 8), np.float32)
    for _ in range(n):
        fldispatch.silu_and_mul(out, x)


@pytest.fixture
def counting():
    fldispatch.stats_enable("calls")
    fldispatch.stats_reset()
    yield
    fldispatch.stats_enable("off")
    fldispatch.stats_reset()


def rows_of(op):
    return [r for r in fldispatch.stats() if r["op"] == op]


def test_off_counts_nothing():
    fldispatch.stats_enable("off")
    fldispatch.stats_reset()
    call_silu(3)
    assert fldispatch.stats_mode() == "off"
    assert fldispatch.stats() == []


def test_counts_calls_per_implementation(counting):
    call_silu(5)
    impl = fldispatch.resolve("silu_and_mul")
    rows = rows_of("silu_and_mul")
    assert rows == [{"op": "silu_and_mul", "impl_id": impl, "device": "cpu", "dtype": "f32",
                     "calls": 5, "fallbacks": 0, "failures": 0, "total_ns": 0}]
    assert set(rows[0]) == KEYS
    summary = fldispatch.stats_summary()
    assert "fldispatch stats" in summary
    assert any("silu_and_mul" in line and impl in line and " 5 " in line
               for line in summary.splitlines())
    fldispatch.stats_reset()
    assert fldispatch.stats() == []


def test_time_mode_times(counting):
    fldispatch.stats_enable("time")
    assert fldispatch.stats_mode() == "time"
    call_silu(3)
    (row,) = rows_of("silu_and_mul")
    assert row["calls"] == 3 and row["total_ns"] > 0


def test_python_side_records_join_the_table(counting):
    fldispatch._C._stats_record("rms_norm", "vendor.python", "cpu", "bfloat16", 0, False, 100)
    fldispatch._C._stats_record("rms_norm", "vendor.python", "cpu", "bf16", status=-7,
                                fell_back=True, ns=50)
    (row,) = rows_of("rms_norm")
    assert row == {"op": "rms_norm", "impl_id": "vendor.python", "device": "cpu",
                   "dtype": "bf16", "calls": 2, "fallbacks": 1, "failures": 1, "total_ns": 150}
    with pytest.raises(fldispatch.InvalidArgumentError):
        fldispatch._C._stats_record("", "vendor.python", "cpu", "f32")


def test_stats_enable_rejects_unknown_modes():
    with pytest.raises(ValueError, match="stats_enable"):
        fldispatch.stats_enable("sometimes")


def test_a_multiprocessing_worker_writes_its_own_file(tmp_path):
    # A worker leaves through os._exit(): no C exit handler runs there, so the
    # package writes the file from multiprocessing's exit hook.
    script = textwrap.dedent("""
        import multiprocessing as mp, os, sys
        import numpy as np
        import fldispatch

        def work():
            x = np.ones((2, 16), np.float32)
            out = np.zeros((2, 8), np.float32)
            for _ in range(6):
                fldispatch.silu_and_mul(out, x)
            print(os.getpid(), flush=True)

        if __name__ == "__main__":
            p = mp.get_context(sys.argv[1]).Process(target=work)
            p.start(); p.join()
            sys.exit(p.exitcode)
    """)
    path = tmp_path / "worker.py"
    path.write_text(script)
    for method in ("fork", "spawn"):
        env = dict(os.environ, VLLM_FL_STATS="1",
                   VLLM_FL_STATS_FILE=str(tmp_path / f"stats-{method}-%p.json"))
        out = subprocess.run([sys.executable, str(path), method], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        child = out.stdout.split()[0]
        doc = json.loads((tmp_path / f"stats-{method}-{child}.json").read_text())
        rows = [e for e in doc["entries"] if e["op"] == "silu_and_mul"]
        assert [r["calls"] for r in rows] == [6], doc


def test_a_multiprocessing_worker_prints_its_table_once(tmp_path):
    # Without VLLM_FL_STATS_FILE the counters go to stderr as a table: once
    # per process whatever the start method, though a spawned worker runs
    # both multiprocessing's exit hook and the library's exit handler. The
    # worker imports fldispatch as vLLM's workers load the plugin: once it
    # runs, as a worker (which arms the exit hook).
    script = textwrap.dedent("""
        import multiprocessing as mp, os, sys
        import numpy as np

        def work():
            import fldispatch

            x = np.ones((2, 16), np.float32)
            out = np.zeros((2, 8), np.float32)
            for _ in range(3):
                fldispatch.silu_and_mul(out, x)
            print(os.getpid(), flush=True)

        if __name__ == "__main__":
            p = mp.get_context(sys.argv[1]).Process(target=work)
            p.start(); p.join()
            sys.exit(p.exitcode)
    """)
    path = tmp_path / "worker.py"
    path.write_text(script)
    for method in ("fork", "spawn", "forkserver"):
        env = dict(os.environ, VLLM_FL_STATS="1")
        env.pop("VLLM_FL_STATS_FILE", None)
        out = subprocess.run([sys.executable, str(path), method], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        child = out.stdout.split()[0]
        tables = [line for line in out.stderr.splitlines()
                  if line.startswith(f"fldispatch stats (pid {child},")]
        assert len(tables) == 1, (method, out.stderr)
        rows = [line.split() for line in out.stderr.splitlines() if line.startswith("silu_and_mul")]
        assert [r[4] for r in rows] == ["3"], (method, out.stderr)


def test_a_killed_worker_keeps_what_the_interval_wrote(tmp_path):
    # With VLLM_FL_STATS_INTERVAL the library rewrites the file while the
    # process runs, from a thread of its own (a forked child starts its
    # own): a worker that is killed, and so runs no exit hook at all, still
    # leaves its counts. The parent kills it once its file holds them.
    script = textwrap.dedent("""
        import json, multiprocessing as mp, os, sys, time
        import numpy as np
        import fldispatch

        def work(ready):
            x = np.ones((2, 16), np.float32)
            out = np.zeros((2, 8), np.float32)
            for _ in range(6):
                fldispatch.silu_and_mul(out, x)
            ready.put(os.getpid())
            time.sleep(600)

        def calls_in(path):
            try:
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                return None
            return [e["calls"] for e in doc["entries"] if e["op"] == "silu_and_mul"]

        if __name__ == "__main__":
            ctx = mp.get_context(sys.argv[1])
            ready = ctx.Queue()
            p = ctx.Process(target=work, args=(ready,))
            p.start()
            pid = ready.get(timeout=120)
            path = os.environ["VLLM_FL_STATS_FILE"].replace("%p", str(pid))
            deadline = time.monotonic() + 60
            while calls_in(path) != [6] and time.monotonic() < deadline:
                time.sleep(0.05)
            p.kill(); p.join()
            print(pid, calls_in(path), p.exitcode, flush=True)
    """)
    path = tmp_path / "worker.py"
    path.write_text(script)
    for method in ("fork", "spawn", "forkserver"):
        env = dict(os.environ, VLLM_FL_STATS_INTERVAL="0.2",
                   VLLM_FL_STATS_FILE=str(tmp_path / f"stats-{method}-%p.json"))
        env.pop("VLLM_FL_STATS", None)
        out = subprocess.run([sys.executable, str(path), method], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        pid, calls, exitcode = out.stdout.split()
        assert (calls, exitcode) == ("[6]", "-9"), (method, out.stdout, out.stderr)
        doc = json.loads((tmp_path / f"stats-{method}-{pid}.json").read_text())
        assert [e["calls"] for e in doc["entries"] if e["op"] == "silu_and_mul"] == [6], doc


def test_an_interval_without_a_file_is_refused(tmp_path):
    env = dict(os.environ, VLLM_FL_STATS="1", VLLM_FL_STATS_INTERVAL="30")
    env.pop("VLLM_FL_STATS_FILE", None)
    env.pop("VLLM_FL_TRACE", None)
    code = ("import fldispatch\n"
            "try:\n"
            "    fldispatch.init()\n"
            "except fldispatch.ConfigError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("VLLM_FL_STATS_INTERVAL: '30' asks to rewrite the files while "
                                 "the process runs, but there is none"), out.stdout
