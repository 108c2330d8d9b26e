"""ApiTester: test_api's rules. (Skeleton: issue 12.)"""

from __future__ import annotations

from appdeck.platform.apis.catalog import ApiCatalog
from appdeck.platform.apis.client import AppHttp
from appdeck.platform.apis.keys import ApiKeyService
from appdeck.platform.apps import AppService


class ApiTester:
    def __init__(
        self, apps: AppService, catalog: ApiCatalog, keys: ApiKeyService, http: AppHttp
    ) -> None:
        self._apps = apps
        self._catalog = catalog
        self._keys = keys
        self._http = http
