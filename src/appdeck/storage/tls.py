"""The automatic-TLS tables (migration 0016): the ACME account per CA, the certificates the
platform wants, the orders it sent and the HTTP-01 challenges pending.

Secrets arrive sealed (the caller holds the Sealer); this module only stores them. Who orders
a certificate is a lease on its row (``holder``, ``held_until`` on the database's clock), taken
by one conditional update, so two replicas never order the same name at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.app_locks import db_now
from appdeck.storage.schema import (
    tls_accounts,
    tls_certificates,
    tls_challenge_acks,
    tls_challenges,
    tls_orders,
)


@dataclass(frozen=True, slots=True)
class CertRow:
    name: str
    hostnames: tuple[str, ...]
    purpose: str
    tenant_id: str | None
    app_id: int | None
    state: str
    chain_sealed: str | None
    key_sealed: str | None
    issuer: str | None
    not_before: float | None
    not_after: float | None
    last_error: str | None
    attempts: int
    next_try: float
    holder: str | None = None
    """The replica ordering it now (its lease runs to ``held_until``, database clock)."""
    held_until: float = 0.0


@dataclass(frozen=True, slots=True)
class WantedRow:
    """A certificate the platform wants: its name, names covered and whose it is."""

    name: str
    hostnames: tuple[str, ...]
    purpose: str
    tenant_id: str | None = None
    app_id: int | None = None


def _row(row: Any) -> CertRow:
    return CertRow(
        name=row.name,
        hostnames=tuple(row.hostnames),
        purpose=row.purpose,
        tenant_id=row.tenant_id,
        app_id=None if row.app_id is None else int(row.app_id),
        state=row.state,
        chain_sealed=row.chain_sealed,
        key_sealed=row.key_sealed,
        issuer=row.issuer,
        not_before=row.not_before,
        not_after=row.not_after,
        last_error=row.last_error,
        attempts=int(row.attempts),
        next_try=float(row.next_try),
        holder=row.holder,
        held_until=float(row.held_until),
    )


class TlsStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.dialect = engine.dialect.name

    def _insert(self) -> Any:
        return postgresql.insert if self.dialect == "postgresql" else sqlite.insert

    # -- the account ------------------------------------------------------------------------
    async def account(self, directory: str) -> tuple[str, str | None] | None:
        """(sealed key, account URL or None) of the CA at ``directory``."""
        query = sa.select(tls_accounts.c.key_sealed, tls_accounts.c.uri).where(
            tls_accounts.c.directory == directory
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else (row.key_sealed, row.uri)

    async def create_account(self, directory: str, key_sealed: str, now: float) -> None:
        """Keep ``key_sealed`` unless a replica stored its own first (then read that one)."""
        statement = (
            self._insert()(tls_accounts)
            .values(directory=directory, key_sealed=key_sealed, uri=None, created_at=now)
            .on_conflict_do_nothing(index_elements=[tls_accounts.c.directory])
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def set_account_uri(self, directory: str, uri: str) -> None:
        statement = (
            sa.update(tls_accounts).where(tls_accounts.c.directory == directory).values(uri=uri)
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    # -- certificates -----------------------------------------------------------------------
    async def all(self) -> list[CertRow]:
        async with self._engine.connect() as conn:
            rows = (await conn.execute(sa.select(tls_certificates))).all()
        return [_row(row) for row in rows]

    async def get(self, name: str) -> CertRow | None:
        query = sa.select(tls_certificates).where(tls_certificates.c.name == name)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def want(self, wanted: Iterable[WantedRow], now: float) -> None:
        """Add rows for new certificates (state ``none``, due now); a row whose names
        changed is due again (its next certificate covers the new set)."""
        async with self._engine.begin() as conn:
            known = {
                row.name: tuple(row.hostnames)
                for row in await conn.execute(
                    sa.select(tls_certificates.c.name, tls_certificates.c.hostnames)
                )
            }
            for item in wanted:
                hostnames = list(item.hostnames)
                if item.name not in known:
                    await conn.execute(
                        self._insert()(tls_certificates)
                        .values(
                            name=item.name,
                            hostnames=hostnames,
                            purpose=item.purpose,
                            tenant_id=item.tenant_id,
                            app_id=item.app_id,
                            state="none",
                            attempts=0,
                            next_try=now,
                            held_until=0.0,
                            updated_at=now,
                        )
                        .on_conflict_do_nothing(index_elements=[tls_certificates.c.name])
                    )
                elif known[item.name] != item.hostnames:
                    await conn.execute(
                        sa.update(tls_certificates)
                        .where(tls_certificates.c.name == item.name)
                        .values(hostnames=hostnames, next_try=now, attempts=0, updated_at=now)
                    )

    async def forget(self, names: Iterable[str]) -> None:
        """Drop certificates nobody wants any more (an app deleted, a domain removed); a row
        being ordered right now stays until its order ends (another replica's view of the
        names may be a moment ahead of this one's)."""
        names = list(names)
        if not names:
            return
        statement = sa.delete(tls_certificates).where(
            tls_certificates.c.name.in_(names),
            tls_certificates.c.held_until <= db_now(self.dialect),
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def due(self, now: float, limit: int) -> list[CertRow]:
        """Rows whose renewal or retry time has come and nobody orders, soonest first."""
        query = (
            sa.select(tls_certificates)
            .where(
                tls_certificates.c.next_try <= now,
                tls_certificates.c.held_until <= db_now(self.dialect),
            )
            .order_by(tls_certificates.c.next_try)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_row(row) for row in rows]

    async def claim(self, name: str, holder: str, ttl: float) -> bool:
        """Take the row's lease for ``ttl`` seconds; False: another replica orders it."""
        now = db_now(self.dialect)
        statement = (
            sa.update(tls_certificates)
            .where(
                tls_certificates.c.name == name,
                sa.or_(tls_certificates.c.held_until <= now, tls_certificates.c.holder == holder),
            )
            .values(holder=holder, held_until=now + sa.literal(float(ttl), sa.Double))
        )
        async with self._engine.begin() as conn:
            done = await conn.execute(statement)
        return bool(done.rowcount)

    async def settle(self, name: str, holder: str, **values: Any) -> bool:
        """Record an outcome under the lease and let it go; False when the lease was lost
        (another replica took the row: its outcome wins)."""
        statement = (
            sa.update(tls_certificates)
            .where(tls_certificates.c.name == name, tls_certificates.c.holder == holder)
            .values(**values, holder=None, held_until=0.0)
        )
        async with self._engine.begin() as conn:
            done = await conn.execute(statement)
        return bool(done.rowcount)

    async def schedule(self, name: str, next_try: float) -> None:
        """Move a row's next renewal or retry (an operator's "renew now")."""
        statement = (
            sa.update(tls_certificates)
            .where(tls_certificates.c.name == name)
            .values(next_try=next_try)
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def count_unissued(self) -> int:
        query = sa.select(sa.func.count()).where(tls_certificates.c.state != "issued")
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    # -- orders (the per-tenant hourly limit) ------------------------------------------------
    async def take_order(self, tenant_id: str | None, now: float, limit: int) -> bool:
        """Count an order against the tenant's hourly limit: False (and nothing counted) when
        ``limit`` orders of the last hour come before it. Racing replicas each count only the
        orders numbered before their own, so at most ``limit`` of them pass."""
        whose = (
            tls_orders.c.tenant_id.is_(None)
            if tenant_id is None
            else tls_orders.c.tenant_id == tenant_id
        )
        async with self._engine.begin() as conn:
            await conn.execute(sa.delete(tls_orders).where(tls_orders.c.at < now - 7200))
            done = await conn.execute(
                sa.insert(tls_orders).values(tenant_id=tenant_id, at=now).returning(tls_orders.c.id)
            )
            mine = int(done.scalar_one())
        async with self._engine.begin() as conn:
            before = sa.select(sa.func.count()).where(
                whose, tls_orders.c.at > now - 3600, tls_orders.c.id < mine
            )
            if int((await conn.execute(before)).scalar_one()) < limit:
                return True
            await conn.execute(sa.delete(tls_orders).where(tls_orders.c.id == mine))
        return False

    # -- challenges -------------------------------------------------------------------------
    async def publish(self, certificate: str, answers: dict[str, str], expires_at: float) -> None:
        async with self._engine.begin() as conn:
            for token, key_authorization in answers.items():
                await conn.execute(
                    self._insert()(tls_challenges)
                    .values(
                        token=token,
                        key_authorization=key_authorization,
                        certificate=certificate,
                        expires_at=expires_at,
                    )
                    .on_conflict_do_nothing(index_elements=[tls_challenges.c.token])
                )

    async def challenges(self, now: float) -> dict[str, str]:
        """Every unexpired challenge: token → key authorization."""
        query = sa.select(tls_challenges.c.token, tls_challenges.c.key_authorization).where(
            tls_challenges.c.expires_at > now
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {row.token: row.key_authorization for row in rows}

    async def ack(self, tokens: Iterable[str], replica: str) -> None:
        """``replica``'s data plane serves these tokens now."""
        async with self._engine.begin() as conn:
            for token in tokens:
                await conn.execute(
                    self._insert()(tls_challenge_acks)
                    .values(token=token, replica=replica)
                    .on_conflict_do_nothing()
                )

    async def acked(self, tokens: Iterable[str]) -> dict[str, set[str]]:
        tokens = list(tokens)
        query = sa.select(tls_challenge_acks).where(tls_challenge_acks.c.token.in_(tokens))
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        seen: dict[str, set[str]] = {token: set() for token in tokens}
        for row in rows:
            seen[row.token].add(row.replica)
        return seen

    async def withdraw(self, tokens: Iterable[str], now: float) -> None:
        """Remove these challenges (their order ended) and every expired one."""
        tokens = list(tokens)
        async with self._engine.begin() as conn:
            expired = sa.select(tls_challenges.c.token).where(tls_challenges.c.expires_at <= now)
            gone = sa.or_(
                tls_challenge_acks.c.token.in_(tokens), tls_challenge_acks.c.token.in_(expired)
            )
            await conn.execute(sa.delete(tls_challenge_acks).where(gone))
            await conn.execute(
                sa.delete(tls_challenges).where(
                    sa.or_(tls_challenges.c.token.in_(tokens), tls_challenges.c.expires_at <= now)
                )
            )
