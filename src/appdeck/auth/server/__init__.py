"""The embedded OAuth 2.1 authorization server, as Starlette routes.

    server = AuthorizationServer(issuer, resource, token_issuer, keys, identities, oauth,
                                 revoke_jti, audit, settings)
    Starlette(routes=[*server.routes(), ...])

Routes (paths relative to the issuer):

- ``GET /.well-known/oauth-authorization-server`` (RFC 8414)
- ``GET /.well-known/oauth-protected-resource`` and ``…/oauth-protected-resource/mcp`` (RFC 9728)
- ``GET /.well-known/jwks.json``
- ``POST /register`` (RFC 7591)
- ``GET|POST /authorize`` (sign-in + consent page, code with PKCE S256)
- ``POST /token`` (authorization_code, refresh_token with rotation, client_credentials)
- ``POST /revoke`` (RFC 7009)

Design notes live in the modules: clients (registration and client authentication), cimd
(URL client ids and their SSRF rules), redirects, authorize, token, revoke, and
:mod:`appdeck.storage.oauth` (families and replay detection).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from appdeck.auth.audit import AuditLog
from appdeck.auth.keys import SigningKeys
from appdeck.auth.server import metadata
from appdeck.auth.server.authorize import Authorize
from appdeck.auth.server.clients import Clients
from appdeck.auth.server.context import RevokeJti, ServerContext
from appdeck.auth.server.http import json_response, preflight
from appdeck.auth.server.pending import TRIM_EVERY, PendingRequests
from appdeck.auth.server.revoke import RevokeEndpoint
from appdeck.auth.server.signin import Refused, check_credentials
from appdeck.auth.server.token import TokenEndpoint
from appdeck.auth.throttle import AuthThrottles
from appdeck.auth.tokens import TokenIssuer
from appdeck.auth.urls import PublicUrls
from appdeck.settings import Settings
from appdeck.storage.consents import ConsentStore
from appdeck.storage.identity import IdentityStore, PersonalTokenRecord, UserRecord
from appdeck.storage.oauth import OAuthStore

__all__ = ["AuthorizationServer"]

Endpoint = Callable[[Request], Awaitable[Response]]


def _with_preflight(endpoint: Endpoint) -> Endpoint:
    async def handle(request: Request) -> Response:
        if request.method == "OPTIONS":
            return await preflight(request)
        return await endpoint(request)

    return handle


class AuthorizationServer:
    def __init__(
        self,
        issuer: str,
        resource: str,
        token_issuer: TokenIssuer,
        keys: SigningKeys,
        identities: IdentityStore,
        oauth: OAuthStore,
        revoke_jti: RevokeJti,
        audit: AuditLog,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        forget_pat: Callable[[PersonalTokenRecord], None] | None = None,
        urls: PublicUrls | None = None,
        consents: ConsentStore | None = None,
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.resource = resource
        self._ctx = ServerContext(
            issuer=self.issuer,
            resource=resource,
            token_issuer=token_issuer,
            keys=keys,
            identities=identities,
            oauth=oauth,
            revoke_jti=revoke_jti,
            audit=audit,
            settings=settings,
            clock=clock,
            forget_pat=forget_pat or (lambda record: None),
            throttles=AuthThrottles.build(
                sign_in_per_ip=settings.sign_in_failures_per_ip,
                sign_in_per_account=settings.sign_in_failures_per_account,
                register_per_hour=settings.register_per_ip_per_hour,
                clock=clock,
            ),
            urls=urls,
        )
        self.clients = Clients(self._ctx)
        # the requests waiting for the user's answer, in the database (any replica answers)
        consents = consents or ConsentStore(oauth._engine, trim_every=TRIM_EVERY)
        self.pending = PendingRequests(consents, oauth.get_client, clock)
        self._authorize = Authorize(self._ctx, self.clients, self.pending)
        self._token = TokenEndpoint(self._ctx, self.clients)
        self._revoke = RevokeEndpoint(self._ctx, self.clients)

    def metadata(self) -> dict[str, object]:
        return metadata.authorization_server(self.issuer)

    def routes(self) -> list[Route]:
        urls = self._ctx.public
        # one document per spelling of the server (loopback names), chosen by the Host header
        as_meta = {b: metadata.authorization_server(b) for b in urls.bases}
        pr_meta = {
            b: metadata.protected_resource(self.resource.replace(urls.base, b, 1), b)
            for b in urls.bases
        }

        async def as_document(request: Request) -> Response:
            base = urls.base_for(request.headers.get("host"))
            return json_response(as_meta[base], cache=metadata.CACHE)

        async def pr_document(request: Request) -> Response:
            base = urls.base_for(request.headers.get("host"))
            return json_response(pr_meta[base], cache=metadata.CACHE)

        async def jwks(request: Request) -> Response:
            return json_response(self._ctx.keys.public_jwks(), cache=metadata.CACHE)

        get, post = ["GET", "OPTIONS"], ["POST", "OPTIONS"]
        as_paths = _well_known("oauth-authorization-server", self.issuer)
        pr_paths = _well_known("oauth-protected-resource", self.resource)
        return [
            *(Route(p, _with_preflight(as_document), methods=get) for p in as_paths),
            *(Route(p, _with_preflight(pr_document), methods=get) for p in pr_paths),
            Route("/.well-known/jwks.json", _with_preflight(jwks), methods=get),
            Route("/register", _with_preflight(self.clients.register), methods=post),
            Route("/authorize", self._authorize.get, methods=["GET"]),
            Route("/authorize", self._authorize.post, methods=["POST"]),
            Route("/token", _with_preflight(self._token), methods=post),
            Route("/revoke", _with_preflight(self._revoke), methods=post),
        ]

    async def check_credentials(
        self, *, ip: str | None, tenant: str, username: str, password: str
    ) -> UserRecord | Refused:
        """The sign-in page's own check, for the console's sign-in (same throttles)."""
        return await check_credentials(
            self._ctx,
            ip=ip,
            tenant=tenant,
            username=username,
            password=password,
            client="console",
            method="POST /console/signin",
        )

    async def create_machine_client(
        self, tenant_id: str, name: str, scopes: frozenset[str] | set[str] | list[str]
    ) -> tuple[str, str]:
        """A client_credentials client acting in ``tenant_id`` within ``scopes``:
        returns (client_id, client_secret). The secret is not stored and cannot be shown
        again. Raises InvalidArgument (no or unknown scope) or NotFound (no such tenant)."""
        return await self.clients.create_machine_client(tenant_id, name, scopes)

    async def cleanup(self) -> dict[str, int]:
        """Delete expired codes, refresh tokens, cached metadata documents and dynamically
        registered clients never used (call it from a periodic sweeper)."""
        now = self._ctx.clock()
        unused_before = now - self._ctx.settings.unused_client_hours * 3600
        removed = await self._ctx.oauth.cleanup(now, unused_clients_before=unused_before)
        removed["consent_requests"] = await self.pending.purge()
        return removed


def _well_known(name: str, url: str) -> list[str]:
    """``/.well-known/<name>`` and, when ``url`` has a path, the path-inserted form too."""
    path = urlsplit(url).path.rstrip("/")
    return [f"/.well-known/{name}"] + ([f"/.well-known/{name}{path}"] if path else [])
