"""SqlTaskStore: tasks persist every state change and outlive the process."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from appdeck.protocol.tasks import Task
from appdeck.storage import Storage


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
        instance_id="i2",
        result={"content": [{"type": "text", "text": "boom"}], "isError": True},
        error={"code": -32603, "message": "interrupted", "data": None},
        progress_token=3,
    )
    await storage.tasks.update(done)
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


async def test_working_elsewhere_finds_the_unfinished_tasks_of_other_instances(
    storage: Storage,
) -> None:
    await storage.tasks.insert(make_task("mine", instance_id="me"))
    await storage.tasks.insert(make_task("working", instance_id="dead"))
    await storage.tasks.insert(make_task("waiting", instance_id="dead", status="input_required"))
    for status in ("completed", "failed", "cancelled"):
        await storage.tasks.insert(make_task(status, instance_id="dead", status=status))

    found = await storage.tasks.working_elsewhere("me")

    assert sorted(t.task_id for t in found) == ["waiting", "working"]
    assert await storage.tasks.working_elsewhere("dead") == [make_task("mine", instance_id="me")]


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
