"""manage_table and alter_table through the MCP layer: every result fits the tool's
outputSchema; bad names and values are tool errors naming the field, and nothing changes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from .conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

COLUMNS = [
    {"name": "title", "type": "text", "nullable": False, "default": "untitled"},
    {"name": "body", "type": "text"},
    {"name": "stars", "type": "integer", "default": 0},
    {"name": "code", "type": "text"},
]


async def _schemas(caller: Caller) -> dict[str, Draft202012Validator]:
    listed = await caller.rpc("tools/list")
    return {
        t["name"]: Draft202012Validator(t["outputSchema"])
        for t in listed["result"]["tools"]
        if t["name"] in ("manage_table", "alter_table")
    }


async def _call(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    """The result, checked against the tool's outputSchema (errors included)."""
    result = await caller.tool(tool, **arguments)
    schema = (await _schemas(caller))[tool]
    schema.validate(result["structuredContent"])
    return result


async def _ok(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await _call(caller, tool, **arguments)
    assert not result.get("isError"), result
    return dict(result["structuredContent"])


async def _error(caller: Caller, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await _call(caller, tool, **arguments)
    assert result.get("isError") is True, result
    return dict(result["structuredContent"]["error"])


async def _app(world: World) -> tuple[Caller, int]:
    alice = await world.caller("alice")
    app_id = (await alice.ok("register_app", name="shop"))["app_id"]
    return alice, app_id


async def test_create_alter_describe_and_drop_a_table(world: World) -> None:
    alice, app_id = await _app(world)
    made = await _ok(
        alice,
        "manage_table",
        action="create",
        app_id=app_id,
        table="notes",
        columns=COLUMNS,
        indexes=[{"columns": ["stars"]}],
        fulltext=["title", "body"],
    )
    assert [c["name"] for c in made["columns"]] == ["id", "title", "body", "stars", "code"]
    assert made["fulltext"] == ["title", "body"]
    dry = await _ok(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[
            {"op": "add_column", "definition": {"name": "due", "type": "timestamp"}},
            {"op": "rename_column", "column": "code", "new_name": "sku"},
            {"op": "set_not_null", "column": "stars"},
        ],
        dry_run=True,
    )
    assert dry["applied"] is False
    assert all(step["sql"] for step in dry["plan"])
    described = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    assert "due" not in [c["name"] for c in described["columns"]]
    done = await _ok(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[
            {"op": "add_column", "definition": {"name": "due", "type": "timestamp"}},
            {"op": "rename_column", "column": "code", "new_name": "sku"},
        ],
    )
    assert done["applied"] is True
    listed = await _ok(alice, "manage_table", action="list", app_id=app_id)
    assert listed["tables"] == [{"name": "notes", "row_estimate": 0}]
    unconfirmed = await _error(alice, "manage_table", action="drop", app_id=app_id, table="notes")
    assert unconfirmed["code"] == "failed_precondition"
    assert "confirm" in unconfirmed["hint"]
    dropped = await _ok(
        alice, "manage_table", action="drop", app_id=app_id, table="notes", confirm=True
    )
    assert dropped == {"app_id": app_id, "table": "notes", "dropped": True}
    assert (await _ok(alice, "manage_table", action="list", app_id=app_id))["tables"] == []


PAYLOADS = [
    "x'; DROP TABLE notes; --",
    'x"; DROP TABLE notes; --',
    "x; DELETE FROM notes",
    "x--",
    "Ünïcödé",
    "x\x00y",
    "x\ny",
    str(2**63),
    "n" * 10_000,
    "a__b",
    "sqlite_master",
    "pg_catalog",
    "",
]


@pytest.mark.parametrize("payload", PAYLOADS)
async def test_a_bad_identifier_anywhere_is_refused_naming_the_field(
    world: World, payload: str
) -> None:
    alice, app_id = await _app(world)
    await _ok(alice, "manage_table", action="create", app_id=app_id, table="notes", columns=COLUMNS)
    before = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("manage_table", {"action": "create", "table": payload, "columns": COLUMNS}, "table"),
        (
            "manage_table",
            {"action": "create", "table": "t2", "columns": [{"name": payload, "type": "text"}]},
            "columns/0/name",
        ),
        ("manage_table", {"action": "describe", "table": payload}, "table"),
        ("manage_table", {"action": "rename", "table": "notes", "new_name": payload}, "new_name"),
        ("manage_table", {"action": "drop", "table": payload, "confirm": True}, "table"),
        (
            "alter_table",
            {"table": "notes", "changes": [{"op": "drop_column", "column": payload}]},
            "changes/0/column",
        ),
        (
            "alter_table",
            {"table": "notes", "changes": [{"op": "drop_index", "index_name": payload}]},
            "changes/0/index_name",
        ),
        (
            "alter_table",
            {"table": "notes", "changes": [{"op": "add_fulltext", "columns": [payload]}]},
            "changes/0/columns/0",
        ),
    ]
    for tool, arguments, field in cases:
        error = (
            await _error(alice, tool, app_id=app_id, confirm=True, **arguments)
            if (tool == "alter_table")
            else await _error(alice, tool, app_id=app_id, **arguments)
        )
        assert error["code"] == "invalid_argument", (arguments, error)
        assert error["details"]["field"] in (field, field.rsplit("/", 1)[0]), (arguments, error)
    after = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    assert after == before
    listed = await _ok(alice, "manage_table", action="list", app_id=app_id)
    assert [t["name"] for t in listed["tables"]] == ["notes"]


async def test_unknown_tables_and_columns_and_bad_defaults_are_errors(world: World) -> None:
    alice, app_id = await _app(world)
    await _ok(alice, "manage_table", action="create", app_id=app_id, table="notes", columns=COLUMNS)
    missing = await _error(alice, "manage_table", action="describe", app_id=app_id, table="nope")
    assert missing["code"] == "not_found"
    no_column = await _error(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[{"op": "set_default", "column": "nope", "default": 1}],
    )
    assert no_column["details"]["field"] == "changes/0/column"
    bad_default = await _error(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[{"op": "set_default", "column": "stars", "default": "1); DROP TABLE notes; --"}],
    )
    assert bad_default["details"]["field"] == "changes/0/default"
    wrong_type = await _error(
        alice,
        "manage_table",
        action="create",
        app_id=app_id,
        table="t2",
        columns=[{"name": "a", "type": "varchar"}],
    )
    assert wrong_type["details"]["field"].startswith("columns/0")


async def test_an_alter_that_fails_midway_changes_nothing(world: World) -> None:
    alice, app_id = await _app(world)
    await _ok(alice, "manage_table", action="create", app_id=app_id, table="notes", columns=COLUMNS)
    await alice.ok("records", action="insert", app_id=app_id, table="notes", rows=[{"code": "abc"}])
    before = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    error = await _error(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[
            {"op": "add_column", "definition": {"name": "x", "type": "integer", "default": 1}},
            {"op": "change_type", "column": "code", "type": "integer"},
        ],
    )
    assert error["code"] == "invalid_argument"
    assert await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes") == (
        before
    )


async def test_roles_and_scopes_hold(world: World) -> None:
    alice, app_id = await _app(world)
    await alice.ok("manage_app", app_id=app_id, action="grant", user="bob", role="viewer")
    bob = await world.caller("bob")
    create = {"action": "create", "app_id": app_id, "table": "t", "columns": COLUMNS}
    assert (await _error(bob, "manage_table", **create))["code"] == "forbidden"
    reader = await world.caller("alice", scope="apps:read tables:read")
    refused = await reader.rpc("tools/call", {"name": "manage_table", "arguments": create})
    assert refused["error"]["data"] == {"scope": "tables:write"}
    assert (await _ok(reader, "manage_table", action="list", app_id=app_id))["tables"] == []
    eve = await world.caller("eve", tenant="globex")
    listed = await _error(eve, "manage_table", action="list", app_id=app_id)
    assert listed["code"] == "not_found"


async def _updates(world: World, caller: Caller, prefix: str) -> list[str]:
    events = await world.services.hub.log.replay(caller.session, "g", 0)
    notes = [json.loads(e.payload) for e in events]
    return [
        n["params"]["uri"]
        for n in notes
        if n.get("method") == "notifications/resources/updated"
        and n["params"]["uri"].startswith(prefix)
    ]


async def test_the_table_resources_read_and_notify_their_subscribers(world: World) -> None:
    alice, app_id = await _app(world)
    base = f"appdeck://apps/{app_id}/tables"
    templates = (await alice.rpc("resources/templates/list"))["result"]["resourceTemplates"]
    assert {"appdeck://apps/{app_id}/tables", "appdeck://apps/{app_id}/tables/{name}"} <= {
        t["uriTemplate"] for t in templates
    }
    assert (await alice.rpc("resources/subscribe", {"uri": base}))["result"] == {}
    missing = await alice.rpc("resources/subscribe", {"uri": f"{base}/notes"})
    assert "error" in missing  # only what can be read can be followed
    await _ok(alice, "manage_table", action="create", app_id=app_id, table="notes", columns=COLUMNS)
    assert await _updates(world, alice, base) == [base]
    assert (await alice.rpc("resources/subscribe", {"uri": f"{base}/notes"}))["result"] == {}
    await _ok(
        alice,
        "alter_table",
        app_id=app_id,
        table="notes",
        changes=[{"op": "drop_default", "column": "title"}],
    )
    assert (await _updates(world, alice, base))[1:] == [f"{base}/notes", base]
    listed = await alice.rpc("resources/read", {"uri": base})
    body = json.loads(listed["result"]["contents"][0]["text"])
    assert body == {"app_id": app_id, "tables": [{"name": "notes", "row_estimate": 0}]}
    read = await alice.rpc("resources/read", {"uri": f"{base}/notes"})
    schema = json.loads(read["result"]["contents"][0]["text"])
    described = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    assert schema == described
    missing = await alice.rpc("resources/read", {"uri": f"{base}/x'y"})
    assert "error" in missing
    eve = await world.caller("eve", tenant="globex")
    assert "error" in await eve.rpc("resources/read", {"uri": base})


async def test_a_destructive_alter_asks_for_confirmation_first(world: World) -> None:
    alice, app_id = await _app(world)
    await _ok(alice, "manage_table", action="create", app_id=app_id, table="notes", columns=COLUMNS)
    drop = {
        "app_id": app_id,
        "table": "notes",
        "changes": [{"op": "drop_column", "column": "body"}],
    }
    asked = await _error(alice, "alter_table", **drop)
    assert asked["code"] == "failed_precondition"
    assert "confirm" in asked["hint"]
    described = await _ok(alice, "manage_table", action="describe", app_id=app_id, table="notes")
    assert "body" in [c["name"] for c in described["columns"]]
    done = await _ok(alice, "alter_table", **drop, confirm=True)
    assert done["destructive"] is True
    assert "body" not in [c["name"] for c in done["columns"]]
