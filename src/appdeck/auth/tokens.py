"""JWT access tokens of the embedded authorization server: issued here, verified here.

Claims: ``iss`` (the server's base URL), ``aud`` (the resource: the canonical ``/mcp`` URL),
``sub`` (user id), ``tid`` (tenant), ``scope``, ``client_id``, ``iat``, ``exp``, ``jti``.
Only ES256 is accepted (``alg: none`` and HMAC confusions are refused by the allow-list).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any, Final

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry

from appdeck.auth.keys import ALGORITHM, SigningKeys

LEEWAY: Final = 30


class InvalidToken(Exception):
    """The token is malformed, forged, expired, or not meant for this resource."""


@dataclass(frozen=True, slots=True)
class AccessClaims:
    issuer: str
    audience: str
    subject: str
    tenant: str
    scope: str
    client_id: str | None
    issued_at: int
    expires_at: int
    jti: str

    def to_claims(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": self.subject,
            "tid": self.tenant,
            "scope": self.scope,
            "iat": self.issued_at,
            "exp": self.expires_at,
            "jti": self.jti,
        }
        if self.client_id:
            body["client_id"] = self.client_id
        return body


class TokenIssuer:
    def __init__(self, keys: SigningKeys, issuer: str, audience: str, ttl_seconds: int) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.ttl = ttl_seconds

    def issue(
        self,
        *,
        tenant: str,
        user: str,
        scope: str,
        client_id: str | None,
        ttl_seconds: int | None = None,
        audience: str | None = None,
    ) -> tuple[str, AccessClaims]:
        now = int(time.time())
        claims = AccessClaims(
            issuer=self.issuer,
            audience=audience or self.audience,
            subject=user,
            tenant=tenant,
            scope=scope,
            client_id=client_id,
            issued_at=now,
            expires_at=now + (ttl_seconds or self.ttl),
            jti=secrets.token_hex(16),  # never starts with "-": a CLI argument
        )
        header = {"alg": ALGORITHM, "kid": self.keys.kid, "typ": "at+jwt"}
        token = jwt.encode(header, claims.to_claims(), self.keys.private_set)
        return token, claims


class TokenVerifier:
    """Verifies signature (ES256 only), issuer, audience and time claims."""

    def __init__(self, keys: KeySet, issuer: str, audience: str, algorithms: list[str]) -> None:
        self._keys = keys
        self._algorithms = algorithms
        self._registry = JWTClaimsRegistry(
            leeway=LEEWAY,
            iss={"essential": True, "value": issuer},
            aud={"essential": True, "value": audience},
            exp={"essential": True},
            sub={"essential": True},
        )

    def verify(self, token: str) -> dict[str, Any]:
        if len(token) > 8192:
            raise InvalidToken("token too long")
        try:
            decoded = jwt.decode(token, self._keys, algorithms=self._algorithms)
            self._registry.validate(decoded.claims)
        except JoseError as exc:
            raise InvalidToken(_jose_words(exc)) from None
        except (ValueError, TypeError, KeyError):
            raise InvalidToken("the token is malformed") from None
        return dict(decoded.claims)


def _jose_words(exc: JoseError) -> str:
    """What joserfc found wrong, in its words (``expired_token``, "invalid claim 'aud'"),
    never the exception's class name."""
    words = str(getattr(exc, "description", "") or getattr(exc, "error", "") or "")
    return words[:200] if words.isprintable() and words else "the token is not valid"
