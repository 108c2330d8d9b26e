"""Replicas started at once on a fresh PostgreSQL database (issue 20, item 2): each creates
the apps database when missing and closes it to ``PUBLIC``; together, none of them fails."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from appdeck.platform.tables.databases import apps_database_url, open_databases
from tests.conftest import _dsn

CREATORS = 6
ROUNDS = 3


async def test_replicas_opening_the_apps_database_at_once_all_succeed(
    postgres_test_database: str, tmp_path: Path
) -> None:
    apps_name = str(make_url(apps_database_url(postgres_test_database)).database)
    prefix = f"t{secrets.token_hex(4)}_app_"
    for round_ in range(ROUNDS):  # a fresh apps database each round: the race is on creation
        await _drop_database(postgres_test_database, apps_name)
        opened = await asyncio.gather(
            *(
                open_databases(
                    postgres_test_database, tmp_path / f"r{round_}-{i}", role_prefix=prefix
                )
                for i in range(CREATORS)
            ),
            return_exceptions=True,
        )
        failed = [repr(o)[:300] for o in opened if isinstance(o, BaseException)]
        for each in opened:
            if not isinstance(each, BaseException):
                await each.close()
        assert failed == [], failed
    conn = await asyncpg.connect(_dsn(postgres_test_database), timeout=10)
    try:
        acl = await conn.fetchval(
            "SELECT datacl::text FROM pg_database WHERE datname = $1", apps_name
        )
    finally:
        await conn.close()
    assert "=Tc/" not in str(acl)  # PUBLIC's default CONNECT, TEMPORARY are revoked


async def _drop_database(platform_url: str, name: str) -> None:
    conn = await asyncpg.connect(_dsn(platform_url), timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
