"""Issue 20's replica items, with three ``appdeck serve`` replicas on one host behind the test
proxy (real PostgreSQL and Redis), checked against the host's process table: a stopped
instance stays stopped whichever replica supervises it (item 1)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.test_replicas_deploys import (
    IN_PROGRESS,
    LEASE_S,
    ORPHANED,
    Replica,
    registered_hello,
    three,
    until,
)
from tests.support.appdeck_process import AppDeckProcess, appdeck_executable, clean_env
from tests.support.mcp import initialize
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
async def two_instance_app(
    replicas: Replicas, on: Replica, cleanup: Replica | None = None, **more: Any
) -> AsyncIterator[int]:
    """The hello fixture with ``instances: 2``, deleted at the end through ``cleanup`` (a
    replica still alive then; default ``on``): its processes belong to the host and outlive
    the replicas."""
    source = replicas.data_dir.parent / "src" / "hello"
    async with registered_hello(source, on, cleanup or on, instances=2, **more) as app_id:
        yield app_id


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
        for number, on in enumerate((a, b, c), start=1):  # each deploy on another replica
            deployed = await deploy(on, app_id)
            assert deployed["number"] == number
        live = f"{app_id}-3"
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


# -- item 3: no failed request while a dead replica's canary is cleaned up -------------------


@dataclass
class FastProbe:
    """GETs the app through one replica's ingress every ~10 ms until stopped: every answer's
    version, and every failure (a non-200 or a transport error)."""

    target: str
    host: str
    versions: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=5, headers={"host": self.host}) as http:
            while not self._stop.is_set():
                try:
                    answer = await http.get(self.target)
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                else:
                    if answer.status_code == 200:
                        self.versions.append(answer.json()["version"])
                    else:
                        self.failures.append(f"{answer.status_code}: {answer.text[-300:]}")
                await asyncio.sleep(0.01)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            async with asyncio.timeout(10):
                await self._task


def ingress_of(server: AppDeckProcess) -> str:
    """``http://127.0.0.1:<port>/`` of the replica's ingress (its startup lines name it)."""
    printed = Path(server.stdout_path).read_text(errors="replace")
    found = re.search(r"ingress router at http://\S+?:(\d+)/", printed)
    assert found, printed
    return f"http://127.0.0.1:{found.group(1)}/"


async def test_a_killed_replicas_canary_is_cleaned_up_without_one_failed_request(
    replicas: Replicas,
) -> None:
    async with (
        asyncio.timeout(240),
        three(replicas) as (a, b, c),
        two_instance_app(
            replicas,
            on=a,
            cleanup=b,  # A is killed below: deleting through it left the app's shims running
            canary={"percent": 50, "steps": [50, 100], "analysis_window_s": 600},
        ) as app_id,
    ):
        await deploy(b, app_id)  # rolling
        await b.tool(
            "env_vars",
            {"app_id": app_id, "action": "set", "name": "APP_VERSION_LABEL", "value": "v2"},
        )
        url = (await b.tool("get_app_url", {"app_id": app_id}))["url"]
        host = urlsplit(url).netloc
        probes = [FastProbe(ingress_of(s.server), host) for s in (b, c)]
        for probe in probes:
            probe.start()
        try:
            await a.start_task("deploy_app", {"app_id": app_id, "strategy": "canary"})  # on A

            async def in_canary() -> bool:
                listed = await b.deployments(app_id)
                return listed[0]["number"] == 2 and listed[0]["state"] == "canary"

            await until(in_canary, within=60)

            async def both_versions() -> bool:
                return all({"v1", "v2"} <= set(p.versions[-200:]) for p in probes)

            await until(both_versions, within=30)  # every survivor's ingress splits
            await a.server.kill()  # kill -9 of the replica driving the canary

            async def orphaned() -> dict[str, Any] | None:
                got = await b.deployment(app_id, 2)
                return got if got["state"] not in IN_PROGRESS else None

            ended = await until(orphaned, within=LEASE_S + 30, every=0.5)
            assert ended["state"] == "failed", ended
            assert ORPHANED in ended["status_message"], ended
            counts = [len(p.versions) for p in probes]

            async def served_on() -> bool:
                return all(len(p.versions) >= n + 100 for p, n in zip(probes, counts, strict=True))

            await until(served_on, within=30)
        finally:
            for probe in probes:
                await probe.stop()
        for probe in probes:
            assert probe.failures == [], probe.failures[:5]
            assert probe.versions[-50:] == ["v1"] * 50  # the live release took all of it back
        live = f"{app_id}-1"
        assert await settled(replicas, app_id, live) == {live: 2}, crash_lines(replicas, app_id)


# -- item 4: a CLI token is accepted by every replica ------------------------------------------


async def test_an_oauth_token_made_by_the_cli_is_accepted_by_every_replica(
    replicas: Replicas,
) -> None:
    command = [
        str(appdeck_executable()),
        "token",
        "create",
        "--oauth",
        "--tenant",
        "dev",
        "--user",
        "dev",
        "--scope",
        "apps:read",
        "--data-dir",
        str(replicas.data_dir),
        "--json",
    ]
    made = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env() | replicas.env,
    )
    async with asyncio.timeout(60):
        out, err = await made.communicate()
    assert made.returncode == 0, err.decode(errors="replace")[-2000:]
    token = json.loads(out)["token"]
    for server in replicas.servers:  # initialize asserts a 200 (a refused token is a 401)
        async with httpx.AsyncClient(base_url=server.origin, timeout=30) as http:
            assert await initialize(http, token)
