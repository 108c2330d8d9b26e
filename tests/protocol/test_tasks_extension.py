"""The tasks extension of MCP 2026-07-28 in the core: per-request negotiation, the wire of
``tasks/get|update|cancel``, input through ``tasks/update``, and the state machine under it."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from appdeck.common.errors import NotFound
from appdeck.common.identity import Principal
from appdeck.protocol.call import Call
from appdeck.protocol.context import ToolContext
from appdeck.protocol.envelope import Peer
from appdeck.protocol.errors import InternalError
from appdeck.protocol.registry import ToolDef
from appdeck.protocol.task_model import INPUT_REQUIRED, WORKING, Task
from appdeck.protocol.tasks_extension import detailed
from tests.support.wait import until

from .conftest import ALICE, BOB, Harness
from .doubles import RecordingChannel

V = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
WITH_TASKS: dict[str, Any] = {"elicitation": {}, "extensions": {EXT: {}}}
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


async def failing(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise NotFound("no such thing")


async def broken(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise InternalError("the job broke")


async def two_questions(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    first, second = await asyncio.gather(
        ctx.elicit("Name?", NAME_SCHEMA), ctx.elicit("Other name?", NAME_SCHEMA)
    )
    names = [(a.get("content") or {}).get("name") for a in (first, second)]
    return {"content": [{"type": "text", "text": " and ".join(map(str, names))}]}


class Stateless:
    """Stateless requests to the harness's server, as the transport would hand them over."""

    def __init__(self, harness: Harness) -> None:
        self.h = harness
        self.ids = itertools.count(1)
        reg = harness.registry
        obj: dict[str, Any] = {"type": "object"}
        reg.add_tool(ToolDef("failing", "tool error", obj, failing, task_support="optional"))
        reg.add_tool(ToolDef("broken", "protocol error", obj, broken, task_support="optional"))
        reg.add_tool(ToolDef("two", "asks twice", obj, two_questions, task_support="optional"))

    async def send(
        self,
        method: str,
        params: dict[str, Any],
        caps: dict[str, Any] | None = None,
        principal: Principal = ALICE,
    ) -> tuple[dict[str, Any], int]:
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        peer = Peer(V, WITH_TASKS if caps is None else caps)
        reply, status, _ = await self.h.server.handle_request(
            message, Call(principal, None, peer=peer)
        )
        assert reply is not None
        return reply, status

    async def result(self, method: str, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
        reply, status = await self.send(method, params, **kw)
        assert status == 200, reply
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    async def create(self, tool: str, arguments: dict[str, Any] | None = None) -> str:
        created = await self.result("tools/call", {"name": tool, "arguments": arguments or {}})
        assert created["resultType"] == "task", created
        task_id: str = created["taskId"]
        return task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.result("tasks/get", {"taskId": task_id})

    async def settled(self, task_id: str, status: str) -> dict[str, Any]:
        """tasks/get once the task reached ``status`` (bounded)."""
        seen: dict[str, Any] = {}

        async def reached() -> bool:
            seen.update(await self.get(task_id))
            return seen["status"] == status

        async with asyncio.timeout(30):
            while not await reached():  # noqa: ASYNC110 - polls tasks/get, as a client does
                await asyncio.sleep(0.01)
        return seen


@pytest.fixture
async def s(harness: Harness) -> AsyncIterator[Stateless]:
    return Stateless(harness)


async def test_a_declaring_client_gets_a_stored_flat_task_for_a_task_capable_tool(
    s: Stateless,
) -> None:
    created = await s.result("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    assert created["resultType"] == "task"
    assert {"taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= set(
        created
    )
    assert created["createdAt"].endswith("Z")
    assert isinstance(created["ttlMs"], int)
    for absent in ("task", "ttl", "pollInterval", "requestState", "result", "inputRequests"):
        assert absent not in created
    # stored before it was sent: the next tasks/get finds it
    assert (await s.get(created["taskId"]))["taskId"] == created["taskId"]


async def test_a_completed_task_inlines_the_tool_result_without_related_task_meta(
    s: Stateless,
) -> None:
    task_id = await s.create("echo", {"text": "hi"})
    done = await s.settled(task_id, "completed")
    assert done["resultType"] == "complete"
    assert done["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert "_meta" not in done["result"]
    assert "error" not in done
    assert "inputRequests" not in done


async def test_a_working_task_shows_its_status_and_no_outcome(
    s: Stateless, harness: Harness
) -> None:
    task_id = await s.create("slow")
    async with asyncio.timeout(30):
        await harness.gate.entered.wait()
    working = await s.get(task_id)
    assert working["status"] == "working"
    assert not {"result", "error", "inputRequests"} & set(working)
    harness.gate.release.set()
    await s.settled(task_id, "completed")


async def test_a_tool_error_completes_the_task_and_a_protocol_error_fails_it(
    s: Stateless,
) -> None:
    tool_error = await s.settled(await s.create("failing"), "completed")
    assert tool_error["result"]["isError"] is True
    failed = await s.settled(await s.create("broken"), "failed")
    assert failed["error"]["code"] == -32603
    assert failed["error"]["message"] == "the job broke"
    assert "result" not in failed


async def test_a_question_during_the_task_is_answered_through_tasks_update(
    s: Stateless,
) -> None:
    task_id = await s.create("ask")
    waiting = await s.settled(task_id, "input_required")
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Your name?"
    ack = await s.result(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {
                key: {"action": "accept", "content": {"name": "Bob"}},
                "never-asked": {"action": "accept"},
            },
        },
    )
    assert ack == {"resultType": "complete", "_meta": ack["_meta"]}
    done = await s.settled(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "hello Bob"
    # answered already (and the task ended): ignored, still acknowledged
    again = {key: {"action": "accept", "content": {"name": "Eve"}}}
    await s.result("tasks/update", {"taskId": task_id, "inputResponses": again})


async def test_two_open_questions_keep_the_task_waiting_until_both_are_answered(
    s: Stateless,
) -> None:
    task_id = await s.create("two")
    seen: dict[str, Any] = {}

    async def both_asked() -> bool:
        seen.update(await s.get(task_id))
        return len(seen.get("inputRequests") or {}) == 2

    async with asyncio.timeout(30):
        while not await both_asked():  # noqa: ASYNC110 - polls tasks/get, as a client does
            await asyncio.sleep(0.01)
    first, second = seen["inputRequests"]
    answer = {"action": "accept", "content": {"name": "A"}}
    await s.result("tasks/update", {"taskId": task_id, "inputResponses": {first: answer}})
    after = await s.get(task_id)
    assert after["status"] == "input_required"
    assert list(after["inputRequests"]) == [second]
    answer = {"action": "accept", "content": {"name": "B"}}
    await s.result("tasks/update", {"taskId": task_id, "inputResponses": {second: answer}})
    done = await s.settled(task_id, "completed")
    assert done["result"]["content"][0]["text"] == "A and B"


async def test_a_malformed_answer_is_invalid_params_and_the_question_stays_open(
    s: Stateless,
) -> None:
    task_id = await s.create("ask")
    waiting = await s.settled(task_id, "input_required")
    [key] = waiting["inputRequests"]
    for junk in (
        {key: {"action": "maybe"}},
        {key: "yes"},
        [key],
        {key: {"action": "accept", "content": 3}},
    ):
        reply, _ = await s.send("tasks/update", {"taskId": task_id, "inputResponses": junk})
        assert reply["error"]["code"] == -32602, junk
    assert (await s.get(task_id))["status"] == "input_required"
    await s.result("tasks/cancel", {"taskId": task_id})


async def test_cancel_acks_empty_for_a_working_task_and_again_once_it_ended(
    s: Stateless, harness: Harness
) -> None:
    task_id = await s.create("slow")
    async with asyncio.timeout(30):
        await harness.gate.entered.wait()
    ack = await s.result("tasks/cancel", {"taskId": task_id})
    assert set(ack) == {"resultType", "_meta"}
    assert ack["resultType"] == "complete"
    assert (await s.get(task_id))["status"] == "cancelled"
    again = await s.result("tasks/cancel", {"taskId": task_id})
    assert again["resultType"] == "complete"
    assert "status" not in again


async def test_an_unknown_id_or_another_owners_task_is_invalid_params(s: Stateless) -> None:
    task_id = await s.create("echo", {"text": "mine"})
    for method, params in (
        ("tasks/get", {}),
        ("tasks/update", {"inputResponses": {}}),
        ("tasks/cancel", {}),
    ):
        for who, tid in ((ALICE, "made-up"), (BOB, task_id), (ALICE, 42)):
            reply, _ = await s.send(method, {"taskId": tid, **params}, principal=who)
            assert reply["error"]["code"] == -32602, (method, who.user, tid)
    assert (await s.get(task_id))["taskId"] == task_id  # still Alice's


async def test_without_the_extension_tasks_methods_are_refused_and_tools_run_at_once(
    s: Stateless,
) -> None:
    task_id = await s.create("echo", {"text": "x"})
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        reply, status = await s.send(method, {"taskId": task_id}, caps={})
        assert status == 400
        assert reply["error"]["code"] == -32021
        assert reply["error"]["data"] == {"requiredCapabilities": {"extensions": {EXT: {}}}}
    sync = await s.result("tools/call", {"name": "echo", "arguments": {"text": "x"}}, caps={})
    assert sync["resultType"] == "complete"
    assert sync["content"][0]["text"] == "x"
    reply, status = await s.send("tools/call", {"name": "only_task", "arguments": {}}, caps={})
    assert (reply["error"]["code"], status) == (-32021, 400)
    # a tool that never runs as a task answers at once, extension or not
    plain = await s.result("tools/call", {"name": "missing", "arguments": {}})
    assert plain["resultType"] == "complete"
    assert plain["isError"] is True


async def test_tasks_result_and_tasks_list_do_not_exist_in_this_era(s: Stateless) -> None:
    for method in ("tasks/result", "tasks/list"):
        reply, status = await s.send(method, {"taskId": "x"})
        assert (reply["error"]["code"], status) == (-32601, 404)


async def test_the_handshake_era_keeps_its_task_wire(harness: Harness) -> None:
    session = await harness.init()
    reply = await harness.request(
        "tools/call",
        {"name": "echo", "arguments": {"text": "old"}, "task": {}},
        session=session,
    )
    task = reply["result"]["task"]
    assert {"ttl", "pollInterval"} <= set(task)
    assert "ttlMs" not in task
    got = await harness.request("tasks/get", {"taskId": task["taskId"]}, session=session)
    assert "ttl" in got["result"]
    assert "resultType" not in got["result"]


async def test_every_status_change_reaches_the_watchers(s: Stateless, harness: Harness) -> None:
    seen: list[tuple[str, str]] = []

    async def watcher(task: Task) -> None:
        seen.append((task.task_id, task.status))

    harness.tasks.on_change(watcher)
    task_id = await s.create("ask")
    waiting = await s.settled(task_id, "input_required")
    [key] = waiting["inputRequests"]
    answer = {key: {"action": "accept", "content": {"name": "W"}}}
    await s.result("tasks/update", {"taskId": task_id, "inputResponses": answer})
    await s.settled(task_id, "completed")
    await until(lambda: (task_id, "completed") in seen)
    statuses = [status for tid, status in seen if tid == task_id]
    assert statuses == [INPUT_REQUIRED, WORKING, "completed"]
    assert not harness.outbox.sent  # a stateless task has no session stream


def test_a_failed_task_without_a_stored_error_still_carries_a_json_rpc_error() -> None:
    task = Task(
        task_id="t",
        tenant="acme",
        user="alice",
        session_id="",
        status="failed",
        created_at=0.0,
        updated_at=0.0,
        ttl_ms=None,
        poll_interval_ms=1000,
        method="tools/call",
        params={},
        instance_id="i",
        status_message="interrupted",
    )
    body = detailed(task, {})
    assert body["error"] == {"code": -32603, "message": "interrupted"}
    assert body["ttlMs"] is None


async def test_a_question_before_the_task_is_an_input_required_round_then_the_task_runs(
    s: Stateless,
) -> None:
    async def ask_first(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        answer = await ctx.elicit("Name?", NAME_SCHEMA)
        return {**args, "who": (answer.get("content") or {}).get("name")}

    async def hello(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"hello {args['who']}"}]}

    s.h.registry.add_tool(
        ToolDef(
            "named",
            "asks, then a task",
            {"type": "object"},
            hello,
            task_support="required",
            before_task=ask_first,
        )
    )
    first = await s.result("tools/call", {"name": "named", "arguments": {}})
    assert first["resultType"] == "input_required"
    assert "taskId" not in first
    [key] = first["inputRequests"]
    retry = {
        "name": "named",
        "arguments": {},
        "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
        "requestState": first["requestState"],
    }
    created = await s.result("tools/call", retry)
    assert created["resultType"] == "task"
    assert "requestState" not in created
    done = await s.settled(created["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "hello Ada"


async def test_status_changes_reach_the_owners_listen_stream_as_notifications_tasks(
    s: Stateless, harness: Harness
) -> None:
    task_id = await s.create("slow")
    channel = RecordingChannel()
    message = {
        "jsonrpc": "2.0",
        "id": "L1",
        "method": "subscriptions/listen",
        "params": {"notifications": {"taskIds": [task_id]}},
    }
    stream = asyncio.create_task(
        harness.server.handle_request(message, Call(ALICE, None, channel, Peer(V, WITH_TASKS)))
    )
    try:
        await until(lambda: channel.messages)  # the ack
        harness.gate.release.set()
        await until(lambda: any(m["params"].get("status") == "completed" for m in channel.messages))
        tasks = [m for m in channel.messages if m["method"] == "notifications/tasks"]
        done = tasks[-1]["params"]
        assert done["taskId"] == task_id
        assert done["result"]["content"][0]["text"] == "slow done"
        assert done["_meta"] == {"io.modelcontextprotocol/subscriptionId": "L1"}
    finally:
        stream.cancel()
        await asyncio.gather(stream, return_exceptions=True)
