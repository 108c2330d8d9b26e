"""The embedded authorization server's signing keys, shared by every replica.

Rows of ``signing_keys``: a key id, the private JWK sealed with the secret key (the caller
seals and opens; this module stores text), and when it was made. The first replica to start
on an empty table creates the first key(s); the others read them. On PostgreSQL the check and
the insert run under a transaction-scoped advisory lock (SQLite: its write lock), so replicas
starting together agree on one first key instead of each making its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.schema import signing_keys

LOCK_ID: Final = 0x61707064_6B657973 & 0x7FFF_FFFF_FFFF_FFFF
"""The advisory lock taken while the first key is created ("appdkeys")."""
MAX_READ: Final = 20
"""Rows read at most (newest first): a few are kept; anything past that is not read."""


@dataclass(frozen=True, slots=True)
class SealedKey:
    kid: str
    sealed_jwk: str
    created_at: float


class SigningKeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def newest(self, limit: int = MAX_READ) -> list[SealedKey]:
        """The keys, newest first (ties: by kid, the same order on every replica)."""
        query = (
            sa.select(signing_keys.c.kid, signing_keys.c.sealed_jwk, signing_keys.c.created_at)
            .order_by(signing_keys.c.created_at.desc(), signing_keys.c.kid.desc())
            .limit(min(limit, MAX_READ))
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [SealedKey(str(r.kid), str(r.sealed_jwk), float(r.created_at)) for r in rows]

    async def create_first(self, keys: Sequence[SealedKey]) -> bool:
        """Insert ``keys`` when the table is empty: True when they were inserted, False when
        another replica's keys were there first."""
        async with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(LOCK_ID)))
            else:  # SQLite: a write first takes the database's write lock for the transaction
                await conn.execute(
                    sa.update(signing_keys).where(sa.false()).values(kid=signing_keys.c.kid)
                )
            present = (await conn.execute(sa.select(signing_keys.c.kid).limit(1))).first()
            if present is not None:
                return False
            await conn.execute(
                sa.insert(signing_keys),
                [
                    {"kid": k.kid, "sealed_jwk": k.sealed_jwk, "created_at": k.created_at}
                    for k in keys
                ],
            )
        return True

    async def add(self, key: SealedKey, *, keep: int) -> None:
        """Add a key (a rotation) and delete all but the ``keep`` newest."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.insert(signing_keys).values(
                    kid=key.kid, sealed_jwk=key.sealed_jwk, created_at=key.created_at
                )
            )
            kept = (
                sa.select(signing_keys.c.kid)
                .order_by(signing_keys.c.created_at.desc(), signing_keys.c.kid.desc())
                .limit(keep)
                .scalar_subquery()
            )
            await conn.execute(sa.delete(signing_keys).where(signing_keys.c.kid.not_in(kept)))
