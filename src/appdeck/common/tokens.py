"""High-entropy secrets we hand out (tokens, codes, client secrets): made here, stored only
as SHA-256 hashes (enough for lookups of random values: no slow hash needed), compared in
constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_secret(prefix: str = "", nbytes: int = 32) -> str:
    """A fresh random token, URL-safe, with an optional recognisable prefix."""
    return prefix + secrets.token_urlsafe(nbytes)


def token_hash(token: str) -> str:
    """SHA-256 of a high-entropy token: enough for lookups (no need for a slow hash)."""
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
