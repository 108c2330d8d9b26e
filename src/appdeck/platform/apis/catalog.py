"""ApiCatalog: discover_apis, list_apis and get_api_schema's rules. (Skeleton: issue 12.)"""

from __future__ import annotations

from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.repos.service import RepoService
from appdeck.storage.api_documents import ApiDocumentStore


class ApiCatalog:
    def __init__(
        self,
        apps: AppService,
        store: ApiDocumentStore,
        http: AppHttp,
        repos: RepoService,
        feed: ChangeFeed,
    ) -> None:
        self._apps = apps
        self._store = store
        self._http = http
        self._repos = repos
        self._feed = feed
