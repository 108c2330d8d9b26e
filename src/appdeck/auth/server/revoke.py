"""Token revocation (RFC 7009).

A refresh token revokes its whole family and the live access tokens issued in it (§2.1:
"SHOULD also invalidate all access tokens based on the same authorization grant"). An
access token (one of our JWTs: signature checked, issuer ours) is revoked by its ``jti``
until it expires. Only the client a token was issued to can revoke it; a token that is
unknown, expired, malformed or another client's is answered with 200 all the same, so the
endpoint tells nobody which tokens exist (§2.2).

A personal access token (``adk_pat_…``) was issued to no client: whoever holds it may use it,
so holding it is what authenticates its revocation (no client credentials asked). Revoking is
the one thing a finder of a leaked PAT should be able to do with it; it is refused at once in
this process (``forget_pat``) and within the trust window elsewhere.
"""

from __future__ import annotations

from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from starlette.requests import Request
from starlette.responses import Response

from appdeck import activity
from appdeck.auth.audit import AuditEvent
from appdeck.auth.bearer import PAT_PREFIX, header_kid
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
            token = form.get("token", max_len=8192)
            hint = form.get("token_type_hint", max_len=64)
            is_pat = token is not None and token.startswith(PAT_PREFIX)
            client = (
                None
                if is_pat  # the PAT is its own credential (module docstring)
                else await self._clients.authenticate(request, form, endpoint=METHOD)
            )
        except OAuthError as exc:
            return exc.response()
        if token is None:
            return OAuthError("invalid_request", "token is required").response()
        if client is None:
            detail = await self._pat(token)
        else:
            first, second = (self._access, self._refresh)
            if hint != "access_token":
                first, second = second, first
            detail = await first(token, client) or await second(token, client)
        if detail is not None:
            self._revoked(detail, client.client_id if client is not None else None)
        return Response(status_code=200, headers={**NO_STORE, **CORS})

    def _revoked(self, detail: dict[str, Any], client_id: str | None) -> None:
        tenant_id, user_id = detail.pop("tenant_id"), detail.pop("user_id")
        token_id = detail.get("jti") or detail.get("pat_id") or detail.get("family")
        activity.token_revoked(
            kind=str(detail["kind"]),
            tenant=tenant_id,
            user=user_id,
            client=client_id,
            token_id=str(token_id) if token_id else None,
        )
        self._ctx.audit.record(
            AuditEvent(
                event="token_revoked",
                outcome="ok",
                tenant_id=tenant_id,
                user_id=user_id,
                client_id=client_id,
                method=METHOD,
                detail=detail,
            )
        )

    async def _pat(self, token: str) -> dict[str, Any] | None:
        identities = self._ctx.identities
        record = await identities.pat_by_hash(token_hash(token))
        if record is None or not await identities.revoke_pat(record.id):
            return None  # unknown, or revoked already: 200 all the same
        self._ctx.forget_pat(record)
        return {
            "tenant_id": record.tenant_id,
            "user_id": record.user_id,
            "kind": "pat",
            "pat_id": record.id,
        }

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
        kid = header_kid(token)
        if kid is not None:  # signed with a key another replica made since these were read
            await self._ctx.keys.refresh_for(kid)
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
