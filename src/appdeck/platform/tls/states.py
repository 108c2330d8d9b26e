"""What a hostname's certificate order is doing, readable without awaiting anything.

``get_app_url`` builds URLs synchronously (the domains' ``TlsStatus`` port), while the orders
live in the database every replica shares (an order may run on another replica).
:class:`TlsStates` is the bridge: the TLS service refreshes it from the database on every
replica each ``check_seconds`` (``TlsService.load``) and at once when this replica's own
orders start or end; ``status_of`` reads it. :func:`describe` is the one vocabulary, used by
the async ``TlsService.status_of`` and by the metrics too:

| state | meaning |
|---|---|
| ``pending`` | wanted, no certificate yet, its order is due |
| ``issuing`` | an order runs now (on some replica), no certificate yet |
| ``issued`` | served and valid; ``not_after``, ``renew_at`` set (failed renewal: ``error``) |
| ``renewing`` | served and valid, its renewal is due or runs now |
| ``failed`` | no usable certificate; ``error`` is the reason, ``next_try`` the next attempt |
| ``expired`` | its certificate ran out and no new one came yet (``error``, ``next_try``) |
| ``none`` | wanted, but ACME is off |
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from appdeck.ingress.hosts import normalize
from appdeck.storage.tls import CertRow

STATES: Final = ("pending", "issuing", "issued", "renewing", "failed", "expired", "none")
MAX_HOST: Final = 300


def iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat()


def state_of(row: CertRow, now: float, acme: bool) -> str:
    """The row's state at ``now`` (see the module's table)."""
    ordering = row.holder is not None and row.held_until > now
    if row.not_after is not None and row.chain_sealed is not None:
        if row.not_after <= now:
            return "issuing" if ordering else "expired"
        return "renewing" if ordering or (acme and row.next_try <= now) else "issued"
    if row.state == "failed":
        return "issuing" if ordering else "failed"
    if not acme:
        return "none"
    return "issuing" if ordering else "pending"


def describe(row: CertRow, now: float, acme: bool) -> dict[str, Any]:
    """The agent's view of ``row``: its state, dates, issuer, last error and next try."""
    state = state_of(row, now, acme)
    served = state in ("issued", "renewing")
    retrying = row.last_error is not None or state in ("failed", "expired")
    return {
        "state": state,
        "not_after": iso(row.not_after),
        "renew_at": iso(row.next_try) if served else None,
        "issuer": row.issuer,
        "error": row.last_error,
        "next_try": iso(row.next_try) if retrying and acme else None,
    }


class TlsStates:
    """The certificate rows as last read, by hostname; ``status_of`` is the ``TlsStatus``
    port (synchronous, bounded input)."""

    def __init__(self, *, acme: bool, clock: Callable[[], float] = time.time) -> None:
        self.acme = acme
        self._clock = clock
        self._rows: dict[str, CertRow] = {}  # certificate name → row
        self._hosts: dict[str, str] = {}  # hostname → certificate name

    def replace(self, rows: Iterable[CertRow]) -> None:
        """Exactly ``rows`` from now on (the whole table, as ``load`` read it)."""
        self._rows = {row.name: row for row in rows}
        self._hosts = {host: row.name for row in self._rows.values() for host in row.hostnames}

    def put(self, row: CertRow) -> None:
        """One row as it changed here (an order of this replica began or ended)."""
        self._rows[row.name] = row
        for host in row.hostnames:
            self._hosts[host] = row.name

    def row_of(self, host: str) -> CertRow | None:
        name = normalize(host) if len(host) <= MAX_HOST else None
        if name is None:
            return None
        key = self._hosts.get(name)
        if key is None and "." in name:
            key = self._hosts.get("*." + name.split(".", 1)[1])
        return None if key is None else self._rows.get(key)

    def status_of(self, host: str) -> dict[str, Any] | None:
        row = self.row_of(host)
        return None if row is None else describe(row, self._clock(), self.acme)

    def counts(self) -> dict[str, int]:
        """How many certificates are in each state now (for the metrics)."""
        now = self._clock()
        counts = dict.fromkeys(STATES, 0)
        for row in self._rows.values():
            counts[state_of(row, now, self.acme)] += 1
        return counts
