"""External IdP mode: verify JWTs against the IdP's JWKS (``APPDECK_ISSUER`` +
``APPDECK_JWKS_URL``), checking issuer, audience, expiry and an algorithm allow-list.

The key set is fetched lazily, cached, and fetched again (at most once a minute) when a token
names a key id we do not know: the IdP rotated its keys.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final, cast

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, KeySetSerialization
from joserfc.jws import extract_compact

from appdeck.auth.tokens import InvalidToken, TokenVerifier
from appdeck.common.failures import http_failure

REFETCH_AFTER: Final = 60.0
MAX_JWKS_BYTES: Final = 256 * 1024


class JwksVerifier:
    def __init__(
        self,
        *,
        jwks_url: str,
        issuer: str,
        audience: str,
        algorithms: list[str],
        refetch_after: float = REFETCH_AFTER,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._refetch_after = refetch_after
        self._url = jwks_url
        self._issuer = issuer
        self._audience = audience
        self._algorithms = [a for a in algorithms if a.lower() != "none"]
        self._client = client or httpx.AsyncClient(timeout=5.0, follow_redirects=False)
        self._verifier: TokenVerifier | None = None
        self._kids: set[str] = set()
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    async def _refresh(self) -> None:
        async with self._lock:
            if (
                time.monotonic() - self._fetched_at < self._refetch_after
                and self._verifier is not None
            ):
                return
            try:
                response = await self._client.get(self._url, headers={"accept": "application/json"})
                response.raise_for_status()
                if len(response.content) > MAX_JWKS_BYTES:
                    raise InvalidToken("the IdP's key set is too large")
                data = cast(KeySetSerialization, response.json())
                keys = KeySet.import_key_set(data)
            except httpx.HTTPError as exc:
                raise InvalidToken(f"cannot load the IdP's keys: {http_failure(exc)}") from None
            except (ValueError, JoseError):
                raise InvalidToken("cannot load the IdP's keys: not a JSON Web Key Set") from None
            self._fetched_at = time.monotonic()
            self._kids = {str(k.kid) for k in keys.keys if k.kid}
            self._verifier = TokenVerifier(keys, self._issuer, self._audience, self._algorithms)

    async def verify(self, token: str) -> dict[str, Any]:
        try:
            kid = extract_compact(token.encode()).headers().get("kid")
        except (JoseError, ValueError):
            raise InvalidToken("malformed token") from None
        if self._verifier is None or (kid and kid not in self._kids):
            await self._refresh()
        assert self._verifier is not None
        return self._verifier.verify(token)

    async def close(self) -> None:
        await self._client.aclose()
