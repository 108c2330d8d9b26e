"""The token endpoint (RFC 6749 §3.2): authorization codes with PKCE, rotating refresh
tokens, and client credentials for machine clients.

- A code is redeemed once. A second presentation revokes what the first produced (its
  refresh-token family and the access tokens issued in it) and fails (RFC 6749 §4.1.2).
- Refresh tokens rotate on every use (OAuth 2.1 §4.3.1). A used refresh token presented
  again means one of two parties holds a stolen copy: the whole family is revoked.
  There is no grace period, so a client retrying a refresh whose answer it lost must sign in
  again. A refresh token lives ``refresh_token_ttl_seconds`` from its own issue (a family
  used at least that often lives on). The new refresh token keeps the family's scope; a
  ``scope`` parameter narrows only the access token (RFC 6749 §6). Scopes asked for beyond
  the grant are dropped rather than refused (RFC 6749 §3.3: the response's ``scope`` says
  what was issued): the user may have unticked some on the consent page, and clients
  (Authlib, for one) resend the scope they first asked for; refusing would send them back
  to the consent page forever. A ``scope`` naming none of the granted scopes is
  ``invalid_scope``.
- Client credentials: confidential clients with a tenant (made by an administrator) only;
  the principal is ``client:<client_id>`` in that tenant, within the client's scope, and
  no refresh token is issued (RFC 6749 §4.4.3).
- Every access token's audience is the canonical MCP URL; a ``resource`` parameter, when
  sent, must name it (RFC 8707, ``invalid_target``). Except an app's own clients
  (manage_oauth_client): their tokens' audience is the app (``urn:appdeck:app:<id>``),
  which AppDeck's own endpoints never accept.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from appdeck import activity
from appdeck.auth import scopes as scope_names
from appdeck.auth.audit import AuditEvent
from appdeck.auth.hashing import new_secret, token_hash
from appdeck.auth.server import pkce
from appdeck.auth.server.clients import Clients
from appdeck.auth.server.context import ServerContext
from appdeck.auth.server.http import Form, OAuthError, json_response, read_form
from appdeck.common.identity import app_audience
from appdeck.storage.oauth import ClientRow, CodeReplay, RefreshTokenRow, family_for_code

METHOD = "POST /token"


class TokenEndpoint:
    def __init__(self, ctx: ServerContext, clients: Clients) -> None:
        self._ctx = ctx
        self._clients = clients

    async def __call__(self, request: Request) -> Response:
        try:
            form = await read_form(request, repeatable=frozenset({"resource"}))
            client = await self._clients.authenticate(request, form, endpoint=METHOD)
            grant = form.get("grant_type", max_len=128)
            if grant is None:
                raise OAuthError("invalid_request", "grant_type is required")
            if grant == "authorization_code":
                body = await self._authorization_code(form, client)
            elif grant == "refresh_token":
                body = await self._refresh_token(form, client)
            elif grant == "client_credentials":
                body = await self._client_credentials(form, client)
            else:
                raise OAuthError("unsupported_grant_type", f"{grant!r} is not supported here")
        except OAuthError as exc:
            return exc.response()
        return json_response(body)

    # -- the three grants -----------------------------------------------------------------

    async def _authorization_code(self, form: Form, client: ClientRow) -> dict[str, Any]:
        self._may_use(client, "authorization_code")
        code = form.get("code", max_len=512)
        verifier = form.get("code_verifier", max_len=256)
        redirect_uri = form.get("redirect_uri", max_len=2000)
        if code is None:
            raise OAuthError("invalid_request", "code is required")
        if verifier is None or not pkce.well_formed(verifier):
            raise OAuthError("invalid_request", "a code_verifier (RFC 7636) is required")
        if redirect_uri is None:
            raise OAuthError("invalid_request", "redirect_uri is required")
        self._check_resource(form, client)
        code_hash = token_hash(code)
        found = await self._ctx.oauth.consume_code(code_hash)
        if found is None:
            raise OAuthError("invalid_grant", "the authorization code is unknown or expired")
        if isinstance(found, CodeReplay):
            revoked = await self._ctx.revoke_family(family_for_code(code_hash))
            self._ctx.refuse(
                "code_replay",
                method=METHOD,
                client_id=client.client_id,
                tenant_id=found.code.tenant_id,
                user_id=found.code.user_id,
                detail={"access_revoked": revoked},
            )
            raise OAuthError(
                "invalid_grant",
                "the authorization code was already used; the tokens issued for it are revoked",
            )
        if found.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the authorization code is unknown or expired")
        if found.expires_at <= self._ctx.clock():
            raise OAuthError("invalid_grant", "the authorization code has expired")
        if redirect_uri != found.redirect_uri:
            raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request")
        if not pkce.verify(verifier, found.code_challenge):
            raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
        await self._user_is_active(found.tenant_id, found.user_id)
        return await self._issue(
            "authorization_code",
            client,
            tenant=found.tenant_id,
            user=found.user_id,
            scope=found.scope,
            family=family_for_code(code_hash),
            resource=found.resource,
        )

    async def _refresh_token(self, form: Form, client: ClientRow) -> dict[str, Any]:
        self._may_use(client, "refresh_token")
        presented = form.get("refresh_token", max_len=512)
        if presented is None:
            raise OAuthError("invalid_request", "refresh_token is required")
        self._check_resource(form, client)
        wanted = form.get("scope", max_len=2000)
        hashed = token_hash(presented)
        row = await self._ctx.oauth.get_refresh(hashed)
        if row is None or row.client_id != client.client_id:
            raise OAuthError("invalid_grant", "the refresh token is unknown")
        if row.revoked:
            raise OAuthError("invalid_grant", "the refresh token was revoked")
        if row.used_at is None and row.expires_at <= self._ctx.clock():
            raise OAuthError("invalid_grant", "the refresh token has expired")
        granted = set(row.scope.split())
        narrowed = set(wanted.split()) & granted if wanted else granted
        if row.used_at is None:
            if not narrowed:
                raise OAuthError("invalid_scope", "scope names none of the granted scopes")
            await self._user_is_active(row.tenant_id, row.user_id)
        if row.used_at is not None or not await self._ctx.oauth.mark_refresh_used(
            hashed, self._ctx.clock()
        ):
            revoked = await self._ctx.revoke_family(row.family_id)
            self._ctx.refuse(
                "refresh_token_reuse",
                method=METHOD,
                client_id=client.client_id,
                tenant_id=row.tenant_id,
                user_id=row.user_id,
                detail={"access_revoked": revoked},
            )
            raise OAuthError(
                "invalid_grant",
                "the refresh token was already used; every token of this grant is revoked",
            )
        return await self._issue(
            "refresh_token",
            client,
            tenant=row.tenant_id,
            user=row.user_id,
            scope=scope_names.render(narrowed),
            family=row.family_id,
            family_scope=row.scope,
            resource=row.resource,
        )

    async def _client_credentials(self, form: Form, client: ClientRow) -> dict[str, Any]:
        if not client.confidential:
            raise OAuthError(
                "unauthorized_client", "client_credentials needs a confidential client"
            )
        self._may_use(client, "client_credentials")
        tenant = client.tenant_id
        if tenant is None or await self._ctx.identities.get_tenant(tenant) is None:
            raise OAuthError("unauthorized_client", "this client acts in no tenant")
        self._check_resource(form, client)
        if client.app_id is not None:  # an app's own scopes, which AppDeck does not know
            allowed = set((client.scope or "").split())
        else:
            allowed = set(scope_names.parse(client.scope, allow_unknown=True))
        wanted = form.get("scope", max_len=2000)
        scope = set(wanted.split()) if wanted else allowed
        if not scope or not scope <= allowed:
            raise OAuthError("invalid_scope", "scope must be a subset of the client's scope")
        return await self._issue(
            "client_credentials",
            client,
            tenant=tenant,
            user=f"client:{client.client_id}",
            scope=scope_names.render(scope),
            family=None,
            resource=self._ctx.resource,
        )

    # -- shared ---------------------------------------------------------------------------

    def _may_use(self, client: ClientRow, grant: str) -> None:
        if grant not in client.grant_types:
            raise OAuthError("unauthorized_client", f"this client may not use {grant}")

    def _check_resource(self, form: Form, client: ClientRow) -> None:
        resources = form.all("resource")
        if client.app_id is not None:  # an app's own client: tokens for that app only
            mine = app_audience(client.app_id)
            if len(resources) > 1 or (resources and resources[0] != mine):
                raise OAuthError("invalid_target", f"this client's only resource is {mine}")
            return
        if len(resources) > 1 or (resources and not self._ctx.is_resource(resources[0])):
            raise OAuthError("invalid_target", f"the only resource here is {self._ctx.resource}")

    async def _user_is_active(self, tenant_id: str, user_id: str) -> None:
        user = await self._ctx.identities.get_user(user_id)
        if (
            user is None
            or user.disabled
            or user.tenant_id != tenant_id
            or await self._ctx.identities.refused_access(tenant_id, user_id)
        ):
            raise OAuthError("invalid_grant", "the user of this grant can no longer sign in")

    async def _issue(
        self,
        grant: str,
        client: ClientRow,
        *,
        tenant: str,
        user: str,
        scope: str,
        family: str | None,
        resource: str | None,
        family_scope: str | None = None,
    ) -> dict[str, Any]:
        settings = self._ctx.settings
        access, claims = self._ctx.token_issuer.issue(
            tenant=tenant,
            user=user,
            scope=scope,
            client_id=client.client_id,
            ttl_seconds=settings.access_token_ttl_seconds,
            audience=self._ctx.resource if client.app_id is None else app_audience(client.app_id),
        )
        body: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": claims.expires_at - claims.issued_at,
            "scope": scope,
        }
        if family is not None:
            now = self._ctx.clock()
            template = RefreshTokenRow(
                token_hash="",
                family_id=family,
                client_id=client.client_id,
                tenant_id=tenant,
                user_id=user,
                scope=family_scope or scope,
                resource=resource,
                created_at=now,
                expires_at=now + settings.refresh_token_ttl_seconds,
            )
            await self._ctx.oauth.record_access_token(template, claims.jti, claims.expires_at)
            if "refresh_token" in client.grant_types:
                refresh = new_secret("adk_rt_", 32)
                await self._ctx.oauth.insert_refresh(
                    dataclasses.replace(template, token_hash=token_hash(refresh))
                )
                body["refresh_token"] = refresh
        activity.token_issued(
            kind=f"oauth:{grant}",
            tenant=tenant,
            user=user,
            client=client.client_id,
            token_id=claims.jti,
        )
        self._ctx.audit.record(
            AuditEvent(
                event="token_issued",
                outcome="ok",
                tenant_id=tenant,
                user_id=user,
                client_id=client.client_id,
                method=METHOD,
                detail={
                    "grant_type": grant,
                    "scope": scope,
                    "jti": claims.jti,
                    "refresh": "refresh_token" in body,
                },
            )
        )
        return body
