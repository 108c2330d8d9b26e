"""alter_table's plans, run in one transaction: a failure midway leaves the table exactly as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from appdeck.common.errors import (
    ConfirmationRequired,
    Conflict,
    InvalidArgument,
    PermissionDenied,
)
from appdeck.platform.tables.alter import Change
from appdeck.platform.tables.catalog import Column, Index
from appdeck.platform.tables.databases import AppDatabases
from appdeck.platform.tables.ddl import IndexSpec
from appdeck.platform.tables.schema_service import TableService
from tests.platform.tables.test_schema import Env, platform


@pytest.fixture
async def env(
    app_databases: AppDatabases, tmp_path: Path, migrated_sqlite: Callable[[Path], str]
) -> AsyncIterator[Env]:
    async with platform(tmp_path, migrated_sqlite(tmp_path / "platform")) as on:
        dbs = app_databases
        tables = TableService(on.platform.apps, dbs, on.platform.feed)
        app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
        yield await _items(Env(on, tables, dbs, app_id, []))


async def _items(env: Env) -> Env:
    on, tables, dbs, app_id = env.on, env.tables, env.dbs, env.app_id
    await tables.create(
        on.alice,
        app_id,
        "items",
        [
            Column("name", "text", nullable=False, default="x"),
            Column("code", "text"),
            Column("price", "real"),
            Column("note", "text", unique=True),
        ],
        indexes=[IndexSpec(("code",), name="by_code")],
        fulltext=["name", "note"],
    )
    async with dbs.transaction(app_id) as conn:
        await conn.execute(
            sa.text(
                "INSERT INTO items (name, code, price, note) VALUES "
                "('apple', '12', 1.5, 'red fruit'), ('pear', NULL, 2.0, 'green fruit')"
            )
        )
    return env


async def snapshot(env: Env) -> tuple[Any, ...]:
    """The table's schema, rows and full-text matches, and (SQLite) every object's SQL."""
    schema = await env.tables.describe(env.on.alice, env.app_id, "items")
    async with env.dbs.transaction(env.app_id) as conn:
        rows = (await conn.execute(sa.text("SELECT * FROM items ORDER BY id"))).all()
        if env.dbs.dialect == "sqlite":
            objects = (
                await conn.execute(
                    sa.text("SELECT type, name, sql FROM sqlite_master ORDER BY name")
                )
            ).all()
            found = (
                await conn.execute(
                    sa.text("SELECT rowid FROM items__fts WHERE items__fts MATCH 'fruit'")
                )
            ).all()
        else:
            objects = (
                await conn.execute(
                    sa.text(
                        "SELECT indexname, indexdef FROM pg_indexes "
                        "WHERE schemaname = current_schema() ORDER BY 1"
                    )
                )
            ).all()
            found = (
                await conn.execute(
                    sa.text("SELECT id FROM items WHERE __fts @@ to_tsquery('simple', 'fruit')")
                )
            ).all()
    return schema, rows, objects, sorted(found)


async def test_add_rename_index_and_default_changes_apply_and_report_their_plan(env: Env) -> None:
    done = await env.tables.alter(
        env.on.alice,
        env.app_id,
        "items",
        [
            Change("add_column", definition=Column("qty", "integer", nullable=False, default=1)),
            Change("rename_column", column="code", new_name="sku"),
            Change("set_default", column="price", default=9.5),
            Change("add_index", index=IndexSpec(("qty", "sku"), unique=False, name="by_qty")),
            Change("drop_index", index_name="by_code"),
        ],
    )
    assert done.applied
    cols = {c.name: c for c in done.schema.columns}
    assert cols["qty"] == Column("qty", "integer", nullable=False, default=1)
    assert "sku" in cols
    assert "code" not in cols
    assert cols["price"].default == 9.5
    assert done.schema.indexes == (Index("by_qty", ("qty", "sku")),)
    assert done.schema.fulltext == ("name", "note")
    assert done.schema.row_estimate == 2
    add = done.plan.steps[0] if env.dbs.dialect == "postgresql" else None
    if add is not None:  # PostgreSQL >= 11: a constant default does not rewrite
        assert "ADD COLUMN" in add.sql
        assert not add.rewrites_table
        assert add.locks_table
    else:  # SQLite: set_default is a rebuild
        assert any('CREATE TABLE "items__new"' in s.sql for s in done.plan.steps)


async def test_a_dry_run_returns_the_plan_and_changes_nothing(env: Env) -> None:
    before = await snapshot(env)
    dry = await env.tables.alter(
        env.on.alice,
        env.app_id,
        "items",
        [
            Change("change_type", column="code", type="integer"),
            Change("drop_column", column="price"),
        ],
        dry_run=True,
    )
    assert not dry.applied
    assert dry.plan.destructive
    assert any(s.rewrites_table for s in dry.plan.steps)
    assert [c.name for c in dry.schema.columns] == ["id", "name", "code", "note"]
    assert await snapshot(env) == before


async def test_dropping_a_column_needs_admin_and_confirmation(env: Env) -> None:
    await env.on.platform.apps.grant(env.on.alice, env.app_id, "bob", "developer")
    drop = [Change("drop_column", column="note")]
    with pytest.raises(PermissionDenied):
        await env.tables.alter(env.on.bob, env.app_id, "items", drop, confirmed=True)
    with pytest.raises(ConfirmationRequired):
        await env.tables.alter(env.on.alice, env.app_id, "items", drop)
    done = await env.tables.alter(env.on.alice, env.app_id, "items", drop, confirmed=True)
    assert "note" not in [c.name for c in done.schema.columns]
    assert done.schema.fulltext == ("name",)


async def test_a_type_change_that_fails_midway_leaves_the_table_exactly_as_it_was(env: Env) -> None:
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("UPDATE items SET code = 'abc' WHERE name = 'pear'"))
    before = await snapshot(env)
    with pytest.raises(InvalidArgument) as raised:
        await env.tables.alter(
            env.on.alice,
            env.app_id,
            "items",
            [
                Change("add_column", definition=Column("extra", "text", default="e")),
                Change("rename_column", column="name", new_name="title"),
                Change("change_type", column="code", type="integer"),
            ],
        )
    assert raised.value.details["field"] == "changes"
    assert await snapshot(env) == before


async def test_set_not_null_over_null_rows_fails_naming_the_row_and_changes_nothing(
    env: Env,
) -> None:
    before = await snapshot(env)
    with pytest.raises(InvalidArgument, match="row id 2") as raised:
        await env.tables.alter(
            env.on.alice,
            env.app_id,
            "items",
            [Change("drop_index", index_name="by_code"), Change("set_not_null", column="code")],
        )
    assert raised.value.details["column"] == "code"
    assert await snapshot(env) == before


async def test_a_type_change_converts_the_values(env: Env) -> None:
    done = await env.tables.alter(
        env.on.alice, env.app_id, "items", [Change("change_type", column="code", type="integer")]
    )
    assert done.schema.column("code") == Column("code", "integer")
    assert any(s.rewrites_table for s in done.plan.steps)
    async with env.dbs.transaction(env.app_id) as conn:
        codes = (await conn.execute(sa.text("SELECT code FROM items ORDER BY id"))).scalars().all()
    assert codes == [12, None]


async def test_a_narrowing_type_change_needs_confirmation(env: Env) -> None:
    narrowing = [Change("change_type", column="price", type="integer")]
    with pytest.raises(ConfirmationRequired):
        await env.tables.alter(env.on.alice, env.app_id, "items", narrowing)
    done = await env.tables.alter(env.on.alice, env.app_id, "items", narrowing, confirmed=True)
    assert done.schema.column("price") == Column("price", "integer")


async def test_full_text_columns_can_be_removed_and_added_back(env: Env) -> None:
    removed = await env.tables.alter(
        env.on.alice, env.app_id, "items", [Change("remove_fulltext", columns=("note",))]
    )
    assert removed.schema.fulltext == ("name",)
    added = await env.tables.alter(
        env.on.alice, env.app_id, "items", [Change("add_fulltext", columns=("note", "code"))]
    )
    assert added.schema.fulltext == ("name", "note", "code")
    _, _, _, found = await snapshot(env)
    assert found == [(1,), (2,)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (Change("drop_column", column="nope"), "changes/0/column"),
        (Change("drop_column", column="id"), "changes/0/column"),
        (Change("rename_column", column="code", new_name="a b"), "changes/0/new_name"),
        (Change("rename_column", column="code", new_name="note"), "changes/0/new_name"),
        (Change("change_type", column="price", type="uuid"), "changes/0/type"),
        (Change("change_type", column="name", type="integer"), "changes/0/type"),
        (Change("set_default", column="price", default="1; drop table items"), "changes/0/default"),
        (Change("drop_index", index_name="nope"), "changes/0/index_name"),
        (Change("add_index", index=IndexSpec(("nope",))), "changes/0/index/columns/0"),
        (Change("add_fulltext", columns=("price",)), "changes/0/columns/0"),
        (Change("remove_fulltext", columns=("code",)), "changes/0/columns"),
        (
            Change("add_column", definition=Column("q", "integer", nullable=False)),
            "changes/0/definition/nullable",
        ),
    ],
)
async def test_a_bad_change_is_refused_naming_the_field_and_nothing_changes(
    env: Env, change: Change, field: str
) -> None:
    before = await snapshot(env)
    with pytest.raises(InvalidArgument) as raised:
        await env.tables.alter(env.on.alice, env.app_id, "items", [change], confirmed=True)
    assert raised.value.details["field"] == field
    assert await snapshot(env) == before


async def test_a_rebuild_keeps_the_next_id_where_it_was(env: Env) -> None:
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("INSERT INTO items (name) VALUES ('plum')"))
        await conn.execute(sa.text("DELETE FROM items WHERE name = 'plum'"))
    await env.tables.alter(
        env.on.alice, env.app_id, "items", [Change("set_default", column="code", default="c")]
    )
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("INSERT INTO items (name) VALUES ('fig')"))
        ids = (await conn.execute(sa.text("SELECT id FROM items ORDER BY id"))).scalars().all()
        code = (await conn.execute(sa.text("SELECT code FROM items WHERE id = 4"))).scalar()
    assert ids == [1, 2, 4]  # 3 was given once: never again
    assert code == "c"


async def test_the_postgresql_plan_says_what_rewrites(env: Env) -> None:
    dry = await env.tables.alter(
        env.on.alice,
        env.app_id,
        "items",
        [
            Change("add_column", definition=Column("n", "integer", default=5)),
            Change("change_type", column="price", type="text"),
            Change("set_not_null", column="name"),
        ],
        dry_run=True,
    )
    rewrites = {s.description: s.rewrites_table for s in dry.plan.steps if s.check is None}
    if env.dbs.dialect == "postgresql":
        assert rewrites == {
            "add column n": False,
            "change price from real to text": True,
            "refuse NULL in name": False,
        }
        assert all(s.locks_table for s in dry.plan.steps if s.check is None)
    else:  # one rebuild: a new table, the copy, the swap
        assert any(s.sql.startswith('CREATE TABLE "items__new"') for s in dry.plan.steps)
        assert any(s.sql.startswith('INSERT INTO "items__new"') for s in dry.plan.steps)


async def test_a_refusal_names_the_step_and_never_quotes_a_value(env: Env) -> None:
    async with env.dbs.transaction(env.app_id) as conn:
        await conn.execute(sa.text("UPDATE items SET code = 'secret-abc' WHERE name = 'pear'"))
        await conn.execute(sa.text("UPDATE items SET price = 2.0"))
    before = await snapshot(env)
    unique = [Change("add_index", index=IndexSpec(("price",), unique=True, name="one_price"))]
    with pytest.raises(Conflict) as duplicate:
        await env.tables.alter(env.on.alice, env.app_id, "items", unique)
    assert "add index one_price" in duplicate.value.message
    assert "unique" in duplicate.value.message
    convert = [Change("change_type", column="code", type="integer")]
    with pytest.raises(InvalidArgument) as refused:
        await env.tables.alter(env.on.alice, env.app_id, "items", convert)
    assert "secret-abc" not in str(refused.value.to_dict())
    assert await snapshot(env) == before


async def test_a_rebuild_deletes_no_row_of_a_table_referencing_it_on_delete_cascade(
    env: Env,
) -> None:
    """SQLite rebuilds a table for most changes (DROP TABLE of the old one): with foreign keys
    enforced, that deleted every row of an app table referencing it ON DELETE CASCADE."""
    async with env.dbs.transaction(env.app_id) as conn:  # the app's own table, its own key
        await conn.execute(
            sa.text(
                "CREATE TABLE reviews (id INTEGER PRIMARY KEY, item BIGINT NOT NULL "
                "REFERENCES items (id) ON DELETE CASCADE, body TEXT)"
            )
        )
        await conn.execute(
            sa.text("INSERT INTO reviews (id, item, body) VALUES (1, 1, 'a'), (2, 2, 'b')")
        )
    done = await env.tables.alter(
        env.on.alice, env.app_id, "items", [Change("set_default", column="price", default=3.0)]
    )
    assert done.applied
    async with env.dbs.transaction(env.app_id) as conn:
        kept = (await conn.execute(sa.text("SELECT item, body FROM reviews ORDER BY id"))).all()
        assert [tuple(r) for r in kept] == [(1, "a"), (2, "b")]
        if env.dbs.dialect == "sqlite":  # enforced again after the change
            assert (await conn.execute(sa.text("PRAGMA foreign_keys"))).scalar() == 1
