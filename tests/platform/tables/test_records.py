"""RecordService: rows in and out, typed, on both dialects."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.common.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.databases import QueryTimeout
from appdeck.platform.tables.filters import OVERSIZED
from appdeck.platform.tables.records_service import ListQuery, RecordService
from tests.platform.tables.records_kit import Kit, kit

__all__ = ["kit"]


async def test_inserted_rows_come_back_typed_in_order(kit: Kit) -> None:
    await kit.table("notes")
    rows = [
        {
            "title": "a",
            "n": 2**63 - 1,
            "score": 1.5,
            "done": True,
            "at": "2026-01-31T13:00:00+01:00",
            "meta": {"k": [1, "x"]},
            "ref": "0B6C8A9E-1F2D-4C3B-9A8E-7D6C5B4A3F21",
        },
        {"title": "b"},
        {"title": "c", "n": -(2**63)},
    ]
    ids = await kit.records.insert(kit.on.alice, kit.app_id, "notes", rows)
    assert len(ids) == 3
    assert ids == sorted(ids)
    first = await kit.records.get(kit.on.alice, kit.app_id, "notes", ids[0])
    assert first == {
        "id": ids[0],
        "title": "a",
        "body": None,
        "n": 2**63 - 1,
        "score": 1.5,
        "done": True,
        "at": "2026-01-31T12:00:00.000000Z",
        "meta": {"k": [1, "x"]},
        "ref": "0b6c8a9e-1f2d-4c3b-9a8e-7d6c5b4a3f21",
    }
    second = await kit.records.get(kit.on.alice, kit.app_id, "notes", ids[1])
    assert second["done"] is False
    assert second["title"] == "b"
    page = await kit.records.list(kit.on.alice, kit.app_id, "notes", ListQuery())
    assert [r["title"] for r in page.rows] == ["a", "b", "c"]
    assert page.next_cursor is None


async def test_a_bad_value_names_its_row_and_field_and_nothing_is_written(kit: Kit) -> None:
    await kit.table("notes")
    good = {"title": "ok"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"title": 5}, "title"),
        ({"title": "x", "n": "5"}, "n"),
        ({"title": "x", "n": 2**63}, "n"),
        ({"title": "x", "n": True}, "n"),
        ({"title": "x", "score": float("inf")}, "score"),
        ({"title": "x", "done": 1}, "done"),
        ({"title": "x", "at": "2026-01-01T00:00:00"}, "at"),
        ({"title": "x", "at": "yesterday"}, "at"),
        ({"title": "x", "ref": "not-a-uuid"}, "ref"),
        ({"title": "x", "meta": float("nan")}, "meta"),
        ({"title": None}, "title"),
        ({"body": "no title"}, "title"),
        ({"title": "x", "nope": 1}, "nope"),
        ({"title": "x", "id": 7}, "id"),
        ({"title": "a\x00b"}, "title"),
        ({"title": "x" * (1024 * 1024 + 1)}, "title"),
    ]
    for bad, field in cases:
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.insert(kit.on.alice, kit.app_id, "notes", [good, good, bad])
        assert refused.value.details == {"field": field, "row": 2}, bad
        assert "row 2" in refused.value.message
    assert await kit.dump("notes") == []


async def test_over_long_batches_and_payloads_are_refused(kit: Kit) -> None:
    await kit.table("notes")
    with pytest.raises(QuotaExceeded) as refused:
        await kit.records.insert(kit.on.alice, kit.app_id, "notes", [{"title": "x"}] * 1001)
    assert refused.value.details["field"] == "rows"
    big = {"title": "x" * (1024 * 1024 - 10)}
    with pytest.raises(QuotaExceeded):
        await kit.records.insert(kit.on.alice, kit.app_id, "notes", [big] * 9)
    for rows in ([], {}, ["x"], None):
        with pytest.raises(InvalidArgument):
            await kit.records.insert(kit.on.alice, kit.app_id, "notes", rows)
    assert await kit.dump("notes") == []
    ids = await kit.records.insert(kit.on.alice, kit.app_id, "notes", [{"title": "x"}] * 1000)
    assert len(set(ids)) == 1000


async def test_update_and_delete_need_an_id_or_a_filter(kit: Kit) -> None:
    await kit.table("notes")
    alice, app = kit.on.alice, kit.app_id
    ids = await kit.records.insert(alice, app, "notes", [{"title": "a"}, {"title": "b"}])
    for call in (
        kit.records.delete(alice, app, "notes"),
        kit.records.delete(alice, app, "notes", filter={}),
        kit.records.delete(alice, app, "notes", id=ids[0], filter={"and": []}),
        kit.records.update(alice, app, "notes", {"title": "z"}),
        kit.records.update(alice, app, "notes", {"title": "z"}, filter={}),
    ):
        with pytest.raises(InvalidArgument) as refused:
            await call
        assert refused.value.details["field"] == "filter"
    by_title = {"column": "title", "op": "eq", "value": "b"}
    assert await kit.records.update(alice, app, "notes", {"n": 7}, filter=by_title) == 1
    assert await kit.records.update(alice, app, "notes", {"body": "x"}, id=ids[0]) == 1
    assert await kit.records.update(alice, app, "notes", {"body": "x"}, id=999) == 0
    for changes, field in (({"id": 3}, "values.id"), ({"n": "x"}, "n"), ({}, "values")):
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.update(alice, app, "notes", changes, id=ids[0])
        assert refused.value.details["field"] == field
    assert (
        await kit.records.count(alice, app, "notes", {"column": "n", "op": "eq", "value": 7}) == 1
    )
    assert await kit.records.delete(alice, app, "notes", id=ids[0]) == 1
    assert await kit.records.count(alice, app, "notes") == 1
    with pytest.raises(NotFound):
        await kit.records.get(alice, app, "notes", ids[0])


async def test_upsert_inserts_or_updates_on_a_unique_column_or_id(kit: Kit) -> None:
    await kit.table("notes")
    alice, app = kit.on.alice, kit.app_id
    ref_a, ref_b = "00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"
    [first] = await kit.records.insert(alice, app, "notes", [{"title": "a", "ref": ref_a}])
    ids = await kit.records.upsert(
        alice,
        app,
        "notes",
        [{"title": "b", "ref": ref_b}, {"title": "a2", "ref": ref_a.upper()}],
        on="ref",
    )
    assert ids[1] == first
    assert ids[0] != first
    assert (await kit.records.get(alice, app, "notes", first))["title"] == "a2"
    by_id = await kit.records.upsert(
        alice, app, "notes", [{"id": first, "title": "a3"}, {"id": 500, "title": "new"}], on="id"
    )
    assert by_id == [first, 500]
    [after] = await kit.records.insert(alice, app, "notes", [{"title": "next"}])
    assert after > 500
    for rows, on, field in (
        ([{"title": "x"}], "title", "on"),
        ([{"title": "x"}], "nope", "on"),
        ([{"title": "x"}], "ref", "ref"),
        ([{"title": "x", "ref": ref_a}, {"title": "y", "ref": ref_a}], "ref", "ref"),
    ):
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.upsert(alice, app, "notes", rows, on=on)
        assert refused.value.details["field"] == field


async def test_a_unique_violation_is_a_conflict_and_writes_nothing(kit: Kit) -> None:
    await kit.table("notes")
    ref = "00000000-0000-4000-8000-00000000000a"
    rows = [{"title": "a", "ref": ref}, {"title": "b", "ref": ref}]
    with pytest.raises(Conflict) as refused:
        await kit.records.insert(kit.on.alice, kit.app_id, "notes", rows)
    assert await kit.dump("notes") == []
    said = refused.value.details["constraint"]
    assert said in ("unique", "notes_ref_key"), said  # the constraint's name, no value
    assert ref not in str(refused.value.to_dict())


async def test_roles_and_tenants_guard_the_rows(kit: Kit) -> None:
    await kit.table("notes")
    on, app = kit.on, kit.app_id
    with pytest.raises(NotFound):
        await kit.records.count(on.eve, app, "notes")
    with pytest.raises(NotFound):
        await kit.records.count(on.bob, app, "notes")
    await on.platform.apps.grant(on.alice, app, "bob", "viewer")
    assert await kit.records.count(on.bob, app, "notes") == 0
    with pytest.raises(PermissionDenied):
        await kit.records.insert(on.bob, app, "notes", [{"title": "x"}])
    await on.platform.apps.grant(on.alice, app, "bob", "developer")
    assert len(await kit.records.insert(on.bob, app, "notes", [{"title": "x"}])) == 1


async def test_unknown_or_invalid_tables_are_not_found_or_refused(kit: Kit) -> None:
    await kit.table("notes", app_id=kit.other_app)
    with pytest.raises(NotFound):  # another app's table is not this app's
        await kit.records.count(kit.on.alice, kit.app_id, "notes")
    for name in ("Notes", "notes; drop", "sqlite_master", "notes__fts", "", "x" * 49):
        with pytest.raises(InvalidArgument) as refused:
            await kit.records.count(kit.on.alice, kit.app_id, name)
        assert refused.value.details["field"] == "table"


async def test_a_page_stops_at_the_result_size_cap_with_a_cursor(kit: Kit) -> None:
    await kit.table("notes")
    big = {"title": "x" * 1_000_000}
    await kit.records.insert(kit.on.alice, kit.app_id, "notes", [big] * 6)
    page = await kit.records.list(kit.on.alice, kit.app_id, "notes", ListQuery(limit=10))
    assert page.capped
    assert len(page.rows) == 4
    assert page.next_cursor is not None
    rest = await kit.records.list(
        kit.on.alice, kit.app_id, "notes", ListQuery(limit=10, cursor=page.next_cursor)
    )
    assert len(rest.rows) == 2
    assert not rest.capped


async def test_a_query_past_the_time_limit_is_stopped_with_a_clear_error(kit: Kit) -> None:
    await kit.table("notes")
    rows = [{"title": f"row {i} " + "abc" * 50} for i in range(1000)]
    for _ in range(20):
        await kit.records.insert(kit.on.alice, kit.app_id, "notes", rows)
    hasty = RecordService(kit.on.platform.apps, kit.dbs, timeout_s=0.001)
    slow = {"column": "title", "op": "like", "value": "%a%b%c%x%y%z%"}

    async def twenty() -> None:  # one of them runs past 1 ms, however fast the machine
        for _ in range(20):
            await hasty.count(kit.on.alice, kit.app_id, "notes", slow)

    with pytest.raises(QueryTimeout) as stopped:
        await twenty()
    assert "longer than" in stopped.value.message
    assert await kit.records.count(kit.on.alice, kit.app_id, "notes", slow) == 0


async def test_two_apps_with_a_table_of_one_name_and_other_types_each_get_their_own(
    kit: Kit,
) -> None:
    await kit.table("notes", (Column("title", "text"),))
    await kit.table("notes", (Column("title", "integer"),), app_id=kit.other_app)
    await kit.records.insert(kit.on.alice, kit.app_id, "notes", [{"title": "a"}])
    await kit.records.insert(kit.on.alice, kit.other_app, "notes", [{"title": 1}])
    for _ in range(3):  # statements of one text alternate between the two apps
        mine = await kit.records.list(kit.on.alice, kit.app_id, "notes", ListQuery())
        theirs = await kit.records.list(kit.on.alice, kit.other_app, "notes", ListQuery())
        assert [r["title"] for r in mine.rows] == ["a"]
        assert [r["title"] for r in theirs.rows] == [1]


async def test_a_table_the_app_keyed_otherwise_is_refused_not_crashed_on(kit: Kit) -> None:
    async with kit.dbs.transaction(kit.app_id) as conn:
        await conn.exec_driver_sql('CREATE TABLE "odd" ("id" TEXT PRIMARY KEY, "x" TEXT)')
        await conn.exec_driver_sql('CREATE TABLE "keyless" ("x" TEXT)')
    for table in ("odd", "keyless"):
        with pytest.raises(FailedPrecondition) as refused:
            await kit.records.insert(kit.on.alice, kit.app_id, table, [{"x": "y"}])
        assert refused.value.details["field"] == "table"


async def test_a_value_the_app_wrote_past_the_limit_reads_as_a_marker(kit: Kit) -> None:
    await kit.table("notes", fulltext=("title",))
    huge = (
        "replace(hex(zeroblob(1100000)), '0', 'a')"
        if kit.dialect == "sqlite"
        else "repeat('a', 2200000)"
    )
    async with kit.dbs.transaction(kit.app_id) as conn:  # as the app itself could
        await conn.exec_driver_sql(
            f'INSERT INTO "notes" ("title", "body") VALUES (\'big one\', {huge})'
        )
    [row] = (await kit.records.list(kit.on.alice, kit.app_id, "notes", ListQuery())).rows
    assert row["body"] == OVERSIZED
    assert row["title"] == "big one"
    assert (await kit.records.get(kit.on.alice, kit.app_id, "notes", row["id"]))["body"] == (
        OVERSIZED
    )
    [hit] = (await kit.records.search(kit.on.alice, kit.app_id, "notes", "big")).hits
    assert hit.row["body"] == OVERSIZED
