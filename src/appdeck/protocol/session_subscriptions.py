"""The handshake era's :class:`~appdeck.protocol.ports.Subscriptions`: kept on each session,
in the session store, so any replica reads them whichever replica took the subscribe."""

from __future__ import annotations

from appdeck.protocol.sessions import Session, SessionChange, SessionManager


class SessionSubscriptions:
    def __init__(self, sessions: SessionManager) -> None:
        self._sessions = sessions

    async def subscribe(self, session: Session, uri: str, limit: int) -> None:
        # the store decides (another replica may have changed the session since it was cached)
        await self._sessions.change(session, SessionChange(subscribe=uri, max_subscriptions=limit))

    async def unsubscribe(self, session: Session, uri: str) -> None:
        await self._sessions.change(session, SessionChange(unsubscribe=frozenset({uri})))

    async def unsubscribe_below(self, tenant: str, user: str, base: str) -> int:
        return await self._sessions.change_owned(
            tenant, user, SessionChange(unsubscribe_below=base)
        )

    async def followers(self, uri: str, tenant: str | None = None) -> list[str]:
        return await self._sessions.subscribers(uri, tenant)

    async def listeners(self, tenant: str | None = None) -> list[str]:
        return await self._sessions.session_ids(tenant)
