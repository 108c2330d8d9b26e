"""What the operator's commands do to a running server: a disabled user or tenant and a
revoked token are refused (401) at the next call, at once when the change goes through this
process's authenticator and within the trust window when the CLI makes it from another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from appdeck.app import Services
from appdeck.auth import scopes
from appdeck.auth.admin import IdentityAdmin
from appdeck.cli import cli
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from tests.support.mcp import headers, initialize, request

ALL = scopes.render(set(scopes.ALL))
TRUST_SECONDS = 0.2


async def _echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ok"}]}


@dataclass
class Server:
    services: Services
    client: httpx.AsyncClient
    admin: IdentityAdmin
    data_dir: Path
    database_url: str

    async def cli(self, *args: str) -> str:
        """Run ``appdeck …`` as an operator would (its own engine, its own event loop)."""
        result = await asyncio.to_thread(
            CliRunner().invoke,
            cli,
            [*args, "--data-dir", str(self.data_dir), "--json"],
            env={"APPDECK_DATABASE_URL": self.database_url},
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    async def call(self, sid: str, token: str) -> int:
        r = await self.client.post(
            "/mcp",
            json=request("tools/call", {"name": "probe_read"}),
            headers=headers(sid, token),
        )
        return r.status_code


@asynccontextmanager
async def _serving(database_url: str, data_dir: Path, trust: float) -> AsyncIterator[Server]:
    settings = Settings.model_validate(
        {"data_dir": data_dir, "database_url": database_url, "auth_trust_seconds": trust}
    )
    services = await Services.start(settings)
    services.registry.add_tool(
        ToolDef("probe_read", "needs apps:read", {"type": "object"}, _echo, scope="apps:read")
    )
    assert services.bearer is not None
    admin = IdentityAdmin(services.identities, services.token_issuer, listener=services.bearer)
    await admin.create_tenant("acme")
    await admin.create_user("acme", "alice", "correct horse battery", role="admin")
    await admin.create_user("acme", "bob", "another password!")
    transport = httpx.ASGITransport(app=services.asgi())
    try:
        async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
            yield Server(services, client, admin, data_dir, database_url)
    finally:
        await services.stop()


@pytest.fixture
async def server(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server that trusts what the database said for TRUST_SECONDS."""
    async with _serving(database_url, tmp_path, TRUST_SECONDS) as running:
        yield running


@pytest.fixture
async def trusting_server(database_url: str, tmp_path: Path) -> AsyncIterator[Server]:
    """A server that trusts what the database said for an hour."""
    async with _serving(database_url, tmp_path, 3600.0) as running:
        yield running


async def _refused_soon(call: Callable[[], Awaitable[int]], within: float = 5.0) -> None:
    """Wait (bounded) until ``call`` answers 401."""
    deadline = asyncio.get_running_loop().time() + within
    while (status := await call()) != 401:
        assert status == 200
        assert asyncio.get_running_loop().time() < deadline, "still admitted"
        await asyncio.sleep(0.05)


async def test_a_user_disabled_by_the_cli_loses_an_open_session_at_the_next_call(
    server: Server,
) -> None:
    jwt, _ = await server.admin.mint_access_token("acme", "alice", ALL)
    pat, _ = await server.admin.create_pat("acme", "alice", ALL)
    by_jwt = await initialize(server.client, jwt)
    by_pat = await initialize(server.client, pat)
    assert await server.call(by_jwt, jwt) == 200
    assert await server.call(by_pat, pat) == 200
    assert by_jwt in await server.cli("session", "list", "--tenant", "acme")

    await server.cli("user", "disable", "--tenant", "acme", "--name", "alice")
    await _refused_soon(lambda: server.call(by_jwt, jwt))
    assert await server.call(by_pat, pat) == 401

    await server.cli("user", "enable", "--tenant", "acme", "--name", "alice")
    await asyncio.sleep(TRUST_SECONDS * 2)
    assert await server.call(by_pat, pat) == 200


async def test_a_pat_and_a_jwt_revoked_by_the_cli_are_refused_at_the_next_call(
    server: Server,
) -> None:
    pat, record = await server.admin.create_pat("acme", "bob", ALL)
    jwt, claims = await server.admin.mint_access_token("acme", "bob", ALL)
    by_pat = await initialize(server.client, pat)
    by_jwt = await initialize(server.client, jwt)
    assert await server.call(by_pat, pat) == 200
    assert await server.call(by_jwt, jwt) == 200

    await server.cli("token", "revoke", record.id)
    await _refused_soon(lambda: server.call(by_pat, pat))
    await server.cli("token", "revoke", claims.jti)
    await _refused_soon(lambda: server.call(by_jwt, jwt))


async def test_a_disabled_tenant_loses_access_within_the_trust_window(server: Server) -> None:
    pat, _ = await server.admin.create_pat("acme", "bob", ALL)
    sid = await initialize(server.client, pat)
    assert await server.call(sid, pat) == 200
    await server.cli("tenant", "disable", "acme")
    await _refused_soon(lambda: server.call(sid, pat))


async def test_a_change_made_through_this_process_is_refused_at_once(
    trusting_server: Server,
) -> None:
    server = trusting_server
    pat, _ = await server.admin.create_pat("acme", "alice", ALL)
    other, record = await server.admin.create_pat("acme", "bob", ALL)
    sid = await initialize(server.client, pat)
    bob = await initialize(server.client, other)
    assert await server.call(sid, pat) == 200
    assert await server.call(bob, other) == 200
    await server.admin.set_user_disabled("acme", "alice", True)
    assert await server.call(sid, pat) == 401
    await server.admin.revoke_token(record.id)
    assert await server.call(bob, other) == 401


async def test_a_change_made_by_the_cli_waits_for_the_trust_window(
    trusting_server: Server,
) -> None:
    server = trusting_server
    pat, _ = await server.admin.create_pat("acme", "alice", ALL)
    sid = await initialize(server.client, pat)
    assert await server.call(sid, pat) == 200
    await server.cli("user", "disable", "--tenant", "acme", "--name", "alice")
    assert await server.call(sid, pat) == 200  # trusted for an hour here: the window is real
