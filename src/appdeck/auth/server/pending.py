"""Authorization requests waiting for the user: kept server-side between the consent page
and its form post, so nothing the browser sends back is trusted but the user's answers.

A pending request is found by a random id (a hidden field), and the post must carry the
CSRF token made with it and come from the browser that loaded the page (a cookie). It lives
10 minutes, survives a few wrong passwords, and is used once.

They are rows of the ``consent_requests`` table (:class:`~appdeck.storage.consents.
ConsentStore`), so with several replicas behind one URL the page shown by one and the post
received by another meet: the answer takes the row (``DELETE … RETURNING``, once whatever
replicas race), wrong passwords are counted by a conditional ``UPDATE``. The client is read
again from the store at each step (one deleted meanwhile ends the request). A row that does
not read back as a request (tampered with, or from another version) is dropped.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from appdeck.storage.consents import ConsentRow, ConsentStore
from appdeck.storage.oauth import ClientRow

log = logging.getLogger("appdeck.auth")

TTL_SECONDS: Final = 600.0
MAX_PENDING: Final = 10_000
TRIM_EVERY: Final = 32
"""The table is trimmed to ``MAX_PENDING`` every so many new requests of a replica (a trim
walks the index): at most ``MAX_PENDING + TRIM_EVERY`` rows per replica."""
MAX_ATTEMPTS: Final = 5
MAX_FIELD: Final = 8192
"""The longest string field read back from a row (the request's own limits are lower)."""
MAX_SCOPES: Final = 200
VERSION: Final = 1

ClientById = Callable[[str], Awaitable[ClientRow | None]]


@dataclass(slots=True)
class PendingRequest:
    id: str
    csrf: str
    browser: str
    client: ClientRow
    redirect_uri: str
    state: str | None
    scopes: frozenset[str]
    resource: str
    code_challenge: str
    expires_at: float
    attempts: int = 0
    granted: frozenset[str] = frozenset()
    """What the browser's user already granted this client (the step-up page shows it)."""

    def body(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "csrf": self.csrf,
            "browser": self.browser,
            "client_id": self.client.client_id,
            "redirect_uri": self.redirect_uri,
            "state": self.state,
            "scopes": sorted(self.scopes),
            "resource": self.resource,
            "code_challenge": self.code_challenge,
            "granted": sorted(self.granted),
        }


def _text(body: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = body.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_FIELD or (not value and not optional):
        raise ValueError(name)
    return value


def _names(body: dict[str, Any], name: str) -> frozenset[str]:
    value = body.get(name)
    if not isinstance(value, list) or len(value) > MAX_SCOPES:
        raise ValueError(name)
    if not all(isinstance(s, str) and 0 < len(s) <= 256 for s in value):
        raise ValueError(name)
    return frozenset(value)


def _fields(body: object) -> dict[str, Any]:
    """The request's fields from a stored body, or ValueError naming what is wrong."""
    if not isinstance(body, dict) or body.get("v") != VERSION:
        raise ValueError("version")
    return {
        "csrf": _text(body, "csrf"),
        "browser": _text(body, "browser"),
        "client_id": _text(body, "client_id"),
        "redirect_uri": _text(body, "redirect_uri"),
        "state": _text(body, "state", optional=True),
        "scopes": _names(body, "scopes"),
        "resource": _text(body, "resource"),
        "code_challenge": _text(body, "code_challenge"),
        "granted": _names(body, "granted"),
    }


class PendingRequests:
    def __init__(
        self, store: ConsentStore, client_by_id: ClientById, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._client_by_id = client_by_id
        self._clock = clock

    async def add(
        self,
        *,
        browser: str,
        client: ClientRow,
        redirect_uri: str,
        state: str | None,
        scopes: frozenset[str],
        resource: str,
        code_challenge: str,
        granted: frozenset[str] = frozenset(),
    ) -> PendingRequest:
        pending = PendingRequest(
            id=secrets.token_urlsafe(24),
            csrf=secrets.token_urlsafe(32),
            browser=browser,
            client=client,
            redirect_uri=redirect_uri,
            state=state,
            scopes=scopes,
            resource=resource,
            code_challenge=code_challenge,
            expires_at=self._clock() + TTL_SECONDS,
            granted=granted,
        )
        await self._store.insert(pending.id, pending.body(), pending.expires_at, cap=MAX_PENDING)
        return pending

    async def get(self, pending_id: str) -> PendingRequest | None:
        """The request, unless it expired, was answered, or its client is gone."""
        row = await self._store.get(pending_id, self._clock())
        return None if row is None else await self._request(row)

    async def take(self, pending_id: str) -> bool:
        """Remove the request to answer it: True for the one caller (of any replicas) that
        got it, False when it was answered already or expired."""
        return await self._store.take(pending_id, self._clock()) is not None

    async def failed_attempt(self, pending: PendingRequest) -> int | None:
        """Count a wrong password: the new count (at ``MAX_ATTEMPTS`` the request is used up
        and deleted); None when the request is gone (answered, expired)."""
        count = await self._store.failed_attempt(pending.id, self._clock(), MAX_ATTEMPTS)
        if count is None:
            return None
        if count >= MAX_ATTEMPTS:
            await self._store.discard(pending.id)
        pending.attempts = count
        return count

    async def discard(self, pending_id: str) -> None:
        await self._store.discard(pending_id)

    async def purge(self) -> int:
        """Delete the expired requests (the periodic sweep)."""
        return await self._store.purge(self._clock())

    async def count(self) -> int:
        return await self._store.count()

    async def _request(self, row: ConsentRow) -> PendingRequest | None:
        try:
            fields = _fields(row.body)
        except ValueError as exc:
            log.warning("consent request %s unreadable (%s): dropped", row.id[:8], exc)
            await self._store.discard(row.id)
            return None
        client = await self._client_by_id(fields.pop("client_id"))
        if client is None:
            await self._store.discard(row.id)
            return None
        return PendingRequest(
            id=row.id, client=client, expires_at=row.expires_at, attempts=row.attempts, **fields
        )
