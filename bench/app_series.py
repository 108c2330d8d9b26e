"""What a ``/metrics`` scrape costs with many apps (issue 23): the app series.

    .venv/bin/python bench/app_series.py [--apps 1000] [--instances 2] [--scrapes 50]
                                          [--labels 200] [postgresql+asyncpg://…]

Writes ``--apps`` apps with a live deployment of ``--instances`` instances into a fresh
SQLite file (or the given PostgreSQL database: drop it afterwards) and 10 responses of every
status class into the ingress counters of each app's route, builds the health service on
them (the real one: store, catalogue, traffic ring) over a runtime stub whose ``inspect``
reads a real instance cgroup's usage once per instance (``Cgroups.usage``: v1
``memory.usage_in_bytes`` and ``cpuacct.usage``, v2 ``memory.current`` and ``cpu.stat``;
root needed to make the group), measures them (``HealthService.measure``), then times ``generate_latest`` of the whole default registry (the app series, the MCP and
TLS series, the process collectors), ``--scrapes`` times. Prints the catalogue refresh time
(two queries), the scrape's median and worst, its size, and the app collector alone.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import astuple
from pathlib import Path

from prometheus_client import REGISTRY, generate_latest

from appdeck.ingress.routes import Counters
from appdeck.model import specs
from appdeck.observability import apps as app_series
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.deploy.ports import DiskUsage, InstanceStatus, InstanceWatcher
from appdeck.platform.health import HealthService
from appdeck.platform.sources import SourceRoots
from appdeck.runtime.cgroups import Cgroups, Limits, Usage, remove_empty
from appdeck.storage import Storage
from appdeck.storage.apps import AppStore
from appdeck.storage.deployments import DeploymentStore
from appdeck.storage.engine import default_sqlite_url
from appdeck.storage.identity import IdentityStore


class StubRuntime:
    """``inspect`` as the local driver's costs for running sandboxed instances: the real
    :meth:`Cgroups.usage` of a real (empty) instance group, once per instance."""

    def __init__(self, instances: int) -> None:
        self.instances = instances
        self.cgroups = Cgroups.detect(name=f"appdeck-bench-{os.getpid()}")
        if self.cgroups is not None:
            self.cgroups.create("1-1.0", Limits())

    def inspect(self, release_id: str) -> list[InstanceStatus]:
        out = []
        for index in range(self.instances):
            usage = self.cgroups.usage("1-1.0") if self.cgroups else Usage(None, None)
            out.append(InstanceStatus(index, "running", 0, None, 0, *astuple(usage)))
        return out

    def disk_usage(self, app_id: int) -> DiskUsage | None:
        return None

    def watch(self, watcher: InstanceWatcher) -> None:
        pass

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.remove("1-1.0")
            remove_empty(self.cgroups.name)


async def measure(url: str, apps: int, instances: int, scrapes: int, labels: int) -> None:
    storage = await Storage.open(url)
    try:
        feed = ChangeFeed()
        store = AppStore(storage.engine)
        service = AppService(
            store,
            IdentityStore(storage.engine),
            feed,
            sources=SourceRoots([], data_dir=Path(tempfile.mkdtemp())),
            max_apps=apps,
            url_of=lambda name, tenant: f"http://{name}--{tenant}.localhost/",
        )
        deployments = DeploymentStore(storage.engine)
        counters = Counters()
        spec = specs.validate({"instances": instances})
        started = time.perf_counter()
        for n in range(apps):
            app = await store.create(f"t{n % 50}", f"app{n}", None, spec, "u")
            live = await deployments.create(
                app_id=app.id,
                strategy="rolling",
                spec=spec,
                env="",
                source={},
                created_by="u",
                previous=None,
                instance_id="bench",
                state="live",
            )
            for status in (101, 200, 302, 404, 503) * 10:
                counters.record(f"app{n}--t{n % 50}", live.release_id, status, 0.01)
        print(f"{apps} apps written in {time.perf_counter() - started:.1f} s")
        runtime = StubRuntime(instances)
        found = runtime.cgroups
        print(f"cgroups: {f'v{found.version}' if found else 'none (not root?)'}")
        health = HealthService(service, deployments, runtime, counters, feed)  # type: ignore[arg-type]
        started = time.perf_counter()
        await health.refresh()
        print(f"catalogue refresh (two queries): {(time.perf_counter() - started) * 1000:.1f} ms")
        started = time.perf_counter()
        await health.measure()
        print(f"measurement (in a thread): {(time.perf_counter() - started) * 1000:.1f} ms")
        app_series.follow(health, labels)
        times, collector = [], []
        body = b""
        for _ in range(scrapes):
            started = time.perf_counter()
            body = generate_latest(REGISTRY)
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
            list(app_series.SERIES.collect())
            collector.append(time.perf_counter() - started)
        lines = body.count(b"\n")
        print(
            f"{storage.engine.dialect.name}, {apps} apps x {instances} instances, "
            f"{labels} app labels: /metrics body {len(body) / 1024:.0f} KiB, {lines} lines; "
            f"scrape median {statistics.median(times) * 1000:.1f} ms, "
            f"worst {max(times) * 1000:.1f} ms; the app collector alone "
            f"{statistics.median(collector) * 1000:.1f} ms"
        )
        runtime.close()
    finally:
        await storage.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url", nargs="?")
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--labels", type=int, default=200)
    args = parser.parse_args()
    url = args.url or default_sqlite_url(Path(tempfile.mkdtemp()))
    asyncio.run(measure(url, args.apps, args.instances, args.scrapes, args.labels))


if __name__ == "__main__":
    main()
