"""The app series: instances, restarts, crash loops, OOM kills, memory, CPU and disk from the
runtime; requests, upstream errors and latency from the data plane's counters.

    appdeck_app_instances{app,state}              gauge: state ``desired`` or ``running``
    appdeck_app_restarts_total{app}               restarts after a crash (this process saw)
    appdeck_app_crash_loops_total{app}            instances given up after a crash loop
    appdeck_app_oom_kills_total{app}              crashes with an OOM kill in their cgroup
    appdeck_app_memory_bytes{app}                 the live release's cgroups, summed
    appdeck_app_cpu_seconds_total{app}            the live release's cgroups' CPU time, summed
    appdeck_app_disk_bytes{app}                   the app's disk used
    appdeck_app_disk_quota_bytes{app}             and its quota
    appdeck_app_http_requests_total{app,code}     responses by class: 1xx … 5xx
    appdeck_app_http_upstream_errors_total{app}   502/504 the ingress made (refused, reset, …)
    appdeck_app_http_response_seconds_sum{app}    seconds to response headers, summed
    appdeck_app_http_response_seconds_count{app}  responses

Read at scrape time (a :class:`Collector`) from the health service's cached catalogue of live
apps, its last measurement of their instances (every 10 s, in a thread: instances and
memory/CPU are that old at most) and one pass over the ingress counters: no database query,
no file read.

**The ``app`` label is bounded.** It is the app's route key (``<app>--<tenant>``, names the
platform validated) for the first ``app_labels`` apps by id (``APPDECK_METRICS_APP_LABELS``,
default 200); every app beyond is summed into ``app="_other"``. A tenant cannot grow the
number of series past the operator's setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import REGISTRY
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from appdeck.platform.health import HealthService

OTHER_APP: Final = "_other"
DEFAULT_APP_LABELS: Final = 200
CODES: Final = ("1xx", "2xx", "3xx", "4xx", "5xx")


@dataclass(slots=True)
class _Row:
    desired: int = 0
    running: int = 0
    restarts: int = 0
    crash_loops: int = 0
    oom_kills: int = 0
    memory: int = 0
    cpu: float = 0.0
    disk: int = 0
    quota: int = 0
    measured: bool = False
    """Memory or CPU was read (else the gauges are left out: no cgroups here)."""
    disk_known: bool = False
    codes: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0, 0])
    upstream_errors: int = 0
    latency_sum: float = 0.0


class AppSeries(Collector):
    """The collector; :func:`follow` points it at the running server's health service (the
    last one started in the process wins: one per process in production)."""

    def __init__(self) -> None:
        self.health: HealthService | None = None
        self.app_labels = DEFAULT_APP_LABELS

    def rows(self) -> dict[str, _Row]:
        """Each ``app`` label's numbers (``_other`` holding every app past the limit)."""
        health = self.health
        if health is None:
            return {}
        rows: dict[str, _Row] = {}
        totals = health.counters.totals()
        for n, entry in enumerate(health.catalogue):
            label = entry.route if n < self.app_labels else OTHER_APP
            row = rows.get(label)
            if row is None:
                row = rows[label] = _Row()
            row.desired += entry.desired
            for status in health.measured(entry.release_id):
                row.running += status.state == "running"
                if status.memory_bytes is not None:
                    row.memory += status.memory_bytes
                    row.measured = True
                if status.cpu_seconds is not None:
                    row.cpu += status.cpu_seconds
                    row.measured = True
            events = health.events.get(entry.app_id)
            if events is not None:
                row.restarts += events.restarts
                row.crash_loops += events.crash_loops
                row.oom_kills += events.oom_kills
            disk = health.measured_disk(entry.app_id)
            if disk is not None:
                row.disk += disk.used_bytes
                row.quota += disk.quota_bytes
                row.disk_known = True
            traffic = totals.get(entry.route)
            if traffic is not None:
                for code in range(1, 6):
                    row.codes[code] += traffic.by_class[code]
                row.upstream_errors += traffic.upstream_errors
                row.latency_sum += traffic.latency_sum
        return rows

    def collect(self) -> Iterator[Metric]:
        rows = self.rows()
        instances = GaugeMetricFamily(
            "appdeck_app_instances",
            "Instances of the app's live release: desired, and running now",
            labels=["app", "state"],
        )
        families = {
            name: CounterMetricFamily(name, text, labels=["app"])
            for name, text in (
                ("appdeck_app_restarts", "Instance restarts after a crash"),
                ("appdeck_app_crash_loops", "Instances given up after a crash loop"),
                ("appdeck_app_oom_kills", "Instance crashes with an OOM kill"),
                ("appdeck_app_cpu_seconds", "CPU time of the live release's instances"),
                ("appdeck_app_http_upstream_errors", "Responses the ingress made: 502/504"),
            )
        }
        memory = GaugeMetricFamily(
            "appdeck_app_memory_bytes", "Memory of the live release's instances", labels=["app"]
        )
        disk = GaugeMetricFamily("appdeck_app_disk_bytes", "The app's disk used", labels=["app"])
        quota = GaugeMetricFamily(
            "appdeck_app_disk_quota_bytes", "The app's disk quota", labels=["app"]
        )
        requests = CounterMetricFamily(
            "appdeck_app_http_requests",
            "Responses through the ingress, by status class",
            labels=["app", "code"],
        )
        seconds = SummaryMetricFamily(
            "appdeck_app_http_response_seconds",
            "Seconds from request in to response headers out (_sum), over responses (_count)",
            labels=["app"],
        )
        for app, row in rows.items():
            instances.add_metric([app, "desired"], row.desired)
            instances.add_metric([app, "running"], row.running)
            families["appdeck_app_restarts"].add_metric([app], row.restarts)
            families["appdeck_app_crash_loops"].add_metric([app], row.crash_loops)
            families["appdeck_app_oom_kills"].add_metric([app], row.oom_kills)
            families["appdeck_app_http_upstream_errors"].add_metric([app], row.upstream_errors)
            if row.measured:
                memory.add_metric([app], row.memory)
                families["appdeck_app_cpu_seconds"].add_metric([app], row.cpu)
            if row.disk_known:
                disk.add_metric([app], row.disk)
                quota.add_metric([app], row.quota)
            for code, name in enumerate(CODES, start=1):
                requests.add_metric([app, name], row.codes[code])
            seconds.add_metric([app], sum(row.codes), row.latency_sum)
        yield instances
        yield from families.values()
        yield memory
        yield disk
        yield quota
        yield requests
        yield seconds


SERIES: Final = AppSeries()
REGISTRY.register(SERIES)


def follow(health: HealthService, app_labels: int = DEFAULT_APP_LABELS) -> None:
    """Serve the app series from ``health``, with at most ``app_labels`` apps by name."""
    SERIES.health = health
    SERIES.app_labels = app_labels
