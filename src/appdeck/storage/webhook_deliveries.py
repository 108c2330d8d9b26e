"""Webhook deliveries already taken (``webhook_deliveries``): what makes a replay a replay.

A delivery is known by its body's SHA-256 and, when GitHub sent one, its ``X-GitHub-Delivery``
id; either seen before for the app, within the window, is a replay. In the database, so every
replica sees what another took. Bounded: rows older than the window go at every new delivery,
and an app keeps at most :data:`MAX_PER_APP` (its oldest go first).
"""

from __future__ import annotations

import time
from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import writing
from appdeck.storage.schema import webhook_deliveries

__all__ = ["MAX_DELIVERY_ID", "MAX_PER_APP", "WebhookDeliveries"]

MAX_PER_APP: Final = 1000
MAX_DELIVERY_ID: Final = 100


class WebhookDeliveries:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def first(
        self, app_id: int, digest: str, delivery: str | None, *, window_s: float
    ) -> bool:
        """Take the delivery: ``False`` when its body or its id was taken for the app within
        the last ``window_s`` seconds (a replay), else ``True`` (and it is remembered)."""
        now = time.time()
        table = webhook_deliveries
        insert = postgresql.insert if self._engine.dialect.name == "postgresql" else sqlite.insert
        statement = (
            insert(table)
            .values(app_id=app_id, digest=digest, delivery=delivery, received_at=now)
            .on_conflict_do_nothing()
            .returning(table.c.digest)
        )
        async with writing(self._engine) as conn:
            await conn.execute(sa.delete(table).where(table.c.received_at < now - window_s))
            taken = (await conn.execute(statement)).first() is not None
            if taken:
                oldest = (
                    sa.select(table.c.digest)
                    .where(table.c.app_id == app_id)
                    .order_by(table.c.received_at.desc(), table.c.digest)
                    .offset(MAX_PER_APP)
                )
                await conn.execute(
                    sa.delete(table).where(table.c.app_id == app_id, table.c.digest.in_(oldest))
                )
        return taken

    async def forget(self, app_id: int, digest: str) -> None:
        """Let a delivery be taken again (its work could not be done: a redelivery may)."""
        table = webhook_deliveries
        async with writing(self._engine) as conn:
            await conn.execute(
                sa.delete(table).where(table.c.app_id == app_id, table.c.digest == digest)
            )
