"""Issue 13's must-show 4: deploys across three ``appdeck serve`` replicas (real PostgreSQL and
Redis). A deploy runs on one replica, is followed and cancelled through the others, while the
app is probed through yet another replica's ingress; concurrent deploys of one app run one
deployment; a replica paused past its app lease has its late writes refused."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.helpers import rpc
from tests.support.appdeck_process import AppDeckProcess
from tests.support.mcp import initialize
from tests.support.replicas import Replicas, run_replicas

pytestmark = pytest.mark.e2e

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
IN_PROGRESS = {"queued", "building", "starting", "canary"}
ORPHANED = "The server driving this deployment stopped"
LEASE_S = 15.0
"""The app lease (``platform/deploy/locks.py``: LEASE_TTL_S, not a setting)."""


@dataclass
class Deck:
    replicas: Replicas
    source: Path


@pytest.fixture
async def deck(
    postgres_test_database: str, redis_prefix: str, tmp_path: Path
) -> AsyncIterator[Deck]:
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    env = {"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])}
    async with run_replicas(postgres_test_database, redis_prefix, tmp_path, extra_env=env) as r:
        yield Deck(r, root / "hello")


# -- helpers ----------------------------------------------------------------------------------


class Replica:
    """One replica's MCP endpoint, on a session shared by all three."""

    def __init__(self, server: AppDeckProcess, token: str) -> None:
        self.server = server
        # every request on a new connection: a kept-alive one, idle past the server's 5 s
        # while another replica deploys, may be closed by the server just as it is reused
        # (a ReadError that says nothing about AppDeck, seen on a loaded machine)
        self.http = httpx.AsyncClient(
            base_url=server.origin,
            headers={"authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(15, read=90),  # above the deploys' wait_seconds (60)
            limits=httpx.Limits(max_keepalive_connections=0),
        )
        self.sid = ""
        self._ids = 0

    def _id(self) -> int:
        self._ids += 1
        return self._ids

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool's result (``isError`` and ``structuredContent``), not checked."""
        params = {"name": name, "arguments": arguments}
        reply = await rpc(self.http, self.sid, "tools/call", params, id=self._id())
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    async def tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """A tool's ``structuredContent``; it must succeed."""
        result = await self.call(name, arguments)
        assert not result.get("isError"), (name, result)
        return result["structuredContent"]

    async def start_task(self, name: str, arguments: dict[str, Any]) -> str:
        params = {"name": name, "arguments": arguments, "task": {"ttl": 300_000}}
        reply = await rpc(self.http, self.sid, "tools/call", params, id=self._id())
        task = reply["result"]["task"]
        assert task["status"] == "working", reply
        return str(task["taskId"])

    async def task(self, method: str, task_id: str) -> dict[str, Any]:
        reply = await rpc(self.http, self.sid, f"tasks/{method}", {"taskId": task_id}, self._id())
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    async def deployments(self, app_id: int) -> list[dict[str, Any]]:
        """The app's deployments, newest first (list_deployments)."""
        listed = await self.tool("list_deployments", {"app_id": app_id})
        found: list[dict[str, Any]] = listed["deployments"]
        return found

    async def deployment(self, app_id: int, number: int) -> dict[str, Any]:
        found = [d for d in await self.deployments(app_id) if d["number"] == number]
        assert found, (app_id, number)
        return found[0]


@contextlib.asynccontextmanager
async def three(replicas: Replicas) -> AsyncIterator[tuple[Replica, Replica, Replica]]:
    """A, B and C, on one session made on A."""
    a, b, c = (Replica(s, replicas.token) for s in replicas.servers)
    try:
        a.sid = b.sid = c.sid = await initialize(a.http)
        yield a, b, c
    finally:
        for one in (a, b, c):
            await one.http.aclose()


@contextlib.asynccontextmanager
async def hello_app(deck: Deck, on: Replica, cleanup: Replica) -> AsyncIterator[int]:
    """The hello fixture app, registered through ``on``; deleted at the end through
    ``cleanup`` (its processes belong to the host and outlive the replicas)."""
    async with registered_hello(deck.source, on, cleanup) as app_id:
        yield app_id


@contextlib.asynccontextmanager
async def registered_hello(
    source: Path, on: Replica, cleanup: Replica, **more: Any
) -> AsyncIterator[int]:
    """The hello fixture at ``source`` (spec fields ``more`` added), registered through ``on``;
    deleted at the end through ``cleanup``."""
    spec = {
        "source_path": str(source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        **more,
    }
    made = await on.tool("register_app", {"name": "hello", "spec": spec})
    app_id = int(made["app_id"])
    try:
        yield app_id
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                args = {"app_id": app_id, "action": "delete", "confirm": True}
                await cleanup.tool("manage_app", args)


async def set_env(on: Replica, app_id: int, **values: str) -> None:
    for name, value in values.items():
        args = {"app_id": app_id, "action": "set", "name": name, "value": value}
        await on.tool("env_vars", args)


async def until(check: Callable[[], Awaitable[Any]], within: float, every: float = 0.2) -> Any:
    """``check()``'s first truthy value, polled every ``every`` seconds, at most ``within``."""
    async with asyncio.timeout(within):
        while True:
            found = await check()
            if found:
                return found
            await asyncio.sleep(every)


@dataclass
class Probe:
    """GETs the app through one replica's ingress, back to back, until stopped: every answer's
    status and version, and every failure (a non-200 or a refused connection)."""

    app_url: str
    versions: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def _run(self) -> None:
        parts = urlsplit(self.app_url)
        target = f"http://127.0.0.1:{parts.port}/"
        # 30 s: a GET slower than that is a failure; 5 s was a loaded machine's hiccup
        async with httpx.AsyncClient(timeout=30, headers={"host": parts.netloc}) as http:
            while not self._stop.is_set():
                try:
                    answer = await http.get(target)
                except httpx.HTTPError as exc:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
                else:
                    if answer.status_code == 200:
                        self.versions.append(answer.json()["version"])
                    else:
                        self.failures.append(f"{answer.status_code}: {answer.text[-600:]}")
                await asyncio.sleep(0.02)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def answered(self, count: int, within: float) -> None:
        """Until ``count`` more answers came (whatever they were)."""
        target = len(self.versions) + len(self.failures) + count

        async def enough() -> bool:
            return len(self.versions) + len(self.failures) >= target

        await until(enough, within, every=0.02)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            async with asyncio.timeout(10):
                await self._task


async def deploy_live(on: Replica, app_id: int) -> dict[str, Any]:
    """A deploy waited for (not a task): it must end live."""
    deployed = await on.tool("deploy_app", {"app_id": app_id, "wait_seconds": 60})
    assert deployed["state"] == "live", deployed
    return deployed


# -- (a) deployed on A, followed on B, cancelled via C; probed through C ----------------------


async def test_a_deploy_on_a_is_followed_on_b_and_cancelled_via_c_while_c_serves_v1_throughout(
    deck: Deck,
) -> None:
    async with (
        asyncio.timeout(600),
        three(deck.replicas) as (a, b, c),
        hello_app(deck, on=a, cleanup=b) as app_id,
    ):
        first = await a.start_task("deploy_app", {"app_id": app_id, "strategy": "rolling"})
        followed: list[str] = []

        async def first_done() -> dict[str, Any] | None:
            listed = await b.deployments(app_id)  # B follows A's deploy
            if listed and (not followed or followed[-1] != listed[0]["state"]):
                followed.append(listed[0]["state"])
            got = await b.task("get", first)
            return got if got["status"] != "working" else None

        ended = await until(first_done, within=240)
        assert ended["status"] == "completed", ended
        assert set(followed) & IN_PROGRESS, followed  # B saw it rolling
        assert (await b.deployment(app_id, 1))["state"] == "live"
        result = await b.task("result", first)  # the result of A's task, read on B
        assert result["structuredContent"]["state"] == "live", result
        assert result["structuredContent"]["number"] == 1

        url = (await c.tool("get_app_url", {"app_id": app_id}))["url"]
        probe = Probe(url)  # through C's ingress: A ran the deploy, C serves it
        probe.start()
        try:
            await probe.answered(20, within=60)
            assert probe.failures == []
            assert set(probe.versions) == {"v1"}

            # v2 would start slowly: it sits in "starting" while we cancel it
            await set_env(b, app_id, APP_VERSION_LABEL="v2", SLOW_START_S="120")
            second = await a.start_task("deploy_app", {"app_id": app_id})

            async def starting() -> bool:
                listed = await b.deployments(app_id)
                return listed[0]["number"] == 2 and listed[0]["state"] == "starting"

            await until(starting, within=300)
            assert (await b.task("get", second))["status"] == "working"
            await probe.answered(20, within=60)

            cancelled = await c.task("cancel", second)  # sent to C, runs on A
            assert cancelled["status"] == "cancelled", cancelled
            loop = asyncio.get_running_loop()
            asked = loop.time()

            async def ended_on_a() -> dict[str, Any] | None:
                got = await c.deployment(app_id, 2)
                return got if got["state"] not in IN_PROGRESS else None

            stopped = await until(ended_on_a, within=LEASE_S + 45)
            # "cancelled" is written by the replica driving the deploy (A), under its lease
            # (which A, alive, keeps renewing): not the "failed" of a takeover, which no
            # replica may attempt before the lease has run out (at least LEASE_S)
            assert stopped["state"] == "cancelled", stopped
            assert loop.time() - asked < LEASE_S, loop.time() - asked
            await probe.answered(50, within=60)
        finally:
            await probe.stop()
        assert probe.failures == [], probe.failures[:5]
        assert set(probe.versions) == {"v1"}, set(probe.versions)
        assert len(probe.versions) >= 90

        for replica in (a, b, c):
            got = await replica.task("get", second)
            assert got["status"] == "cancelled", got
            states = [d["state"] for d in await replica.deployments(app_id)]
            assert states == ["cancelled", "live"], states
        # the lease was let go: the app deploys again at once
        await set_env(b, app_id, SLOW_START_S="0")
        again = await deploy_live(c, app_id)
        assert again["number"] == 3

        # deploy_app's own cancel, sent to B while A drives the deploy: carried to A
        await set_env(b, app_id, APP_VERSION_LABEL="v4", SLOW_START_S="120")
        fourth = await a.start_task("deploy_app", {"app_id": app_id})

        async def fourth_starting() -> bool:
            listed = await b.deployments(app_id)
            return listed[0]["number"] == 4 and listed[0]["state"] == "starting"

        await until(fourth_starting, within=300)
        answer = await b.tool("deploy_app", {"app_id": app_id, "action": "cancel"})
        assert answer["number"] == 4, answer
        assert answer["state"] == "cancelled", answer

        async def fourth_cancelled() -> dict[str, Any] | None:
            # A writes the task's status once the deploy has unwound, an instant after the
            # deployment's "cancelled" that B waited for
            got = await a.task("get", fourth)
            return got if got["status"] != "working" else None

        assert (await until(fourth_cancelled, within=30))["status"] == "cancelled"


# -- (b) fifty concurrent deploys of one app ------------------------------------------------


async def test_fifty_concurrent_deploys_over_three_replicas_run_one_deployment(
    deck: Deck,
) -> None:
    async with (
        asyncio.timeout(600),
        three(deck.replicas) as (a, b, c),
        hello_app(deck, on=a, cleanup=b) as app_id,
    ):
        spread = (a, b, c)

        async def deploy(i: int) -> dict[str, Any]:
            return await spread[i % 3].call("deploy_app", {"app_id": app_id, "wait_seconds": 0})

        results = await asyncio.gather(*(deploy(i) for i in range(50)))
        ran = [r for r in results if not r.get("isError")]
        refused = [r for r in results if r.get("isError")]
        assert len(ran) == 1, [r["structuredContent"] for r in ran]
        number = ran[0]["structuredContent"]["number"]
        assert number == 1
        assert len(refused) == 49
        errors = [r["structuredContent"]["error"] for r in refused]
        assert {e["code"] for e in errors} == {"conflict"}, errors
        unnamed = [e for e in errors if f"deployment {number} " not in e["message"]]
        assert unnamed == [], unnamed[:3]

        async def settled() -> list[dict[str, Any]] | None:
            listed = await c.deployments(app_id)
            return None if listed[0]["state"] in IN_PROGRESS else listed

        listed = await until(settled, within=240)
        assert [d["state"] for d in listed] == ["live"], listed


# -- (c) a replica paused past its lease ----------------------------------------------------


def _stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped (a SIGSTOP is delivered to each as it next runs; a
    thread that ended meanwhile holds nothing)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
                return False
    return True


def _exclusive_flocks(pid: int) -> list[str]:
    """The exclusive ``flock`` locks ``pid`` holds (``/proc/locks``)."""
    return [
        line
        for line in Path("/proc/locks").read_text().splitlines()
        if line.split()[1:5] == ["FLOCK", "ADVISORY", "WRITE", str(pid)]
    ]


async def pause_outside_host_locks(pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds none of this host's exclusive locks (a release's
    state, a release's log, HAProxy's control), resuming it and trying again otherwise.

    A known limit, not what this test is about (docs/decisions.md, "A release's host lock is
    held to read and write, never across a spawn"): a server stopped while it holds a
    release's state lock blocks every other server's stop of that release on this host until
    it runs again, so B and C could not end the deployment A left. The start that the test
    pauses takes that lock twice, briefly, right as the deployment shows ``starting``: one
    whole-suite run in about six paused A inside it (2026-11-29)."""

    async def stopped() -> bool:
        return _stopped(pid)

    for _ in range(500):
        os.kill(pid, signal.SIGSTOP)
        await until(stopped, within=10, every=0.005)
        if not _exclusive_flocks(pid):
            return
        os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(0.02)
    raise AssertionError(f"replica {pid} held a host lock at each of 500 tries")


async def test_a_replica_paused_past_its_lease_loses_the_deploy_and_its_late_writes_are_refused(
    deck: Deck,
) -> None:
    async with (
        asyncio.timeout(600),
        three(deck.replicas) as (a, b, c),
        hello_app(deck, on=a, cleanup=b) as app_id,
    ):
        await deploy_live(b, app_id)
        url = (await c.tool("get_app_url", {"app_id": app_id}))["url"]
        probe = Probe(url)
        probe.start()
        try:
            await probe.answered(20, within=60)
            await set_env(b, app_id, APP_VERSION_LABEL="v2", SLOW_START_S="120")
            task_id = await a.start_task("deploy_app", {"app_id": app_id})

            async def starting() -> bool:
                listed = await b.deployments(app_id)
                return listed[0]["number"] == 2 and listed[0]["state"] == "starting"

            await until(starting, within=300)  # a build on a loaded machine: a bound only
            pid = a.server.process.pid
            loop = asyncio.get_running_loop()
            await pause_outside_host_locks(pid)
            paused = loop.time()
            try:

                async def taken_over() -> dict[str, Any] | None:
                    got = await b.deployment(app_id, 2)
                    return got if got["state"] not in IN_PROGRESS else None

                # the lease runs out (15 s after A's last renewal), then B's or C's watch
                # (every 5 s) takes the app over and ends the deployment A left. When A held
                # this host's HAProxy, the route broadcast the takeover waits for runs into
                # its bound (~35 s); the reclaimer renews its lease meanwhile (before, it lost
                # it and B and C took turns until A woke). A bound only, ~20 s when quiet.
                ended = await until(taken_over, within=LEASE_S + 180, every=0.5)
                took = loop.time() - paused
                assert ended["state"] == "failed", ended
                assert ORPHANED in ended["status_message"], ended
                assert took >= LEASE_S - LEASE_S / 3 - 1, took  # not before the lease ended
            finally:
                os.kill(pid, signal.SIGCONT)

            # A wakes up: whichever comes first of its lease's renewal and its deploy's next
            # write is refused (the takeover fenced it), so its deploy writes no more; its
            # task, failed meanwhile as a dead replica's, is stopped by A's own re-read of it
            # (every 2 s). When the write comes first the deploy ends there and its renewal
            # is never tried (a clean-clone CI saw that order once); that write may be the
            # unwind of that stop ("its cancel was not written: ... no longer held", another).
            # When A was paused inside its instance's start (after the spawn, before the
            # record), it wakes to the stop B's takeover counted, fails the deploy, and its
            # abort's re-check of the lease finds it lost ("... was lost", a third).
            log = Path(a.server.stderr_path)
            fenced = re.compile(
                rf"app {app_id}: (lost its lock"  # the renewal refused
                rf"|the lease fenced \d+ (is no longer held|was lost))"  # a write refused
            )

            async def refused() -> bool:
                text = await asyncio.to_thread(log.read_text, errors="replace")
                return fenced.search(text) is not None

            try:
                await until(refused, within=90, every=0.5)
            except TimeoutError:  # what A was doing: its whole recent log, its state
                status = Path(f"/proc/{pid}/status")
                state = await asyncio.to_thread(status.read_text) if a.server.running else ""
                lines = [ln for ln in state.splitlines() if ln.startswith(("State", "Threads"))]
                pytest.fail(f"A wrote no refusal within 90 s; {lines}:\n{a.server.log_tail(80)}")
            await asyncio.sleep(5)  # whatever A still had in flight
            await probe.answered(20, within=60)
        finally:
            await probe.stop()
        assert probe.failures == [], probe.failures[:5]
        assert set(probe.versions) == {"v1"}, set(probe.versions)

        for replica in (a, b, c):
            got = await replica.deployment(app_id, 2)
            assert got["state"] == "failed", got
            assert ORPHANED in got["status_message"], got  # the takeover's write stands
            states = [d["state"] for d in await replica.deployments(app_id)]
            assert states == ["failed", "live"], states
        task = await c.task("get", task_id)
        assert task["status"] == "failed", task
