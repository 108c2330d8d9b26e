"""The suite's httpx clients share httpx's default TLS context (tests/conftest.py)."""

from __future__ import annotations

import ssl

import httpx


def _context(client: httpx.AsyncClient) -> ssl.SSLContext:
    context = client._transport._pool._ssl_context  # type: ignore[attr-defined]
    assert isinstance(context, ssl.SSLContext)
    return context


async def test_default_clients_share_one_verifying_context_and_others_keep_their_own() -> None:
    async with httpx.AsyncClient() as a, httpx.AsyncClient(base_url="http://127.0.0.1") as b:
        assert _context(a) is _context(b)
        assert _context(a).verify_mode == ssl.CERT_REQUIRED
        assert _context(a).check_hostname
    own = ssl.create_default_context()
    async with httpx.AsyncClient(verify=own) as c, httpx.AsyncClient(verify=False) as d:
        assert _context(c) is own
        assert _context(d).verify_mode == ssl.CERT_NONE
        assert _context(d) is not _context(a)
