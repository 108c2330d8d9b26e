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

Several replicas (issue 13). The store is the truth; every replica may cache any session. A
change of a session's state (log level, subscriptions) is one atomic read-modify-write in the
store (:meth:`SessionStore.change`), never a rewrite of a cached copy, so two replicas changing
one session concurrently both land. After a change or a drop the replica publishes the session's
id on the ``session`` channel of the :class:`~appdeck.protocol.ports.Broadcast`; the others that
cache it re-read it from the store (or forget it when it is gone). Pub/sub is at most once, so
a cached entry is also re-read when it is older than ``recheck_seconds`` on its next use, and
every entry after the broadcast reconnects.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from appdeck.common.identity import Principal
from appdeck.protocol.errors import Forbidden, InvalidParams, ServerBusy, SessionNotFound
from appdeck.protocol.levels import passes
from appdeck.protocol.ports import Broadcast, SessionStore, Subscription

log = logging.getLogger("appdeck.protocol")


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
        return passes(level, self.log_level)

    def supports(self, capability: str) -> bool:
        return capability in self.client_capabilities


@dataclass(frozen=True, slots=True)
class SessionChange:
    """One change of a session's mutable protocol state, applied by the store to the stored
    row inside one transaction (so concurrent changes from several replicas compose)."""

    log_level: str | None = None
    subscribe: str | None = None
    unsubscribe: frozenset[str] = frozenset()
    unsubscribe_below: str | None = None
    """End the subscriptions to this URI and to the URIs below it (``base/…``)."""
    max_subscriptions: int = 1000

    def apply(self, session: Session) -> bool:
        """Change ``session`` in place; whether anything changed. Raises
        :class:`InvalidParams` when a subscribe would pass ``max_subscriptions``."""
        before = (session.log_level, len(session.subscriptions))
        if self.log_level is not None:
            session.log_level = self.log_level
        subs = session.subscriptions
        subs.difference_update(self.unsubscribe)
        base = self.unsubscribe_below
        if base is not None:
            subs.difference_update([u for u in subs if u == base or u.startswith(base + "/")])
        if self.subscribe is not None and self.subscribe not in subs:
            if len(subs) >= self.max_subscriptions:
                raise InvalidParams(f"at most {self.max_subscriptions} subscriptions per session")
            subs.add(self.subscribe)
            return True
        return (session.log_level, len(subs)) != before


SESSION_CHANNEL = "session"
"""Broadcast channel: ``{"id": session id, "from": instance}`` after a change or a drop."""
MAX_REFRESHING = 256
"""Re-reads scheduled by invalidations at once; past it an entry is only marked stale."""


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
        broadcast: Broadcast | None = None,
        instance_id: str = "",
        recheck_seconds: float | None = None,
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
        self._broadcast = broadcast
        self._instance = instance_id
        self._recheck = recheck_seconds
        self._checked: dict[str, float] = {}  # session id -> when the cache last read the store
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        self._subscription: Subscription | None = None

    async def start(self) -> None:
        """Listen for other replicas' changes (no-op without a broadcast)."""
        if self._broadcast is None or self._subscription is not None:
            return
        self._subscription = await self._broadcast.subscribe(SESSION_CHANNEL, self._on_signal)
        self._broadcast.on_reconnect(self._all_stale)

    async def close(self) -> None:
        if self._broadcast is not None and self._subscription is not None:
            await self._broadcast.unsubscribe(self._subscription)
            self._subscription = None
        for task in list(self._refreshing.values()):
            task.cancel()
        if self._refreshing:
            await asyncio.gather(*self._refreshing.values(), return_exceptions=True)

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
        self._hold(session)
        return session

    def _hold(self, session: Session) -> None:
        self._cache[session.id] = session
        self._checked[session.id] = time.monotonic()

    async def get(self, session_id: str) -> Session | None:
        """The live session with this id, or None when unknown or expired."""
        session = self._cache.get(session_id)
        if session is None:
            if len(session_id) > 128:
                return None
            session = await self._store.load(session_id)
            if session is None:
                return None
            self._hold(session)
        elif self._stale(session_id) and not await self._reread(session):
            return None
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

    async def change(self, session: Session, change: SessionChange) -> Session:
        """Apply ``change`` to the stored session (atomically, whatever other replicas do),
        then to ``session`` and the cached copy, and tell the other replicas. Raises
        :class:`SessionNotFound` when the session ended meanwhile (it is forgotten here)."""
        before = (session.log_level, set(session.subscriptions))
        fresh = await self._store.change(session.id, change)
        if fresh is None:
            await self._forget(session.id)
            raise SessionNotFound("Session not found")
        _adopt(session, fresh)
        cached = self._cache.get(session.id)
        if cached is not None and cached is not session:
            _adopt(cached, fresh)
        if before != (session.log_level, session.subscriptions):
            await self._signal(session.id)
        return session

    async def change_owned(self, tenant: str, user: str, change: SessionChange) -> int:
        """Apply ``change`` to every stored session of (``tenant``, ``user``), whichever replica
        holds it. How many sessions changed."""
        changed = 0
        for session_id, _, _ in await self._store.owned(tenant, user):
            cached = self._cache.get(session_id)
            before = None if cached is None else (cached.log_level, set(cached.subscriptions))
            fresh = await self._store.change(session_id, change)
            if fresh is None:
                await self._forget(session_id)
                continue
            if cached is not None:
                _adopt(cached, fresh)
                if before == (cached.log_level, cached.subscriptions):
                    continue
            changed += 1
            await self._signal(session_id)
        return changed

    async def subscribers(self, uri: str, tenant: str | None = None) -> list[str]:
        """Ids of the sessions subscribed to ``uri`` (only those of ``tenant`` when given),
        whichever replica took the subscribe."""
        return await self._store.subscribers(uri, tenant)

    async def session_ids(self, tenant: str | None = None) -> list[str]:
        """Ids of every stored session (of ``tenant`` when given), on any replica."""
        return await self._store.session_ids(tenant)

    async def owned_sessions(self, tenant: str, user: str) -> list[Session]:
        """Every live session of (``tenant``, ``user``) on any replica, most recently active
        first (what the console lists; at most ``max_per_user``)."""
        found = []
        for session_id, _, _ in await self._store.owned(tenant, user):
            session = self._cache.get(session_id) or await self._store.load(session_id)
            if session is not None:
                found.append(session)
        return sorted(found, key=lambda s: s.last_active, reverse=True)

    async def end_owned(self, tenant: str, user: str, session_id: str) -> bool:
        """End (``tenant``, ``user``)'s session ``session_id`` as ``DELETE /mcp`` does: its
        streams here close, the other replicas hear it and close theirs. False when no such
        session of theirs exists."""
        if len(session_id) > 128:
            return False
        session = self._cache.get(session_id) or await self._store.load(session_id)
        if session is None or session.owner != (tenant, user):
            return False
        await self.drop(session)
        return True

    async def drop(self, session: Session) -> None:
        if self._cache.pop(session.id, None) is None and await self._store.load(session.id) is None:
            return
        self._dirty.pop(session.id, None)
        self._checked.pop(session.id, None)
        await self._store.delete(session.id)
        await self._signal(session.id)
        for listener in self._drop_listeners:
            await listener(session)

    # -- other replicas -------------------------------------------------------------------

    async def _signal(self, session_id: str) -> None:
        """Tell the other replicas to re-read ``session_id`` (best effort: they re-check
        cached entries anyway)."""
        if self._broadcast is None:
            return
        payload = json.dumps({"id": session_id, "from": self._instance}).encode()
        try:
            await self._broadcast.publish(SESSION_CHANNEL, payload)
        except Exception:  # the backstop re-read covers a lost signal
            log.warning("could not publish a session change", exc_info=True)

    def _on_signal(self, payload: bytes) -> None:
        session_id = _signalled_id(payload, self._instance)
        if session_id is None or session_id not in self._cache:
            return
        self._checked[session_id] = float("-inf")  # the next use re-reads it, at the latest
        if session_id in self._refreshing or len(self._refreshing) >= MAX_REFRESHING:
            return
        task = asyncio.get_running_loop().create_task(self._refresh(session_id))
        self._refreshing[session_id] = task

    async def _refresh(self, session_id: str) -> None:
        try:
            session = self._cache.get(session_id)
            if session is not None:
                await self._reread(session)
        except Exception:
            log.warning("could not re-read session %s", session_id[:16], exc_info=True)
        finally:
            self._refreshing.pop(session_id, None)

    def _all_stale(self) -> None:
        for session_id in self._checked:
            self._checked[session_id] = float("-inf")

    def _stale(self, session_id: str) -> bool:
        checked = self._checked.get(session_id, float("-inf"))
        if checked == float("-inf"):
            return True
        return self._recheck is not None and time.monotonic() - checked >= self._recheck

    async def _reread(self, session: Session) -> bool:
        """Bring the cached ``session`` up to date with the store; False (and forgotten) when
        the store no longer holds it."""
        self._checked[session.id] = time.monotonic()
        fresh = await self._store.load(session.id)
        if fresh is None:
            await self._forget(session.id)
            return False
        _adopt(session, fresh)
        return True

    async def _forget(self, session_id: str) -> None:
        """The session ended elsewhere: stop serving it here (drop listeners run)."""
        session = self._cache.pop(session_id, None)
        self._dirty.pop(session_id, None)
        self._checked.pop(session_id, None)
        if session is not None:
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
            if session_id not in present:
                await self._forget(session_id)


def _adopt(session: Session, fresh: Session) -> None:
    """Copy the stored state into a cached session, in place (in-flight calls hold it)."""
    session.log_level = fresh.log_level
    session.subscriptions = set(fresh.subscriptions)
    session.initialized = session.initialized or fresh.initialized
    session.last_active = max(session.last_active, fresh.last_active)


def _signalled_id(payload: bytes, me: str) -> str | None:
    """The session id of another replica's signal; None for ours or a malformed one."""
    if len(payload) > 1024:
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        log.warning("dropped a malformed session signal")
        return None
    if not isinstance(body, dict):
        return None
    session_id, sender = body.get("id"), body.get("from")
    if not isinstance(session_id, str) or not 0 < len(session_id) <= 128:
        return None
    if sender == me and me:
        return None
    return session_id
