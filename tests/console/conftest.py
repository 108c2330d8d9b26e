"""A whole server (SQLite unless a test asks for the database_url fixture) with users who have
passwords, driven through httpx's ASGI transport as a browser would: cookies, forms, redirects.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.settings import Settings
from appdeck.storage import default_sqlite_url
from tests.platform.on_fakes import close_app_databases
from tests.support.mcp import initialize
from tests.support.passwords import user_with_password
from tests.tools.conftest import ALL, Caller
from tests.tools.root import USERS

PASSWORD = "correct horse battery staple"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Browser:
    """One browser: its own cookie jar."""

    client: httpx.AsyncClient

    async def sign_in(self, user: str, tenant: str = "acme", password: str = PASSWORD) -> None:
        page = await self.client.get("/console/signin")
        assert page.status_code == 200, page.text
        answer = await self.client.post(
            "/console/signin",
            data={"tenant": tenant, "username": user, "password": password, "csrf": csrf(page)},
        )
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/console"

    async def get(self, path: str) -> httpx.Response:
        return await self.client.get(path)

    async def post_form(self, page_path: str, action: str, **fields: str) -> httpx.Response:
        """Submit a form as the page at ``page_path`` carries it (its CSRF token)."""
        page = await self.client.get(page_path)
        assert page.status_code == 200, page.text
        return await self.client.post(action, data={"csrf": csrf(page), **fields})


def csrf(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found is not None, page.text
    return found.group(1)


@dataclass
class ConsoleWorld:
    services: Services
    admin: IdentityAdmin
    base_url: str
    _clients: list[httpx.AsyncClient]

    def browser(self) -> Browser:
        transport = httpx.ASGITransport(app=self.services.asgi())
        client = httpx.AsyncClient(transport=transport, base_url=self.base_url)
        self._clients.append(client)
        return Browser(client)

    async def agent(self, user: str, tenant: str = "acme") -> Caller:
        """An MCP caller (what an agent does), on the same server."""
        token, _ = await self.admin.mint_access_token(tenant, user, ALL)
        client = self.browser().client
        return Caller(client, token, await initialize(client, token))


async def start_world(settings: Settings) -> ConsoleWorld:
    services = await Services.start(settings)
    admin = IdentityAdmin(services.identities, services.token_issuer)
    for tenant in ("acme", "globex"):
        await admin.create_tenant(tenant)
    for tenant, user, role in USERS:
        await user_with_password(services.identities, tenant, user, PASSWORD, role)
    return ConsoleWorld(services, admin, services.base_url, [])


async def stop_world(world: ConsoleWorld) -> None:
    for client in world._clients:
        await client.aclose()
    await world.services.stop(stop_apps=True)
    await close_app_databases()


def settings_for(tmp_path: Path, database_url: str | None = None) -> Settings:
    source = tmp_path / "src" / "hello"
    source.mkdir(parents=True, exist_ok=True)
    (source / "app.py").write_text("print('hi')\n")
    return Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "database_url": database_url or default_sqlite_url(tmp_path),
            "source_roots": [tmp_path / "src"],
            "rate_limit_per_second": 0,
        }
    )


@pytest.fixture
async def world(
    tmp_path: Path, migrated_sqlite: Callable[[Path], str]
) -> AsyncIterator[ConsoleWorld]:
    built = await start_world(settings_for(tmp_path, migrated_sqlite(tmp_path)))
    try:
        yield built
    finally:
        await stop_world(built)
