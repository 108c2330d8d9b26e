"""Migrations: idempotent, in step with the schema metadata, safe to run concurrently."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage import create_engine, default_sqlite_url, migrate
from appdeck.storage.migrate import MIGRATIONS_DIR, alembic_config
from appdeck.storage.schema import metadata

TABLES = set(metadata.tables) | {"alembic_version"}
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()

MIGRATE_IN_A_PROCESS = """
import asyncio, sys
from appdeck.storage import create_engine, migrate

async def main() -> None:
    engine = create_engine(sys.argv[1])
    try:
        await migrate(engine)
    finally:
        await engine.dispose()

asyncio.run(main())
"""


async def _state(engine: AsyncEngine) -> tuple[set[str], str | None]:
    def read(conn: Connection) -> tuple[set[str], str | None]:
        tables = set(sa.inspect(conn).get_table_names())
        return tables, MigrationContext.configure(conn).get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def test_migrate_creates_the_tables_and_records_the_head_revision(
    empty_database_url: str,
) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        assert await _state(engine) == (TABLES, HEAD)
    finally:
        await engine.dispose()


async def test_migrate_is_idempotent_and_keeps_the_data(empty_database_url: str) -> None:
    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO session_events (session_id, stream, payload, created_at) "
                    "VALUES ('s', 'get', '{}', 1.0)"
                )
            )
        await migrate(engine)
        assert await _state(engine) == (TABLES, HEAD)
        async with engine.connect() as conn:
            count = await conn.scalar(sa.text("SELECT count(*) FROM session_events"))
        assert count == 1
    finally:
        await engine.dispose()


async def test_the_migrations_build_exactly_the_schema_the_stores_query(
    empty_database_url: str,
) -> None:
    def diff(conn: Connection) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, metadata))

    engine = create_engine(empty_database_url)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            assert await conn.run_sync(diff) == []
    finally:
        await engine.dispose()


async def test_two_engines_migrating_at_once_both_succeed(empty_database_url: str) -> None:
    engines = [create_engine(empty_database_url) for _ in range(2)]
    try:
        await asyncio.wait_for(asyncio.gather(*(migrate(e) for e in engines)), timeout=60)
        assert await _state(engines[0]) == (TABLES, HEAD)
    finally:
        for engine in engines:
            await engine.dispose()


async def test_one_process_can_migrate_two_databases_at_once(
    empty_database_url: str, tmp_path: Path
) -> None:
    engines = [create_engine(empty_database_url), create_engine(default_sqlite_url(tmp_path / "b"))]
    try:
        await asyncio.wait_for(asyncio.gather(*(migrate(e) for e in engines)), timeout=60)
        for engine in engines:
            assert await _state(engine) == (TABLES, HEAD)
    finally:
        for engine in engines:
            await engine.dispose()


async def test_two_processes_migrating_at_once_both_succeed(empty_database_url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            MIGRATE_IN_A_PROCESS,
            empty_database_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        outputs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in processes)), timeout=120
        )
    finally:
        for p in processes:
            if p.returncode is None:
                p.kill()
                await p.wait()
    for p, (_, stderr) in zip(processes, outputs, strict=True):
        assert p.returncode == 0, stderr.decode()
    engine = create_engine(empty_database_url)
    try:
        assert await _state(engine) == (TABLES, HEAD)
    finally:
        await engine.dispose()


def test_the_migration_templates_live_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "script.py.mako").is_file()
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert HEAD == "0020"
