"""External IdP mode: tokens from another issuer, verified against its JWKS over HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, RSAKey

from appdeck.app import Services
from appdeck.settings import Settings
from tests.support.mcp import INIT, headers, request

ISSUER = "https://idp.example.test"


class Idp:
    def __init__(self) -> None:
        self.keys: list[Any] = [ECKey.generate_key("P-256", parameters={"kid": "k1"}, private=True)]
        self.fetches = 0

    def jwks(self) -> dict[str, Any]:
        self.fetches += 1
        return {"keys": [k.as_dict(private=False) for k in self.keys]}

    def token(self, key: Any = None, alg: str = "ES256", **claims: Any) -> str:
        key = key or self.keys[-1]
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "aud": "appdeck",
            "sub": "u-42",
            "org": "acme",
            "exp": now + 300,
            "iat": now,
            "scope": "apps:read other:scope",
        } | claims
        return jwt.encode({"alg": alg, "kid": key.kid}, body, KeySet([key]), algorithms=[alg])


@pytest.fixture
def idp() -> Iterator[tuple[Idp, str]]:
    state = Idp()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(state.jwks()).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


async def test_tokens_from_an_external_idp_are_verified_against_its_jwks(
    idp: tuple[Idp, str], tmp_path: Path
) -> None:
    state, jwks_url = idp
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path,
            "issuer": ISSUER,
            "jwks_url": jwks_url,
            "audience": "appdeck",
            "tenant_claim": "org",
            "jwks_refetch_seconds": 0,
            "jwt_algorithms": ["ES256", "RS256"],
        }
    )
    services = await Services.start(settings)
    try:
        assert services.token_issuer is None  # no embedded server in this mode
        transport = httpx.ASGITransport(app=services.asgi())
        async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as client:

            async def status(token: str) -> int:
                r = await client.post(
                    "/mcp", json=request("initialize", INIT), headers=headers(token=token)
                )
                return r.status_code

            good = state.token()
            assert await status(good) == 200
            principal = await services.authenticator.authenticate(f"Bearer {good}")
            assert principal.owner == ("acme", "u-42")
            assert principal.scopes == frozenset({"apps:read"})  # other resources' scopes ignored

            assert await status(state.token(iss="https://evil.example")) == 401
            assert await status(state.token(aud="someone-else")) == 401
            assert await status(state.token(exp=int(time.time()) - 600)) == 401
            assert await status(state.token(org=None)) == 401
            stranger = ECKey.generate_key("P-256", parameters={"kid": "k1"}, private=True)
            assert await status(state.token(key=stranger)) == 401

            rsa = RSAKey.generate_key(2048, parameters={"kid": "k2"}, private=True)
            state.keys.append(rsa)  # the IdP rotates: a new kid makes us fetch the set again
            fetches = state.fetches
            tok = state.token(key=rsa, alg="RS256")
            r = await client.post(
                "/mcp", json=request("initialize", INIT), headers=headers(token=tok)
            )
            assert r.status_code == 200, r.text
            assert state.fetches == fetches + 1
            assert await status(state.token(key=state.keys[0], alg="ES256")) == 200
            assert await status(state.token(key=rsa, alg="PS256")) == 401  # not in the allow-list
    finally:
        await services.stop()
