# SPDX-License-Identifier: Apache-2.0
"""fldispatch's counters on a Prometheus endpoint.

CountersCollector is a prometheus_client collector that, at each scrape,
merges the counters files of a deployment's processes (VLLM_FL_STATS_FILE,
rewritten every VLLM_FL_STATS_INTERVAL seconds while they run) as
`fldispatch stats --prometheus --by-rank` merges them: the library merges
them and hands over the metric families of its exposition
(core/observe/stats_prometheus.c's table), which become prometheus_client's
families here, so that the endpoint serves what the tool prints. The vLLM
plugin registers one where vLLM's /metrics finds it (register_default:
prometheus_client's default registry, and the multiprocess registries of
several API servers); any other server registers its own:

    from prometheus_client import REGISTRY
    from fldispatch.prometheus import CountersCollector
    REGISTRY.register(CountersCollector())

A scrape never fails because of these files: a file that is not a
counters file, or two files of one process, leave fldispatch's families
out of that scrape, and a warning on the "fldispatch.prometheus" logger
names the file (once, until the message changes).
"""

import glob
import logging
import os
import time
import weakref
from typing import Any

from . import _C

logger = logging.getLogger(__name__)


class CountersCollector:
    """The counters files matching pattern (a glob; by default
    VLLM_FL_STATS_FILE's, every process's and rank's file), merged at each
    collect() with a rank label per row. Files last written before since
    (seconds since the epoch, as time.time() gives them) are another run's
    and left out; None takes every file. The default pattern initialises
    the library (a bad VLLM_FL_* setting raises fldispatch.ConfigError).
    notice: a line the first collect() logs as a warning (register_default
    sets one when the files are written at exit only), or None."""

    notice: str | None = None

    def __init__(self, pattern: str | None = None, since: float | None = None, by_rank: bool = True) -> None:
        if pattern is None:
            _C.init()
            pattern = _C._stats_file_glob()
            if pattern is None:
                raise ValueError("CountersCollector: VLLM_FL_STATS_FILE is not set; name the "
                                 "files' glob pattern")
        self.pattern = pattern
        self.since = since
        self.by_rank = by_rank
        self._warned: str | None = None

    def files(self) -> list[str]:
        """The files a scrape merges now, sorted."""
        found = []
        for path in glob.glob(self.pattern):
            try:
                if self.since is None or os.stat(path).st_mtime >= self.since:
                    found.append(path)
            except OSError:
                pass  # replaced or removed since the listing
        return sorted(found)

    def families(self) -> list[list[Any]]:
        """The merged files as [name, type, help, label names, [(label
        values, value), ...]] per metric family (core/observe/
        stats_prometheus.c's table); raises fldispatch.Error naming the
        file at fault. A file removed between the listing and its reading
        is taken as gone: one more listing."""
        paths = self.files()
        try:
            return _C._stats_metric_families(paths, self.by_rank)
        except Exception:
            again = self.files()
            if again == paths:
                raise
            return _C._stats_metric_families(again, self.by_rank)

    def describe(self) -> list[Any]:
        # Nothing to check at registration: collect() would read the files then.
        return []

    def collect(self) -> list[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        notice, self.notice = self.notice, None
        if notice:
            logger.warning("%s", notice)
        try:
            families = self.families()
        except Exception as e:
            message = str(e)
            if message != self._warned:
                logger.warning("fldispatch: the counters files %s were left out of this scrape: "
                               "%s", self.pattern, message)
                self._warned = message
            return []
        self._warned = None
        kinds = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily}
        metrics = []
        for name, kind, help_text, label_names, samples in families:
            metric = kinds[kind](name, help_text, labels=label_names or ())
            for values, value in samples:
                metric.add_metric(values, value)
            metrics.append(metric)
        return metrics


_default: CountersCollector | None = None
# A file's time comes from a coarser clock than time.time() (the kernel's
# tick, or a filesystem's granularity, up to 2 s): a file written just after
# the collector's start may carry an earlier time.
FILE_TIME_SLACK_S = 2.0


# What the first scrape says where this process (and so, as a rule, the
# processes of its deployment, which inherit its environment) writes its
# counters file only as it exits.
EXIT_ONLY_NOTICE = (
    "fldispatch: VLLM_FL_STATS_INTERVAL is not set, so each process writes its counters file as "
    "it exits: until then this endpoint has no counts of the processes that run; set "
    "VLLM_FL_STATS_INTERVAL=SECONDS to have their files rewritten while they run")


def register_default(since: float | None = None) -> CountersCollector | None:
    """Registers a CountersCollector of VLLM_FL_STATS_FILE's files where
    prometheus_client serves this process's metrics, once per process: on
    its default registry, and on each registry a
    prometheus_client.multiprocess.MultiProcessCollector is made for from
    then on (a multiprocess server builds one per scrape, as vLLM's /metrics
    does with more than one API server). Does nothing without the variable
    or without prometheus_client. Returns the collector, or None. since: the
    files' oldest time, by default now (less FILE_TIME_SLACK_S). Without
    VLLM_FL_STATS_INTERVAL, its first scrape logs EXIT_ONLY_NOTICE."""
    global _default
    if _default is not None:
        return _default
    _C.init()
    if _C._stats_file_glob() is None:
        return None
    try:
        from prometheus_client import REGISTRY, multiprocess
    except ImportError:
        return None
    if since is None:
        since = time.time() - FILE_TIME_SLACK_S
    collector = CountersCollector(since=since)
    if not _C._stats_interval():
        collector.notice = EXIT_ONLY_NOTICE
    REGISTRY.register(collector)
    _join_multiprocess_registries(multiprocess.MultiProcessCollector, collector)
    _default = collector
    return collector


def _join_multiprocess_registries(multiprocess_collector: Any, collector: CountersCollector) -> None:
    """multiprocess_collector.__init__ wrapped: each registry it registers
    on gets collector too, once."""
    init = multiprocess_collector.__init__
    joined: weakref.WeakSet[Any] = weakref.WeakSet()

    def __init__(self: Any, registry: Any, *args: Any, **kwargs: Any) -> None:
        init(self, registry, *args, **kwargs)
        if registry and registry not in joined:
            registry.register(collector)
            joined.add(registry)

    __init__.__doc__ = init.__doc__
    __init__.__wrapped__ = init  # type: ignore[attr-defined]  # as functools.wraps sets it
    multiprocess_collector.__init__ = __init__
