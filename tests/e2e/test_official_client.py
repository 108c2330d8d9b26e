"""The official MCP Python SDK client (mcp 2.3.0) against a real ``appdeck serve`` process."""

from __future__ import annotations

import asyncio

import httpx2
import mcp.types as types
import pytest
from mcp import MCPDeprecationWarning

from tests.e2e.helpers import (
    PROTOCOL,
    RELATED_TASK,
    TERMINAL,
    Inbox,
    call_tool_as_task,
    get_task,
    list_tasks,
    official_client,
    task_result,
)
from tests.support.appdeck_process import AppDeckProcess
from tests.support.wait import until

WATCHED = "test://watched-resource"


def _text(result: types.CallToolResult) -> str:
    assert result.content, result
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return block.text


@pytest.mark.e2e
async def test_the_official_client_initializes_lists_tools_and_calls_a_tool(
    appdeck: AppDeckProcess,
) -> None:
    inbox = Inbox()
    async with asyncio.timeout(15), official_client(appdeck, inbox) as client:
        assert client.protocol_version == PROTOCOL
        assert client.server_info is not None
        assert client.server_info.name == "appdeck-mcp"
        assert client.server_capabilities.tools is not None

        listed = await client.list_tools()
        names = {tool.name for tool in listed.tools}
        assert {
            "test_simple_text",
            "test_tool_with_progress",
            "test_reconnection",
            "appdeck_test_sleep",
        } <= names

        result = await client.call_tool("test_simple_text", {})
        assert not result.is_error
        assert _text(result) == "This is a simple text response for testing."
    assert inbox.errors == []


@pytest.mark.e2e
async def test_progress_notifications_reach_the_callback_before_the_result(
    appdeck: AppDeckProcess,
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    inbox = Inbox()
    async with asyncio.timeout(15), official_client(appdeck, inbox) as client:
        result = await client.call_tool(
            "test_tool_with_progress", {}, progress_callback=on_progress
        )
        progress_when_result_arrived = list(seen)

    assert not result.is_error
    assert [(p, t) for p, t, _ in progress_when_result_arrived] == [
        (0, 100),
        (50, 100),
        (100, 100),
    ]
    assert all(message for _, _, message in progress_when_result_arrived)
    assert inbox.errors == []


@pytest.mark.e2e
async def test_a_task_runs_to_completion_and_its_result_carries_the_related_task_id(
    appdeck: AppDeckProcess,
) -> None:
    inbox = Inbox()
    async with asyncio.timeout(20), official_client(appdeck, inbox) as client:
        assert client.server_capabilities.tasks is not None

        created = await call_tool_as_task(client, "appdeck_test_sleep", {"seconds": 0.5})
        task_id = created.task.task_id
        assert created.task.status == "working"
        assert created.task.ttl == 60_000
        assert created.task.created_at
        assert created.task.last_updated_at

        statuses: list[str] = []
        async with asyncio.timeout(10):
            while not statuses or statuses[-1] not in TERMINAL:
                if statuses:
                    # respect pollInterval, capped so that the test stays quick
                    await asyncio.sleep(min((created.task.poll_interval or 1000) / 1000, 0.2))
                status = await get_task(client, task_id)
                assert status.task_id == task_id
                statuses.append(status.status)
        assert statuses[-1] == "completed", statuses
        assert set(statuses[:-1]) <= {"working"}, statuses

        async with asyncio.timeout(30):
            result = await task_result(client, task_id)
        assert not result.is_error
        assert _text(result) == "slept 0.5s"
        assert result.meta is not None
        assert result.meta[RELATED_TASK]["taskId"] == task_id

        listed = await list_tasks(client)
        mine = [task for task in listed.tasks if task.task_id == task_id]
        assert len(mine) == 1
        assert mine[0].status == "completed"
    assert inbox.errors == []


@pytest.mark.e2e
async def test_a_subscriber_gets_resource_updated_notifications_until_it_unsubscribes(
    appdeck: AppDeckProcess,
) -> None:
    inbox = Inbox()

    def updates() -> list[types.ResourceUpdatedNotification]:
        return [n for n in inbox.of(types.ResourceUpdatedNotification) if n.params.uri == WATCHED]

    async with asyncio.timeout(120), official_client(appdeck, inbox) as client:
        # resources/subscribe is deprecated by the SDK (gone in 2026-07-28) but is the
        # 2025-11-25 way to subscribe; the SDK warns on every call.
        with pytest.warns(MCPDeprecationWarning, match="resources/subscribe"):
            await client.session.subscribe_resource(WATCHED)
        # the server announces the watched resource every second on the GET stream
        await until(updates, within=30)

        with pytest.warns(MCPDeprecationWarning, match="resources/unsubscribe"):
            await client.session.unsubscribe_resource(WATCHED)
        # an announcement already under way when unsubscribe ran may still land: let it
        # (3 s: a loaded machine may deliver it late; 0.3 s assumed a quiet one)
        await asyncio.sleep(3)
        before = len(updates())
        await asyncio.sleep(3)  # three announcement periods
        assert len(updates()) == before
    assert inbox.errors == []


@pytest.mark.e2e
async def test_the_official_client_resumes_a_post_stream_the_server_closed(
    appdeck: AppDeckProcess,
) -> None:
    inbox = Inbox()
    sent: list[httpx2.Request] = []
    async with asyncio.timeout(60), official_client(appdeck, inbox, sent) as client:
        # the server closes the POST's SSE stream right after its priming event; the
        # client must come back with GET + Last-Event-ID to get the result
        result = await client.call_tool("test_reconnection", {})
    assert not result.is_error
    assert _text(result).startswith("Reconnection test completed successfully.")
    resumptions = [
        r.headers["last-event-id"]
        for r in sent
        if r.method == "GET" and "last-event-id" in r.headers
    ]
    # the result came by resuming the POST's own stream, not the standalone one ("g.<n>")
    assert any(not eid.startswith("g.") for eid in resumptions), resumptions
    assert inbox.errors == []
