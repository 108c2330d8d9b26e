"""Sessions in the database: the durable home behind the session manager's hot cache."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.protocol.ports import SessionStore
from appdeck.protocol.sessions import Session, SessionChange
from appdeck.storage.engine import writing
from appdeck.storage.schema import sessions

_TOUCH = (
    sa.update(sessions)
    .where(sessions.c.id == sa.bindparam("b_id"))
    .where(sessions.c.last_active < sa.bindparam("b_last_active"))
    .values(last_active=sa.bindparam("b_last_active"))
)


class SqlSessionStore(SessionStore):
    """:class:`~appdeck.protocol.ports.SessionStore` on SQLAlchemy Core."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def insert(self, session: Session) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(sa.insert(sessions).values(_row(session)))

    async def load(self, session_id: str) -> Session | None:
        async with self._engine.connect() as conn:
            result = await conn.execute(sa.select(sessions).where(sessions.c.id == session_id))
            row = result.one_or_none()
        return None if row is None else _session(row._mapping)

    async def update(self, session: Session) -> None:
        """Rewrite the session's state: everything but its id and creation time."""
        values = _row(session)
        del values["id"], values["created_at"]
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(sessions).where(sessions.c.id == session.id).values(values)
            )

    async def change(self, session_id: str, change: SessionChange) -> Session | None:
        """Read-modify-write of one session's state under its row lock (PostgreSQL ``FOR
        UPDATE``; SQLite: the write lock ``writing`` takes), so the changes of two replicas
        to one session never overwrite each other."""
        query = sa.select(sessions).where(sessions.c.id == session_id).with_for_update()
        async with writing(self._engine) as conn:
            row = (await conn.execute(query)).one_or_none()
            if row is None:
                return None
            session = _session(row._mapping)
            if change.apply(session):
                await conn.execute(
                    sa.update(sessions)
                    .where(sessions.c.id == session_id)
                    .values(
                        log_level=session.log_level,
                        subscriptions=sorted(session.subscriptions),
                    )
                )
        return session

    async def subscribers(self, uri: str, tenant: str | None) -> list[str]:
        """A scan of the (tenant's) sessions, narrowed in SQL by the URI's JSON spelling
        (subscriptions are a JSON list written by this module), then checked exactly.
        The column is read as text and decoded here with orjson: SQLAlchemy's JSON type
        decodes with the stdlib, the larger part of this lookup's CPU for 1,000 rows."""
        text = sa.cast(sessions.c.subscriptions, sa.Text)
        query = sa.select(sessions.c.id, text)
        if tenant is not None:
            query = query.where(sessions.c.tenant == tenant)
        needle = json.dumps(uri)  # how json.dumps wrote it inside the list, quotes included
        if needle.isascii():
            pattern = (
                "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            )
            query = query.where(text.like(pattern, escape="\\"))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [sid for sid, raw in rows if _subscribed(raw, uri)]

    async def session_ids(self, tenant: str | None) -> list[str]:
        query = sa.select(sessions.c.id)
        if tenant is not None:
            query = query.where(sessions.c.tenant == tenant)
        async with self._engine.connect() as conn:
            return list((await conn.scalars(query)).all())

    async def delete(self, session_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(sa.delete(sessions).where(sessions.c.id == session_id))

    async def list_sessions(
        self, tenant: str | None = None, user: str | None = None
    ) -> list[dict[str, Any]]:
        """Sessions in the database (newest activity first), for the operator's CLI."""
        query = sa.select(
            sessions.c.id,
            sessions.c.tenant,
            sessions.c.user,
            sessions.c.client_info,
            sessions.c.created_at,
            sessions.c.last_active,
        ).order_by(sessions.c.last_active.desc())
        if tenant is not None:
            query = query.where(sessions.c.tenant == tenant)
        if user is not None:
            query = query.where(sessions.c.user == user)
        async with self._engine.connect() as conn:
            return [dict(r._mapping) for r in (await conn.execute(query)).all()]

    async def touch(self, last_active: dict[str, float]) -> None:
        """Record activity times in one batch. A time never moves backwards, so a stale
        flush from another process cannot make a busy session look idle."""
        if not last_active:
            return
        params = [{"b_id": sid, "b_last_active": ts} for sid, ts in last_active.items()]
        async with self._engine.begin() as conn:
            await conn.execute(_TOUCH, params)

    async def idle_since(self, before: float) -> list[str]:
        query = sa.select(sessions.c.id).where(sessions.c.last_active < before)
        async with self._engine.connect() as conn:
            return list((await conn.scalars(query)).all())

    async def owned(self, tenant: str, user: str) -> list[tuple[str, float, str | None]]:
        """(id, last_active, token_id) of every session of (tenant, user), least recently
        active first: what the per-user and per-token caps count and evict."""
        query = (
            sa.select(sessions.c.id, sessions.c.last_active, sessions.c.token_id)
            .where(sessions.c.tenant == tenant, sessions.c.user == user)
            .order_by(sessions.c.last_active)
        )
        async with self._engine.connect() as conn:
            return [(r.id, r.last_active, r.token_id) for r in (await conn.execute(query)).all()]

    async def present(self, session_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        ids = list(session_ids)
        async with self._engine.connect() as conn:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                query = sa.select(sessions.c.id).where(sessions.c.id.in_(chunk))
                found.update((await conn.scalars(query)).all())
        return found

    async def count(self) -> int:
        async with self._engine.connect() as conn:
            return int(await conn.scalar(sa.select(sa.func.count()).select_from(sessions)) or 0)


def _subscribed(raw: str | None, uri: str) -> bool:
    """Whether the subscriptions column's text (a JSON list) holds ``uri``. orjson first;
    the stdlib for what orjson refuses and ``json.dumps`` may write (a lone surrogate
    escaped), so the answer is the JSON type's for every row."""
    if raw is None:
        return False
    try:
        subscriptions = orjson.loads(raw)
    except orjson.JSONDecodeError:
        subscriptions = json.loads(raw)
    return isinstance(subscriptions, list) and uri in subscriptions


def _row(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "tenant": session.tenant,
        "user": session.user,
        "protocol_version": session.protocol_version,
        "client_info": session.client_info,
        "client_capabilities": session.client_capabilities,
        "created_at": session.created_at,
        "last_active": session.last_active,
        "log_level": session.log_level,
        "initialized": session.initialized,
        "subscriptions": sorted(session.subscriptions),
        "token_id": session.token_id,
    }


def _session(row: sa.RowMapping) -> Session:
    return Session(
        id=row["id"],
        tenant=row["tenant"],
        user=row["user"],
        protocol_version=row["protocol_version"],
        client_info=row["client_info"],
        client_capabilities=row["client_capabilities"],
        created_at=row["created_at"],
        last_active=row["last_active"],
        log_level=row["log_level"],
        initialized=row["initialized"],
        subscriptions=set(row["subscriptions"]),
        token_id=row["token_id"],
    )
