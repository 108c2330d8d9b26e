"""Secrets we hand out (tokens, codes, client secrets) are stored only as hashes; passwords
with argon2."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()
_DUMMY = _hasher.hash("appdeck-timing-equaliser")


def new_secret(prefix: str = "", nbytes: int = 32) -> str:
    """A fresh random token, URL-safe, with an optional recognisable prefix."""
    return prefix + secrets.token_urlsafe(nbytes)


def token_hash(token: str) -> str:
    """SHA-256 of a high-entropy token: enough for lookups (no need for a slow hash)."""
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Constant-ish time whether or not the user exists (a dummy hash is checked otherwise)."""
    try:
        return _hasher.verify(password_hash or _DUMMY, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
