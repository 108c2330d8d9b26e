"""Token revocation (RFC 7009).

A refresh token revokes its whole family and the live access tokens issued in it (§2.1:
"SHOULD also invalidate all access tokens based on the same authorization grant"). An
access token (one of our JWTs: signature checked, issuer ours) is revoked by its ``jti``
until it expires. Only the client a token was issued to can revoke it; a token that is
unknown, expired, malformed or another client's is answered with 200 all the same, so the
endpoint tells nobody which tokens exist (§2.2).
"""

from __future__ import annotations

from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import Response

from appdeck.auth.audit import AuditEvent
from appdeck.auth.hashing import token_hash
from appdeck.auth.keys import ALGORITHM
from appdeck.auth.server.clients import Clients
from appdeck.auth.server.context import ServerContext
from appdeck.auth.server.http import CORS, NO_STORE, OAuthError, read_form
from appdeck.storage.oauth import ClientRow

METHOD = "POST /revoke"


class RevokeEndpoint:
    def __init__(self, ctx: ServerContext, clients: Clients) -> None:
        self._ctx = ctx
        self._clients = clients

    async def __call__(self, request: Request) -> Response:
        try:
            form = await read_form(request)
            client = await self._clients.authenticate(request, form, endpoint=METHOD)
            token = form.get("token", max_len=8192)
            hint = form.get("token_type_hint", max_len=64)
        except OAuthError as exc:
            return exc.response()
        if token is None:
            return OAuthError("invalid_request", "token is required").response()
        first, second = (self._access, self._refresh)
        if hint != "access_token":
            first, second = second, first
        detail = await first(token, client) or await second(token, client)
        if detail is not None:
            self._ctx.audit.record(
                AuditEvent(
                    event="token_revoked",
                    outcome="ok",
                    tenant_id=detail.pop("tenant_id"),
                    user_id=detail.pop("user_id"),
                    client_id=client.client_id,
                    method=METHOD,
                    detail=detail,
                )
            )
        return Response(status_code=200, headers={**NO_STORE, **CORS})

    async def _refresh(self, token: str, client: ClientRow) -> dict[str, Any] | None:
        row = await self._ctx.oauth.get_refresh(token_hash(token))
        if row is None or row.client_id != client.client_id:
            return None
        revoked = await self._ctx.revoke_family(row.family_id)
        return {
            "tenant_id": row.tenant_id,
            "user_id": row.user_id,
            "kind": "refresh_token",
            "access_revoked": revoked,
        }

    async def _access(self, token: str, client: ClientRow) -> dict[str, Any] | None:
        if token.count(".") != 2:
            return None
        try:
            claims = jwt.decode(token, self._ctx.keys.public_set, algorithms=[ALGORITHM]).claims
        except (JoseError, ValueError, TypeError, KeyError):
            return None
        jti, exp = claims.get("jti"), claims.get("exp")
        if (
            claims.get("iss") != self._ctx.issuer
            or claims.get("client_id") != client.client_id
            or not isinstance(jti, str)
            or not isinstance(exp, int | float)
        ):
            return None
        if exp > self._ctx.clock():
            await self._ctx.revoke_jti(jti, float(exp))
        return {
            "tenant_id": claims.get("tid"),
            "user_id": claims.get("sub"),
            "kind": "access_token",
            "jti": jti,
        }
