"""Change events the platform emits; the MCP layer turns them into resource notifications.

The platform knows nothing of MCP: it calls :meth:`ChangeFeed.emit`, and whoever composed the
server subscribed (``appdeck.app`` maps them to ``notifications/resources/updated`` and
``…/list_changed``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger("appdeck.changes")

Kind = Literal[
    "app.created",
    "app.updated",
    "app.deleted",
    "spec.updated",
    "env.updated",
    "deployment.updated",
    "member.revoked",
    "table.updated",
    "tables.updated",
    "instance.updated",
    "commit.received",
]
"""``instance.updated``: an instance of the app's live release crashed, was restarted, was
OOM-killed or given up (``deployment``: the release's number). ``commit.received``: a new
commit on the app's connected branch (a webhook push, a poll, a ``git push``), for observers:
what it does (tested, deployed, recorded) is the push policy's answer, not a listener's, and
``app.updated`` is emitted for it as well."""


@dataclass(frozen=True, slots=True)
class Change:
    kind: Kind
    tenant_id: str
    app_id: int
    deployment: int | None = None
    user: str | None = None
    """``member.revoked``: the user who lost access to the app."""
    table: str | None = None
    """``table.updated``: the table whose schema changed (``tables.updated``: the list did)."""
    commit: str | None = None
    """``commit.received``: the commit (a full sha)."""


Listener = Callable[[Change], Awaitable[None]]


class ChangeFeed:
    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    async def emit(self, change: Change) -> None:
        for listener in self._listeners:
            try:
                await listener(change)
            except Exception:  # a listener's failure must not fail the change itself
                log.exception("change listener failed for %s", change)
