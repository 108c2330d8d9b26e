"""Alembic environment for AppDeck's own migrations.

From code, :func:`appdeck.storage.migrate.migrate` hands over an open (sync) connection in
``config.attributes["connection"]``, already inside the transaction that holds the migration
lock; this runs on it and leaves committing to the caller. From the ``alembic`` command line,
it builds an async engine from ``sqlalchemy.url`` or ``APPDECK_DATABASE_URL`` instead.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection

from appdeck.storage.engine import create_engine
from appdeck.storage.schema import metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.config.get_main_option("sqlalchemy.url") or os.environ.get("APPDECK_DATABASE_URL")
    if not url:
        raise RuntimeError("set sqlalchemy.url or APPDECK_DATABASE_URL to run migrations")
    return url


async def _run_on_new_engine() -> None:
    engine = create_engine(_url())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def _run_offline() -> None:
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    _run_offline()
elif isinstance(given := context.config.attributes.get("connection"), Connection):
    _run(given)
else:
    asyncio.run(_run_on_new_engine())
