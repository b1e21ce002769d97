# SPDX-License-Identifier: Apache-2.0
"""fldispatch.prometheus: the counters files of several processes, as the
library writes them, served through prometheus_client's registry and read
back with its parser; the same text as `fldispatch stats --prometheus`; a
file at fault leaves the scrape working; the default pattern follows
VLLM_FL_STATS_FILE's escapes; the default collector joins the registries
of prometheus_client's multiprocess mode, and its first scrape warns when
the files are written at exit only."""

import ast
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import fldispatch
from fldispatch.__main__ import tool_path
from fldispatch.prometheus import CountersCollector

WORKER = textwrap.dedent("""
    import sys
    import numpy as np
    import fldispatch

    x = np.ones((2, 16), np.float32)
    out = np.zeros((2, 8), np.float32)
    for _ in range(int(sys.argv[1])):
        fldispatch.silu_and_mul(out, x)
""")


def run_workers(tmp_path, calls_by_rank):
    """One process per rank, each counting (VLLM_FL_STATS=time) its silu_and_mul calls into
    tmp_path/stats-RANK-PID.json as it exits."""
    for rank, calls in calls_by_rank.items():
        env = dict(os.environ, VLLM_FL_STATS="time", RANK=str(rank),
                   VLLM_FL_STATS_FILE=str(tmp_path / "stats-%r-%p.json"))
        env.pop("VLLM_FL_STATS_INTERVAL", None)
        out = subprocess.run([sys.executable, "-c", WORKER, str(calls)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr


def scrape(collector):
    """What a registry holding collector serves, parsed back: {sample name: {labels: value}}."""
    registry = CollectorRegistry()
    registry.register(collector)
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def silu_by_rank(samples, name):
    return {dict(labels)["rank"]: value for labels, value in samples.get(name, {}).items()
            if dict(labels)["op"] == "silu_and_mul"}


def test_the_ranks_files_on_a_registry(tmp_path):
    since = time.time()
    run_workers(tmp_path, {0: 3, 1: 5})
    # another run's file: older than since
    stale = tmp_path / "stats-9-999999.json"
    stale.write_text('{"pid": 999999, "rank": 9, "mode": "calls", "entries": [{"op": '
                     '"silu_and_mul", "impl_id": "x", "device": "cpu", "dtype": "f32", '
                     '"calls": 7, "fallbacks": 0, "failures": 0, "total_ns": 0}]}\n')
    os.utime(stale, (since - 3600, since - 3600))

    collector = CountersCollector(str(tmp_path / "stats-*-*.json"), since=since)
    assert len(collector.files()) == 2
    samples = scrape(collector)
    assert silu_by_rank(samples, "fldispatch_calls_total") == {"0": 3, "1": 5}, samples
    assert silu_by_rank(samples, "fldispatch_timed_calls_total") == {"0": 3, "1": 5}
    seconds = silu_by_rank(samples, "fldispatch_call_seconds_total")
    assert set(seconds) == {"0", "1"} and all(v > 0 for v in seconds.values()), seconds
    assert silu_by_rank(samples, "fldispatch_failures_total") == {"0": 0, "1": 0}
    assert samples["fldispatch_stats_files"] == {(): 2}
    for labels in samples["fldispatch_calls_total"]:
        assert [k for k, _ in labels] == ["device", "dtype", "impl_id", "op", "rank"]

    # what the tool prints for a textfile collector, family by family
    exe = tool_path()
    assert exe is not None, "the fldispatch tool is not built next to this package"
    tool = subprocess.run([exe, "stats", "--prometheus", "--by-rank",
                           *collector.files()], capture_output=True, text=True, timeout=60)
    assert tool.returncode == 0, tool.stderr
    printed = [(f.name, f.type, f.documentation, f.samples)
               for f in text_string_to_metric_families(tool.stdout)]
    served = [(f.name, f.type, f.documentation, f.samples) for f in collector.collect()]
    assert printed == served
    assert len(served) == 6

    # without since: every file, the other run's too; summed over ranks without by_rank
    everything = scrape(CountersCollector(str(tmp_path / "stats-*-*.json")))
    assert silu_by_rank(everything, "fldispatch_calls_total")["9"] == 7
    summed = scrape(CountersCollector(str(tmp_path / "stats-*-*.json"), since=since,
                                      by_rank=False))
    assert [v for labels, v in summed["fldispatch_calls_total"].items()
            if dict(labels)["op"] == "silu_and_mul"] == [8]
    assert "fldispatch_stats_files" in scrape(CountersCollector(str(tmp_path / "none-*.json")))


def test_a_file_at_fault_leaves_the_scrape_working(tmp_path, caplog):
    run_workers(tmp_path, {0: 2})
    bad = tmp_path / "stats-1-1.json"
    bad.write_text('{"pid": 1, "rank": 1, "mode": "calls"}\n')
    registry = CollectorRegistry()
    registry.register(CountersCollector(str(tmp_path / "stats-*.json")))
    Gauge("vllm_like_gauge", "what else the endpoint serves", registry=registry).set(4)
    with caplog.at_level(logging.WARNING, logger="fldispatch.prometheus"):
        for _ in range(2):
            text = generate_latest(registry).decode()
            assert "fldispatch_" not in text, text
            assert "vllm_like_gauge 4.0" in text, text
    warnings = [r.getMessage() for r in caplog.records if r.name == "fldispatch.prometheus"]
    assert len(warnings) == 1, warnings
    assert f"{bad}:1:1: the document has no 'entries'" in warnings[0], warnings

    bad.unlink()
    assert "fldispatch_calls_total{" in generate_latest(registry).decode()


def test_a_file_removed_after_the_listing_is_taken_as_gone(tmp_path):
    run_workers(tmp_path, {0: 4})
    collector = CountersCollector(str(tmp_path / "stats-*.json"))
    listings = [[str(tmp_path / "stats-0-gone.json"), *collector.files()]]
    real_files = collector.files
    collector.files = lambda: listings.pop() if listings else real_files()  # type: ignore[method-assign]  # stubbed
    assert silu_by_rank(scrape(collector), "fldispatch_calls_total") == {"0": 4}


def test_the_default_pattern_is_the_variable_s(tmp_path):
    # VLLM_FL_STATS_FILE's %r and %p match every rank and process, %% is a %,
    # and its own glob characters are literal
    directory = tmp_path / "a[1]"
    directory.mkdir()
    code = textwrap.dedent("""
        import numpy as np
        import fldispatch
        from fldispatch import prometheus
        from prometheus_client import REGISTRY, generate_latest

        collector = prometheus.register_default()  # initialises the library
        print(fldispatch._C._stats_file_glob())
        assert prometheus.register_default() is collector
        x = np.ones((2, 16), np.float32)
        out = np.zeros((2, 8), np.float32)
        for _ in range(3):
            fldispatch.silu_and_mul(out, x)
        fldispatch.stats_flush()
        print(collector.files())
        for line in generate_latest(REGISTRY).decode().splitlines():
            if line.startswith("fldispatch_calls_total{") and "silu_and_mul" in line:
                print(line)
    """)
    env = dict(os.environ, VLLM_FL_STATS="1", RANK="2",
               VLLM_FL_STATS_FILE=str(directory / "st*ts-%r-%p-%%.json"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    pattern, files, *lines = out.stdout.splitlines()
    assert pattern == str(tmp_path / "a[[]1]" / "st[*]ts-*-*-%.json"), pattern
    assert len(ast.literal_eval(files)) == 1 and "/st*ts-2-" in files, files
    assert len(lines) == 1 and lines[0].endswith('rank="2"} 3.0'), out.stdout

    env.pop("VLLM_FL_STATS_FILE")
    code = textwrap.dedent("""
        import fldispatch
        from fldispatch import prometheus
        print(prometheus.register_default(), fldispatch._C._stats_file_glob())
        try:
            prometheus.CountersCollector()
        except ValueError as e:
            print(e)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "None None",
        "CountersCollector: VLLM_FL_STATS_FILE is not set; name the files' glob pattern"]


def test_multiprocess_registries_get_the_default_collector(tmp_path):
    # a multiprocess server (vLLM's /metrics with several API servers, its
    # instrumentator) builds a registry per scrape and gives it prometheus_client's
    # MultiProcessCollector alone: after register_default() such a registry
    # also serves fldispatch's families, once (register_default() called
    # twice), beside the processes' own metrics
    multiprocess_dir = tmp_path / "prometheus"
    multiprocess_dir.mkdir()
    code = textwrap.dedent("""
        import numpy as np
        import fldispatch
        from fldispatch import prometheus
        from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess

        def page():
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return [line for line in generate_latest(registry).decode().splitlines()
                    if line.startswith(("requests_total", "fldispatch_calls_total"))]

        requests = Counter("requests", "a process's own metric")
        requests.inc(2)
        print(page())  # before: the multiprocess metrics alone
        collector = prometheus.register_default()
        assert prometheus.register_default() is collector
        multiprocess.MultiProcessCollector(None)  # no registry: nothing to join
        x = np.ones((2, 16), np.float32)
        out = np.zeros((2, 8), np.float32)
        for _ in range(3):
            fldispatch.silu_and_mul(out, x)
        fldispatch.stats_flush()
        for line in page():
            print(line)
    """)
    env = dict(os.environ, VLLM_FL_STATS="1", PROMETHEUS_MULTIPROC_DIR=str(multiprocess_dir),
               VLLM_FL_STATS_FILE=str(tmp_path / "stats-%p.json"))
    env.pop("VLLM_FL_STATS_INTERVAL", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    before, *lines = out.stdout.splitlines()
    assert before == "['requests_total 2.0']", out.stdout
    assert lines.count("requests_total 2.0") == 1, out.stdout
    silu = [line for line in lines if "silu_and_mul" in line]
    assert len(silu) == 1 and silu[0].endswith("} 3.0"), out.stdout


@pytest.mark.parametrize("interval", [None, "60"])
def test_the_first_scrape_says_when_the_files_are_written_at_exit_only(tmp_path, interval):
    code = textwrap.dedent("""
        import fldispatch
        from fldispatch import prometheus
        from prometheus_client import REGISTRY, generate_latest

        prometheus.register_default()
        print(fldispatch._C._stats_interval())
        for _ in range(2):
            generate_latest(REGISTRY)
    """)
    env = dict(os.environ, VLLM_FL_STATS_FILE=str(tmp_path / "stats-%p.json"))
    env.pop("VLLM_FL_STATS_INTERVAL", None)
    if interval:
        env["VLLM_FL_STATS_INTERVAL"] = interval
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == float(interval or 0), out.stdout
    from fldispatch.prometheus import EXIT_ONLY_NOTICE

    assert out.stderr.count(EXIT_ONLY_NOTICE) == (0 if interval else 1), out.stderr
    assert "VLLM_FL_STATS_INTERVAL is not set" in EXIT_ONLY_NOTICE


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        fldispatch._C._stats_metric_families([3], True)  # type: ignore[list-item]  # a wrong type, refused
    with pytest.raises(TypeError):
        fldispatch._C._stats_metric_families(5, True)  # type: ignore[arg-type]  # a wrong type, refused
    with pytest.raises(ValueError):
        fldispatch._C._stats_metric_families(["a\0b"], True)
    with pytest.raises(fldispatch.Error, match="cannot open"):
        fldispatch._C._stats_metric_families(["/nonexistent/stats.json"], False)
    families = fldispatch._C._stats_metric_families([], False)
    assert [f[:2] for f in families] == [
        ["fldispatch_calls_total", "counter"], ["fldispatch_fallbacks_total", "counter"],
        ["fldispatch_failures_total", "counter"], ["fldispatch_stats_files", "gauge"]]
    assert families[-1][3:] == [(), [((), 0)]]


def test_the_docs_name_the_families_there_are(tmp_path):
    # every family of the library's table in configuration.md, and no
    # family name in the docs that the table lacks
    run_workers(tmp_path, {0: 1})
    names = {f[0] for f in fldispatch._C._stats_metric_families(
        [str(p) for p in tmp_path.glob("stats-*.json")], True)}
    assert len(names) == 6, names
    docs = Path(__file__).resolve().parents[2] / "docs"
    configuration = (docs / "configuration.md").read_text(encoding="utf-8")
    for name in names:
        assert f"`{name}`" in configuration, name
    for page in ("configuration.md", "vllm.md", "BENCHMARKS.md", "python.md", "user-guide.md"):
        text = (docs / page).read_text(encoding="utf-8")
        mentioned = set(re.findall(r"\bfldispatch_[a-z_]+", text)) - {"fldispatch_"}
        family_like = {m for m in mentioned if m.endswith(("_total", "_files"))}
        assert family_like <= names, (page, family_like - names)
