"""The tasks extension of MCP 2026-07-28 over POST /mcp, through ASGI: a task created, asked
for input, answered with tasks/update and polled to its end, all without a session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.app import Services
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from tests.support.mcp import TokenTable, headers, request

from .conftest import TOKENS, register

V = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
WITH_TASKS: dict[str, Any] = {"elicitation": {}, "extensions": {EXT: {}}}
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}


async def confirm_wipe(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit("Wipe it?", CONFIRM)
    yes = answer.get("action") == "accept" and (answer.get("content") or {}).get("confirm")
    return {"content": [{"type": "text", "text": "wiped" if yes else "kept"}]}


@pytest.fixture
async def client(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(data_dir=tmp_path, database_url=database_url, stateless_era=True)
    svc = await Services.start(settings, authenticator=TokenTable(TOKENS))
    register(svc)
    svc.registry.add_tool(
        ToolDef("confirm_wipe", "Asks", {"type": "object"}, confirm_wipe, task_support="optional")
    )
    try:
        transport = httpx.ASGITransport(app=svc.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            yield c
    finally:
        await svc.stop()


async def post(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any],
    caps: dict[str, Any] | None = None,
    token: str = "alice-token",
) -> httpx.Response:
    params = {
        **params,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": WITH_TASKS if caps is None else caps,
        },
    }
    routing = {"mcp-protocol-version": V, "mcp-method": method}
    name = params.get("name") or params.get("taskId")
    if isinstance(name, str):
        routing["mcp-name"] = name
    return await client.post(
        "/mcp", json=request(method, params, 7), headers=headers(token=token, **routing)
    )


async def poll(client: httpx.AsyncClient, task_id: str, status: str) -> dict[str, Any]:
    """tasks/get until ``status`` (bounded), as a client polls."""
    async with asyncio.timeout(30):
        while True:
            r = await post(client, "tasks/get", {"taskId": task_id})
            assert r.status_code == 200, r.text
            task: dict[str, Any] = r.json()["result"]
            if task["status"] == status:
                return task
            await asyncio.sleep(0.02)


async def test_a_task_asks_through_tasks_get_and_hears_the_answer_through_tasks_update(
    client: httpx.AsyncClient,
) -> None:
    r = await post(client, "tools/call", {"name": "confirm_wipe", "arguments": {}})
    assert r.status_code == 200
    assert "mcp-session-id" not in r.headers
    created = r.json()["result"]
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    task_id = created["taskId"]

    waiting = await poll(client, task_id, "input_required")
    [(key, asked)] = waiting["inputRequests"].items()
    assert asked["method"] == "elicitation/create"
    assert asked["params"]["message"] == "Wipe it?"

    answer = {key: {"action": "accept", "content": {"confirm": True}}}
    r = await post(client, "tasks/update", {"taskId": task_id, "inputResponses": answer})
    assert r.status_code == 200
    ack = r.json()["result"]
    assert ack["resultType"] == "complete"
    assert not {"taskId", "status"} & set(ack)

    done = await poll(client, task_id, "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "wiped"}]


async def test_discover_declares_the_extension_and_tasks_methods_need_it(
    client: httpx.AsyncClient,
) -> None:
    caps = (await post(client, "server/discover", {})).json()["result"]["capabilities"]
    assert caps["extensions"] == {EXT: {}}
    assert "tasks" not in caps

    task_id = (await post(client, "tools/call", {"name": "echo", "arguments": {}})).json()[
        "result"
    ]["taskId"]
    refused = await post(client, "tasks/get", {"taskId": task_id}, caps={})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32021
    other = await post(client, "tasks/get", {"taskId": task_id}, token="bob-token")
    assert other.json()["error"]["code"] == -32602
    for removed in ("tasks/result", "tasks/list"):
        r = await post(client, removed, {"taskId": task_id})
        assert r.status_code == 404
        assert r.json()["error"]["code"] == -32601
    wrong_name = await client.post(
        "/mcp",
        json=request(
            "tasks/get",
            {
                "taskId": task_id,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": V,
                    "io.modelcontextprotocol/clientCapabilities": WITH_TASKS,
                },
            },
        ),
        headers=headers(
            token="alice-token",
            **{"mcp-protocol-version": V, "mcp-method": "tasks/get", "mcp-name": "another"},
        ),
    )
    assert wrong_name.status_code == 400
    assert wrong_name.json()["error"]["code"] == -32020
