"""The four table tools against a careless or hostile client and a hostile app, through the MCP
endpoint on both dialects: every answer is a result or a clear tool error (never ``internal``),
within its size cap, and valid against the tool's outputSchema."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from jsonschema import Draft202012Validator

from appdeck.platform.tables.results import RESULT_BYTES
from tests.support.mcp import headers, request

from .conftest import SHARED_ROOT, Caller, World, shared_world

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

TOOLS = ("manage_table", "alter_table", "records", "search_table")


class Checked:
    """A caller whose every result is checked against the tool's outputSchema."""

    def __init__(self, caller: Caller, schemas: dict[str, Draft202012Validator]) -> None:
        self.caller = caller
        self.schemas = schemas

    async def call(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.caller.tool(tool, **arguments)
        self.schemas[tool].validate(result["structuredContent"])
        if result.get("isError"):
            assert result["structuredContent"]["error"]["code"] != "internal", result
        return result

    async def ok(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert not result.get("isError"), str(result)[:2000]
        return dict(result["structuredContent"])

    async def error(self, tool: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.call(tool, **arguments)
        assert result.get("isError") is True, str(result)[:2000]
        return dict(result["structuredContent"]["error"])


async def _checked(world: World, user: str = "alice", tenant: str = "acme") -> Checked:
    caller = await world.caller(user, tenant)
    listed = await caller.rpc("tools/list")
    schemas = {
        t["name"]: Draft202012Validator(t["outputSchema"])
        for t in listed["result"]["tools"]
        if t["name"] in TOOLS
    }
    return Checked(caller, schemas)


async def _app(world: World, name: str = "shop") -> tuple[Checked, int]:
    alice = await _checked(world)
    app_id = (await alice.caller.ok("register_app", name=name))["app_id"]
    return alice, app_id


def _size(body: dict[str, Any]) -> int:
    return len(json.dumps(body["rows"], ensure_ascii=False).encode())


async def test_a_row_larger_than_a_result_is_cut_with_markers_naming_row_field_and_size(
    world: World,
) -> None:
    alice, app_id = await _app(world)
    wide = [{"name": f"c{i}", "type": "text"} for i in range(10)]
    at = {"app_id": app_id, "table": "wide"}
    await alice.ok("manage_table", action="create", **at, columns=wide, fulltext=["c0"])
    big = "word " * 200_000  # 1,000,000 bytes
    (row_id,) = (await alice.ok("records", action="insert", **at, rows=[{"c0": big}]))["ids"]
    for i in range(1, 10):  # a request body is at most 4 MiB: a value per call
        await alice.ok("records", action="update", **at, id=row_id, values={f"c{i}": big})
    await alice.ok("records", action="insert", **at, rows=[{"c0": "small word"}])

    got = await alice.ok("records", action="get", **at, id=row_id)
    listed = await alice.ok("records", action="list", **at, limit=10)
    found = await alice.ok("search_table", **at, query="word")
    for body in (got, listed, found):
        assert _size(body) <= RESULT_BYTES
    row = got["rows"][0]
    cut = [k for k, v in row.items() if isinstance(v, str) and v.startswith("[cut:")]
    assert 6 <= len(cut) < 10
    assert f"row id {row_id}, field {cut[0]}: 1000002 bytes" in row[cut[0]]
    assert listed["rows"][0] == row
    assert [r["c0"] for r in listed["rows"][1:]] == ["small word"]
    two = await alice.ok("records", action="list", **at, columns=["c0", "c1"], limit=1)
    assert two["rows"] == [{"id": row_id, "c0": big, "c1": big}]  # 2 MB: no cut
    assert "capped" not in two
    assert found["rows"][0]["row"]["id"] == row_id
    assert found["rows"][0]["snippet"].startswith("<mark>word</mark> <mark>word</mark>")
    assert len(found["rows"][0]["snippet"]) <= 2000
    alone = await alice.ok("records", action="get", **at, id=row_id, columns=[cut[0]])
    assert alone["rows"][0][cut[0]] == big


NOTES = [
    {"name": "title", "type": "text"},
    {"name": "n", "type": "integer"},
    {"name": "doc", "type": "json"},
]


async def _raw(caller: Caller, tool: str, arguments: str) -> dict[str, Any]:
    call = json.dumps(request("tools/call", {"name": tool, "arguments": {}}))
    raw = call.replace('"arguments": {}', f'"arguments": {arguments}')
    headed = {**headers(caller.session, caller.token), "content-type": "application/json"}
    posted = await caller.client.post("/mcp", content=raw, headers=headed)
    return dict(posted.json())


async def _notes(world: World) -> tuple[Checked, int, dict[str, Any]]:
    """An app with a table notes (one row: title a, n 1), and the arguments naming it."""
    alice, app_id = await _app(world)
    at = {"app_id": app_id, "table": "notes"}
    await alice.ok("manage_table", action="create", **at, columns=NOTES, fulltext=["title"])
    await alice.ok("records", action="insert", **at, rows=[{"title": "a", "n": 1}])
    return alice, app_id, at


def _nested(depth: int) -> dict[str, Any]:
    f: dict[str, Any] = {"column": "n", "op": "eq", "value": 1}
    for _ in range(depth):
        f = {"not": f}
    return f


async def test_absurd_arguments_get_clear_errors_valid_against_the_output_schema(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("manage_table", {"action": "create", "app_id": app_id, "table": "x" * 100_000}),
        ("manage_table", {"action": "create", "app_id": app_id, "table": "a\x00b"}),
        ("manage_table", {"action": "create", "app_id": app_id, "table": "Notes"}),
        ("manage_table", {"action": "create", "app_id": app_id, "table": "n\u00e9"}),
        ("manage_table", {"action": "create", **at, "columns": [{}]}),
        ("manage_table", {"action": "create", "app_id": app_id, "table": "t", "columns": []}),
        (
            "manage_table",
            {
                "action": "create",
                "app_id": app_id,
                "table": "dup",
                "columns": [{"name": "a", "type": "text"}, {"name": "a", "type": "integer"}],
            },
        ),
        (
            "manage_table",
            {
                "action": "create",
                "app_id": app_id,
                "table": "ids",
                "columns": [{"name": "id", "type": "integer"}],
            },
        ),
        (
            "manage_table",
            {
                "action": "create",
                "app_id": app_id,
                "table": "wide",
                "columns": [{"name": f"c{i}", "type": "text"} for i in range(101)],
            },
        ),
        (
            "manage_table",
            {
                "action": "create",
                "app_id": app_id,
                "table": "nul",
                "columns": [{"name": "a", "type": "json", "default": {"k": "\x00"}}],
            },
        ),
        ("manage_table", {"action": "describe", "app_id": 2**63, "table": "notes"}),
        ("manage_table", {"action": "describe", "app_id": -1, "table": "notes"}),
        ("records", {"action": "get", **at, "id": 2**63}),
        ("records", {"action": "get", **at, "id": -(2**63) - 1}),
        ("records", {"action": "get", **at, "id": "1"}),
        ("records", {"action": "insert", **at, "rows": []}),
        ("records", {"action": "insert", **at, "rows": [{}] * 1001}),
        ("records", {"action": "insert", **at, "rows": [{"n": 2**63}]}),
        ("records", {"action": "insert", **at, "rows": [{"n": 1.5}]}),
        ("records", {"action": "insert", **at, "rows": [{"n": True}]}),
        ("records", {"action": "insert", **at, "rows": [{"title": "a\x00b"}]}),
        ("records", {"action": "insert", **at, "rows": [{"id": 5, "title": "x"}]}),
        ("records", {"action": "insert", **at, "rows": [{"nope": 1}]}),
        ("records", {"action": "insert", **at, "rows": [{"doc": _nested(900)}]}),
        ("records", {"action": "delete", **at}),
        ("records", {"action": "delete", **at, "filter": {}}),
        ("records", {"action": "update", **at, "values": {"n": 1}}),
        ("records", {"action": "list", **at, "filter": _nested(900)}),
        ("records", {"action": "list", **at, "filter": {"and": []}}),
        (
            "records",
            {"action": "list", **at, "filter": {"column": "n", "op": "in", "value": [1] * 10_001}},
        ),
        ("records", {"action": "list", **at, "filter": {"column": "n", "op": "eq", "value": "x"}}),
        ("records", {"action": "list", **at, "filter": {"column": "id\x00", "op": "eq"}}),
        ("records", {"action": "list", **at, "sort": [{"column": "__fts"}]}),
        ("records", {"action": "list", **at, "columns": ["title", "title"] * 200}),
        ("records", {"action": "list", **at, "cursor": "x" * 100_000}),
        ("records", {"action": "list", **at, "limit": 0}),
        ("records", {"action": "list", **at, "limit": 2**63}),
        ("search_table", {**at, "query": "word " * 20_000}),
        ("search_table", {**at, "query": ""}),
        ("search_table", {**at, "query": "a\x00"}),
        ("alter_table", {**at, "changes": []}),
        ("alter_table", {**at, "changes": [{"op": "drop_column", "column": "id"}] * 60}),
    ]
    accepted = []
    for tool, arguments in refused:
        result = await alice.call(tool, **arguments)
        if not result.get("isError"):
            accepted.append(str((tool, arguments))[:300])
    assert accepted == []
    # a lone surrogate and 100,000 levels of nesting, as JSON text (a client's encoder refuses)
    for row in ('{"title": "\\ud800"}', '{"doc": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001):
        body = await _raw(
            alice.caller,
            "records",
            f'{{"action": "insert", "app_id": {app_id}, "table": "notes", "rows": [{row}]}}',
        )
        if "error" in body:  # refused by the JSON-RPC layer: not an internal error
            assert body["error"]["code"] != -32603, body
        else:
            assert body["result"]["isError"] is True, str(body)[:2000]
    for query in ("!!! ??? ...", '"', "*", "NEAR(a b)", "title:a", "a OR b) (", "\u00e9\u00e9"):
        await alice.ok("search_table", **at, query=query)
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [(r["title"], r["n"]) for r in rows] == [("a", 1)]  # nothing changed


async def test_a_cursor_of_another_table_app_or_tenant_is_refused(world: World) -> None:
    alice, app_id = await _app(world)
    _, other_app = await _app(world, "blog")
    eve = await _checked(world, "eve", "globex")
    eve_app = (await eve.caller.ok("register_app", name="shop"))["app_id"]
    for who, app, table in ((alice, app_id, "a"), (alice, app_id, "b"), (alice, other_app, "a")):
        await who.ok("manage_table", action="create", app_id=app, table=table, columns=NOTES)
        rows = [{"title": str(i), "n": i} for i in range(3)]
        await who.ok("records", action="insert", app_id=app, table=table, rows=rows)
    await eve.ok("manage_table", action="create", app_id=eve_app, table="a", columns=NOTES)
    page = await alice.ok("records", action="list", app_id=app_id, table="a", limit=1)
    cursor = page["next_cursor"]
    for who, app, table in ((alice, app_id, "b"), (alice, other_app, "a"), (eve, eve_app, "a")):
        error = await who.error("records", action="list", app_id=app, table=table, cursor=cursor)
        assert error["code"] == "invalid_argument"
    filtered = {"column": "n", "op": "gt", "value": 0}
    error = await alice.error(
        "records", action="list", app_id=app_id, table="a", cursor=cursor, filter=filtered
    )
    assert error["code"] == "invalid_argument"


async def _as_app(world: World, app_id: int, *statements: str) -> None:
    """The app changes its own database behind the platform's back."""
    databases = world.services.databases
    assert databases is not None
    async with databases.transaction(app_id) as conn:
        for statement in statements:
            await conn.exec_driver_sql(statement)


SQLITE_TRICKS = (
    "CREATE TABLE noid (x TEXT)",
    'CREATE TABLE weird (id INTEGER PRIMARY KEY AUTOINCREMENT, v "FANCY (TYPE)", w BLOB)',
    "INSERT INTO weird (v, w) VALUES (x'00ff', x'deadbeef')",
    "CREATE VIEW notes_view AS SELECT * FROM notes",
    "CREATE TRIGGER boom BEFORE INSERT ON notes WHEN NEW.title = 'boom' "
    "BEGIN SELECT RAISE(ABORT, 'secret from the app'); END",
    "CREATE TRIGGER spin BEFORE INSERT ON notes WHEN NEW.title = 'spin' BEGIN "
    "SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT x FROM c); END",
    "UPDATE notes SET doc = '" + '{"a":' * 5000 + "1" + "}" * 5000 + "' WHERE id = 1",
)
POSTGRES_TRICKS = (
    "CREATE TABLE noid (x text)",
    "CREATE TABLE weird (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v money, "
    "w bytea, p point)",
    "INSERT INTO weird (v, w, p) VALUES (1.5, '\\xdeadbeef', '(1,2)')",
    "CREATE VIEW notes_view AS SELECT * FROM notes",
    "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF NEW.title = 'boom' THEN RAISE EXCEPTION 'secret from the app'; END IF; "
    "IF NEW.title = 'spin' THEN PERFORM pg_sleep(60); END IF; RETURN NEW; END $$",
    "CREATE TRIGGER boom BEFORE INSERT ON notes FOR EACH ROW EXECUTE FUNCTION boom()",
    "UPDATE notes SET doc = '" + '{"a":' * 5000 + "1" + "}" * 5000 + "' WHERE id = 1",
)


async def test_an_app_that_changes_its_own_database_gets_clear_errors_and_no_internal(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    sqlite = world.services.settings.database().startswith("sqlite")
    await _as_app(world, app_id, *(SQLITE_TRICKS if sqlite else POSTGRES_TRICKS))

    listed = await alice.ok("manage_table", action="list", app_id=app_id)
    assert "notes" in json.dumps(listed)
    for table in ("noid", "weird", "notes_view"):
        await alice.call("manage_table", action="describe", app_id=app_id, table=table)
        await alice.call("records", action="list", app_id=app_id, table=table)
        await alice.call("records", action="count", app_id=app_id, table=table)
        await alice.call("records", action="insert", app_id=app_id, table=table, rows=[{}])
        await alice.call("search_table", app_id=app_id, table=table, query="a")
        await alice.call(
            "alter_table",
            app_id=app_id,
            table=table,
            changes=[{"op": "add_column", "column": {"name": "z", "type": "text"}}],
        )
    weird = await alice.call("records", action="get", app_id=app_id, table="weird", id=1)
    json.dumps(weird)  # whatever the app stored reads as JSON
    refused = await alice.error("records", action="insert", **at, rows=[{"title": "boom"}])
    assert "secret" not in json.dumps(refused)
    slow = await alice.error("records", action="insert", **at, rows=[{"title": "spin"}])
    # SQLite: the app's triggers are refused before a write (guard.py); PostgreSQL runs them
    # as the app's role, under the statement timeout
    assert slow["code"] == ("failed_precondition" if sqlite else "quota_exceeded"), slow
    got = await alice.ok("records", action="get", **at, id=1)
    assert isinstance(got["rows"][0]["doc"], str)  # too deep to be JSON here: its text
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [r["title"] for r in rows] == ["a"]


async def test_a_table_the_app_keeps_locked_gets_a_clear_error_in_bounded_time(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    databases = world.services.databases
    assert databases is not None
    held, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with databases.transaction(app_id, timeout_s=60) as conn:
            await conn.exec_driver_sql("INSERT INTO notes (title) VALUES ('lock')")
            if databases.dialect == "postgresql":
                await conn.exec_driver_sql("LOCK TABLE notes IN ACCESS EXCLUSIVE MODE")
            held.set()
            await asyncio.wait_for(release.wait(), 30)

    holder = asyncio.create_task(hold())
    try:
        await asyncio.wait_for(held.wait(), 10)
        error = await asyncio.wait_for(
            alice.error("records", action="insert", **at, rows=[{"title": "b"}]), 20
        )
        assert error["code"] in ("unavailable", "quota_exceeded"), error
    finally:
        release.set()
        await holder
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [r["title"] for r in rows] == ["a", "lock"]


async def test_tables_indexes_and_columns_stop_at_their_limits(world: World) -> None:
    alice, app_id, at = await _notes(world)
    one = [{"name": "c", "type": "integer"}]
    for i in range(199):
        await alice.ok("manage_table", action="create", app_id=app_id, table=f"t{i}", columns=one)
    error = await alice.error(
        "manage_table", action="create", app_id=app_id, table="t", columns=one
    )
    assert error["code"] == "quota_exceeded"
    wide = [{"name": f"c{i}", "type": "integer"} for i in range(21)]
    await alice.ok("manage_table", action="drop", app_id=app_id, table="t0", confirm=True)
    many = [{"columns": [f"c{i}"]} for i in range(21)]
    error = await alice.error(
        "manage_table", action="create", app_id=app_id, table="t0", columns=wide, indexes=many
    )
    assert error["code"] in ("quota_exceeded", "invalid_argument")
    for column in ("id", "ID", "Id"):
        changes = [{"op": "rename_column", "column": "title", "to": column}]
        await alice.error("alter_table", **at, changes=changes)
