"""The app series: read at scrape time from the health service (no database query), the
``app`` label bounded by the operator's setting, HAProxy-like HTTP series from the counters."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY, generate_latest

from appdeck.observability import apps as series
from appdeck.platform.deploy.ports import DiskUsage, InstanceStatus
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, close_app_databases, platform_on_fakes, shop_spec


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> AsyncIterator[OnFakes]:
    made = await platform_on_fakes(storage, tmp_path)
    yield made
    series.SERIES.health = None
    await close_app_databases()


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def _live(on: OnFakes, name: str, instances: int = 1) -> int:
    spec = {**shop_spec(on.source), "instances": instances}
    app_id = (await on.platform.apps.register(on.alice, name, spec)).app.id
    done = await on.platform.deployments.deploy(on.alice, app_id, wait_s=None)
    assert done is not None
    assert done.record.state == "live"
    return app_id


async def test_each_live_app_has_its_instances_restarts_memory_and_disk(on: OnFakes) -> None:
    shop = await _live(on, "shop", instances=2)
    on.runtime.statuses[f"{shop}-1"] = [
        InstanceStatus(0, "running", memory_bytes=3_000_000, cpu_seconds=1.5),
        InstanceStatus(1, "restarting", restarts=1),
    ]
    on.runtime.disks[shop] = DiskUsage(10_000, 1_000_000)
    on.runtime.crash(shop, f"{shop}-1", 1, "oom_killed")
    on.runtime.crash(shop, f"{shop}-1", 1, "restarted")
    await on.platform.health.settle()
    await on.platform.health.refresh()
    await on.platform.health.measure()
    series.follow(on.platform.health, app_labels=10)
    assert value("appdeck_app_instances", app="shop--acme", state="desired") == 2
    assert value("appdeck_app_instances", app="shop--acme", state="running") == 1
    assert value("appdeck_app_restarts_total", app="shop--acme") == 1
    assert value("appdeck_app_oom_kills_total", app="shop--acme") == 1
    assert value("appdeck_app_crash_loops_total", app="shop--acme") == 0
    assert value("appdeck_app_memory_bytes", app="shop--acme") == 3_000_000
    assert value("appdeck_app_cpu_seconds_total", app="shop--acme") == 1.5
    assert value("appdeck_app_disk_bytes", app="shop--acme") == 10_000
    assert value("appdeck_app_disk_quota_bytes", app="shop--acme") == 1_000_000


async def test_http_series_are_bridged_from_the_counters_by_status_class(on: OnFakes) -> None:
    shop = await _live(on, "shop")
    counters = on.router.ingress.counters
    for status in (200, 201, 302, 404, 503):
        counters.record("shop--acme", f"{shop}-1", status, 0.1)
    counters.record("shop--acme", f"{shop}-1", 502, 0.5, upstream_error=True)
    await on.platform.health.refresh()
    await on.platform.health.measure()
    series.follow(on.platform.health)
    codes = {
        c: value("appdeck_app_http_requests_total", app="shop--acme", code=c) for c in series.CODES
    }
    assert codes == {"1xx": 0, "2xx": 2, "3xx": 1, "4xx": 1, "5xx": 2}
    assert value("appdeck_app_http_upstream_errors_total", app="shop--acme") == 1
    assert value("appdeck_app_http_response_seconds_count", app="shop--acme") == 6
    assert value("appdeck_app_http_response_seconds_sum", app="shop--acme") == pytest.approx(1.0)
    # no cgroups measured (the fake runtime): no memory series rather than a false 0
    assert value("appdeck_app_memory_bytes", app="shop--acme") is None


async def test_apps_past_the_label_limit_are_summed_as_other(on: OnFakes) -> None:
    for name in ("a1", "a2", "a3"):
        await _live(on, name, instances=2)
    await on.platform.health.refresh()
    await on.platform.health.measure()
    series.follow(on.platform.health, app_labels=1)
    text = generate_latest(REGISTRY).decode()
    assert value("appdeck_app_instances", app="a1--acme", state="desired") == 2
    assert value("appdeck_app_instances", app="_other", state="desired") == 4
    assert 'app="a2--acme"' not in text
    assert 'app="a3--acme"' not in text


async def test_a_scrape_makes_no_database_query(on: OnFakes, storage: Storage) -> None:
    for name in ("a1", "a2"):
        await _live(on, name)
    await on.platform.health.refresh()
    await on.platform.health.measure()
    series.follow(on.platform.health)
    with _queries(storage) as seen:
        generate_latest(REGISTRY)
    assert seen == []


@contextlib.contextmanager
def _queries(storage: Storage) -> Iterator[list[str]]:
    """The SQL statements run while the block runs."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    engine = storage.engine.sync_engine
    sa.event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", before)
