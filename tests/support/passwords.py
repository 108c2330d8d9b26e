"""Users with passwords for the fixtures, without an argon2 hash per user per test.

A password's argon2 hash (the product's own parameters, ``appdeck.auth.hashing``) costs 0.3 s
of CPU on the test hosts, and the console's and the auth suite's fixtures made four and two
per test: a third of those suites' set-up (issue 26 §3). The hash of each password is made
once per process here and stored for every fixture user that has that password, through the
identity store, as ``IdentityAdmin.create_user`` stores it. Signing in still verifies the
password against a real argon2 hash; only the salt is shared between those users, which no
test reads. The tests of ``create_user`` itself keep going through ``IdentityAdmin``.
"""

from __future__ import annotations

import functools

from appdeck.auth.hashing import hash_password
from appdeck.storage.identity import IdentityStore, UserRecord


@functools.cache
def password_hash(password: str) -> str:
    """The argon2 hash of ``password``, made once per process."""
    return hash_password(password)


async def user_with_password(
    identities: IdentityStore, tenant: str, name: str, password: str, role: str = "member"
) -> UserRecord:
    """User ``name`` of ``tenant`` whose password is ``password``."""
    return await identities.create_user(tenant, name, password_hash(password), role)
