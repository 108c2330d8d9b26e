"""What the table tools say when they refuse (issue 20, items 11-14): the reason first and
never more than a short excerpt of the input; the row a failed conversion stops at; a list
right after a type change; a dry run of a type change over a default."""

from __future__ import annotations

from .conftest import SHARED_ROOT, World, shared_world
from .test_tables_hostile import _app, _notes

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

EXCERPT = 120
"""How much of a refused input an error may repeat, at most (characters)."""


async def test_a_batch_too_long_and_a_huge_column_name_get_the_reason_first(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    rows = [{"title": f"row {i} " + "x" * 50} for i in range(1001)]
    long_name = "c" * 5000
    refusals = [
        await alice.error("records", action="insert", **at, rows=rows),
        await alice.error(
            "manage_table",
            action="create",
            app_id=app_id,
            table="t",
            columns=[{"name": long_name, "type": "text"}],
        ),
        await alice.error("records", action="insert", **at, rows=[{long_name: 1}]),
        await alice.error("manage_table", action="describe", app_id=app_id, table=long_name),
    ]
    for error in refusals:
        message = error["message"]
        assert error["code"] in ("invalid_argument", "quota_exceeded"), error
        assert len(message) < 300, message
        assert "x" * EXCERPT not in message, message
        assert "c" * EXCERPT not in message, message
        reason = message.lower()
        assert any(
            word in reason[:100]
            for word in ("1001", "1,001", "at most", "too long", "longer than", "no column")
        ), message
    first = refusals[0]["message"]
    assert "1000" in first or "1,000" in first, first


async def test_a_text_to_integer_change_that_fails_names_the_row_on_both_dialects(
    world: World,
) -> None:
    alice, app_id = await _app(world)
    at = {"app_id": app_id, "table": "t"}
    await alice.ok("manage_table", action="create", **at, columns=[{"name": "v", "type": "text"}])
    await alice.ok("records", action="insert", **at, rows=[{"v": "1"}, {"v": "x2"}, {"v": "3"}])
    change = [{"op": "change_type", "column": "v", "type": "integer"}]
    error = await alice.error("alter_table", **at, changes=change)
    assert error["code"] == "invalid_argument", error
    assert "row id 2" in error["message"], error
    assert error["details"].get("row") == 2, error
    await alice.ok("records", action="update", **at, id=2, values={"v": "2"})
    await alice.ok("alter_table", **at, changes=change)
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [r["v"] for r in rows] == [1, 2, 3]


async def test_the_first_list_after_a_type_change_works(world: World) -> None:
    alice, app_id = await _app(world)
    at = {"app_id": app_id, "table": "t"}
    columns = [{"name": "n", "type": "integer"}, {"name": "s", "type": "text"}]
    await alice.ok("manage_table", action="create", **at, columns=columns)
    await alice.ok("records", action="insert", **at, rows=[{"n": i, "s": str(i)} for i in range(3)])
    for _ in range(4):  # every pooled connection has the statements prepared
        await alice.ok("records", action="list", **at)
        await alice.ok("records", action="get", **at, id=1)
    # the statements' text stays the same, their result's type changes (bigint to float8)
    changes = [{"op": "change_type", "column": "n", "type": "real"}]
    await alice.ok("alter_table", **at, changes=changes)
    for _ in range(4):
        rows = (await alice.ok("records", action="list", **at))["rows"]
        assert [(r["n"], r["s"]) for r in rows] == [(0.0, "0"), (1.0, "1"), (2.0, "2")]
        got = await alice.ok("records", action="get", **at, id=1)
        assert got["rows"][0]["n"] == 0.0


async def test_a_dry_run_of_a_type_change_converts_the_columns_default(world: World) -> None:
    alice, app_id = await _app(world)
    at = {"app_id": app_id, "table": "t"}
    columns = [
        {"name": "n", "type": "integer", "default": 0},
        {"name": "t", "type": "text", "default": "12"},
        {"name": "b", "type": "boolean", "default": True},
        {"name": "w", "type": "text", "default": "abc"},
    ]
    await alice.ok("manage_table", action="create", **at, columns=columns)
    changes = [
        {"op": "change_type", "column": "n", "type": "text"},
        {"op": "change_type", "column": "t", "type": "integer"},
        {"op": "change_type", "column": "b", "type": "text"},
    ]
    planned = await alice.ok("alter_table", **at, changes=changes, dry_run=True)
    defaults = {c["name"]: c["default"] for c in planned["columns"]}
    assert defaults == {"id": None, "n": "0", "t": 12, "b": "true", "w": "abc"}, planned
    await alice.ok("alter_table", **at, changes=changes)
    await alice.ok("records", action="insert", **at, rows=[{}])
    row = (await alice.ok("records", action="list", **at))["rows"][0]
    assert (row["n"], row["t"], row["b"]) == ("0", 12, "true")
    bad = [{"op": "change_type", "column": "w", "type": "integer"}]
    error = await alice.error("alter_table", **at, changes=bad, dry_run=True)
    assert error["code"] == "invalid_argument", error
    assert "'abc'" in error["message"], error
    assert "drop_default" in error["message"] + str(error.get("hint")), error
