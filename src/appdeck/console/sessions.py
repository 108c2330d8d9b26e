"""Console sessions: signing a browser in and out, and finding who a request's cookie names.

The cookie holds a random secret (``cs_`` + 43 characters); the database holds its SHA-256
(:mod:`appdeck.storage.console_sessions`), so a read of the table signs nobody in. A session
lives :data:`IDLE_S` past its last request and :data:`ABSOLUTE_S` at most; its user (or
tenant) being disabled, or the user removed, ends it at the next request.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from appdeck.common.tokens import token_hash
from appdeck.storage.console_sessions import ConsoleSessionRow, ConsoleSessionStore
from appdeck.storage.identity import IdentityStore, UserRecord

COOKIE: Final = "appdeck_console"
IDLE_S: Final = 12 * 3600.0
ABSOLUTE_S: Final = 7 * 86_400.0
TOUCH_EVERY_S: Final = 60.0
"""A request writes ``last_seen`` at most this often (one write a minute, not one a page)."""
_SECRET = re.compile(r"cs_[A-Za-z0-9_\-]{43}")


class ConsoleSessions:
    def __init__(
        self,
        store: ConsoleSessionStore,
        identities: IdentityStore,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._identities = identities
        self._clock = clock

    async def sign_in(
        self, user: UserRecord, *, ip: str | None, user_agent: str | None
    ) -> tuple[str, ConsoleSessionRow]:
        """A new session for ``user``: (the cookie's value, the row)."""
        now = self._clock()
        secret = "cs_" + secrets.token_urlsafe(32)
        row = ConsoleSessionRow(
            id=secrets.token_urlsafe(12),
            tenant_id=user.tenant_id,
            user_id=user.id,
            csrf=secrets.token_urlsafe(24),
            ip=(ip or "")[:64] or None,
            user_agent=_printable(user_agent or "")[:200] or None,
            created_at=now,
            last_seen=now,
            expires_at=now + IDLE_S,
        )
        await self.store.create(row, token_hash(secret))
        return secret, row

    async def find(self, secret: str | None) -> tuple[ConsoleSessionRow, UserRecord] | None:
        """The live session ``secret`` names and its (still active) user, or None."""
        if not secret or not _SECRET.fullmatch(secret):
            return None
        now = self._clock()
        row = await self.store.find(token_hash(secret), now)
        if row is None:
            return None
        user = await self._identities.get_user(row.user_id)
        if (
            user is None
            or user.disabled
            or user.tenant_id != row.tenant_id
            or await self._identities.refused_access(row.tenant_id, row.user_id) is not None
        ):  # a user (or tenant) disabled since
            await self.store.delete(row.tenant_id, row.id)
            return None
        if now - row.last_seen >= TOUCH_EVERY_S:
            expires = min(row.created_at + ABSOLUTE_S, now + IDLE_S)
            await self.store.touch(row.id, now, expires)
            row = replace(row, last_seen=now, expires_at=expires)
        return row, user

    async def sign_out(self, row: ConsoleSessionRow) -> None:
        await self.store.delete(row.tenant_id, row.id)

    async def purge(self) -> int:
        return await self.store.purge(self._clock())


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
