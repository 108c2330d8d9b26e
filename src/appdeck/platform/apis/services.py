"""The API catalogue's services, built together (``Platform.apis``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.ingress.keys import KeyGate
from appdeck.platform.apis.catalog import ApiCatalog
from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apis.keys import ApiKeyService
from appdeck.platform.apis.tester import ApiTester
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.repos.service import RepoService
from appdeck.storage.api_documents import ApiDocumentStore
from appdeck.storage.api_keys import ApiKeyStore


@dataclass(frozen=True, slots=True)
class ApiServices:
    keys: ApiKeyService
    """manage_api_key (and the ingress's key check, through the gate)."""
    catalog: ApiCatalog
    """discover_apis, list_apis, get_api_schema."""
    tester: ApiTester
    """test_api."""
    http: AppHttp
    """Requests to an app's live release through the ingress (discovery and test_api)."""

    @classmethod
    def build(
        cls,
        engine: AsyncEngine,
        apps: AppService,
        repos: RepoService,
        feed: ChangeFeed,
        *,
        gate: KeyGate,
        http: AppHttp,
        keys_published: Callable[[], Awaitable[None]] | None = None,
    ) -> ApiServices:
        keys = ApiKeyService(apps, ApiKeyStore(engine), gate, feed, published=keys_published)
        catalog = ApiCatalog(
            apps, ApiDocumentStore(engine), http, repos, feed, credentials=keys
        )  # an app that requires a key is read with a short-lived one
        return cls(keys, catalog, ApiTester(apps, catalog, keys, http), http)

    async def start(self) -> None:
        await self.keys.start()

    async def close(self) -> None:
        await self.keys.close()
        await self.http.aclose()
