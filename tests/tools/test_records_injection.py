"""The injection corpus through the MCP endpoint: every payload in every identifier and value
position of records and search_table is a tool error (never internal) or plain data, and the
tables of this app and of another tenant's app are unchanged afterwards."""

from __future__ import annotations

import json
from typing import Any

from tests.platform.tables.test_injection import PAYLOADS
from tests.support.mcp import headers, request
from tests.tools.conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

COLUMNS = [{"name": "title", "type": "text"}, {"name": "n", "type": "integer"}]


async def _call(caller: Caller, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """tools/call with the body as ASCII JSON (a lone surrogate travels as ``\\ud800``); a
    request the transport refuses (a lone surrogate is not valid JSON text) counts as a tool
    error."""
    body = json.dumps(request("tools/call", {"name": tool, "arguments": arguments}))
    sent = headers(caller.session, caller.token) | {"content-type": "application/json"}
    reply = (await caller.client.post("/mcp", content=body, headers=sent)).json()
    if "error" in reply:
        assert reply["error"]["code"] == -32700, reply
        return {"isError": True, "structuredContent": {"error": {"code": "parse_error"}}}
    return dict(reply["result"])


async def _state(caller: Caller, app_id: int) -> Any:
    described = await caller.ok("manage_table", action="describe", app_id=app_id, table="canary")
    rows = await caller.ok("records", action="list", app_id=app_id, table="canary", limit=500)
    return described, rows["rows"]


async def _make(caller: Caller, name: str) -> int:
    app_id = int((await caller.ok("register_app", name=name))["app_id"])
    at = {"app_id": app_id, "table": "canary"}
    await caller.ok("manage_table", action="create", **at, columns=COLUMNS, fulltext=["title"])
    rows = [{"title": "secret canary", "n": 1}, {"title": "plain", "n": 2}]
    await caller.ok("records", action="insert", **at, rows=rows)
    return app_id


async def test_the_corpus_through_the_tools_changes_nothing(world: World) -> None:
    alice = await world.caller("alice")
    eve = await world.caller("eve", tenant="globex")
    app_id = await _make(alice, "victim")
    theirs = await _make(eve, "theirs")
    before = (await _state(alice, app_id), await _state(eve, theirs))
    at = {"app_id": app_id, "table": "canary"}
    for p in PAYLOADS[:-6] + PAYLOADS[-5:]:  # all but the 2 MB string (the platform test has it)
        identifier_calls: list[tuple[str, dict[str, Any]]] = [
            ("records", {"action": "count", "app_id": app_id, "table": p}),
            ("records", {"action": "insert", **at, "rows": [{p: "x"}]}),
            ("records", {"action": "list", **at, "sort": [{"column": p}]}),
            ("records", {"action": "list", **at, "columns": [p]}),
            ("records", {"action": "count", **at, "filter": {"column": p, "op": "eq", "value": 1}}),
            ("records", {"action": "upsert", **at, "rows": [{"title": "x"}], "on": p}),
            ("records", {"action": "update", **at, "id": 1, "values": {p: 1}}),
            ("search_table", {"app_id": app_id, "table": p, "query": "secret"}),
            ("records", {"action": "list", **at, "cursor": p}),
            ("search_table", {**at, "query": "secret", "cursor": p}),
        ]
        for tool, arguments in identifier_calls:
            result = await _call(alice, tool, arguments)
            assert result.get("isError") is True, (p, arguments)
            assert result["structuredContent"]["error"]["code"] != "internal", (p, result)
        value_calls: list[tuple[str, dict[str, Any]]] = [
            (
                "records",
                {"action": "count", **at, "filter": {"column": "title", "op": "eq", "value": p}},
            ),
            (
                "records",
                {"action": "list", **at, "filter": {"column": "title", "op": "like", "value": p}},
            ),
            ("search_table", {**at, "query": p}),
        ]
        for tool, arguments in value_calls:
            result = await _call(alice, tool, arguments)
            if result.get("isError"):
                assert result["structuredContent"]["error"]["code"] != "internal", (p, result)
    assert (await _state(alice, app_id), await _state(eve, theirs)) == before
