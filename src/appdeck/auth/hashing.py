"""Secrets we hand out (tokens, codes, client secrets) are stored only as hashes; passwords
with argon2."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from appdeck.common.tokens import new_secret, same, token_hash

__all__ = ["hash_password", "new_secret", "same", "token_hash", "verify_password"]

_hasher = PasswordHasher()
_DUMMY = (
    "$argon2id$v=19$m=65536,t=3,p=4$FW7Osda0sMmHOD65lE1IYA"
    "$ru0TvxzkUyRDMzCzhGDPXPFj/UED47D2EZklH0BJ1Cc"
)
"""What a missing user's password is checked against: ``_hasher.hash`` of a fixed text, made
once and kept here with ``_hasher``'s parameters (tests/auth/test_hashing.py checks that they
still match, so the check costs what a user's does). Hashing it at import cost every process
that imports this module ~0.2 s of CPU (each ``appdeck serve`` start, each CLI command)."""


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Constant-ish time whether or not the user exists (a dummy hash is checked otherwise)."""
    try:
        return _hasher.verify(password_hash or _DUMMY, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
