"""Interfaces of the event log, the bus's items and the stream leases.

Two implementations of each: the embedded default (the database's log, an in-process bus and
in-process leases: one process) and Redis (``events/redis_log.py``, ``events/leases.py``:
several replicas serving one fleet of sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One message that went (or was meant to go) down one SSE stream of one session.

    ``seq`` increases with every append to that session's stream, so with the stream name it
    makes an SSE event id (``<stream>.<seq>``) that is unique per session. In a *dense* log
    (:attr:`EventLog.dense`) a stream's seqs are 1, 2, 3, … with no gap, so a reader that sees
    ``last + 2`` knows it missed one and reads it back from the log.
    """

    session_id: str
    stream: str
    seq: int
    payload: bytes  # the JSON-RPC message, JSON-encoded


class EventLog(Protocol):
    """Append-only per-session log with replay."""

    dense: bool
    """True when a stream's seqs have no gaps (a gap seen live means a lost doorbell)."""

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent: ...

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]: ...

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events of that session's stream with ``seq > after_seq``, oldest first."""
        ...

    async def tail(self, session_id: str, stream: str) -> int | None:
        """The stream's newest seq (0 when opened but empty); None for a stream never seen."""
        ...

    async def open_stream(self, session_id: str, stream: str) -> None:
        """Make an empty stream known (:meth:`tail` gives 0), so another replica accepts a
        ``Last-Event-ID`` of its priming event."""
        ...

    async def closed(self, session_id: str) -> bool:
        """True once the session was dropped (a reader's backstop for a lost CLOSE)."""
        ...

    async def drop_session(self, session_id: str) -> None: ...

    async def trim(self, older_than: float) -> int:
        """Delete events appended before the epoch time ``older_than``; returns how many."""
        ...


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to serve one stream of one session; ``token`` tells holders apart."""

    key: str
    token: str


class StreamLeases(Protocol):
    """Who serves a stream: at most one holder per key, cluster-wide.

    A holder renews every :attr:`renew_every` seconds while its connection is open; a holder
    that dies stops renewing and its lease expires. A holder whose lease was taken learns it
    at its next renewal (or at once, from the bus's :class:`~appdeck.events.bus.Taken`).
    """

    renew_every: float

    async def acquire(self, key: str) -> Lease | None:
        """The lease, or None while someone else holds it."""
        ...

    async def take(self, key: str) -> Lease | None:
        """The lease even from a holder that may be dead (a client resuming after
        ``Last-Event-ID`` lost its connection: it will not come back). Leases whose holders
        always release when their connection ends (one process) refuse, as :meth:`acquire`."""
        ...

    async def renew(self, lease: Lease) -> bool:
        """Extend the lease; False when it is no longer ours (expired and taken, or gone)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up if it is still ours (never someone else's)."""
        ...
