"""An authorization server on a real SQLite database, driven through httpx's ASGI transport."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from authlib.integrations.httpx_client import AsyncOAuth2Client
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette

from appdeck.auth.audit import AuditLog
from appdeck.auth.keys import ALGORITHM, SigningKeys
from appdeck.auth.server import AuthorizationServer
from appdeck.auth.tokens import TokenIssuer, TokenVerifier
from appdeck.auth.urls import PublicUrls
from appdeck.settings import Settings
from appdeck.storage import create_engine, migrate
from appdeck.storage.audit import AuditStore
from appdeck.storage.identity import IdentityStore, UserRecord
from appdeck.storage.oauth import OAuthStore
from tests.support.passwords import password_hash

ISSUER = "http://127.0.0.1:8080"
RESOURCE = f"{ISSUER}/mcp"
PASSWORD = "correct horse battery staple"
REDIRECT = "http://127.0.0.1:33418/"


@dataclass
class Clock:
    """Real time plus an offset that tests move forward."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class OAuthWorld:
    server: AuthorizationServer
    app: Starlette
    http: httpx.AsyncClient
    keys: SigningKeys
    identities: IdentityStore
    oauth: OAuthStore
    audit: AuditLog
    audit_store: AuditStore
    user: UserRecord
    engine: AsyncEngine
    clock: Clock
    revoked: list[tuple[str, float]] = field(default_factory=list)

    def verifier(self) -> TokenVerifier:
        return TokenVerifier(self.keys.public_set, ISSUER, RESOURCE, [ALGORITHM])

    def oauth_client(self, client_id: str, **kwargs: Any) -> AsyncOAuth2Client:
        """Authlib's client (built on httpx2), talking to the same ASGI app."""
        kwargs.setdefault("token_endpoint_auth_method", "none")
        kwargs.setdefault("redirect_uri", REDIRECT)
        kwargs.setdefault("code_challenge_method", "S256")
        transport = httpx2.ASGITransport(app=self.app)
        return AsyncOAuth2Client(client_id=client_id, transport=transport, **kwargs)

    async def audit_rows(self) -> list[dict[str, Any]]:
        await self.audit.flush()
        return await self.audit_store.tail(10_000)


WorldFactory = Callable[..., Awaitable[OAuthWorld]]


@pytest.fixture
async def make_world(
    tmp_path: Path, migrated_sqlite: Callable[[Path], str]
) -> AsyncIterator[WorldFactory]:
    """Builds worlds (each on its own database, a copy of the migrated template);
    ``cimd_allow_loopback`` as asked."""
    url = migrated_sqlite(tmp_path / "db")
    engine = create_engine(url)
    await migrate(engine)  # at the newest already: only checked
    identities = IdentityStore(engine)
    await identities.create_tenant("acme", "Acme Corp")
    user = await identities.create_user("acme", "ada", password_hash(PASSWORD), "admin")
    keys = SigningKeys.load_or_create(tmp_path)
    clients: list[httpx.AsyncClient] = []
    audits: list[AuditLog] = []

    async def build(
        *, cimd_allow_loopback: bool = False, urls: PublicUrls | None = None
    ) -> OAuthWorld:
        settings = Settings.model_validate(
            {"data_dir": tmp_path, "cimd_allow_loopback": cimd_allow_loopback}
        )
        audit_store = AuditStore(engine)
        audit = AuditLog(AuditStore.opener(url))
        audits.append(audit)
        revoked: list[tuple[str, float]] = []

        async def revoke_jti(jti: str, expires_at: float) -> None:
            revoked.append((jti, expires_at))

        oauth = OAuthStore(engine)
        clock = Clock()
        server = AuthorizationServer(
            ISSUER,
            RESOURCE,
            TokenIssuer(keys, ISSUER, RESOURCE, settings.access_token_ttl_seconds),
            keys,
            identities,
            oauth,
            revoke_jti,
            audit,
            settings,
            clock=clock,
            urls=urls,
        )
        app = Starlette(routes=server.routes())
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ISSUER)
        clients.append(http)
        return OAuthWorld(
            server=server,
            app=app,
            http=http,
            keys=keys,
            identities=identities,
            oauth=oauth,
            audit=audit,
            audit_store=audit_store,
            user=user,
            engine=engine,
            clock=clock,
            revoked=revoked,
        )

    try:
        yield build
    finally:
        for http in clients:
            await http.aclose()
        for audit in audits:
            await audit.close()
        await engine.dispose()


@pytest.fixture
async def authz(make_world: WorldFactory) -> OAuthWorld:
    return await make_world()
