"""AppClientService: OAuth clients that belong to an app (manage_oauth_client).

An app's machine clients get tokens from AppDeck's authorization server with the client
credentials grant, for **that app**: the access token's ``aud`` is the app's resource
(:func:`~appdeck.common.identity.app_audience`, ``urn:appdeck:app:<id>``), its ``scope`` the
app's own scope strings, ``tid`` the app's tenant, ``sub`` ``client:<client_id>``. AppDeck's
own endpoints accept only tokens whose audience is AppDeck's /mcp resource, so such a token
opens nothing of AppDeck's. The app verifies tokens with the server's JWKS.

The app's **users** sign in through a client with the ``authorization_code`` grant: the
sign-in page at ``/authorize`` names the client and its app, takes the password of an account
of the app's tenant (nobody else's), and asks consent for the app's scopes; the code (PKCE
S256, redirect URI registered) is exchanged at ``/token`` for an access token with the same
audience, and a rotating refresh token when the client also has ``refresh_token``.

The rules: admin or owner of the app (``oauth_clients``); at most 20 clients per app; a name
of 1-100 printable characters; 1-20 scopes matching ``[a-z][a-z0-9_.:-]{0,63}``, none of
them AppDeck's (``apps:``, ``deploy:``, ``repos:``, ``tables:``, ``apis:``, ...); grant types
among ``client_credentials``, ``authorization_code`` and ``refresh_token`` (default
``client_credentials``; ``refresh_token`` only with ``authorization_code``, which needs at
least one redirect URI, and redirect URIs only with it); at most 10 redirect URIs, https (or
http on a loopback host), no fragment, no credentials, at most 2,048 characters. Every client
is confidential (HTTP Basic with its secret at /token). The secret is shown once, at create
and rotate, and stored as a SHA-256 hash; rotating stops the old secret at once.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from appdeck.common.errors import ConfirmationRequired, InvalidArgument, NotFound, QuotaExceeded
from appdeck.common.identity import Principal
from appdeck.common.tokens import new_secret, token_hash
from appdeck.platform.apps import AppService
from appdeck.storage.oauth import ClientRow, OAuthStore

__all__ = ["AppClient", "AppClientService", "ClientRow"]

MAX_CLIENTS: Final = 20
MAX_SCOPES: Final = 20
MAX_REDIRECTS: Final = 10
MAX_URI: Final = 2048
GRANTS: Final = ("authorization_code", "client_credentials", "refresh_token")
DEFAULT_GRANTS: Final = ("client_credentials",)
SCOPE: Final = re.compile(r"[a-z][a-z0-9_.:-]{0,63}")
APPDECK_FAMILIES: Final = ("apps", "deploy", "repos", "tables", "apis", "admin", "appdeck")
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass(frozen=True, slots=True)
class AppClient:
    client: ClientRow
    secret: str | None = None
    """Only from create and rotate_secret: shown once."""


class AppClientService:
    def __init__(self, apps: AppService, store: OAuthStore) -> None:
        self._apps = apps
        self._store = store

    async def create(
        self,
        principal: Principal,
        app_id: int,
        *,
        name: str,
        scopes: list[str],
        grant_types: list[str] | None = None,
        redirect_uris: list[str] | None = None,
    ) -> AppClient:
        app = (await self._apps.load(principal, app_id, "oauth_clients")).app
        _check_name(name)
        wanted = _check_scopes(scopes)
        grants = _check_grants(grant_types or list(DEFAULT_GRANTS))
        uris = _check_redirects(redirect_uris or [])
        _check_grant_needs(grants, uris)
        if len(await self._store.app_clients(app_id, limit=MAX_CLIENTS + 1)) >= MAX_CLIENTS:
            raise QuotaExceeded(
                f"an app has at most {MAX_CLIENTS} OAuth clients", hint="delete one first"
            )
        secret = new_secret("adk_cs_", 32)
        client = ClientRow(
            client_id=new_secret(f"adk_app{app_id}_", 12),
            kind="app",
            redirect_uris=tuple(uris),
            grant_types=tuple(grants),
            auth_method="client_secret_basic",
            secret_hash=token_hash(secret),
            name=name,
            scope=" ".join(wanted),
            tenant_id=app.tenant_id,
            metadata={"created_by": principal.user, "app_name": app.name},
            created_at=time.time(),
            app_id=app_id,
        )
        await self._store.insert_client(client)
        return AppClient(client, secret)

    async def list(
        self, principal: Principal, app_id: int, *, offset: int, limit: int
    ) -> list[ClientRow]:
        await self._apps.load(principal, app_id, "oauth_clients")
        return await self._store.app_clients(app_id, offset=offset, limit=limit)

    async def get(self, principal: Principal, app_id: int, client_id: str) -> ClientRow:
        await self._apps.load(principal, app_id, "oauth_clients")
        return await self._own(app_id, client_id)

    async def rotate_secret(self, principal: Principal, app_id: int, client_id: str) -> AppClient:
        await self._apps.load(principal, app_id, "oauth_clients")
        client = await self._own(app_id, client_id)
        secret = new_secret("adk_cs_", 32)
        if not await self._store.set_client_secret(client.client_id, token_hash(secret)):
            raise NotFound(f"app {app_id} has no OAuth client {client_id[:80]!r}")
        return AppClient(client, secret)

    async def delete(
        self, principal: Principal, app_id: int, client_id: str, *, confirmed: bool
    ) -> ClientRow:
        await self._apps.load(principal, app_id, "oauth_clients")
        client = await self._own(app_id, client_id)
        if not confirmed:
            raise ConfirmationRequired(
                f"deleting OAuth client {client.name} stops its secret working",
                question=f"Delete OAuth client {client.name!r} ({client.client_id}) of app "
                f"{app_id}? Whatever uses its secret can no longer get tokens.",
                what="the deletion",
                hint="call again with confirm: true to go ahead",
            )
        await self._store.delete_client(client.client_id)
        return client

    async def _own(self, app_id: int, client_id: str) -> ClientRow:
        client = await self._store.get_client(client_id) if len(client_id) <= 200 else None
        if client is None or client.app_id != app_id:  # another app's: not found alike
            raise NotFound(
                f"app {app_id} has no OAuth client {client_id[:80]!r}",
                hint="manage_oauth_client list shows them",
            )
        return client


def _check_name(name: str) -> None:
    if not 1 <= len(name) <= 100 or not name.isprintable():
        raise InvalidArgument("name must be 1 to 100 printable characters", field="name")


def _check_scopes(scopes: list[str]) -> list[str]:
    if not 1 <= len(scopes) <= MAX_SCOPES:
        raise InvalidArgument(f"give 1 to {MAX_SCOPES} scopes", field="scopes")
    for scope in scopes:
        if not SCOPE.fullmatch(scope):
            raise InvalidArgument(
                f"scope {scope[:70]!r} must match {SCOPE.pattern}", field="scopes"
            )
        family = scope.split(":", 1)[0]
        if family in APPDECK_FAMILIES:
            raise InvalidArgument(
                f"scope {scope!r} is AppDeck's: an app's clients get the app's own scopes",
                hint="name scopes after what your app's API does, e.g. orders:read",
                field="scopes",
            )
    return sorted(set(scopes))


def _check_grants(grants: list[str]) -> list[str]:
    for grant in grants:
        if grant not in GRANTS:
            raise InvalidArgument(
                f"grant type {grant[:40]!r} is not offered for an app's clients",
                hint=f"one of {', '.join(GRANTS)}",
                field="grant_types",
            )
    return sorted(set(grants))


def _check_grant_needs(grants: list[str], uris: list[str]) -> None:
    signs_in = "authorization_code" in grants
    if "refresh_token" in grants and not signs_in:
        raise InvalidArgument(
            "refresh_token goes with authorization_code (client credentials get no refresh "
            "token: they ask for a new access token)",
            field="grant_types",
        )
    if signs_in and not uris:
        raise InvalidArgument(
            "authorization_code needs at least one redirect URI (where the code is sent)",
            field="redirect_uris",
        )
    if uris and not signs_in:
        raise InvalidArgument(
            "redirect URIs are for the authorization_code grant; add it to grant_types or "
            "leave redirect_uris out",
            field="redirect_uris",
        )


def _check_redirects(uris: list[str]) -> list[str]:
    if len(uris) > MAX_REDIRECTS:
        raise InvalidArgument(f"at most {MAX_REDIRECTS} redirect URIs", field="redirect_uris")
    for uri in uris:
        if len(uri) > MAX_URI or not uri.isprintable() or any(c.isspace() for c in uri):
            raise InvalidArgument("a redirect URI is too long or has spaces or control characters")
        parts = urlsplit(uri)
        loopback = parts.scheme == "http" and parts.hostname in _LOOPBACK
        if (parts.scheme != "https" and not loopback) or not parts.hostname:
            raise InvalidArgument(
                f"redirect URI {uri[:100]!r} must be https (or http on a loopback host)",
                field="redirect_uris",
            )
        if parts.fragment or "#" in uri or parts.username or parts.password:
            raise InvalidArgument(
                "a redirect URI has no fragment and no credentials", field="redirect_uris"
            )
    return list(dict.fromkeys(uris))
