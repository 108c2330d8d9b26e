"""Sessions: created by initialize, owned by the (tenant, user) of the token that created it.

State machine (one module owns it):

    none ──initialize──▶ live ──any call by another owner──▶ dropped (403 -32003, then 404)
                          │ ──DELETE /mcp / idle expiry────▶ dropped

Caps. A (tenant, user) holds at most ``max_per_user`` sessions and one token (the principal's
``token_id``) at most ``max_per_token``: past either, ``initialize`` evicts that user's (or
token's) own least recently active session, so one user flooding ``initialize`` only ever
replaces their own sessions. ``max_sessions`` over all users stays as a last resort (503);
the per-user cap keeps one user from reaching it.

A hot cache sits in front of the durable :class:`~appdeck.protocol.ports.SessionStore`, so the
request path costs a dict lookup; ``last_active`` is flushed in batches by :meth:`sweep`.
"""

from __future__ import annotations

import asyncio
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
    token_id: str | None = None
    """The token (``jti``, PAT id) that created the session: per-token caps count by it."""

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
        max_per_user: int = 100,
        max_per_token: int = 50,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._idle_timeout = idle_timeout
        self._max = max_sessions
        self._per_user = max_per_user
        self._per_token = max_per_token
        # one initialize at a time per (tenant, user): [lock, how many hold or wait for it]
        self._creating: dict[tuple[str, str], list[Any]] = {}
        self.evicted = 0
        """Sessions dropped to make room under a per-user or per-token cap."""
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
        """A new session for ``principal``, after evicting its own least recently active
        sessions when it is at its per-user or per-token cap."""
        entry = self._creating.get(principal.owner)
        if entry is None:
            entry = self._creating[principal.owner] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                await self._make_room(principal)
                return await self._create(
                    principal, protocol_version, client_info, client_capabilities
                )
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._creating[principal.owner]

    async def _make_room(self, principal: Principal) -> None:
        rows = await self._store.owned(principal.tenant, principal.user)
        if len(rows) < self._per_user and len(rows) < self._per_token:
            return  # the common case: far below both caps
        # the cache knows fresher activity times than the store (flushed by sweep())
        ranked = sorted((self._last_active(sid, at), sid, token) for sid, at, token in rows)
        victims = ranked[: max(0, len(ranked) - self._per_user + 1)]
        if principal.token_id is not None:
            gone = {sid for _, sid, _ in victims}
            same = [r for r in ranked if r[2] == principal.token_id and r[1] not in gone]
            victims += same[: max(0, len(same) - self._per_token + 1)]
        for _, session_id, _ in victims:
            session = self._cache.get(session_id) or await self._store.load(session_id)
            if session is not None:
                await self.drop(session)
                self.evicted += 1

    def _last_active(self, session_id: str, stored: float) -> float:
        cached = self._cache.get(session_id)
        return cached.last_active if cached is not None else stored

    async def _create(
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
            token_id=principal.token_id,
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
        """Flush activity times, forget sessions ended elsewhere and drop idle ones. Returns
        how many were dropped."""
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            await self._store.touch(dirty)
        await self._forget_ended_elsewhere()
        cutoff = self._clock() - self._idle_timeout
        dropped = 0
        for session_id in await self._store.idle_since(cutoff):
            session = self._cache.get(session_id) or await self._store.load(session_id)
            if session is not None and session.last_active < cutoff:
                await self.drop(session)
                dropped += 1
        return dropped

    async def _forget_ended_elsewhere(self) -> None:
        """A session another process (or ``appdeck session drop``) deleted stops being served
        here at the next sweep: out of the cache, its streams closed by the drop listeners."""
        if not self._cache:
            return
        held = list(self._cache)
        present = await self._store.present(held)
        for session_id in held:
            if session_id in present:
                continue
            session = self._cache.pop(session_id, None)
            self._dirty.pop(session_id, None)
            if session is not None:
                for listener in self._drop_listeners:
                    await listener(session)
