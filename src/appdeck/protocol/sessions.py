"""Sessions: created by initialize, owned by the (tenant, user) of the token that created it.

State machine (one module owns it):

    none ──initialize──▶ live ──any call by another owner──▶ dropped (403 -32003, then 404)
                          │ ──DELETE /mcp / idle expiry────▶ dropped

A hot cache sits in front of the durable :class:`~appdeck.protocol.ports.SessionStore`, so the
request path costs a dict lookup; ``last_active`` is flushed in batches by :meth:`sweep`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from appdeck.common.identity import Principal
from appdeck.protocol.errors import Forbidden, ServerBusy
from appdeck.protocol.ports import SessionStore

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
LOG_RANK = {name: rank for rank, name in enumerate(LOG_LEVELS)}


@dataclass(slots=True)
class Session:
    """One client connection's protocol state."""

    id: str
    tenant: str
    user: str
    protocol_version: str
    client_info: dict[str, Any] = field(default_factory=dict)
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    last_active: float = 0.0
    log_level: str = "debug"
    initialized: bool = False
    subscriptions: set[str] = field(default_factory=set)

    @property
    def owner(self) -> tuple[str, str]:
        return (self.tenant, self.user)

    def wants_log(self, level: str) -> bool:
        return LOG_RANK.get(level, 0) >= LOG_RANK.get(self.log_level, 0)

    def supports(self, capability: str) -> bool:
        return capability in self.client_capabilities


DropListener = Callable[[Session], Awaitable[None]]


class SessionManager:
    """Creates, finds, checks and drops sessions."""

    def __init__(
        self,
        store: SessionStore,
        *,
        idle_timeout: float = 3600.0,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._idle_timeout = idle_timeout
        self._max = max_sessions
        self._clock = clock
        self._cache: dict[str, Session] = {}
        self._dirty: dict[str, float] = {}
        self._drop_listeners: list[DropListener] = []

    def on_drop(self, listener: DropListener) -> None:
        """Call ``listener`` whenever a session ends (owner mismatch, DELETE, idle expiry)."""
        self._drop_listeners.append(listener)

    async def create(
        self,
        principal: Principal,
        protocol_version: str,
        client_info: dict[str, Any],
        client_capabilities: dict[str, Any],
    ) -> Session:
        if len(self._cache) >= self._max and await self._store.count() >= self._max:
            raise ServerBusy(
                f"Session limit reached ({self._max}); end an unused session (DELETE /mcp) "
                "or retry later"
            )
        now = self._clock()
        session = Session(
            id=secrets.token_urlsafe(24),
            tenant=principal.tenant,
            user=principal.user,
            protocol_version=protocol_version,
            client_info=client_info,
            client_capabilities=client_capabilities,
            created_at=now,
            last_active=now,
        )
        await self._store.insert(session)
        self._cache[session.id] = session
        return session

    async def get(self, session_id: str) -> Session | None:
        """The live session with this id, or None when unknown or expired."""
        session = self._cache.get(session_id)
        if session is None:
            if len(session_id) > 128:
                return None
            session = await self._store.load(session_id)
            if session is None:
                return None
            self._cache[session_id] = session
        now = self._clock()
        if now - session.last_active > self._idle_timeout:
            await self.drop(session)
            return None
        session.last_active = now
        self._dirty[session_id] = now
        return session

    def cached(self, session_id: str) -> Session | None:
        """The session if this process holds it, without touching the store."""
        return self._cache.get(session_id)

    def live(self) -> list[Session]:
        return list(self._cache.values())

    async def check_owner(self, session: Session, principal: Principal) -> None:
        """Drop the session and refuse when ``principal`` is not its owner."""
        if session.owner != principal.owner:
            await self.drop(session)
            raise Forbidden("forbidden: the session belongs to another user; initialize again")

    async def save(self, session: Session) -> None:
        """Persist a change of the session's protocol state (log level, subscriptions...)."""
        await self._store.update(session)

    async def drop(self, session: Session) -> None:
        if self._cache.pop(session.id, None) is None and await self._store.load(session.id) is None:
            return
        self._dirty.pop(session.id, None)
        await self._store.delete(session.id)
        for listener in self._drop_listeners:
            await listener(session)

    async def sweep(self) -> int:
        """Flush activity times and drop idle sessions. Returns how many were dropped."""
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            await self._store.touch(dirty)
        cutoff = self._clock() - self._idle_timeout
        dropped = 0
        for session_id in await self._store.idle_since(cutoff):
            session = self._cache.get(session_id) or await self._store.load(session_id)
            if session is not None and session.last_active < cutoff:
                await self.drop(session)
                dropped += 1
        return dropped
