"""Tasks shared by several replicas: one store (SQLite and PostgreSQL), heartbeats in it, and
the real broadcast between them (Redis; in one process, the local one).

Each replica is a TaskManager with its own instance id, broadcast connection and heartbeat,
as separate ``appdeck serve`` processes would have; they share the database and Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from appdeck.events.signals import LocalBroadcast, RedisBroadcast
from appdeck.protocol.errors import InvalidParams, ServerBusy
from appdeck.protocol.task_inputs import answer_task, ask_through_task
from appdeck.protocol.task_model import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    SESSIONLESS,
    WORKING,
    Task,
    TaskLimits,
    cancel_channel,
)
from appdeck.protocol.tasks import ORPHAN_MESSAGE, TaskManager
from appdeck.protocol.tasks_extension import detailed_task
from appdeck.storage import SqlTaskStore, Storage
from appdeck.storage.replicas import ReplicaStore
from appdeck.storage.schema import replicas
from tests.support.redis import connect
from tests.support.wait import until

from .conftest import ALICE, BOB
from .doubles import RecordingOutbox

SLOW_POLL = {"pollInterval": 60_000}
"""A waiter woken within seconds with this poll interval was woken by a message."""


class Work:
    """A task's runner the test holds until ``release``; records a cancel."""

    def __init__(self, *, stubborn: bool = False) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.stubborn = stubborn  # ignores the cancel and returns a result anyway

    async def __call__(self, task: Task) -> dict[str, Any]:
        self.entered.set()
        try:
            async with asyncio.timeout(30):
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            if not self.stubborn:
                raise
            await asyncio.sleep(0)
        return {"content": [{"type": "text", "text": "done"}]}


@dataclass
class Replica:
    name: str
    tasks: TaskManager
    outbox: RecordingOutbox
    beats: ReplicaStore
    broadcast: RedisBroadcast | LocalBroadcast | None
    redis: Redis | None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    loops: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self, work: Work, **task_request: Any) -> Task:
        task = await self.tasks.start(ALICE, "s1", "tools/call", {}, task_request, work)
        async with asyncio.timeout(5):
            await work.entered.wait()
        return task

    def statuses(self) -> list[str]:
        return [
            m["params"]["status"]
            for _, m in self.outbox.sent
            if m["method"] == "notifications/tasks/status"
        ]

    async def crash(self) -> None:
        """As kill -9: no more heartbeats, no writes; its runs are simply gone."""
        self.stopping.set()
        for loop in self.loops:
            loop.cancel()
        await self.tasks.shutdown()


class Fleet:
    """Replicas over one database and one Redis prefix."""

    def __init__(self, storage: Storage, prefix: str | None) -> None:
        self.storage = storage
        self.prefix = prefix
        self.local = LocalBroadcast()
        self.replicas: list[Replica] = []

    async def replica(
        self,
        name: str,
        *,
        attach: bool = True,
        watch: bool = True,
        recheck: float = 0.2,
        sweep: float = 0.2,
        dead_after: float = 10.0,
        **limits: Any,
    ) -> Replica:
        redis = broadcast = None
        if attach and self.prefix is not None:
            redis = connect(client_name=f"{self.prefix}-{name}")
            broadcast = RedisBroadcast(redis, self.prefix)
            await broadcast.start()
        elif attach:
            broadcast = self.local
        store = SqlTaskStore(self.storage.engine, dead_after=dead_after)
        outbox = RecordingOutbox()
        manager = TaskManager(
            store,
            outbox,
            instance_id=name,
            limits=TaskLimits(recheck_seconds=recheck, sweep_seconds=sweep, **limits),
        )
        beats = ReplicaStore(self.storage.engine, name, interval=0.1, dead_after=dead_after)
        replica = Replica(name, manager, outbox, beats, broadcast, redis)
        self.replicas.append(replica)
        await beats.heartbeat()
        replica.loops.append(asyncio.create_task(beats.beat_forever(replica.stopping)))
        if broadcast is not None:
            await manager.attach(broadcast)
        if watch:
            replica.loops.append(asyncio.create_task(manager.watch(replica.stopping)))
        return replica

    async def close(self) -> None:
        for replica in self.replicas:
            replica.stopping.set()
            for loop in replica.loops:
                with contextlib.suppress(asyncio.CancelledError):
                    async with asyncio.timeout(10):
                        await loop
            await replica.tasks.shutdown()
            if isinstance(replica.broadcast, RedisBroadcast):
                await replica.broadcast.close()
            if replica.redis is not None:
                await replica.redis.aclose()


@pytest.fixture
async def fleet(storage: Storage, redis: Redis, redis_prefix: str) -> AsyncIterator[Fleet]:
    made = Fleet(storage, redis_prefix)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def one_process(storage: Storage) -> AsyncIterator[Fleet]:
    made = Fleet(storage, None)
    try:
        yield made
    finally:
        await made.close()


async def _stored(fleet: Fleet, task_id: str) -> Task:
    task = await fleet.storage.tasks.get(task_id)
    assert task is not None
    return task


async def test_a_task_started_on_one_replica_is_read_listed_and_awaited_on_the_others(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a")
    b = await fleet.replica("b")
    c = await fleet.replica("c")
    work = Work()
    task = await a.start(work, **SLOW_POLL)

    got = await b.tasks.get(ALICE, task.task_id)
    assert (got.status, got.instance_id) == (WORKING, "a")
    listed, _ = await c.tasks.list(ALICE, None)
    assert [t.task_id for t in listed] == [task.task_id]
    waiters = [asyncio.create_task(r.tasks.wait(ALICE, task.task_id)) for r in (b, c)]
    await until(lambda: len(b.tasks._doorbells) == len(c.tasks._doorbells) == 1)
    work.release.set()
    async with asyncio.timeout(10):  # the poll interval is 60 s: task-done woke them
        done = await asyncio.gather(*waiters)
    assert [t.status for t in done] == [COMPLETED, COMPLETED]
    assert done[0].result == {"content": [{"type": "text", "text": "done"}]}
    assert b.tasks._doorbells == c.tasks._doorbells == {}  # unsubscribed after


async def test_a_cancel_on_one_replica_stops_the_task_on_its_owner_within_a_second(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)  # the message alone must do it
    b = await fleet.replica("b")
    work = Work()
    task = await a.start(work)

    cancelled = await b.tasks.cancel(ALICE, task.task_id)

    assert cancelled.status == CANCELLED
    # a's recheck and sweep are a minute: a cancel seen within 20 s came by the message
    # (about 10 ms on a quiet machine; 1 s was too little for a loaded one)
    async with asyncio.timeout(20):
        await work.cancelled.wait()
    await until(lambda: task.task_id not in a.tasks._running)
    stored = await _stored(fleet, task.task_id)
    assert (stored.status, stored.status_message) == (
        CANCELLED,
        "The task was cancelled by request.",
    )
    assert b.statuses() == [CANCELLED]  # the canceller announced it
    assert a.statuses() == []  # the owner's own end was refused: nothing announced twice


async def test_the_owners_finish_never_overwrites_a_cancel_written_elsewhere(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)
    b = await fleet.replica("b", attach=False)  # its cancel message is lost
    work = Work()
    task = await a.start(work)
    await b.tasks.cancel(ALICE, task.task_id)

    work.release.set()  # the owner finishes its run and tries to write "completed"
    await until(lambda: task.task_id not in a.tasks._running)

    stored = await _stored(fleet, task.task_id)
    assert stored.status == CANCELLED
    assert stored.result is None
    assert a.statuses() == []
    again = await a.tasks.wait(ALICE, task.task_id)
    assert again.status == CANCELLED


async def test_a_run_that_ignores_its_cancel_cannot_complete_the_task(fleet: Fleet) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)
    b = await fleet.replica("b")
    work = Work(stubborn=True)
    task = await a.start(work)
    await b.tasks.cancel(ALICE, task.task_id)
    async with asyncio.timeout(5):
        await work.cancelled.wait()
    await until(lambda: task.task_id not in a.tasks._running)
    assert (await _stored(fleet, task.task_id)).status == CANCELLED


async def test_a_lost_cancel_message_is_caught_by_the_owners_recheck(fleet: Fleet) -> None:
    a = await fleet.replica("a", recheck=0.2)
    b = await fleet.replica("b", attach=False)
    work = Work()
    task = await a.start(work)
    await b.tasks.cancel(ALICE, task.task_id)
    async with asyncio.timeout(5):  # ~2 s in production (recheck_seconds)
        await work.cancelled.wait()
    assert (await _stored(fleet, task.task_id)).status == CANCELLED


async def test_a_refused_status_write_stops_the_run_on_the_owner(fleet: Fleet) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)
    b = await fleet.replica("b", attach=False)
    seen: list[bool] = []
    cancelled_elsewhere = asyncio.Event()
    stopped = asyncio.Event()

    async def asks_the_client(task: Task) -> dict[str, Any]:
        async with asyncio.timeout(10):
            await cancelled_elsewhere.wait()
        seen.append(await a.tasks.transition(task, INPUT_REQUIRED, "Waiting for the client"))
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {"content": []}

    task = await a.tasks.start(ALICE, "s1", "tools/call", {}, {}, asks_the_client)
    await b.tasks.cancel(ALICE, task.task_id)
    cancelled_elsewhere.set()
    async with asyncio.timeout(5):
        await stopped.wait()
    assert seen == [False]
    assert task.status == CANCELLED  # the owner's copy holds the stored state
    assert (await _stored(fleet, task.task_id)).status == CANCELLED


async def test_cancelling_a_task_that_ended_elsewhere_is_refused_on_every_replica(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a")
    b = await fleet.replica("b")
    work = Work()
    task = await a.start(work)
    work.release.set()
    async with asyncio.timeout(5):
        await b.tasks.wait(ALICE, task.task_id)
    for replica in (a, b):
        with pytest.raises(InvalidParams, match="terminal status 'completed'"):
            await replica.tasks.cancel(ALICE, task.task_id)


async def test_a_replica_that_stops_heartbeating_has_its_tasks_failed_by_a_live_one(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a", dead_after=1.0)
    b = await fleet.replica("b", dead_after=1.0)
    c = await fleet.replica("c", dead_after=1.0)
    task = await a.start(Work(), **SLOW_POLL)
    waiter = asyncio.create_task(c.tasks.wait(ALICE, task.task_id))
    await until(lambda: len(c.tasks._doorbells) == 1)

    await a.crash()

    async with asyncio.timeout(10):  # dead at 1 s here (10 s in production), swept each 0.2 s
        ended = await waiter
    assert ended.status == FAILED
    assert ended.status_message == ORPHAN_MESSAGE
    assert ended.error == {"code": -32603, "message": "interrupted: its server stopped"}
    assert sorted(b.statuses() + c.statuses()) == [FAILED]  # one sweeper won


async def test_a_clean_stop_lets_the_others_sweep_its_tasks_at_once(fleet: Fleet) -> None:
    a = await fleet.replica("a")
    b = await fleet.replica("b", watch=False)
    task = await a.start(Work())
    assert await b.tasks.sweep() == 0  # a is alive: its task is its own

    await a.crash()
    await a.beats.remove()

    assert await b.tasks.sweep() == 1
    assert (await _stored(fleet, task.task_id)).status == FAILED


async def test_a_new_replica_fails_nothing_that_a_live_replica_runs(fleet: Fleet) -> None:
    a = await fleet.replica("a")
    work = Work()
    task = await a.start(work)

    newcomer = await fleet.replica("new", watch=False)
    assert await newcomer.tasks.reconcile({}) == 0

    assert (await _stored(fleet, task.task_id)).status == WORKING
    work.release.set()
    async with asyncio.timeout(5):
        done = await newcomer.tasks.wait(ALICE, task.task_id)
    assert done.status == COMPLETED


async def _orphans(fleet: Fleet, count: int) -> list[str]:
    """``count`` tasks left working by an instance that never beat (long dead)."""
    ids = [f"orphan-{n}" for n in range(count)]
    for n, task_id in enumerate(ids):
        await fleet.storage.tasks.insert(
            Task(
                task_id,
                "acme",
                "alice",
                "s1",
                WORKING,
                float(n),
                float(n),
                None,
                1000,
                "tools/call",
                {},
                "dead",
            )
        )
    return ids


async def test_replicas_sweeping_at_once_end_each_orphan_exactly_once(fleet: Fleet) -> None:
    sweepers = [await fleet.replica(n, watch=False) for n in ("b", "c", "d")]
    ids = await _orphans(fleet, 30)

    async with asyncio.timeout(30):
        counts = await asyncio.gather(*(s.tasks.sweep() for s in sweepers))

    assert sum(counts) == 30
    assert sum(len(s.statuses()) for s in sweepers) == 30  # each end announced once
    for task_id in ids:
        assert (await _stored(fleet, task_id)).status == FAILED
    assert [await s.tasks.sweep() for s in sweepers] == [0, 0, 0]


async def test_replicas_resuming_at_once_resume_each_orphan_exactly_once(fleet: Fleet) -> None:
    sweepers = [await fleet.replica(n, watch=False) for n in ("b", "c", "d")]
    ids = await _orphans(fleet, 20)
    resumed: list[tuple[str, str]] = []

    def resumer_of(replica: Replica) -> Any:
        async def resume(task: Task) -> bool:
            resumed.append((task.task_id, replica.name))
            replica.tasks.launch(task, Work())
            return True

        return resume

    async with asyncio.timeout(30):
        counts = await asyncio.gather(
            *(s.tasks.sweep({"tools/call": resumer_of(s)}) for s in sweepers)
        )

    assert sum(counts) == 20
    assert sorted(task_id for task_id, _ in resumed) == sorted(ids)
    for task_id, owner in resumed:
        stored = await _stored(fleet, task_id)
        assert (stored.status, stored.instance_id) == (WORKING, owner)


async def test_malformed_cancel_messages_are_dropped_and_the_owner_keeps_listening(
    fleet: Fleet, redis: Redis, redis_prefix: str
) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)
    b = await fleet.replica("b")
    work = Work()
    task = await a.start(work)
    wire = f"{redis_prefix}:b:{cancel_channel('a')}"
    for junk in (b"", b"\xff\xfe", b"x" * 100_000, b"no such task", b"\n\x00"):
        await redis.publish(wire, junk)
    await asyncio.sleep(0.2)  # let the reader take them (nothing to wait on: they are dropped)
    assert not work.cancelled.is_set()
    assert (await _stored(fleet, task.task_id)).status == WORKING

    await b.tasks.cancel(ALICE, task.task_id)
    async with asyncio.timeout(20):  # by the message: a's recheck and sweep are a minute
        await work.cancelled.wait()


async def test_after_a_broadcast_reconnect_the_owner_rereads_its_tasks(
    fleet: Fleet, redis: Redis, redis_prefix: str
) -> None:
    a = await fleet.replica("a", recheck=60, sweep=60)  # no periodic recheck to help
    b = await fleet.replica("b", attach=False)  # its cancel message is lost
    work = Work()
    task = await a.start(work)
    await b.tasks.cancel(ALICE, task.task_id)

    killed = 0
    for client in await redis.client_list(_type="pubsub"):
        if client.get("name") == f"{redis_prefix}-a":
            killed += await redis.client_kill_filter(_id=client["id"])
    assert killed == 1

    async with asyncio.timeout(10):
        await work.cancelled.wait()


async def test_in_one_process_the_local_broadcast_wakes_a_waiter_and_cancels(
    one_process: Fleet,
) -> None:
    solo = await one_process.replica("solo", recheck=60, sweep=60)
    first, second = Work(), Work()
    done = await solo.start(first, **SLOW_POLL)
    waiter = asyncio.create_task(solo.tasks.wait(ALICE, done.task_id))
    await until(lambda: len(solo.tasks._doorbells) == 1)
    first.release.set()
    async with asyncio.timeout(10):
        assert (await waiter).status == COMPLETED

    running = await solo.start(second)
    await solo.tasks.cancel(ALICE, running.task_id)
    async with asyncio.timeout(20):  # by the local broadcast: recheck and sweep are a minute
        await second.cancelled.wait()
    assert solo.statuses() == [COMPLETED, CANCELLED]


async def test_a_start_up_without_heartbeats_fails_every_other_instances_task(
    one_process: Fleet,
) -> None:
    """The embedded default writes no heartbeat: a restart fails what the last process left
    working at once, as before replicas."""
    ids = await _orphans(one_process, 3)
    async with one_process.storage.engine.begin() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(replicas)) == 0
    manager = TaskManager(one_process.storage.tasks, RecordingOutbox(), instance_id="restarted")
    assert await manager.reconcile({}) == 3
    for task_id in ids:
        assert (await _stored(one_process, task_id)).status == FAILED


async def test_past_the_watched_cap_a_waiter_on_another_replica_still_returns_by_polling(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a")
    b = await fleet.replica("b", max_watched=0)
    work = Work()
    task = await a.start(work, pollInterval=250)
    waiter = asyncio.create_task(b.tasks.wait(ALICE, task.task_id))
    await asyncio.sleep(0)
    work.release.set()
    async with asyncio.timeout(10):
        assert (await waiter).status == COMPLETED
    assert b.tasks._doorbells == {}


async def test_past_the_running_cap_a_new_task_is_refused_as_busy(fleet: Fleet) -> None:
    a = await fleet.replica("a", max_running=1)
    work = Work()
    await a.start(work)
    with pytest.raises(ServerBusy):
        await a.tasks.start(ALICE, "s1", "tools/call", {}, {}, Work())
    work.release.set()
    await until(lambda: not a.tasks._running)
    await a.start(Work())


async def test_a_resumer_that_fails_leaves_the_orphan_failed_not_working(fleet: Fleet) -> None:
    sweeper = await fleet.replica("b", watch=False)
    [task_id] = await _orphans(fleet, 1)
    calls: list[str] = []

    async def broken(task: Task) -> bool:
        calls.append(task.task_id)
        raise RuntimeError("resumer defect")

    assert await sweeper.tasks.sweep({"tools/call": broken}) == 1
    stored = await _stored(fleet, task_id)
    assert (stored.status, stored.instance_id) == (FAILED, "b")
    assert await sweeper.tasks.sweep({"tools/call": broken}) == 0
    assert calls == [task_id]


async def test_a_task_whose_ttl_ran_out_mid_run_runs_on_unstored(fleet: Fleet) -> None:
    a = await fleet.replica("a", recheck=0.1)
    work = Work()
    task = await a.start(work, ttl=1_000)
    assert await fleet.storage.tasks.delete_expired(task.created_at + 5) == 1
    await a.tasks.note(task, "still going")
    await asyncio.sleep(0.3)  # rechecks pass over it (nothing to wait on: it must not stop)
    assert not work.cancelled.is_set()
    work.release.set()
    await until(lambda: not a.tasks._running)
    assert not work.cancelled.is_set()
    assert a.statuses()[-1] == COMPLETED


async def _status(replica: Replica, task_id: str, status: str) -> Task:
    """The task as ``replica`` reads it once it reached ``status`` (bounded), as a client
    polling tasks/get through that replica would see it."""
    async with asyncio.timeout(30):
        while True:
            task = await replica.tasks.get(ALICE, task_id)
            if task.status == status:
                return task
            await asyncio.sleep(0.02)


def _asking(manager: TaskManager, stopped: asyncio.Event) -> Any:
    async def runner(task: Task) -> dict[str, Any]:
        request = {"method": "elicitation/create", "params": {"message": "Go?"}}
        try:
            answers = await ask_through_task(manager, task, {"go": request})
        except asyncio.CancelledError:
            stopped.set()
            raise
        return {"content": [{"type": "text", "text": answers["go"]["action"]}]}

    return runner


async def test_a_stateless_tasks_question_asked_on_a_is_answered_on_b_and_read_on_c(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a")
    b = await fleet.replica("b")
    c = await fleet.replica("c")
    stopped = asyncio.Event()
    task = await a.tasks.start(
        ALICE, SESSIONLESS, "tools/call", {}, SLOW_POLL, _asking(a.tasks, stopped)
    )

    waiting = await detailed_task(c.tasks, await _status(c, task.task_id, INPUT_REQUIRED))
    [key] = waiting["inputRequests"]
    with pytest.raises(InvalidParams):  # Bob cannot answer Alice's task
        await answer_task(b.tasks, BOB, task.task_id, {key: {"action": "decline"}})
    await answer_task(b.tasks, ALICE, task.task_id, {key: {"action": "accept"}})

    done = await detailed_task(c.tasks, await _status(c, task.task_id, COMPLETED))
    assert done["result"]["content"][0]["text"] == "accept"
    assert not stopped.is_set()


async def test_a_stateless_task_waiting_for_input_on_a_is_cancelled_through_c(
    fleet: Fleet,
) -> None:
    a = await fleet.replica("a")
    c = await fleet.replica("c")
    stopped = asyncio.Event()
    task = await a.tasks.start(
        ALICE, SESSIONLESS, "tools/call", {}, SLOW_POLL, _asking(a.tasks, stopped)
    )
    await _status(c, task.task_id, INPUT_REQUIRED)
    await c.tasks.cancel(ALICE, task.task_id)
    async with asyncio.timeout(30):  # a's run stops: the cancel reached it
        await stopped.wait()
    assert (await _stored(fleet, task.task_id)).status == CANCELLED
