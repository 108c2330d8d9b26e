"""POST /mcp in the stateless era (MCP 2026-07-28) beside the handshake era, through ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.app import Services
from appdeck.protocol import versions
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from tests.support.mcp import TokenTable, headers, initialize, parse_sse, request
from tests.support.stateless import body as stateless_body
from tests.support.stateless import routing

from .conftest import TOKENS, register

TOKEN = "alice-token"
CAPS: dict[str, Any] = {"elicitation": {}}


async def loud(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    await ctx.log("debug", "a debug line")
    await ctx.log("warning", "a warning line")
    return {"content": [{"type": "text", "text": "logged"}]}


async def echo_app(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": str(args.get("app"))}]}


async def only_as_task(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ran"}]}


async def start(tmp_path: Path, database_url: str, stateless: bool) -> Services:
    settings = Settings(
        data_dir=tmp_path, database_url=database_url, stateless_era=stateless, keepalive_seconds=0.3
    )
    svc = await Services.start(settings, authenticator=TokenTable(TOKENS))
    register(svc)
    obj: dict[str, Any] = {"type": "object"}
    svc.registry.add_tool(ToolDef("loud", "Logs", obj, loud))
    routed = {"type": "object", "properties": {"app": {"type": "string", "x-mcp-header": "App"}}}
    svc.registry.add_tool(ToolDef("routed", "Routed", routed, echo_app))
    svc.registry.add_tool(
        ToolDef("only_as_task", "Task", obj, only_as_task, task_support="required")
    )
    return svc


@pytest.fixture
async def client(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    svc = await start(tmp_path, database_url, stateless=True)
    try:
        transport = httpx.ASGITransport(app=svc.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            yield c
    finally:
        await svc.stop()


def body(method: str, params: dict[str, Any] | None = None, rid: Any = 1, **meta: Any) -> Any:
    return stateless_body(method, params, rid, CAPS, **meta)


def stateless(method: str, name: str | None = None, token: str | None = TOKEN) -> dict[str, str]:
    return routing(method, name, token)


async def post(
    client: httpx.AsyncClient, method: str, params: dict[str, Any] | None = None, **meta: Any
) -> httpx.Response:
    name = (params or {}).get("name") or (params or {}).get("uri")
    return await client.post(
        "/mcp", json=body(method, params, **meta), headers=stateless(method, name)
    )


async def test_discover_names_every_version_the_capabilities_and_the_server(
    client: httpx.AsyncClient,
) -> None:
    r = await post(client, "server/discover")
    assert r.status_code == 200
    assert "mcp-session-id" not in r.headers
    result = r.json()["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == list(versions.ALL)
    assert set(result["capabilities"]) >= {"tools", "resources", "prompts", "completions"}
    assert "tasks" not in result["capabilities"]  # the handshake era's slot
    assert "whats_next" in result["instructions"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "appdeck-mcp"
    assert (result["ttlMs"], result["cacheScope"]) == (300_000, "public")


async def test_lists_and_reads_carry_caching_hints_private_to_the_caller(
    client: httpx.AsyncClient,
) -> None:
    tools = (await post(client, "tools/list")).json()["result"]
    assert "echo" in {t["name"] for t in tools["tools"]}
    assert (tools["resultType"], tools["cacheScope"], tools["ttlMs"]) == (
        "complete",
        "private",
        300_000,
    )
    read = (await post(client, "resources/read", {"uri": "test://items/42"})).json()["result"]
    assert read["contents"] == [{"uri": "test://items/42", "text": "42"}]
    assert (read["cacheScope"], read["ttlMs"]) == ("private", 0)


async def test_a_tool_call_is_answered_without_a_session_and_ignores_a_task_request(
    client: httpx.AsyncClient,
) -> None:
    r = await post(client, "tools/call", {"name": "echo", "arguments": {"text": "hi", "task": {}}})
    assert r.status_code == 200
    assert "mcp-session-id" not in r.headers
    result = r.json()["result"]
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["resultType"] == "complete"
    assert "task" not in result
    assert "ttlMs" not in result  # a tool result is not cacheable


async def test_progress_turns_the_answer_into_an_sse_stream_without_event_ids(
    client: httpx.AsyncClient,
) -> None:
    params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": "p1"}}
    payload = body("tools/call", params)
    payload["params"]["_meta"]["progressToken"] = "p1"
    r = await client.post("/mcp", json=payload, headers=stateless("tools/call", "chatty"))
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    assert r.headers["x-accel-buffering"] == "no"
    events = parse_sse(r.text)
    assert [e.id for e in events] == [None] * 4
    messages = [e.json() for e in events]
    assert [m.get("method") for m in messages[:3]] == ["notifications/progress"] * 3
    assert messages[3]["result"]["content"][0]["text"] == "chatty done"


async def test_log_messages_are_sent_only_at_the_level_the_request_asked_for(
    client: httpx.AsyncClient,
) -> None:
    quiet = await post(client, "tools/call", {"name": "loud", "arguments": {}})
    assert quiet.headers["content-type"] == "application/json"  # no log level: no message
    r = await post(client, "tools/call", {"name": "loud", "arguments": {}}, logLevel="warning")
    messages = [e.json() for e in parse_sse(r.text)]
    logs = [m["params"]["data"] for m in messages if m.get("method") == "notifications/message"]
    assert logs == ["a warning line"]
    assert messages[-1]["result"]["content"][0]["text"] == "logged"


@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/list",
        "tasks/result",
        "no/such",
    ],
)
async def test_a_removed_or_unknown_method_is_404_method_not_found_echoing_the_id(
    client: httpx.AsyncClient, method: str
) -> None:
    r = await client.post("/mcp", json=body(method, rid="r-7"), headers=stateless(method))
    assert r.status_code == 404
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": "r-7",
        "error": {"code": -32601, "message": f"Method not found: {method}"},
    }


async def test_a_header_unlike_the_body_is_400_header_mismatch(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp",
        json=body("tools/call", {"name": "echo", "arguments": {}}, rid=5),
        headers=stateless("tools/call", "not-echo"),
    )
    assert r.status_code == 400
    assert (r.json()["id"], r.json()["error"]["code"]) == (5, -32020)


async def test_an_unknown_version_is_400_and_lists_the_handshake_versions_to_fall_back_to(
    client: httpx.AsyncClient,
) -> None:
    payload = body("server/discover", rid=3)
    payload["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    h = stateless("server/discover")
    h["mcp-protocol-version"] = "2099-01-01"
    r = await client.post("/mcp", json=payload, headers=h)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32022
    assert "2025-11-25" in error["data"]["supported"]


async def test_an_unknown_resource_is_invalid_params_with_its_uri(
    client: httpx.AsyncClient,
) -> None:
    r = await post(client, "resources/read", {"uri": "test://nothing"})
    error = r.json()["error"]
    assert (error["code"], error["data"]) == (-32602, {"uri": "test://nothing"})


async def test_a_tool_that_runs_only_as_a_task_needs_the_tasks_extension(
    client: httpx.AsyncClient,
) -> None:
    r = await post(client, "tools/call", {"name": "only_as_task", "arguments": {}})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {
        "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    }


async def test_no_token_is_401_with_a_challenge(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/mcp", json=body("tools/list"), headers=stateless("tools/list", token=None)
    )
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")


async def test_a_get_or_delete_of_the_stateless_era_is_405(client: httpx.AsyncClient) -> None:
    for verb in ("GET", "DELETE"):
        h = stateless("tools/list")
        h["accept"] = "text/event-stream"
        r = await client.request(verb, "/mcp", headers=h)
        assert r.status_code == 405, verb
        assert r.headers["allow"] == "POST"


async def test_tools_listed_in_the_stateless_era_carry_no_task_support_of_the_handshake_era(
    client: httpx.AsyncClient,
) -> None:
    stateless = (await post(client, "tools/list")).json()["result"]["tools"]
    assert "only_as_task" in {t["name"] for t in stateless}
    assert all("execution" not in t for t in stateless)
    sid = await initialize(client, TOKEN)
    r = await client.post("/mcp", json=request("tools/list"), headers=headers(sid, TOKEN))
    handshake = {t["name"]: t for t in r.json()["result"]["tools"]}
    assert handshake["only_as_task"]["execution"] == {"taskSupport": "required"}


async def test_a_handshake_client_is_served_as_before_beside_the_stateless_era(
    client: httpx.AsyncClient,
) -> None:
    sid = await initialize(client, TOKEN)
    r = await client.post("/mcp", json=request("tools/list"), headers=headers(sid, TOKEN))
    result = r.json()["result"]
    assert "resultType" not in result
    assert "ttlMs" not in result
    assert "echo" in {t["name"] for t in result["tools"]}


async def test_with_the_era_off_discover_is_refused_so_clients_fall_back_to_initialize(
    database_url: str, tmp_path: Path
) -> None:
    svc = await start(tmp_path, database_url, stateless=False)
    try:
        transport = httpx.ASGITransport(app=svc.asgi())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            r = await post(c, "server/discover")
            assert r.status_code == 400
            assert r.json()["error"]["code"] == -32000
    finally:
        await svc.stop()


async def test_an_argument_marked_x_mcp_header_must_be_repeated_in_its_header(
    client: httpx.AsyncClient,
) -> None:
    payload = body("tools/call", {"name": "routed", "arguments": {"app": "shop"}}, rid=9)
    h = stateless("tools/call", "routed")
    missing = await client.post("/mcp", json=payload, headers=h)
    assert missing.status_code == 400
    assert (missing.json()["id"], missing.json()["error"]["code"]) == (9, -32020)
    wrong = await client.post("/mcp", json=payload, headers={**h, "mcp-param-app": "other"})
    assert wrong.json()["error"]["code"] == -32020
    ok = await client.post("/mcp", json=payload, headers={**h, "Mcp-Param-App": "shop"})
    assert ok.json()["result"]["content"][0]["text"] == "shop"
    listed = (await post(client, "tools/list")).json()["result"]["tools"]
    [tool] = [t for t in listed if t["name"] == "routed"]
    assert tool["inputSchema"]["properties"]["app"]["x-mcp-header"] == "App"
