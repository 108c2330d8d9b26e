from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import sqlalchemy as sa

from appdeck.app import Services
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.runtime.disks import unmount_under
from appdeck.settings import Settings
from appdeck.storage import default_sqlite_url, schema
from tests.platform.on_fakes import close_app_databases
from tests.support.appdeck_process import reap_haproxy
from tests.support.mcp import headers, initialize, request
from tests.tools.root import Root, seed, world_settings, write_source

ALL = scopes.render(set(scopes.ALL))

SHARED_ROOT = pytest.mark.asyncio(loop_scope="module")
"""A module whose tests share one composition root per dialect (tests/tools/root.py) says
``pytestmark = SHARED_ROOT`` (its tests run on the module's event loop, the root's) and
``world = shared_world``."""


@dataclass
class Caller:
    client: httpx.AsyncClient
    token: str
    session: str

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        r = await self.client.post(
            "/mcp", json=request(method, params), headers=headers(self.session, self.token)
        )
        return dict(r.json())

    async def tool(self, tool_name: str, /, **arguments: Any) -> dict[str, Any]:
        reply = await self.rpc("tools/call", {"name": tool_name, "arguments": arguments})
        assert "result" in reply, reply
        return dict(reply["result"])

    async def ok(self, tool_name: str, /, **arguments: Any) -> dict[str, Any]:
        result = await self.tool(tool_name, **arguments)
        assert not result.get("isError"), result
        return dict(result["structuredContent"])

    async def error(self, tool_name: str, /, **arguments: Any) -> str:
        result = await self.tool(tool_name, **arguments)
        assert result.get("isError") is True, result
        return str(result["structuredContent"]["error"]["code"])


@dataclass
class World:
    services: Services
    client: httpx.AsyncClient
    admin: IdentityAdmin
    source: Path

    async def caller(self, user: str, tenant: str = "acme", scope: str = ALL) -> Caller:
        token, _ = await self.admin.mint_access_token(tenant, user, scope)
        return Caller(self.client, token, await initialize(self.client, token))


@pytest.fixture(autouse=True)
async def _close_app_databases() -> AsyncIterator[None]:
    """The app databases a test's fake platform opened are closed after it."""
    yield
    await close_app_databases()


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[World]:
    source = write_source(tmp_path)
    services = await Services.start(world_settings(database_url, tmp_path / "data", tmp_path))
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await seed(admin)
    transport = httpx.ASGITransport(app=services.asgi())
    async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
        yield World(services, client, admin, source)
    await _drop_app_databases(services)
    await services.stop(stop_apps=True)  # apps outlive a server by design: not a test's


@pytest_asyncio.fixture(scope="module", params=["sqlite", "postgresql"], loop_scope="module")
async def _root(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Root]:
    """The module's composition root on one dialect (tests/tools/root.py), on a database of
    the module's own at the newest schema."""
    base = tmp_path_factory.mktemp("root")
    if request.param == "sqlite":
        (base / "db").mkdir()
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), base / "db" / "appdeck.db")
        url = default_sqlite_url(base / "db")
    else:
        url = request.getfixturevalue("postgres_module_database")
    root = await Root.start(url, base)
    try:
        yield root
    finally:
        try:
            await root.clean()
        finally:
            await root.services.stop(stop_apps=True)
            unmount_under(f"{base}/")
            reap_haproxy(base)


@pytest_asyncio.fixture(loop_scope="module")
async def shared_world(_root: Root) -> AsyncIterator[World]:
    """``world`` on the module's root, brought back to a fresh start's state first: for a
    module that overrides ``world`` with it (and runs its tests on the module's loop)."""
    admin, source, client = await _root.fresh()
    async with client:
        yield World(_root.services, client, admin, source)


async def _drop_app_databases(services: Services) -> None:
    """The apps' own databases outlive the platform's rows (on PostgreSQL the apps database is
    the module's), and the next test's app ids start at 1 again: drop every app's."""
    if services.databases is None:
        return
    async with services.storage.engine.connect() as conn:
        last = (await conn.execute(sa.select(sa.func.max(schema.apps.c.id)))).scalar()
    for app_id in range(1, int(last or 0) + 1):
        await services.databases.drop(app_id)


HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"


@pytest.fixture
async def deploy_world(tmp_path: Path) -> AsyncIterator[World]:
    source = tmp_path / "src" / "hello"
    shutil.copytree(HELLO, source)
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "source_roots": [tmp_path / "src"],
            "rate_limit_per_second": 0,
        }
    )
    async with alice_at(settings, source) as world:
        yield world


@contextlib.asynccontextmanager
async def alice_at(settings: Settings, source: Path) -> AsyncIterator[World]:
    """A server started with ``settings``, tenant ``acme`` with its admin ``alice``, reached
    over ASGI; stopped with its apps."""
    services = await Services.start(settings)
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.create_tenant("acme")
    await admin.create_user("acme", "alice", None, role="admin")
    transport = httpx.ASGITransport(app=services.asgi())
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url=services.base_url, timeout=90
        ) as client:
            yield World(services, client, admin, source)
    finally:
        await services.stop(stop_apps=True)


async def fetch(world: World, name: str) -> httpx.Response:
    assert world.services.ingress is not None
    async with httpx.AsyncClient(timeout=5) as http:
        return await http.get(
            f"http://127.0.0.1:{world.services.ingress.port}/",
            headers={"host": f"{name}--acme.localhost"},
        )
