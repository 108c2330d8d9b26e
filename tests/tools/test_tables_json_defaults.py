"""json column defaults (issue 19, finding 8): a default nested too deep is refused at the
edge and creates nothing; a list or object default works in every tool."""

from __future__ import annotations

from typing import Any

from .conftest import SHARED_ROOT, World, shared_world
from .test_tables_hostile import _app

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def test_a_json_default_nested_300_deep_is_refused_and_creates_nothing(
    world: World,
) -> None:
    alice, app_id = await _app(world)
    for depth in (65, 300):
        column = {"name": "doc", "type": "json", "default": _deep(depth)}
        error = await alice.error(
            "manage_table", action="create", app_id=app_id, table="t", columns=[column]
        )
        assert error["code"] == "invalid_argument", error
        assert "deep" in error["message"], error
        assert len(error["message"]) < 400
    listed = await alice.ok("manage_table", action="list", app_id=app_id)
    assert listed["tables"] == []
    column = {"name": "doc", "type": "json", "default": _deep(64)}
    await alice.ok("manage_table", action="create", app_id=app_id, table="t", columns=[column])
    described = await alice.ok("manage_table", action="describe", app_id=app_id, table="t")
    assert described["columns"][1]["default"] == _deep(64)


async def test_records_list_works_with_a_list_or_object_json_default(world: World) -> None:
    alice, app_id = await _app(world)
    at = {"app_id": app_id, "table": "t"}
    columns = [
        {"name": "tags", "type": "json", "default": ["a", "b"]},
        {"name": "meta", "type": "json", "default": {"k": [1, {"v": None}]}},
        {"name": "n", "type": "integer", "default": 0},
    ]
    await alice.ok("manage_table", action="create", **at, columns=columns)
    await alice.ok("records", action="insert", **at, rows=[{}, {"tags": [], "n": 2}])
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [(r["tags"], r["meta"], r["n"]) for r in rows] == [
        (["a", "b"], {"k": [1, {"v": None}]}, 0),
        ([], {"k": [1, {"v": None}]}, 2),
    ]
    page = await alice.ok("records", action="list", **at, limit=1)
    assert page["next_cursor"]
    more = await alice.ok("records", action="list", **at, limit=1, cursor=page["next_cursor"])
    assert [r["n"] for r in more["rows"]] == [2]
    assert (await alice.ok("records", action="count", **at))["count"] == 2
    described = await alice.ok("manage_table", action="describe", **at)
    assert described["columns"][1]["default"] == ["a", "b"]
