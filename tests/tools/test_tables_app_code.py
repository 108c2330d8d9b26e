"""An app's database is attacker input (issue 19, finding 6): code the app plants in it (a
trigger, a view, a check) never runs unbounded inside the server when a table tool touches
the table. Through the MCP endpoint, on both dialects."""

from __future__ import annotations

import resource
import time

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from tests.conftest import _dsn

from .conftest import SHARED_ROOT, World, shared_world
from .test_tables_hostile import _as_app, _notes

pytestmark = SHARED_ROOT
world = shared_world  # one composition root per dialect for this module's tests

GIB_ALLOCATIONS = " ".join("SELECT length(randomblob(1000000000));" for _ in range(3))
"""A runaway body: three 1 GB blobs in a row (no loop the progress handler would see)."""
SPIN = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
PEAK_GROWTH_KIB = 400 * 1024
"""How much the process's peak memory may grow while the tool runs (the attack: 1 GB+)."""


def _peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def test_an_app_planted_sqlite_trigger_is_refused_before_it_runs(world: World) -> None:
    alice, app_id, at = await _notes(world)
    if not world.services.settings.database().startswith("sqlite"):
        # PostgreSQL: the platform's statements run as the app's own role, under the
        # statement timeout (appdb_postgres): the app's code runs with the app's rights
        await _as_app(
            world,
            app_id,
            "CREATE FUNCTION spin() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "PERFORM pg_sleep(60); RETURN NEW; END $$",
            "CREATE TRIGGER spin BEFORE INSERT ON notes FOR EACH ROW EXECUTE FUNCTION spin()",
        )
        started = time.monotonic()
        slow = await alice.error("records", action="insert", **at, rows=[{"title": "b"}])
        assert slow["code"] == "quota_exceeded", slow
        assert time.monotonic() - started < 30
        return
    await _as_app(
        world,
        app_id,
        f"CREATE TRIGGER hog BEFORE INSERT ON notes BEGIN {GIB_ALLOCATIONS} END",
        f"CREATE TRIGGER hog2 AFTER UPDATE ON notes BEGIN {GIB_ALLOCATIONS} END",
    )
    before = _peak_kib()
    started = time.monotonic()
    for arguments in (
        {"action": "insert", "rows": [{"title": "b"}]},
        {"action": "upsert", "rows": [{"id": 1, "title": "b"}], "on": "id"},
        {"action": "update", "id": 1, "values": {"title": "c"}},
        {"action": "delete", "id": 1},
    ):
        refused = await alice.error("records", **at, **arguments)
        assert refused["code"] == "failed_precondition", refused
        assert "hog" in refused["message"], refused
        assert "never run an app's code" in refused["message"]
    elapsed = time.monotonic() - started
    assert _peak_kib() - before < PEAK_GROWTH_KIB
    assert elapsed < 20  # four calls; the attack took 6 s or more for each
    # reads fire no trigger: they still work, and so do our own full-text triggers' tables
    rows = (await alice.ok("records", action="list", **at))["rows"]
    assert [r["title"] for r in rows] == ["a"]
    await _as_app(world, app_id, "DROP TRIGGER hog", "DROP TRIGGER hog2")
    await alice.ok("records", action="insert", **at, rows=[{"title": "b"}])
    hits = await alice.ok("search_table", app_id=app_id, table="notes", query="b")
    assert len(hits["rows"]) == 1


async def test_a_trigger_reached_by_a_cascade_refuses_the_write_and_the_drop(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    if not world.services.settings.database().startswith("sqlite"):
        return  # SQLite only: PostgreSQL runs the app's code as the app (see above)
    await _as_app(
        world,
        app_id,
        "CREATE TABLE child (id INTEGER PRIMARY KEY, note INTEGER "
        "REFERENCES notes(id) ON DELETE CASCADE)",
        "INSERT INTO child (note) VALUES (1)",
        f"CREATE TRIGGER hog BEFORE DELETE ON child BEGIN {GIB_ALLOCATIONS} END",
    )
    before = _peak_kib()
    refused = await alice.error("records", action="delete", **at, id=1)
    assert refused["code"] == "failed_precondition", refused
    dropped = await alice.error("manage_table", action="drop", **at, confirm=True)
    assert dropped["code"] == "failed_precondition", dropped
    assert _peak_kib() - before < PEAK_GROWTH_KIB
    assert (await alice.ok("records", action="count", **at))["count"] == 1


async def test_an_app_planted_view_with_a_runaway_body_is_never_run(world: World) -> None:
    alice, app_id, _ = await _notes(world)
    await _as_app(world, app_id, f"CREATE VIEW spin AS {SPIN}")
    started = time.monotonic()
    listed = await alice.ok("manage_table", action="list", app_id=app_id)
    assert [t["name"] for t in listed["tables"]] == ["notes"], listed
    for tool, arguments in (
        ("manage_table", {"action": "describe"}),
        ("records", {"action": "list"}),
        ("records", {"action": "count"}),
        ("search_table", {"query": "a"}),
    ):
        error = await alice.error(tool, app_id=app_id, table="spin", **arguments)
        assert error["code"] in ("not_found", "failed_precondition"), error
    assert time.monotonic() - started < 20  # the view's body never ends


async def test_a_check_that_makes_a_gigabyte_gets_a_clear_error_in_bounded_memory(
    world: World,
) -> None:
    alice, app_id, _ = await _notes(world)
    if not world.services.settings.database().startswith("sqlite"):
        return  # PostgreSQL: the app's role, its limits (above)
    await _as_app(
        world,
        app_id,
        "CREATE TABLE hog (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "t TEXT CHECK (length(randomblob(1000000000)) + length(randomblob(1000000000)) > 0))",
    )
    before = _peak_kib()
    error = await alice.error("records", action="insert", app_id=app_id, table="hog", rows=[{}])
    assert error["code"] == "invalid_argument", error
    assert "128 MiB" in error["message"], error
    assert _peak_kib() - before < PEAK_GROWTH_KIB


async def test_an_app_file_is_opened_defensive(world: World) -> None:
    _, app_id, _ = await _notes(world)
    databases = world.services.databases
    assert databases is not None
    if databases.dialect != "sqlite":
        return
    async with databases.transaction(app_id) as conn:
        await conn.exec_driver_sql("PRAGMA writable_schema = ON")
        with pytest.raises(DBAPIError, match="may not be modified"):
            await conn.exec_driver_sql("UPDATE sqlite_master SET sql = sql WHERE 0")


async def test_an_app_role_sees_no_other_database_name(world: World) -> None:
    _, app_id, _ = await _notes(world)
    databases = world.services.databases
    assert databases is not None
    if databases.dialect != "postgresql":
        return
    grant = await databases.grant(app_id, sandboxed=False)
    conn = await asyncpg.connect(_dsn(grant.env["DATABASE_URL"]), timeout=10)
    try:
        platform = world.services.settings.database().rsplit("/", 1)[-1].split("?")[0]
        for query in (
            "SELECT string_agg(datname, ',') FROM pg_database",
            "SELECT string_agg(datname, ',') FROM pg_stat_database",
            "SELECT string_agg(datname, ',') FROM pg_stat_activity",
        ):
            try:
                seen = str(await conn.fetchval(query))
            except asyncpg.InsufficientPrivilegeError:
                continue
            assert platform not in seen.split(","), (query, seen)
            assert "postgres" not in seen.split(","), (query, seen)
        assert await conn.fetchval("SELECT current_database()")  # its own: still works
    finally:
        await conn.close()
