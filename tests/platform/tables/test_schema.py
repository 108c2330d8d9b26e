"""TableService: create, list, describe, rename and drop, with roles, tenants and limits."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from appdeck.common.errors import (
    ConfirmationRequired,
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from appdeck.platform.changes import Change
from appdeck.platform.tables import limits
from appdeck.platform.tables.catalog import Column, Index
from appdeck.platform.tables.databases import AppDatabases
from appdeck.platform.tables.ddl import IndexSpec
from appdeck.platform.tables.schema_service import TableService
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@dataclass
class Env:
    on: OnFakes
    tables: TableService
    dbs: AppDatabases
    app_id: int
    changes: list[Change]


@asynccontextmanager
async def platform(tmp_path: Path, url: str) -> AsyncIterator[OnFakes]:
    """The platform's own database (``url``, a copy of the migrated SQLite template: the
    dialect under test is the apps')."""
    storage = await Storage.open(url)
    try:
        yield await platform_on_fakes(storage, tmp_path)
    finally:
        await storage.close()


@pytest.fixture
async def env(
    app_databases: AppDatabases, tmp_path: Path, migrated_sqlite: Callable[[Path], str]
) -> AsyncIterator[Env]:
    async with platform(tmp_path, migrated_sqlite(tmp_path / "platform")) as on:
        tables = TableService(on.platform.apps, app_databases, on.platform.feed)
        seen: list[Change] = []

        async def listen(change: Change) -> None:
            seen.append(change)

        on.platform.feed.subscribe(listen)
        app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
        yield Env(on, tables, app_databases, app_id, seen)


NOTES = [
    Column("title", "text", nullable=False, default="untitled"),
    Column("body", "text"),
    Column("stars", "integer", default=0),
    Column("score", "real", default=1.5),
    Column("done", "boolean", default=False),
    Column("due", "timestamp", default="2024-01-02T03:04:05+02:00"),
    Column("meta", "json", default={"a": [1, "x'y"]}),
    Column("ref", "uuid", unique=True),
]


async def test_create_then_describe_gives_back_every_declaration(env: Env) -> None:
    made = await env.tables.create(
        env.on.alice,
        env.app_id,
        "notes",
        NOTES,
        indexes=[IndexSpec(("stars", "done"))],
        fulltext=["title", "body"],
    )
    described = await env.tables.describe(env.on.alice, env.app_id, "notes")
    assert made.columns == described.columns
    cols = {c.name: c for c in described.columns}
    assert cols["id"].primary_key
    assert cols["title"] == Column("title", "text", nullable=False, default="untitled")
    assert cols["due"].type == "timestamp"
    assert cols["meta"].default == {"a": [1, "x'y"]}
    assert cols["ref"].unique
    assert cols["done"].default is False
    assert described.indexes == (Index("notes_stars_done_idx", ("stars", "done")),)
    assert described.fulltext == ("title", "body")
    assert described.row_estimate == 0
    assert [(c.kind, c.table) for c in env.changes][-1] == ("tables.updated", "notes")


async def test_list_shows_tables_with_row_estimates_and_hides_our_objects(env: Env) -> None:
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:2], fulltext=["body"])
    await env.tables.create(env.on.alice, env.app_id, "tags", [Column("name", "text")])
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("INSERT INTO notes (title, body) VALUES ('a', 'b'), ('c', 'd')"))
    listed = await env.tables.list(env.on.alice, env.app_id)
    assert [(t.name, t.row_estimate) for t in listed] == [("notes", 2), ("tags", 0)]


async def test_rename_keeps_rows_and_full_text(env: Env) -> None:
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:2], fulltext=["body"])
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("INSERT INTO notes (title, body) VALUES ('a', 'bee')"))
    renamed = await env.tables.rename(env.on.alice, env.app_id, "notes", "memos")
    assert renamed.fulltext == ("body",)
    with pytest.raises(NotFound):
        await env.tables.describe(env.on.alice, env.app_id, "notes")
    assert (await env.tables.describe(env.on.alice, env.app_id, "memos")).row_estimate == 1


async def test_drop_asks_for_confirmation_and_needs_admin(env: Env) -> None:
    apps = env.on.platform.apps
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:1], fulltext=["title"])
    await apps.grant(env.on.alice, env.app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await env.tables.drop(env.on.bob, env.app_id, "notes", confirmed=True)
    with pytest.raises(ConfirmationRequired):
        await env.tables.drop(env.on.alice, env.app_id, "notes")
    assert await env.tables.drop(env.on.alice, env.app_id, "notes", confirmed=True) == "notes"
    assert await env.tables.list(env.on.alice, env.app_id) == []


async def test_another_tenant_does_not_find_the_app(env: Env) -> None:
    with pytest.raises(NotFound):
        await env.tables.list(env.on.eve, env.app_id)
    with pytest.raises(NotFound):
        await env.tables.create(env.on.eve, env.app_id, "x", NOTES[:1])


async def test_a_viewer_reads_but_does_not_create(env: Env) -> None:
    await env.on.platform.apps.grant(env.on.alice, env.app_id, "bob", "viewer")
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:1])
    assert [t.name for t in await env.tables.list(env.on.bob, env.app_id)] == ["notes"]
    with pytest.raises(PermissionDenied):
        await env.tables.create(env.on.bob, env.app_id, "more", NOTES[:1])


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        ([Column("id", "integer")], "columns/0/name"),
        ([Column("a", "text"), Column("a", "text")], "columns/1"),
        ([Column("a", "varchar")], "columns/0/type"),
        ([Column("a'; drop table x; --", "text")], "columns/0/name"),
        ([Column("a", "integer", default="1; drop table x")], "columns/0/default"),
        ([Column("a", "integer", default=2**63)], "columns/0/default"),
        ([Column("a", "real", default=float("nan"))], "columns/0/default"),
        ([Column("a", "boolean", default=1)], "columns/0/default"),
        ([Column("a", "uuid", default="not-a-uuid")], "columns/0/default"),
        ([Column("a", "timestamp", default="yesterday")], "columns/0/default"),
        ([Column("a", "text", default="x\x00y")], "columns/0/default"),
        ([Column(f"c{i}", "text") for i in range(100)], "columns"),
    ],
)
async def test_a_bad_declaration_is_refused_naming_the_field_and_nothing_is_made(
    env: Env, columns: list[Column], field: str
) -> None:
    with pytest.raises((InvalidArgument, QuotaExceeded)) as raised:
        await env.tables.create(env.on.alice, env.app_id, "notes", columns)
    assert raised.value.details["field"] == field
    assert await env.tables.list(env.on.alice, env.app_id) == []


async def test_a_bad_index_or_full_text_column_is_refused(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="no column"):
        await env.tables.create(
            env.on.alice, env.app_id, "t", NOTES[:1], indexes=[IndexSpec(("nope",))]
        )
    with pytest.raises(InvalidArgument, match="only text"):
        await env.tables.create(env.on.alice, env.app_id, "t", NOTES[:3], fulltext=["stars"])
    assert await env.tables.list(env.on.alice, env.app_id) == []


async def test_a_table_name_in_use_is_a_conflict(env: Env) -> None:
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:1])
    with pytest.raises(Conflict):
        await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:1])
    await env.tables.create(env.on.alice, env.app_id, "other", NOTES[:1])
    with pytest.raises(Conflict):
        await env.tables.rename(env.on.alice, env.app_id, "other", "notes")


async def test_unknown_tables_are_not_found(env: Env) -> None:
    with pytest.raises(NotFound) as raised:
        await env.tables.describe(env.on.alice, env.app_id, "nope")
    assert raised.value.details["field"] == "table"
    with pytest.raises(NotFound):
        await env.tables.drop(env.on.alice, env.app_id, "nope", confirmed=True)


async def test_the_tables_per_app_limit_holds(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "TABLES_PER_APP", 2)
    for name in ("a", "b"):
        await env.tables.create(env.on.alice, env.app_id, name, NOTES[:1])
    with pytest.raises(QuotaExceeded) as raised:
        await env.tables.create(env.on.alice, env.app_id, "c", NOTES[:1])
    assert raised.value.details["field"] == "table"
    assert [t.name for t in await env.tables.list(env.on.alice, env.app_id)] == ["a", "b"]


async def test_list_pages_through_offset_and_limit(env: Env) -> None:
    for name in ("c", "a", "b"):
        await env.tables.create(env.on.alice, env.app_id, name, NOTES[:1])
    page = await env.tables.list(env.on.alice, env.app_id, offset=1, limit=1)
    assert [t.name for t in page] == ["b"]


async def test_a_hostile_full_text_comment_is_not_trusted(env: Env) -> None:
    await env.tables.create(env.on.alice, env.app_id, "notes", NOTES[:3], fulltext=["title"])
    if env.dbs.dialect == "postgresql":
        async with env.dbs.transaction(env.app_id) as conn:
            await conn.execute(sa.text("""COMMENT ON COLUMN notes.__fts IS '["stars", "x"]'"""))
        described = await env.tables.describe(env.on.alice, env.app_id, "notes")
        assert described.fulltext == ()
    else:
        async with env.dbs.transaction(env.app_id) as conn:
            await conn.execute(sa.text('CREATE TABLE "odd name" (x)'))
            await conn.execute(sa.text("CREATE TABLE notes__fts_data2 (x)"))
        listed = await env.tables.list(env.on.alice, env.app_id)
        assert [t.name for t in listed] == ["notes"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_default_is_rendered_as_a_literal_that_cannot_end_early(dialect: str) -> None:
    from appdeck.platform.tables import ddl

    hostile = "'); DROP TABLE notes; -- \\' \""
    rendered = ddl.literal(dialect, "text", hostile)  # type: ignore[arg-type]
    assert rendered == "'" + hostile.replace("'", "''") + "'"
    assert ddl.literal(dialect, "json", {"a": "'"}) == """'{"a":"''"}'"""  # type: ignore[arg-type]
    assert ddl.literal(dialect, "integer", -5) == "-5"  # type: ignore[arg-type]


async def test_hostile_defaults_round_trip_as_values(env: Env) -> None:
    hostile = "'); DROP TABLE notes; -- \\' \""
    await env.tables.create(
        env.on.alice, env.app_id, "notes", [Column("t", "text", default=hostile)]
    )
    described = await env.tables.describe(env.on.alice, env.app_id, "notes")
    assert described.column("t") == Column("t", "text", default=hostile)
