"""SqlTaskStore: tasks persist every state change and outlive the process; replicas share
them, and every write of a task's state is a compare-and-set."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from appdeck.protocol.task_model import Task
from appdeck.storage import Storage
from appdeck.storage.replicas import ReplicaStore
from appdeck.storage.schema import replicas


def make_task(task_id: str = "t1", **changes: Any) -> Task:
    fields: dict[str, Any] = {
        "task_id": task_id,
        "tenant": "acme",
        "user": "ada",
        "session_id": "s1",
        "status": "working",
        "created_at": 1_000.0,
        "updated_at": 1_000.0,
        "ttl_ms": 60_000,
        "poll_interval_ms": 1_000,
        "method": "tools/call",
        "params": {"name": "deploy_app", "arguments": {"app": "shop", "replicas": 2}},
        "instance_id": "i1",
    }
    fields.update(changes)
    return Task(**fields)


async def test_a_task_survives_a_reload_from_the_store(storage: Storage) -> None:
    task = make_task(
        params={"name": "ü", "arguments": {"list": [1, 2.5, None, {"deep": True}]}},
        status_message="Deploying…",
        progress_token="tok-1",
    )
    await storage.tasks.insert(task)
    assert await storage.tasks.get("t1") == task


@pytest.mark.parametrize("token", [None, 7, "7"])
async def test_a_progress_token_keeps_its_json_type(storage: Storage, token: Any) -> None:
    await storage.tasks.insert(make_task(progress_token=token))
    loaded = await storage.tasks.get("t1")
    assert loaded is not None
    assert loaded.progress_token == token
    assert type(loaded.progress_token) is type(token)


async def test_getting_an_unknown_task_gives_none(storage: Storage) -> None:
    assert await storage.tasks.get("nope") is None


async def test_a_task_id_is_stored_only_once(storage: Storage) -> None:
    await storage.tasks.insert(make_task())
    with pytest.raises(sa.exc.IntegrityError):
        await storage.tasks.insert(make_task())


async def test_an_update_persists_the_new_state_result_and_error(storage: Storage) -> None:
    await storage.tasks.insert(make_task("t1"))
    await storage.tasks.insert(make_task("t2"))
    done = make_task(
        "t1",
        status="failed",
        status_message="The task failed.",
        updated_at=1_005.5,
        ttl_ms=None,
        poll_interval_ms=250,
        result={"content": [{"type": "text", "text": "boom"}], "isError": True},
        error={"code": -32603, "message": "interrupted", "data": None},
        progress_token=3,
    )
    assert await storage.tasks.update(done) is True
    assert await storage.tasks.get("t1") == done
    assert await storage.tasks.get("t2") == make_task("t2")


async def test_an_update_keeps_the_owner_and_creation_time(storage: Storage) -> None:
    await storage.tasks.insert(make_task())
    await storage.tasks.update(make_task(tenant="evil", user="mallory", created_at=5.0))
    loaded = await storage.tasks.get("t1")
    assert loaded is not None
    assert (loaded.tenant, loaded.user, loaded.created_at) == ("acme", "ada", 1_000.0)


async def test_absent_results_are_sql_null_not_json_null(storage: Storage) -> None:
    await storage.tasks.insert(make_task())
    async with storage.engine.connect() as conn:
        nulls = await conn.scalar(
            sa.text(
                "SELECT count(*) FROM tasks WHERE result IS NULL AND error IS NULL "
                "AND progress_token IS NULL"
            )
        )
    assert nulls == 1


async def test_an_owner_lists_their_tasks_newest_first_one_page_at_a_time(
    storage: Storage,
) -> None:
    for n in range(5):
        await storage.tasks.insert(make_task(f"t{n}", created_at=1_000.0 + n))
    await storage.tasks.insert(make_task("other-user", user="bob", created_at=2_000.0))
    await storage.tasks.insert(make_task("other-tenant", tenant="globex", created_at=2_000.0))

    first = await storage.tasks.list_for_owner("acme", "ada", 0, 2)
    second = await storage.tasks.list_for_owner("acme", "ada", 2, 2)
    last = await storage.tasks.list_for_owner("acme", "ada", 4, 2)

    assert [t.task_id for t in first] == ["t4", "t3"]
    assert [t.task_id for t in second] == ["t2", "t1"]
    assert [t.task_id for t in last] == ["t0"]
    assert first[0] == make_task("t4", created_at=1_004.0)
    assert await storage.tasks.list_for_owner("acme", "nobody", 0, 10) == []


async def test_tasks_created_at_the_same_time_keep_a_stable_order(storage: Storage) -> None:
    for task_id in ("b", "c", "a"):
        await storage.tasks.insert(make_task(task_id, created_at=1_000.0))
    pages = [await storage.tasks.list_for_owner("acme", "ada", n, 1) for n in range(3)]
    assert [t.task_id for page in pages for t in page] == ["c", "b", "a"]


async def test_delete_expired_removes_only_tasks_whose_ttl_has_run_out(storage: Storage) -> None:
    await storage.tasks.insert(make_task("expired", created_at=1_000.0, ttl_ms=1_000))
    await storage.tasks.insert(make_task("at-the-edge", created_at=1_000.0, ttl_ms=5_000))
    await storage.tasks.insert(make_task("alive", created_at=1_000.0, ttl_ms=60_000))
    await storage.tasks.insert(make_task("forever", created_at=0.0, ttl_ms=None))

    assert await storage.tasks.delete_expired(1_005.0) == 1

    assert await storage.tasks.get("expired") is None
    for kept in ("at-the-edge", "alive", "forever"):
        assert await storage.tasks.get(kept) is not None
    assert await storage.tasks.delete_expired(1_005.0) == 0
    assert await storage.tasks.delete_expired(10_000.0) == 2


async def test_an_update_of_a_task_already_ended_is_refused_and_writes_nothing(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task())
    cancelled = make_task(status="cancelled", status_message="cancelled elsewhere")
    assert await storage.tasks.update(cancelled) is True
    late = make_task(status="completed", result={"content": []}, updated_at=2_000.0)
    assert await storage.tasks.update(late) is False
    assert await storage.tasks.get("t1") == cancelled


async def test_an_update_by_an_instance_that_no_longer_owns_the_task_is_refused(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task(instance_id="old"))
    assert await storage.tasks.update(make_task(instance_id="other", status="failed")) is False
    assert await storage.tasks.update(make_task(instance_id="old", status_message="x")) is True
    stored = await storage.tasks.get("t1")
    assert stored is not None
    assert (stored.status, stored.status_message, stored.instance_id) == ("working", "x", "old")


async def test_an_update_of_an_unknown_task_is_refused(storage: Storage) -> None:
    assert await storage.tasks.update(make_task("ghost")) is False


async def test_a_claim_moves_a_running_task_once(storage: Storage) -> None:
    await storage.tasks.insert(make_task(instance_id="dead"))
    read = make_task(instance_id="dead")
    assert await storage.tasks.claim(read, "b") is True
    assert await storage.tasks.claim(read, "c") is False  # read before b took it
    stored = await storage.tasks.get("t1")
    assert stored is not None
    assert stored.instance_id == "b"


async def test_an_ended_task_cannot_be_claimed(storage: Storage) -> None:
    await storage.tasks.insert(make_task(instance_id="dead", status="completed"))
    assert await storage.tasks.claim(make_task(instance_id="dead"), "b") is False


async def test_statuses_gives_the_status_and_instance_of_the_tasks_that_exist(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task("t1", instance_id="a"))
    await storage.tasks.insert(make_task("t2", instance_id="b", status="cancelled"))
    many = [f"x{n}" for n in range(1_200)]  # several IN lists
    found = await storage.tasks.statuses(["t1", "t2", "gone", "t1", *many])
    assert found == {"t1": ("working", "a"), "t2": ("cancelled", "b")}
    assert await storage.tasks.statuses([]) == {}


async def test_orphans_are_the_running_tasks_of_replicas_without_a_fresh_heartbeat(
    storage: Storage,
) -> None:
    await ReplicaStore(storage.engine, "live").heartbeat()
    await ReplicaStore(storage.engine, "stale").heartbeat()
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.update(replicas)
            .where(replicas.c.instance_id == "stale")
            .values(heartbeat_at=replicas.c.heartbeat_at - 11)
        )
    await storage.tasks.insert(make_task("of-live", instance_id="live"))
    await storage.tasks.insert(make_task("of-stale", instance_id="stale", created_at=3.0))
    await storage.tasks.insert(
        make_task("of-gone", instance_id="gone", status="input_required", created_at=2.0)
    )
    await storage.tasks.insert(make_task("mine", instance_id="me", created_at=1.0))
    for status in ("completed", "failed", "cancelled"):
        await storage.tasks.insert(make_task(status, instance_id="gone", status=status))

    found = await storage.tasks.orphaned("me", 10)

    assert [t.task_id for t in found] == ["mine", "of-gone", "of-stale"]
    assert [t.task_id for t in await storage.tasks.orphaned("me", 2)] == ["mine", "of-gone"]
    seen_by_another = await storage.tasks.orphaned("another", 10)
    assert [t.task_id for t in seen_by_another] == ["mine", "of-gone", "of-stale"]
    assert "of-live" in {t.task_id for t in await storage.tasks.orphaned("live", 10)}  # its own


async def test_of_many_concurrent_ends_of_one_task_exactly_one_is_written(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task())
    ends = [
        make_task(status=status, status_message=f"{status} {n}")
        for n in range(10)
        for status in ("completed", "failed", "cancelled")
    ]
    async with asyncio.timeout(30):
        written = await asyncio.gather(*(storage.tasks.update(end) for end in ends))
    assert written.count(True) == 1
    winner = ends[written.index(True)]
    assert await storage.tasks.get("t1") == winner


async def test_of_many_concurrent_claims_of_one_task_exactly_one_wins(storage: Storage) -> None:
    await storage.tasks.insert(make_task(instance_id="dead"))
    read = make_task(instance_id="dead")
    async with asyncio.timeout(30):
        won = await asyncio.gather(*(storage.tasks.claim(read, f"r{n}") for n in range(20)))
    assert won.count(True) == 1
    stored = await storage.tasks.get("t1")
    assert stored is not None
    assert stored.instance_id == f"r{won.index(True)}"


async def test_input_requests_are_pending_until_answered_and_the_first_answer_stands(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task(session_id=""))
    asked = {"method": "elicitation/create", "params": {"message": "Go?"}}
    await storage.tasks.ask("t1", {"a-1": asked, "b-2": asked}, 1_001.0)
    assert await storage.tasks.inputs("t1") == ({"a-1": asked, "b-2": asked}, {})

    yes, no = {"action": "accept", "content": {"ok": True}}, {"action": "decline"}
    assert await storage.tasks.answer("t1", {"a-1": yes, "never-asked": yes}, 1_002.0) == 1
    assert await storage.tasks.answer("t1", {"a-1": no}, 1_003.0) == 0  # answered already
    assert await storage.tasks.inputs("t1") == ({"b-2": asked}, {"a-1": yes})
    assert await storage.tasks.answer("other", {"b-2": yes}, 1_004.0) == 0  # another task's key


async def test_a_tasks_inputs_go_when_its_ttl_runs_out(storage: Storage) -> None:
    await storage.tasks.insert(make_task(session_id="", ttl_ms=1_000))
    await storage.tasks.ask("t1", {"k": {"method": "elicitation/create", "params": {}}}, 1_000.0)
    assert await storage.tasks.delete_expired(1_002.0) == 1
    assert await storage.tasks.inputs("t1") == ({}, {})
