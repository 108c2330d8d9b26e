"""Authorization requests waiting for the user: kept server-side between the consent page
and its form post, so nothing the browser sends back is trusted but the user's answers.

A pending request is found by a random id (a hidden field), and the post must carry the
CSRF token made with it and come from the browser that loaded the page (a cookie). It lives
10 minutes, survives a few wrong passwords, and is used once. They are held in memory: with
several replicas the consent page and its post must reach the same one (sticky sessions),
or pending requests must move to a shared table.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from appdeck.storage.oauth import ClientRow

TTL_SECONDS: Final = 600.0
MAX_PENDING: Final = 10_000
MAX_ATTEMPTS: Final = 5


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


class PendingRequests:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._items: OrderedDict[str, PendingRequest] = OrderedDict()

    def add(
        self,
        *,
        browser: str,
        client: ClientRow,
        redirect_uri: str,
        state: str | None,
        scopes: frozenset[str],
        resource: str,
        code_challenge: str,
    ) -> PendingRequest:
        self._purge()
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
        )
        self._items[pending.id] = pending
        while len(self._items) > MAX_PENDING:
            self._items.popitem(last=False)
        return pending

    def get(self, pending_id: str) -> PendingRequest | None:
        pending = self._items.get(pending_id)
        if pending is not None and pending.expires_at <= self._clock():
            del self._items[pending_id]
            return None
        return pending

    def discard(self, pending_id: str) -> None:
        self._items.pop(pending_id, None)

    def __len__(self) -> int:
        return len(self._items)

    def _purge(self) -> None:
        now = self._clock()
        while self._items:
            oldest = next(iter(self._items.values()))
            if oldest.expires_at > now:
                break
            self._items.popitem(last=False)
