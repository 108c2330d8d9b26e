"""OAuth clients: Dynamic Client Registration (RFC 7591), URL client ids (CIMD), machine
clients made by an administrator, and client authentication at the token and revocation
endpoints (RFC 6749 §2.3).

Registration choices (RFC 7591 lets the server substitute values; the response says what
was registered):
- ``token_endpoint_auth_method`` absent: ``client_secret_basic`` (the RFC 7591 default), so
  the client gets a secret; MCP clients send ``none`` and get none. A confidential client
  may present its secret by Basic or in the form, whichever it registered (the secret is the
  same; only a public client versus a confidential one matters).
- grant types outside ``authorization_code``/``refresh_token`` are dropped (VS Code also
  asks for the device-code grant); ``client_credentials`` clients are made by an
  administrator (:meth:`Clients.create_machine_client`), never by self-registration.
- scopes AppDeck does not know are dropped (Claude registers ``claudeai``).

Registration is open, so it is bounded: at most ``APPDECK_REGISTER_PER_IP_PER_HOUR`` per client
IP (429 with ``Retry-After`` past it), and a client that gets no authorization code within
``APPDECK_UNUSED_CLIENT_HOURS`` is deleted by the sweep (``OAuthStore.cleanup``).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any, Final
from urllib.parse import unquote_plus, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from appdeck.auth import scopes as scope_names
from appdeck.auth.audit import AuditEvent
from appdeck.auth.hashing import new_secret, same, token_hash
from appdeck.auth.server import cimd, redirects
from appdeck.auth.server.context import ServerContext
from appdeck.auth.server.http import Form, OAuthError, json_response, read_json_object
from appdeck.common.errors import InvalidArgument, NotFound
from appdeck.storage.oauth import ClientRow

AUTH_METHODS: Final = ("none", "client_secret_basic", "client_secret_post")
USER_GRANTS: Final = ("authorization_code", "refresh_token")
MAX_REDIRECT_URIS: Final = 10
MAX_CLIENT_ID: Final = 1024
MAX_TEXT: Final = 200
MAX_URI: Final = 2000


class ClientLookupError(Exception):
    """The client of an authorization request is unknown or unusable (shown to the user)."""


def _text(body: dict[str, Any], name: str, limit: int = MAX_TEXT) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise OAuthError("invalid_client_metadata", f"{name} must be a string of <= {limit} chars")
    return value or None


def _web_uri(body: dict[str, Any], name: str) -> str | None:
    value = _text(body, name, MAX_URI)
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme != "https" and not redirects.is_loopback_http(value):
        raise OAuthError("invalid_client_metadata", f"{name} must be an https URL")
    return value


def _string_list(body: dict[str, Any], name: str, default: list[str]) -> list[str]:
    value = body.get(name, default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise OAuthError("invalid_client_metadata", f"{name} must be a list of strings")
    if len(value) > 20:
        raise OAuthError("invalid_client_metadata", f"{name} has too many entries")
    return value


def parse_registration(body: dict[str, Any]) -> tuple[ClientRow, dict[str, Any]]:
    """The client row to store (without id or secret) and the metadata to echo back."""
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not 1 <= len(uris) <= MAX_REDIRECT_URIS:
        raise OAuthError(
            "invalid_redirect_uri", f"redirect_uris must list 1 to {MAX_REDIRECT_URIS} URIs"
        )
    try:
        valid_uris = [redirects.validate(u) for u in uris]
    except redirects.InvalidRedirect as exc:
        raise OAuthError("invalid_redirect_uri", str(exc)) from None
    method = body.get("token_endpoint_auth_method", "client_secret_basic")
    if method not in AUTH_METHODS:
        raise OAuthError(
            "invalid_client_metadata",
            f"token_endpoint_auth_method must be one of {', '.join(AUTH_METHODS)}",
        )
    grants = [g for g in _string_list(body, "grant_types", list(USER_GRANTS)) if g in USER_GRANTS]
    if "authorization_code" not in grants:
        raise OAuthError(
            "invalid_client_metadata",
            "grant_types must include authorization_code (client_credentials clients are "
            "created by an administrator)",
        )
    if "code" not in _string_list(body, "response_types", ["code"]):
        raise OAuthError("invalid_client_metadata", "response_types must include 'code'")
    scope = _text(body, "scope", 1000)
    known = scope_names.parse(scope, allow_unknown=True) if scope else frozenset()
    contacts = [c for c in _string_list(body, "contacts", []) if len(c) <= MAX_TEXT]
    name = _text(body, "client_name")
    extra: dict[str, Any] = {
        "client_uri": _web_uri(body, "client_uri"),
        "logo_uri": _web_uri(body, "logo_uri"),
        "tos_uri": _web_uri(body, "tos_uri"),
        "policy_uri": _web_uri(body, "policy_uri"),
        "software_id": _text(body, "software_id"),
        "software_version": _text(body, "software_version"),
        "contacts": contacts or None,
    }
    extra = {k: v for k, v in extra.items() if v is not None}
    grants = list(dict.fromkeys(grants))
    row = ClientRow(
        client_id="",
        kind="dcr",
        redirect_uris=tuple(valid_uris),
        grant_types=tuple(grants),
        auth_method=method,
        name=name,
        scope=scope_names.render(known) if known else None,
        metadata=extra,
    )
    echoed: dict[str, Any] = {
        "redirect_uris": valid_uris,
        "token_endpoint_auth_method": method,
        "grant_types": grants,
        "response_types": ["code"],
        **({"client_name": name} if name else {}),
        **({"scope": row.scope} if row.scope else {}),
        **extra,
    }
    return row, echoed


class Clients:
    def __init__(self, ctx: ServerContext) -> None:
        self._ctx = ctx

    # -- POST /register -------------------------------------------------------------------

    async def register(self, request: Request) -> Response:
        ip = request.client.host if request.client else None  # proxy headers not trusted
        wait_ms = self._ctx.throttles.register.check(ip or "-")
        if wait_ms is not None:
            self._ctx.refuse(
                "registration_rate_limited",
                method="POST /register",
                status=429,
                detail={"source": ip},
            )
            retry = str(max(1, (wait_ms + 999) // 1000))
            return OAuthError(
                "temporarily_unavailable",
                "too many client registrations from this address; retry later",
                status=429,
                headers={"Retry-After": retry},
            ).response()
        try:
            row, echoed = parse_registration(await read_json_object(request))
        except OAuthError as exc:
            return exc.response()
        now = self._ctx.clock()
        client_id = new_secret("adk_dcr_", 16)
        secret = new_secret("adk_cs_", 32) if row.auth_method != "none" else None
        stored = ClientRow(
            client_id=client_id,
            kind="dcr",
            redirect_uris=row.redirect_uris,
            grant_types=row.grant_types,
            auth_method=row.auth_method,
            secret_hash=token_hash(secret) if secret else None,
            name=row.name,
            scope=row.scope,
            metadata=row.metadata,
            created_at=now,
        )
        await self._ctx.oauth.insert_client(stored)
        self._ctx.audit.record(
            AuditEvent(
                event="client_registered",
                outcome="ok",
                client_id=client_id,
                method="POST /register",
                detail={"kind": "dcr", "auth_method": row.auth_method, "name": row.name},
            )
        )
        body: dict[str, Any] = {"client_id": client_id, "client_id_issued_at": int(now)}
        if secret:
            body |= {"client_secret": secret, "client_secret_expires_at": 0}
        return json_response({**body, **echoed}, status=201)

    async def create_machine_client(
        self, tenant_id: str, name: str, scopes: frozenset[str] | set[str] | list[str]
    ) -> tuple[str, str]:
        """A confidential client for the client_credentials grant, acting in ``tenant_id``
        with at most ``scopes``. Returns (client_id, client_secret); the secret is shown once."""
        wanted = scope_names.parse(" ".join(scopes))
        if not wanted:
            raise InvalidArgument("a machine client needs at least one scope")
        if await self._ctx.identities.get_tenant(tenant_id) is None:
            raise NotFound(f"no tenant {tenant_id!r}", hint="create it with: appdeck tenant create")
        client_id = new_secret("adk_mc_", 12)
        secret = new_secret("adk_cs_", 32)
        await self._ctx.oauth.insert_client(
            ClientRow(
                client_id=client_id,
                kind="static",
                redirect_uris=(),
                grant_types=("client_credentials",),
                auth_method="client_secret_basic",
                secret_hash=token_hash(secret),
                name=name[:MAX_TEXT],
                scope=scope_names.render(wanted),
                tenant_id=tenant_id,
                created_at=time.time(),
            )
        )
        return client_id, secret

    # -- looking clients up ---------------------------------------------------------------

    async def for_authorize(self, client_id: str) -> ClientRow:
        """The client of an authorization request: a registered one, or a URL client id
        whose metadata document is fetched (and cached) when not cached or stale."""
        if len(client_id) > MAX_CLIENT_ID:
            raise ClientLookupError("The client_id is too long.")
        if cimd.is_url_client_id(client_id):
            cached = await self._ctx.oauth.get_client(client_id)
            fresh = cached is not None and (cached.expires_at or 0) > self._ctx.clock()
            if cached is not None and cached.kind == "cimd" and fresh:
                return cached
            return await self._fetch(client_id, "GET /authorize")
        client = await self._ctx.oauth.get_client(client_id)
        if client is None:
            raise ClientLookupError("This application is not registered with AppDeck.")
        if client.app_id is not None and "authorization_code" not in client.grant_types:
            raise ClientLookupError("This client uses the client credentials grant only.")
        return client

    async def for_token(self, client_id: str, endpoint: str) -> ClientRow | None:
        """The client at the token/revocation endpoints: a cached metadata document is used
        even when stale (a URL client is public: it proves nothing but its id); fetched
        again only when it is gone."""
        if not client_id or len(client_id) > MAX_CLIENT_ID:
            return None
        client = await self._ctx.oauth.get_client(client_id)
        if client is None and cimd.is_url_client_id(client_id):
            try:
                client = await self._fetch(client_id, endpoint)
            except ClientLookupError:
                return None
        return client

    async def _fetch(self, client_id: str, endpoint: str) -> ClientRow:
        allow = self._ctx.settings.cimd_allow_loopback
        try:
            document, ttl = await cimd.fetch(client_id, allow_loopback=allow)
            client = cimd.to_client(client_id, document, ttl)
        except cimd.MetadataError as exc:
            self._ctx.refuse(
                "client_metadata_document",
                method=endpoint,
                client_id=client_id,
                detail={"error": str(exc)},
            )
            raise ClientLookupError(
                f"The client's metadata document cannot be used: {exc}."
            ) from None
        await self._ctx.oauth.upsert_cimd_client(client)
        return client

    # -- client authentication (token and revocation endpoints) ---------------------------

    async def authenticate(self, request: Request, form: Form, *, endpoint: str) -> ClientRow:
        """The client making the request, authenticated as it registered; OAuthError
        ``invalid_client`` (401) otherwise."""
        basic_id, basic_secret = _basic(request)
        form_id = form.get("client_id", max_len=MAX_CLIENT_ID)
        form_secret = form.get("client_secret", max_len=512)
        if basic_id is not None and form_secret is not None:
            raise OAuthError("invalid_request", "use one client authentication method only")
        if basic_id is not None and form_id is not None and form_id != basic_id:
            raise OAuthError(
                "invalid_client", "client_id differs from the Basic credentials", status=401
            )
        client_id = basic_id if basic_id is not None else form_id
        secret = basic_secret if basic_id is not None else form_secret
        challenge = {"WWW-Authenticate": 'Basic realm="appdeck"'} if basic_id is not None else {}
        client = await self.for_token(client_id or "", endpoint)
        reason = None
        if client is None:
            reason = "unknown_client"
        elif client.secret_hash is not None:
            if not secret or not same(token_hash(secret), client.secret_hash):
                reason = "bad_client_secret"
        elif secret:
            reason = "secret_for_public_client"
        if reason is not None or client is None:
            self._ctx.refuse(
                reason or "unknown_client",
                method=endpoint,
                client_id=client_id[:MAX_CLIENT_ID] if client_id else None,
            )
            raise OAuthError(
                "invalid_client", "client authentication failed", status=401, headers=challenge
            )
        return client


def _basic(request: Request) -> tuple[str | None, str | None]:
    header = request.headers.get("authorization")
    if not header:
        return None, None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None, None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise OAuthError(
            "invalid_client",
            "malformed Basic credentials",
            status=401,
            headers={"WWW-Authenticate": 'Basic realm="appdeck"'},
        ) from None
    client_id, sep, secret = decoded.partition(":")
    if not sep or not client_id:
        raise OAuthError(
            "invalid_client",
            "malformed Basic credentials",
            status=401,
            headers={"WWW-Authenticate": 'Basic realm="appdeck"'},
        )
    # RFC 6749 §2.3.1: both parts are form-urlencoded before being joined
    return unquote_plus(client_id), unquote_plus(secret)
