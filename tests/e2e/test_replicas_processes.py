"""Issue 20's replica items, with three ``appdeck serve`` replicas on one host behind the test
proxy (real PostgreSQL and Redis), checked against the host's process table: a stopped
instance stays stopped whichever replica supervises it (item 1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_replicas_deploys import Replica, three, until
from tests.support.replicas import Replicas, app_processes, run_replicas

pytestmark = pytest.mark.e2e

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
SETTLE_S = 4.0
"""How long a stopped instance is given to come back (the first restart of a crash is
0.5 s after it): counted after it, the process table must show no resurrection."""
CRASHED = "exited unexpectedly"


@pytest.fixture
async def replicas(
    postgres_test_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[Replicas]:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    env = {"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])}
    async with run_replicas(postgres_test_database, redis_prefix, tmp_path, extra_env=env) as r:
        yield r


@contextlib.asynccontextmanager
async def two_instance_app(replicas: Replicas, on: Replica) -> AsyncIterator[int]:
    """The hello fixture with ``instances: 2``, deleted at the end (its processes belong to
    the host and outlive the replicas)."""
    spec = {
        "source_path": str(replicas.data_dir.parent / "src" / "hello"),
        "run_command": "python3 app.py",
        "instances": 2,
        "health_check": {"path": "/healthz", "timeout_s": 2},
    }
    made = await on.tool("register_app", {"name": "hello", "spec": spec})
    app_id = int(made["app_id"])
    try:
        yield app_id
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                args = {"app_id": app_id, "action": "delete", "confirm": True}
                await on.tool("manage_app", args)


async def deploy(on: Replica, app_id: int) -> dict[str, Any]:
    deployed = await on.tool(
        "deploy_app", {"app_id": app_id, "strategy": "rolling", "wait_seconds": 60}
    )
    assert deployed["state"] == "live", deployed
    return deployed


def crash_lines(replicas: Replicas, app_id: int) -> list[str]:
    """The runtime log lines of the app's releases that say an instance crashed."""
    found = []
    for log in (replicas.data_dir / "runtime" / "apps" / str(app_id)).glob("releases/*/*.log"):
        found += [f"{log.parent.name}: {line[:300]}" for line in log.read_text().splitlines()]
    return [line for line in found if CRASHED in line]


async def settled(replicas: Replicas, app_id: int, live: str) -> dict[str, int]:
    """The app's processes once stopped ones had time to come back: at first until only the
    live release runs (the last stops are awaited by the deploy, but a bound on order is
    kinder to a loaded machine), then after ``SETTLE_S`` more."""

    async def only_live() -> bool:
        return set(app_processes(replicas.data_dir, app_id)) <= {live}

    with contextlib.suppress(TimeoutError):
        await until(only_live, within=20, every=0.2)
    await asyncio.sleep(SETTLE_S)
    return app_processes(replicas.data_dir, app_id)


# -- item 1: stopped instances stay stopped ----------------------------------------------------


async def test_deploys_through_three_replicas_and_a_kill_9_leave_exactly_the_live_instances(
    replicas: Replicas,
) -> None:
    async with (
        asyncio.timeout(300),
        three(replicas) as (a, b, c),
        two_instance_app(replicas, on=a) as app_id,
    ):
        for number, on in enumerate((a, b, c, a), start=1):  # each deploy on another replica
            deployed = await deploy(on, app_id)
            assert deployed["number"] == number
        live = f"{app_id}-4"
        assert await settled(replicas, app_id, live) == {live: 2}, crash_lines(replicas, app_id)
        assert crash_lines(replicas, app_id) == []

        await replicas.servers[1].kill()  # kill -9 of B, which adopted instances
        b.server = await replicas.restart(1)
        b.http.base_url = b.server.origin
        assert await settled(replicas, app_id, live) == {live: 2}, crash_lines(replicas, app_id)

        deployed = await deploy(b, app_id)  # through the restarted replica
        live = f"{app_id}-{deployed['number']}"
        assert await settled(replicas, app_id, live) == {live: 2}, crash_lines(replicas, app_id)
        assert crash_lines(replicas, app_id) == []
