from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.settings import Settings
from tests.support.passwords import user_with_password


async def _echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ok"}]}


SCOPED_TOOLS = {
    "probe_read": "apps:read",
    "probe_write": "apps:write",
    "probe_deploy": "deploy:write",
}


@dataclass
class AuthWorld:
    services: Services
    client: httpx.AsyncClient
    admin: IdentityAdmin

    async def token(self, scope: str, user: str = "alice", **kw: Any) -> str:
        jwt, _ = await self.admin.mint_access_token("acme", user, scope, **kw)
        return jwt

    async def pat(self, scope: str, user: str = "alice") -> str:
        token, _ = await self.admin.create_pat("acme", user, scope)
        return token

    async def audit_rows(self) -> list[dict[str, Any]]:
        await self.services.audit.flush()
        from appdeck.storage.audit import AuditStore

        return await AuditStore(self.services.storage.engine).tail(1000)


@pytest.fixture
async def world(database_url: str, tmp_path: Path) -> AsyncIterator[AuthWorld]:
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path,
            "database_url": database_url,
            "rate_limit_per_second": 5,
            "rate_limit_burst": 40,
        }
    )
    services = await Services.start(settings)
    for name, scope in SCOPED_TOOLS.items():
        services.registry.add_tool(
            ToolDef(name, f"needs {scope}", {"type": "object"}, _echo, scope=scope)
        )
    admin = IdentityAdmin(services.identities, services.token_issuer)
    await admin.create_tenant("acme")
    await user_with_password(services.identities, "acme", "alice", "correct horse battery", "admin")
    await user_with_password(services.identities, "acme", "bob", "another password!")
    transport = httpx.ASGITransport(app=services.asgi())
    async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:
        yield AuthWorld(services, client, admin)
    await services.stop()
