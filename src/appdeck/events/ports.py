"""Interfaces of the event log and the bus, shaped so Redis can stand behind both later."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One message that went (or was meant to go) down one SSE stream of one session.

    ``seq`` is unique across the log and increases with time, so it orders a session's events
    and, with the stream name, makes an SSE event id that is unique per session.
    """

    session_id: str
    stream: str
    seq: int
    payload: bytes  # the JSON-RPC message, JSON-encoded


class EventLog(Protocol):
    """Append-only per-session log with replay."""

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent: ...

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]: ...

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events of that session's stream with ``seq > after_seq``, oldest first."""
        ...

    async def drop_session(self, session_id: str) -> None: ...

    async def trim(self, older_than: float) -> int:
        """Delete events appended before the epoch time ``older_than``; returns how many."""
        ...
