"""The filter DSL, sorting, keyset cursors and projections, through RecordService.list."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.records_service import ListQuery
from tests.platform.tables.records_kit import Kit, kit

__all__ = ["kit"]

PEOPLE = (
    Column("name", "text"),
    Column("age", "integer"),
    Column("height", "real"),
    Column("member", "boolean"),
    Column("born", "timestamp"),
    Column("tags", "json"),
    Column("rank", "integer", nullable=False, default=0),
)
ROWS = [
    {"name": "Ann", "age": 30, "height": 1.7, "member": True, "born": "1996-01-01T00:00:00Z"},
    {"name": "bob", "age": 25, "height": 1.8, "member": False, "born": "2001-05-05T10:00:00Z"},
    {"name": "Cy%", "age": None, "height": 1.6, "member": True, "born": None},
    {"name": "dee_", "age": 30, "height": None, "member": None, "born": "1996-01-01T00:00:01Z"},
    {"name": None, "age": 41, "height": 1.9, "member": False, "tags": ["x"]},
]


async def _people(kit: Kit) -> list[int]:
    await kit.table("people", PEOPLE)
    return await kit.records.insert(kit.on.alice, kit.app_id, "people", ROWS)


async def _names(kit: Kit, **query: Any) -> list[str | None]:
    page = await kit.records.list(kit.on.alice, kit.app_id, "people", ListQuery(**query))
    return [r["name"] for r in page.rows]


def c(column: str, op: str, value: Any = None) -> dict[str, Any]:
    return {"column": column, "op": op, "value": value}


async def test_every_operator_selects_the_rows_it_names(kit: Kit) -> None:
    await _people(kit)
    cases: list[tuple[dict[str, Any], list[str | None]]] = [
        (c("age", "eq", 30), ["Ann", "dee_"]),
        (c("age", "ne", 30), ["bob", "Cy%", None]),  # ne matches NULL too
        (c("age", "lt", 30), ["bob"]),
        (c("age", "lte", 30), ["Ann", "bob", "dee_"]),
        (c("height", "gt", 1.7), ["bob", None]),
        (c("height", "gte", 1.7), ["Ann", "bob", None]),
        (c("born", "gt", "1996-01-01T01:00:00+01:00"), ["bob", "dee_"]),
        (c("member", "eq", True), ["Ann", "Cy%"]),
        (c("age", "in", [25, 41]), ["bob", None]),
        (c("name", "like", "a%"), ["Ann"]),  # case-insensitive
        (c("name", "like", "%\\%"), ["Cy%"]),  # an escaped wildcard is a literal
        (c("name", "like", "dee\\_"), ["dee_"]),
        (c("age", "is_null", True), ["Cy%"]),
        (c("tags", "is_null", False), [None]),
        ({"and": [c("age", "eq", 30), c("member", "is_null", True)]}, ["dee_"]),
        ({"or": [c("age", "eq", 25), c("name", "eq", "Cy%")]}, ["bob", "Cy%"]),
        ({"not": c("member", "eq", True)}, ["bob", None]),  # NOT of NULL is NULL
    ]
    for spec, expected in cases:
        assert await _names(kit, filter=spec) == expected, spec


async def test_malformed_filters_name_the_field(kit: Kit) -> None:
    await _people(kit)
    deep: dict[str, Any] = c("age", "eq", 1)
    for _ in range(9):
        deep = {"and": [deep]}
    cases: list[tuple[Any, str]] = [
        (c("nope", "eq", 1), "filter.column"),
        (c("age", "eq", "1"), "filter.value"),
        (c("age", "eq", None), "filter.value"),
        (c("age", "eq", 2**63), "filter.value"),
        (c("age", "like", "1"), "filter"),
        (c("tags", "eq", ["x"]), "filter"),
        (c("member", "lt", True), "filter"),
        (c("age", "bogus", 1), "filter.op"),
        (c("age", "in", []), "filter.value"),
        (c("age", "in", list(range(1001))), "filter.value"),
        (c("age", "in", [1, "2"]), "filter.value[1]"),
        (c("name", "like", "a\\"), "filter.value"),
        (c("name", "like", "\\a"), "filter.value"),
        (c("age", "is_null", 1), "filter.value"),
        ({"and": []}, "filter"),
        ({"and": [c("age", "eq", 1)], "or": []}, "filter"),
        ({"or": [c("age", "eq", 1), {"x": 1}]}, "filter.or[1]"),
        ([], "filter"),
        (deep, "filter" + ".and[0]" * 8),
        ({"or": [c("age", "eq", i) for i in range(201)]}, "filter"),
    ]
    for spec, field in cases:
        with pytest.raises(InvalidArgument) as refused:
            await _names(kit, filter=spec)
        assert refused.value.details["field"] == field, spec


async def test_sorting_puts_null_first_ascending_and_ends_with_id(kit: Kit) -> None:
    await _people(kit)
    assert await _names(kit, sort=[{"column": "age"}]) == ["Cy%", "bob", "Ann", "dee_", None]
    by_age_desc = [{"column": "age", "direction": "desc"}]
    assert await _names(kit, sort=by_age_desc) == [None, "Ann", "dee_", "bob", "Cy%"]
    for bad, field in (
        ([{"column": "tags"}], "sort[0]"),
        ([{"column": "age", "direction": "up"}], "sort[0].direction"),
        ([{"column": "age"}, {"column": "age"}], "sort[1]"),
        ([{"column": "x"}], "sort[0].column"),
        ([{"column": "age"}] * 6, "sort"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            await _names(kit, sort=bad)
        assert refused.value.details["field"] == field


@pytest.mark.parametrize(
    "sort",
    [
        None,
        [{"column": "age"}],
        [{"column": "age", "direction": "desc"}, {"column": "height"}],
        [{"column": "member", "direction": "desc"}, {"column": "born", "direction": "desc"}],
        [{"column": "name"}],
        [{"column": "rank", "direction": "desc"}, {"column": "age", "direction": "desc"}],
        [{"column": "id", "direction": "desc"}],
    ],
)
async def test_keyset_pages_walk_every_row_once_in_order(kit: Kit, sort: Any) -> None:
    await _people(kit)
    await kit.records.insert(kit.on.alice, kit.app_id, "people", ROWS * 3)
    everything = await kit.records.list(
        kit.on.alice, kit.app_id, "people", ListQuery(sort=sort, limit=500)
    )
    walked: list[int] = []
    cursor = None
    for _ in range(30):
        page = await kit.records.list(
            kit.on.alice, kit.app_id, "people", ListQuery(sort=sort, limit=3, cursor=cursor)
        )
        walked += [r["id"] for r in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert walked == [r["id"] for r in everything.rows]
    assert len(walked) == 20


async def test_a_cursor_of_another_query_or_table_is_refused(kit: Kit) -> None:
    await _people(kit)
    await kit.table("other", PEOPLE)
    page = await kit.records.list(kit.on.alice, kit.app_id, "people", ListQuery(limit=2))
    assert page.next_cursor is not None
    for table, query in (
        ("people", ListQuery(limit=2, cursor=page.next_cursor, sort=[{"column": "age"}])),
        ("people", ListQuery(cursor=page.next_cursor, filter=c("age", "eq", 1))),
        ("other", ListQuery(cursor=page.next_cursor)),
        ("people", ListQuery(cursor="not a cursor")),
        ("people", ListQuery(cursor=page.next_cursor[:-4])),
    ):
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.list(kit.on.alice, kit.app_id, table, query)
        assert refused.value.details["field"] == "cursor"
    same = await kit.records.list(
        kit.on.alice, kit.app_id, "people", ListQuery(limit=2, cursor=page.next_cursor)
    )
    assert [r["name"] for r in same.rows] == ["Cy%", "dee_"]


async def test_a_projection_returns_id_and_the_named_columns(kit: Kit) -> None:
    ids = await _people(kit)
    page = await kit.records.list(
        kit.on.alice,
        kit.app_id,
        "people",
        ListQuery(columns=["age"], sort=[{"column": "name"}], limit=1),
    )
    assert page.rows == [{"id": ids[4], "age": 41}]
    for bad, field in ((["nope"], "columns[0]"), ([], "columns"), ("age", "columns")):
        with pytest.raises(InvalidArgument) as refused:
            await _names(kit, columns=bad)
        assert refused.value.details["field"] == field
