"""ApiKeyService: manage_api_key's rules. (Skeleton: issue 12.)"""

from __future__ import annotations

from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.ingress.keys import KeyGate
from appdeck.storage.api_keys import ApiKeyStore


class ApiKeyService:
    def __init__(
        self, apps: AppService, store: ApiKeyStore, gate: KeyGate, feed: ChangeFeed
    ) -> None:
        self._apps = apps
        self._store = store
        self._gate = gate
        self._feed = feed

    async def start(self) -> None:
        """At server start: load every app's live keys and api_auth into the gate."""

    async def close(self) -> None:
        """At shutdown: write what is only in memory (last use times)."""
