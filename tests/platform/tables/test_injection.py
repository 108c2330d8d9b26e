"""SQL injection in every identifier and value position of records and search_table: each
payload is refused (a domain error, never internal) or taken literally as data, and afterwards
the canary table, its full-text index and a second app's table are exactly as they were."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from appdeck.common.errors import AppDeckError, Internal
from appdeck.platform.tables import catalog
from appdeck.platform.tables.catalog import Column
from appdeck.platform.tables.records_service import ListQuery
from tests.platform.tables.records_kit import Kit, kit

__all__ = ["kit"]

PAYLOADS: list[str] = [
    "' OR 1=1 --",
    "' OR '1'='1",
    "1' OR '1'='1' /*",
    '"; DROP TABLE canary; --',
    "'; DROP TABLE canary; --",
    'x"; DELETE FROM canary; --',
    ") UNION SELECT name, sql FROM sqlite_master --",
    "') UNION SELECT usename, passwd FROM pg_shadow --",
    "1) OR (1=1",
    "canary; DROP TABLE canary",
    'canary" --',
    "id) VALUES (1); DROP TABLE canary; --",
    "/* comment */ canary",
    "-- comment",
    "# comment",
    "canary\x00",
    "\x00",
    "a\nb",
    "line1\r\nDROP TABLE canary",
    "tab\there",
    "\u02bc OR 1=1 --",  # modifier letter apostrophe
    "\uff07 OR 1=1 --",  # fullwidth apostrophe
    "\u201cquoted\u201d",
    "\uff43\uff41\uff4e\uff41\uff52\uff59",  # fullwidth letters
    "c\u0430nary",  # Cyrillic a
    "\\",
    "\\'",
    "\\\\'; DROP TABLE canary; --",
    "%",
    "_",
    "%' OR 'x' LIKE '%",
    "title:secret",
    "canary:secret OR 1",
    "NEAR(secret canary)",
    "secret*",
    "*",
    '"',
    '""',
    '"secret',
    "secret AND NOT x",
    "^secret",
    "{title body}: secret",
    "$$; DROP TABLE canary; $$",
    "$tag$ x $tag$",
    "E'\\x27'",
    "E'\\x27; DROP TABLE canary; --'",
    "U&'\\0027'",
    "9223372036854775808",
    "-9223372036854775809",
    "1e309",
    "NaN",
    "__fts",
    "canary__fts",
    "sqlite_master",
    "pg_catalog.pg_class",
    "information_schema.tables",
    "main.canary",
    "app_1.canary",
    "Canary",
    "CANARY",
    "\ud800",
    "x" * 2_000_000,
    "💣'; --",
    "%00",
    "&#39; OR 1=1",
    "' ; SELECT pg_sleep(10); --",
    "randomblob(1000000000)",
]
assert len(PAYLOADS) >= 50

DOCS = (Column("title", "text"), Column("body", "text"), Column("n", "integer"))
CANARY_ROWS = [
    {"title": "secret one", "body": "canary body", "n": 1},
    {"title": "two", "body": "secret canary", "n": 2},
]


async def _setup(kit: Kit) -> None:
    await kit.table("canary", DOCS, fulltext=("title", "body"))
    await kit.table("notes", DOCS, fulltext=("title", "body"))
    await kit.table("canary", DOCS, fulltext=("title", "body"), app_id=kit.other_app)
    alice = kit.on.alice
    await kit.records.insert(alice, kit.app_id, "canary", CANARY_ROWS)
    await kit.records.insert(alice, kit.other_app, "canary", CANARY_ROWS)


async def _state(kit: Kit) -> Any:
    """Everything the payloads must not change."""
    state = []
    for app_id in (kit.app_id, kit.other_app):
        async with kit.dbs.transaction(app_id) as conn:
            tables = await catalog.list_tables(conn, kit.dialect)
            schemas = [await catalog.describe(conn, kit.dialect, t) for t in tables]
        state.append((tables, schemas, await kit.dump("canary", app_id)))
    found = await kit.records.search(kit.on.alice, kit.app_id, "canary", "secret")
    state.append(sorted(h.row["id"] for h in found.hits))
    return state


async def _refused_or_done(call: Callable[[], Awaitable[Any]]) -> Any:
    """The call's result, or None when it was refused with a domain error (never internal)."""
    try:
        return await call()
    except Internal:
        raise
    except AppDeckError:
        return None


async def test_payloads_in_identifier_positions_are_refused(kit: Kit) -> None:
    await _setup(kit)
    before = await _state(kit)
    r, alice, app = kit.records, kit.on.alice, kit.app_id
    for p in PAYLOADS:
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda p=p: r.count(alice, app, p),
            lambda p=p: r.insert(alice, app, p, [{"title": "x"}]),
            lambda p=p: r.insert(alice, app, "notes", [{p: "x"}]),
            lambda p=p: r.list(alice, app, "notes", ListQuery(sort=[{"column": p}])),
            lambda p=p: r.list(alice, app, "notes", ListQuery(columns=[p])),
            lambda p=p: r.get(alice, app, "notes", 1, [p]),
            lambda p=p: r.count(alice, app, "notes", {"column": p, "op": "eq", "value": 1}),
            lambda p=p: r.upsert(alice, app, "notes", [{"title": "x"}], on=p),
            lambda p=p: r.update(alice, app, "notes", {p: "x"}, id=1),
            lambda p=p: r.delete(
                alice, app, "notes", filter={"column": p, "op": "is_null", "value": True}
            ),
            lambda p=p: r.search(alice, app, p, "secret"),
            lambda p=p: r.count(alice, app, "notes", {"column": "n", "op": p, "value": 1}),
            lambda p=p: r.list(
                alice, app, "notes", ListQuery(sort=[{"column": "n", "direction": p}])
            ),
        ]
        for i, call in enumerate(calls):
            with pytest.raises(AppDeckError) as refused:
                await call()
            assert not isinstance(refused.value, Internal), (p, i)
    assert await _state(kit) == before


async def test_payloads_in_value_positions_are_stored_and_matched_literally(kit: Kit) -> None:
    await _setup(kit)
    before = await _state(kit)
    r, alice, app = kit.records, kit.on.alice, kit.app_id
    for p in PAYLOADS:
        ids = await _refused_or_done(
            lambda p=p: r.insert(alice, app, "notes", [{"title": p, "body": p}])
        )
        acceptable = "\x00" not in p and "\ud800" not in p and len(p) <= 1024 * 1024
        assert (ids is not None) == acceptable, p
        if ids is None:
            continue
        row = await r.get(alice, app, "notes", ids[0])
        assert row["title"] == p
        assert row["body"] == p
        eq = {"column": "title", "op": "eq", "value": p}
        assert await r.count(alice, app, "notes", eq) == 1
        page = await r.list(alice, app, "notes", ListQuery(filter=eq))
        assert [x["id"] for x in page.rows] == ids
        assert await r.update(alice, app, "notes", {"body": p + "!"}, filter=eq) == 1
        assert (await r.get(alice, app, "notes", ids[0]))["body"] == p + "!"
        assert await r.delete(alice, app, "notes", filter=eq) == 1
    assert await r.count(alice, app, "notes") == 0
    assert await _state(kit) == before


async def test_payloads_as_like_patterns_search_text_numbers_and_cursors_change_nothing(
    kit: Kit,
) -> None:
    await _setup(kit)
    await kit.records.insert(kit.on.alice, kit.app_id, "notes", CANARY_ROWS)
    before = await _state(kit)
    r, alice, app = kit.records, kit.on.alice, kit.app_id
    note_ids = {x["id"] for x in (await r.list(alice, app, "notes", ListQuery())).rows}
    for p in PAYLOADS:
        like = {"column": "title", "op": "like", "value": p}
        page = await _refused_or_done(
            lambda like=like: r.list(alice, app, "notes", ListQuery(filter=like))
        )
        if page is not None:
            assert {x["id"] for x in page.rows} <= note_ids
        found = await _refused_or_done(lambda p=p: r.search(alice, app, "notes", p))
        if found is not None:
            assert {h.row["id"] for h in found.hits} <= note_ids
        in_list = {"column": "title", "op": "in", "value": [p, "two"]}
        page = await _refused_or_done(
            lambda f=in_list: r.list(alice, app, "notes", ListQuery(filter=f))
        )
        if page is not None:
            assert {x["title"] for x in page.rows} <= {p, "two"}
        for cursor_call in (
            lambda p=p: r.list(alice, app, "notes", ListQuery(cursor=p)),
            lambda p=p: r.search(alice, app, "notes", "secret", cursor=p),
        ):
            with pytest.raises(AppDeckError) as refused:
                await cursor_call()
            assert not isinstance(refused.value, Internal)
        as_number = {"column": "n", "op": "eq", "value": p}
        with pytest.raises(AppDeckError):
            await r.count(alice, app, "notes", as_number)
    for big in (2**63, -(2**63) - 1, 10**30):
        with pytest.raises(AppDeckError):
            await r.count(alice, app, "notes", {"column": "n", "op": "gt", "value": big})
        with pytest.raises(AppDeckError):
            await r.insert(alice, app, "notes", [{"n": big}])
        with pytest.raises(AppDeckError):
            await r.get(alice, app, "notes", big)
    assert await _state(kit) == before
