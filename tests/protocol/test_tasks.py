import asyncio

import pytest

from appdeck.protocol.errors import INVALID_PARAMS
from appdeck.protocol.task_model import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    RELATED_TASK_META,
    TERMINAL,
    WORKING,
    Task,
)
from appdeck.protocol.tasks import TRANSITIONS, IllegalTransition, TaskManager
from appdeck.storage import Storage
from tests.support.wait import until

from .conftest import ALICE, BOB, Harness
from .doubles import MemoryTaskStore, RecordingOutbox


def test_terminal_states_have_no_way_out() -> None:
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    assert TRANSITIONS[WORKING] == {INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED}
    assert TRANSITIONS[INPUT_REQUIRED] == {WORKING, COMPLETED, FAILED, CANCELLED}


async def _start(
    harness: Harness, name: str, arguments: dict, *, in_arguments: bool = False, ttl: int = 60000
) -> tuple:
    session = await harness.init()
    params: dict = {"name": name, "arguments": dict(arguments)}
    if in_arguments:
        params["arguments"]["task"] = {"ttl": ttl}
    else:
        params["task"] = {"ttl": ttl}
    reply = await harness.request("tools/call", params, session=session)
    return session, reply["result"]["task"]


async def test_a_task_call_returns_a_working_task_at_once(harness: Harness) -> None:
    _, task = await _start(harness, "slow", {})
    assert task["status"] == "working"
    assert task["ttl"] == 60000
    assert task["pollInterval"] == 1000
    assert task["createdAt"].endswith("Z")
    assert set(task) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}


@pytest.mark.parametrize("in_arguments", [False, True])
async def test_tasks_result_returns_the_tool_result_with_related_task_meta(
    harness: Harness, in_arguments: bool
) -> None:
    session, task = await _start(harness, "echo", {"text": "bg"}, in_arguments=in_arguments)
    async with asyncio.timeout(5):
        result = (
            await harness.request("tasks/result", {"taskId": task["taskId"]}, session=session)
        )["result"]
    assert result["content"] == [{"type": "text", "text": "bg"}]
    assert result["_meta"][RELATED_TASK_META] == {"taskId": task["taskId"]}
    got = (await harness.request("tasks/get", {"taskId": task["taskId"]}, session=session))[
        "result"
    ]
    assert got["status"] == "completed"


async def test_status_changes_are_announced_on_the_session_stream(harness: Harness) -> None:
    session, task = await _start(harness, "echo", {"text": "bg"})
    async with asyncio.timeout(5):
        await harness.request("tasks/result", {"taskId": task["taskId"]}, session=session)
    notes = [m for sid, m in harness.outbox.sent if m["method"] == "notifications/tasks/status"]
    assert notes[-1]["params"]["status"] == "completed"
    assert notes[-1]["params"]["taskId"] == task["taskId"]


async def test_task_progress_uses_the_original_token_on_the_session_stream(
    harness: Harness,
) -> None:
    session = await harness.init()
    reply = await harness.request(
        "tools/call",
        {"name": "slow", "task": {}, "_meta": {"progressToken": "tok"}},
        session=session,
    )
    task = reply["result"]["task"]
    harness.gate.release.set()
    async with asyncio.timeout(5):
        await harness.request("tasks/result", {"taskId": task["taskId"]}, session=session)
    progress = [m for _, m in harness.outbox.sent if m["method"] == "notifications/progress"]
    assert [p["params"]["progress"] for p in progress] == [1, 2]
    assert all(p["params"]["progressToken"] == "tok" for p in progress)


async def test_cancelling_a_working_task_ends_it_cancelled(harness: Harness) -> None:
    session, task = await _start(harness, "slow", {})
    async with asyncio.timeout(5):
        await harness.gate.entered.wait()
    cancelled = (
        await harness.request("tasks/cancel", {"taskId": task["taskId"]}, session=session)
    )["result"]
    assert cancelled["status"] == "cancelled"
    again = await harness.request("tasks/cancel", {"taskId": task["taskId"]}, session=session)
    assert again["error"]["code"] == INVALID_PARAMS
    assert harness.tasks_store.rows[task["taskId"]].status == "cancelled"


async def test_another_owners_task_is_not_found(harness: Harness) -> None:
    _, task = await _start(harness, "echo", {"text": "x"})
    bob = await harness.init(BOB)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        reply = await harness.request(
            method, {"taskId": task["taskId"]}, session=bob, principal=BOB
        )
        assert reply["error"]["code"] == INVALID_PARAMS
    listed = (await harness.request("tasks/list", {}, session=bob, principal=BOB))["result"]
    assert listed["tasks"] == []


async def test_tasks_list_pages_with_a_cursor(harness: Harness) -> None:
    session = await harness.init()
    harness.tasks._limits = type(harness.tasks._limits)(page_size=2)
    for i in range(5):
        await harness.request(
            "tools/call",
            {"name": "echo", "arguments": {"text": str(i)}, "task": {}},
            session=session,
        )
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"cursor": cursor} if cursor else {}
        page = (await harness.request("tasks/list", params, session=session))["result"]
        seen += [t["taskId"] for t in page["tasks"]]
        cursor = page.get("nextCursor")
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 5
    bad = await harness.request("tasks/list", {"cursor": "garbage!"}, session=session)
    assert bad["error"]["code"] == INVALID_PARAMS


async def test_ttl_is_capped_by_the_server(harness: Harness) -> None:
    _, task = await _start(harness, "echo", {"text": "x"}, ttl=10**12)
    assert task["ttl"] == harness.tasks._limits.max_ttl_ms


async def test_a_tool_error_ends_the_task_failed_with_the_result_kept(harness: Harness) -> None:
    session = await harness.init()
    harness.registry.tools["missing"] = __import__("dataclasses").replace(
        harness.registry.tools["missing"], task_support="optional"
    )
    task = (await harness.request("tools/call", {"name": "missing", "task": {}}, session=session))[
        "result"
    ]["task"]
    async with asyncio.timeout(5):
        result = (
            await harness.request("tasks/result", {"taskId": task["taskId"]}, session=session)
        )["result"]
    assert result["isError"] is True
    got = (await harness.request("tasks/get", {"taskId": task["taskId"]}, session=session))[
        "result"
    ]
    assert got["status"] == "failed"
    assert "no app 42" in got["statusMessage"]


async def test_an_elicitation_inside_a_task_passes_through_input_required(harness: Harness) -> None:
    session = await harness.init(caps={"elicitation": {}})
    task = (await harness.request("tools/call", {"name": "ask", "task": {}}, session=session))[
        "result"
    ]["task"]
    await until(
        lambda: any(m.get("method") == "elicitation/create" for _, m in harness.outbox.sent)
    )
    got = (await harness.request("tasks/get", {"taskId": task["taskId"]}, session=session))[
        "result"
    ]
    assert got["status"] == "input_required"
    request = next(m for _, m in harness.outbox.sent if m.get("method") == "elicitation/create")
    assert request["params"]["_meta"][RELATED_TASK_META] == {"taskId": task["taskId"]}
    from appdeck.protocol.call import Call

    await harness.server.handle_response(
        {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {"action": "accept", "content": {"name": "Bo"}},
        },
        Call(ALICE, session),
    )
    async with asyncio.timeout(5):
        result = (
            await harness.request("tasks/result", {"taskId": task["taskId"]}, session=session)
        )["result"]
    assert result["content"][0]["text"] == "hello Bo"


def _left_by(instance_id: str) -> Task:
    return Task(
        "t1", "acme", "alice", "s1", WORKING, 1.0, 1.0, None, 1000, "tools/call", {}, instance_id
    )


async def test_a_task_left_working_by_a_dead_process_is_failed_at_start(storage: Storage) -> None:
    await storage.tasks.insert(_left_by("dead-process"))
    manager = TaskManager(storage.tasks, RecordingOutbox(), instance_id="new")
    assert await manager.reconcile({}) == 1
    task = await storage.tasks.get("t1")
    assert task is not None
    assert task.status == FAILED
    assert "restarted" in (task.status_message or "")
    assert task.error is not None
    assert task.error["code"] == -32603
    assert await manager.reconcile({}) == 0


async def test_a_resumer_may_take_over_an_interrupted_task(storage: Storage) -> None:
    await storage.tasks.insert(_left_by("dead-process"))
    manager = TaskManager(storage.tasks, RecordingOutbox(), instance_id="new")
    taken: list[tuple[str, str]] = []

    async def resume(task: Task) -> bool:
        taken.append((task.task_id, task.instance_id))
        return True

    assert await manager.reconcile({"tools/call": resume}) == 1
    assert taken == [("t1", "new")]
    task = await storage.tasks.get("t1")
    assert task is not None
    assert (task.status, task.instance_id) == (WORKING, "new")


async def test_shutdown_leaves_running_tasks_for_the_next_start(harness: Harness) -> None:
    _, task = await _start(harness, "slow", {})
    async with asyncio.timeout(5):
        await harness.gate.entered.wait()
    await harness.tasks.shutdown()
    assert harness.tasks_store.rows[task["taskId"]].status == WORKING


async def test_an_illegal_transition_is_refused() -> None:
    store, outbox = MemoryTaskStore(), RecordingOutbox()
    manager = TaskManager(store, outbox, instance_id="x")
    task = Task("t", "a", "b", "s", COMPLETED, 1.0, 1.0, None, 1000, "tools/call", {}, "x")
    with pytest.raises(IllegalTransition):
        await manager.transition(task, WORKING)
