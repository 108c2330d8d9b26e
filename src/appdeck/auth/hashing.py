"""Secrets we hand out (tokens, codes, client secrets) are stored only as hashes; passwords
with argon2."""

from __future__ import annotations

import functools
import os
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from appdeck.common.tokens import new_secret, same, token_hash

__all__ = [
    "FAST_FOR_TESTS",
    "fast_for_tests",
    "hash_password",
    "new_secret",
    "same",
    "token_hash",
    "verify_password",
]

_DUMMY: Final = (
    "$argon2id$v=19$m=65536,t=3,p=4$FW7Osda0sMmHOD65lE1IYA"
    "$ru0TvxzkUyRDMzCzhGDPXPFj/UED47D2EZklH0BJ1Cc"
)
"""What a missing user's password is checked against: ``PasswordHasher().hash`` of a fixed
text, made once and kept here with the default parameters (tests/auth/test_hashing.py checks
that they still match, so the check costs what a user's does). Hashing it at import cost every
process that imports this module ~0.2 s of CPU (each ``appdeck serve`` start, each CLI command)."""

FAST_FOR_TESTS: Final = "APPDECK_TEST_FAST_PASSWORD_HASHES"
"""Set to ``1`` by the test suite, never in production: argon2id at its lowest cost (t=1, 8 KiB,
one lane) instead of the default (t=3, 64 MiB, four lanes, ~0.2 s of CPU a hash or a check),
for the hundreds of users and sign-ins the tests make. ``appdeck serve`` warns when it is set.
Stored hashes carry their own parameters, so either kind verifies under either setting."""


def fast_for_tests() -> bool:
    """True when :data:`FAST_FOR_TESTS` is set (read at the first hash or check)."""
    return _hashing()[0]


@functools.cache
def _hashing() -> tuple[bool, PasswordHasher, str]:
    """(fast for tests, the hasher, its dummy hash), chosen once per process."""
    if os.environ.get(FAST_FOR_TESTS) == "1":
        fast = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
        return True, fast, fast.hash("appdeck-timing-equaliser")
    return False, PasswordHasher(), _DUMMY


def hash_password(password: str) -> str:
    return _hashing()[1].hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """Constant-ish time whether or not the user exists (a dummy hash is checked otherwise)."""
    _, hasher, dummy = _hashing()
    try:
        return hasher.verify(password_hash or dummy, password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False
