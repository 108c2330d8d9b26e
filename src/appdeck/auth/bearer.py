"""The resource server: ``Authorization: Bearer …`` to a :class:`Principal`.

Two kinds of token are accepted:

- OAuth access tokens (JWTs) from the embedded authorization server or an external IdP:
  signature (algorithm allow-list), issuer, audience (RFC 8707), expiry; kind ``oauth``.
- Personal access tokens ``adk_pat_…`` (stored hashed, with scopes and expiry); kind ``pat``.

Verified tokens are cached by value until they expire (bounded), so the check on the hot path
is a dict lookup; revoking a token evicts it. Tokens are never read from the query string.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appdeck.auth import AuthError
from appdeck.auth import scopes as scope_names
from appdeck.auth.hashing import token_hash
from appdeck.auth.tokens import InvalidToken
from appdeck.common.identity import Principal
from appdeck.storage.identity import IdentityStore, PersonalTokenRecord

PAT_PREFIX: Final = "adk_pat_"
CACHE_SIZE: Final = 10_000
PAT_CACHE_SECONDS: Final = 60.0
"""How long a PAT lookup is trusted before the store is asked again (revocation delay)."""


class JwtVerifier(Protocol):
    async def verify(self, token: str) -> dict[str, Any]: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ClaimNames:
    tenant: str = "tid"
    user: str = "sub"


@dataclass(slots=True)
class _Entry:
    principal: Principal
    expires_at: float
    jti: str | None


class BearerAuthenticator:
    def __init__(
        self,
        *,
        verifier: JwtVerifier,
        identities: IdentityStore,
        resource_metadata_url: str,
        claims: ClaimNames | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._verifier = verifier
        self._identities = identities
        self._metadata_url = resource_metadata_url
        self._claims = claims or ClaimNames()
        self._clock = clock
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._revoked: set[str] = set()
        self._pat_used: dict[str, float] = {}

    async def load_revocations(self) -> None:
        self._revoked |= await self._identities.revoked_jtis(self._clock())

    # -- Authenticator --------------------------------------------------------------------

    async def authenticate(self, authorization: str | None) -> Principal:
        if not authorization:
            raise AuthError("Authorization required: send a bearer token", error="")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("Authorization must be 'Bearer <token>'", error="invalid_request")
        now = self._clock()
        entry = self._cache.get(token)
        if entry is not None and entry.expires_at > now:
            if entry.jti is None or entry.jti not in self._revoked:
                if entry.principal.kind == "pat":
                    self._pat_used[entry.principal.client_id or ""] = now
                return entry.principal
            self._cache.pop(token, None)
            raise AuthError("The access token was revoked")
        entry = await (self._pat(token, now) if token.startswith(PAT_PREFIX) else self._jwt(token))
        self._cache[token] = entry
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return entry.principal

    def challenge(self, error: AuthError | None = None) -> str:
        parts = [
            f'Bearer resource_metadata="{self._metadata_url}"',
            f'scope="{scope_names.render(set(scope_names.ALL))}"',
        ]
        if error is not None and error.error:
            parts.append(f'error="{error.error}"')
            parts.append(f'error_description="{error.message}"')
        return ", ".join(parts)

    # -- the two kinds --------------------------------------------------------------------

    async def _jwt(self, token: str) -> _Entry:
        try:
            claims = await self._verifier.verify(token)
        except InvalidToken as exc:
            raise AuthError(f"The access token is invalid ({exc})") from None
        jti = claims.get("jti")
        if isinstance(jti, str) and jti in self._revoked:
            raise AuthError("The access token was revoked")
        tenant = claims.get(self._claims.tenant)
        user = claims.get(self._claims.user)
        if not isinstance(tenant, str) or not isinstance(user, str) or not tenant or not user:
            raise AuthError("The access token names no tenant or user")
        raw_scope = claims.get("scope")
        if isinstance(raw_scope, list):
            raw_scope = " ".join(str(s) for s in raw_scope)
        scopes = scope_names.parse(
            raw_scope if isinstance(raw_scope, str) else "", allow_unknown=True
        )
        client = claims.get("client_id") or claims.get("azp")
        principal = Principal(
            tenant=tenant,
            user=user,
            scopes=scopes,
            kind="oauth",
            client_id=client if isinstance(client, str) else None,
        )
        return _Entry(principal, float(claims["exp"]), jti if isinstance(jti, str) else None)

    async def _pat(self, token: str, now: float) -> _Entry:
        record = await self._identities.pat_by_hash(token_hash(token))
        if record is None or record.revoked_at is not None:
            raise AuthError("The personal access token is unknown or revoked")
        if record.expires_at is not None and record.expires_at <= now:
            raise AuthError("The personal access token has expired")
        self._pat_used[record.id] = now
        principal = Principal(
            tenant=record.tenant_id,
            user=record.user_id,
            scopes=frozenset(record.scopes),
            kind="pat",
            client_id=record.id,
        )
        until = now + PAT_CACHE_SECONDS
        if record.expires_at is not None:
            until = min(until, record.expires_at)
        return _Entry(principal, until, None)

    # -- revocation and bookkeeping -------------------------------------------------------

    async def revoke_jti(self, jti: str, expires_at: float) -> None:
        self._revoked.add(jti)
        await self._identities.revoke_jti(jti, expires_at)

    def forget_pat(self, record: PersonalTokenRecord) -> None:
        for token, entry in list(self._cache.items()):
            if entry.principal.kind == "pat" and entry.principal.client_id == record.id:
                del self._cache[token]

    async def close(self) -> None:
        await self._verifier.close()

    async def flush_usage(self) -> None:
        used, self._pat_used = self._pat_used, {}
        await self._identities.touch_pats(used)


class LocalJwtVerifier:
    """Adapts the embedded server's synchronous :class:`~appdeck.auth.tokens.TokenVerifier`."""

    def __init__(self, verify: Callable[[str], dict[str, Any]]) -> None:
        self._verify = verify

    async def verify(self, token: str) -> dict[str, Any]:
        return self._verify(token)

    async def close(self) -> None:
        return None


Verify = Callable[[str], Awaitable[dict[str, Any]]]
