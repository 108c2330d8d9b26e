"""Secrets we hand out (tokens, codes, client secrets) are stored only as hashes; passwords
with argon2."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from appdeck.common.tokens import new_secret, same, token_hash

__all__ = ["hash_password", "new_secret", "same", "token_hash", "verify_password"]

_hasher = PasswordHasher()
_DUMMY = _hasher.hash("appdeck-timing-equaliser")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Constant-ish time whether or not the user exists (a dummy hash is checked otherwise)."""
    try:
        return _hasher.verify(password_hash or _DUMMY, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
