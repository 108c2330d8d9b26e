"""The per-session event log in the database, for SSE replay after ``Last-Event-ID``.

The embedded default, for one process (several replicas use ``events/redis_log.py``). The
database assigns ``seq`` (``INSERT … RETURNING``), so it is unique across the log and
increases with every append, with gaps between a stream's events (the log is not *dense*).
On PostgreSQL two transactions appending at once may commit out of seq order; the stream hub
(``transport/hub.py``) therefore appends and publishes each session's events one at a time,
so a session's live readers see them in seq order; the in-process bus loses nothing, so a
reader never needs to read a gap back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.events.ports import EventLog, StoredEvent
from appdeck.storage.schema import session_events

_APPEND = sa.insert(session_events).returning(session_events.c.seq, sort_by_parameter_order=True)
_APPEND_KEYED = sa.insert(session_events).returning(
    session_events.c.seq, session_events.c.session_id, session_events.c.stream
)
"""Rows whose (session, stream) are all different: each seq comes back with its key, so
no order is needed and the rows go in multi-row statements (``sort_by_parameter_order``
makes SQLite insert one row per statement: 1,000 subscribers were 1,000 round trips)."""


class SqlEventLog(EventLog):
    """:class:`~appdeck.events.ports.EventLog` on SQLAlchemy Core.

    ``clock`` gives the append time that :meth:`trim` compares against (epoch seconds).
    """

    dense = False

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent:
        (event,) = await self.append_many([(session_id, stream, payload)])
        return event

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]:
        """Append all ``(session_id, stream, payload)`` items in one transaction, in order."""
        if not items:
            return []
        now = self._clock()
        rows = [
            {"session_id": sid, "stream": stream, "payload": payload.decode(), "created_at": now}
            for sid, stream, payload in items
        ]
        keys = [(sid, stream) for sid, stream, _ in items]
        async with self._engine.begin() as conn:
            if len(rows) == 1:
                seqs = [(await conn.execute(_APPEND, rows[0])).scalar_one()]
            elif len(set(keys)) == len(keys):  # a fan-out: one event per session
                result = await conn.execute(_APPEND_KEYED, rows)
                by_key = {(sid, stream): seq for seq, sid, stream in result}
                seqs = [by_key[key] for key in keys]
            else:
                seqs = list((await conn.execute(_APPEND, rows)).scalars())
        return [
            StoredEvent(session_id=sid, stream=stream, seq=seq, payload=payload)
            for (sid, stream, payload), seq in zip(items, seqs, strict=True)
        ]

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events of that session's stream with ``seq > after_seq``, oldest first."""
        t = session_events.c
        query = (
            sa.select(t.seq, t.payload)
            .where(t.session_id == session_id, t.stream == stream, t.seq > after_seq)
            .order_by(t.seq)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            result = await conn.execute(query)
            return [
                StoredEvent(session_id=session_id, stream=stream, seq=seq, payload=text.encode())
                for seq, text in result
            ]

    async def tail(self, session_id: str, stream: str) -> int | None:
        """The stream's newest seq; None when it has no event (a stream opened but still
        empty is known to this process only, and one process is all this log serves)."""
        t = session_events.c
        query = sa.select(sa.func.max(t.seq)).where(t.session_id == session_id, t.stream == stream)
        async with self._engine.connect() as conn:
            newest = (await conn.execute(query)).scalar_one_or_none()
        return int(newest) if newest is not None else None

    async def open_stream(self, session_id: str, stream: str) -> None:
        """Nothing to store: in one process the hub remembers its open request streams."""

    async def closed(self, session_id: str) -> bool:
        """Never asked of this log in practice: the in-process bus delivers CLOSE itself."""
        return False

    async def drop_session(self, session_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.delete(session_events).where(session_events.c.session_id == session_id)
            )

    async def trim(self, older_than: float) -> int:
        """Delete events appended before the epoch time ``older_than``; returns how many."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                sa.delete(session_events).where(session_events.c.created_at < older_than)
            )
        return result.rowcount
