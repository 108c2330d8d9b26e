"""Automatic TLS: obtain, store, renew and serve certificates (issue 21 §3).

Every replica runs :meth:`TlsService.run_forever`. Each turn (``follow_seconds``) it copies
the pending HTTP-01 challenges from the database into its data plane and acknowledges them;
every ``check_seconds`` it loads every issued certificate into its data plane, adds rows for
new names (:mod:`.names`) and orders the certificates that are due, one replica per name (a
lease on the row). A certificate's life, per row::

    none ──order──▶ issued ──2/3 of its life──▶ (renewal order) ──▶ issued
      │                ▲                               │
      └──CA failure──▶ failed ──backoff──▶ (order) ────┘   failure with a valid
                                                          certificate: stays issued,
                                                          error shown, retried with backoff

An order: the account (generated once per CA, sealed, shared), a fresh key and CSR, the CA's
challenges written to the database, then a bounded wait until every live replica's data plane
serves them (their acknowledgements), only then the CA is told to validate. The ``acme``
library blocks: its calls run in threads, ``concurrency`` at a time. Failures wait
``backoff_base * 2^(n-1)`` (capped, jittered between half and all of it) before the next try;
a tenant's orders per hour are capped, and so are the names per app and the names waiting.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.ingress.certs import Certificate, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.hosts import normalize
from appdeck.platform.crypto import Sealer
from appdeck.platform.tls import ca, metrics, pem
from appdeck.platform.tls.names import NamesSource, cert_name
from appdeck.platform.tls.states import TlsStates, describe, iso
from appdeck.storage.tls import CertRow, TlsStore, WantedRow

log = logging.getLogger("appdeck.tls")

OPERATOR = "operator"
"""The data plane's name for the operator's own certificate (``APPDECK_TLS_CERT``)."""

DomainVerified = Callable[[str, str], Awaitable[None]]
"""``mark_verified(domain, "acme")`` of the domains service: a certificate issued for a
custom domain proves its owner controls it."""
LiveReplicas = Callable[[], Awaitable[set[str]]]
CHANNEL = "tls-challenges"
"""The cluster broadcast's doorbell: "new challenges in the database, follow now"."""


class Broadcast(Protocol):
    """What the doorbell needs of the cluster's broadcast (``appdeck.events.signals``)."""

    async def publish(self, channel: str, payload: bytes) -> None: ...

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> Any: ...


@dataclass(frozen=True, slots=True)
class TlsConfig:
    directory: str | None = None
    """The ACME directory URL; None: no ACME (operator files only, or no TLS)."""
    email: str | None = None
    ca_bundle: Path | None = None
    """A CA bundle to trust the ACME server with (a test CA such as Pebble's)."""
    cert_file: Path | None = None
    key_file: Path | None = None
    max_names_per_app: int = 10
    orders_per_tenant_hour: int = 20
    max_waiting: int = 500
    """Names without a certificate at most (beyond it new names wait their turn)."""
    concurrency: int = 2
    order_timeout: float = 120.0
    publish_timeout: float = 10.0
    backoff_base: float = 60.0
    backoff_cap: float = 6 * 3600.0
    follow_seconds: float = 1.0
    check_seconds: float = 5.0


def renew_at(not_before: float, not_after: float) -> float:
    """Two thirds into the certificate's life (Let's Encrypt's 90 days: at day 60)."""
    return not_before + (not_after - not_before) * 2 / 3


def backoff(attempts: int, base: float, cap: float, rng: random.Random) -> float:
    """The wait after the ``attempts``-th failure in a row: exponential, capped, jittered
    (half to all of it), so replicas and names never retry in step."""
    delay = min(cap, base * 2.0 ** min(max(attempts, 1) - 1, 30))
    return delay * (0.5 + rng.random() / 2)


SERVED_WITHIN_S = 10.0
"""How long a data plane may take to serve new challenges before the wait is logged."""


class TlsService:
    def __init__(
        self,
        engine: AsyncEngine,
        sealer: Sealer,
        certificates: Certificates,
        challenges: Challenges,
        config: TlsConfig,
        *,
        names: NamesSource,
        replica: str,
        live_replicas: LiveReplicas | None = None,
        domain_verified: DomainVerified | None = None,
        clock: Callable[[], float] = time.time,
        states: TlsStates | None = None,
        served: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = TlsStore(engine)
        self._served = served
        """Returns once this host's data plane serves what ``challenges`` holds (HAProxy copies
        it asynchronously): a challenge is acknowledged only then, or the CA may come first."""
        self.config = config
        self.certificates = certificates
        self.challenges = challenges
        self._sealer = sealer
        self._names = names
        self.replica = replica
        self._live = live_replicas
        self._verified = domain_verified
        self._clock = clock
        self.states = states if states is not None else TlsStates(acme=bool(config.directory))
        """What ``get_app_url`` reads synchronously: refreshed by :meth:`load` and orders."""
        self._rng = random.Random()  # noqa: S311 - jitter, not a secret
        self._slots = asyncio.Semaphore(max(1, config.concurrency))
        self._loaded: dict[str, str] = {}  # name → sealed chain last put in the data plane
        self._acked: set[str] = set()
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._operator: pem.Chain | None = None
        self._broadcast: Broadcast | None = None
        self._wake = asyncio.Event()

    # -- start ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the operator's files (refusing bad ones: :class:`pem.BadCertificate`) and
        every stored certificate, before the data plane takes traffic."""
        c = self.config
        if (c.cert_file is None) != (c.key_file is None):
            raise pem.BadCertificate("set both APPDECK_TLS_CERT and APPDECK_TLS_KEY, or neither")
        if c.cert_file is not None and c.key_file is not None:
            chain, key = pem.load_operator_files(c.cert_file, c.key_file, self._clock())
            self.certificates.put(
                OPERATOR, Certificate(chain.hostnames, chain.pem, key, chain.not_after)
            )
            self._operator = chain
            log.info("serving the operator's certificate for %s", ", ".join(chain.hostnames))
        await self.load()

    async def attach(self, broadcast: Broadcast) -> None:
        """Replica mode: hear "new challenges" at once rather than at the next turn (the
        database stays the truth; a lost message costs one ``follow_seconds``)."""
        self._broadcast = broadcast
        await broadcast.subscribe(CHANNEL, self._doorbell)

    def _doorbell(self, payload: bytes) -> None:
        self._wake.set()

    # -- every replica: follow the database ---------------------------------------------------
    async def load(self) -> int:
        """Put every issued certificate in this replica's data plane (and drop the ones
        gone); returns how many are served."""
        rows = await self.store.all()
        self.states.replace(rows)
        served: dict[str, str] = {}
        soonest: float | None = None
        for row in rows:
            if row.chain_sealed is None or row.key_sealed is None or row.not_after is None:
                continue
            served[row.name] = row.chain_sealed
            soonest = row.not_after if soonest is None else min(soonest, row.not_after)
            if self._loaded.get(row.name) == row.chain_sealed:
                continue
            chain = self._sealer.open(row.chain_sealed).encode()
            key = self._sealer.open(row.key_sealed).encode()
            self.certificates.put(row.name, Certificate(row.hostnames, chain, key, row.not_after))
        for name in set(self._loaded) - set(served):
            self.certificates.drop(name)
        self._loaded = served
        for state, count in self.states.counts().items():
            metrics.CERTIFICATES.labels(state).set(count)
        if soonest is not None:
            metrics.SOONEST_EXPIRY.set(soonest - self._clock())
        return len(served)

    async def follow(self) -> None:
        """Serve exactly the pending challenges the database holds; acknowledge new ones."""
        pending = await self.store.challenges(self._clock())
        self.challenges.replace(pending)
        new = set(pending) - self._acked
        if new:
            if not await self._in_data_plane():
                return  # acknowledged at a later turn, once served
            await self.store.ack(new, self.replica)
        self._acked = set(pending)

    async def _in_data_plane(self) -> bool:
        """Whether the data plane serves the challenges now (bounded wait)."""
        if self._served is None:
            return True
        try:
            async with asyncio.timeout(SERVED_WITHIN_S):
                await self._served()
        except Exception as exc:  # noqa: BLE001 - the data plane's own errors; retried
            log.warning("the data plane did not take the ACME challenges yet: %r", exc)
            return False
        return True

    # -- which names ------------------------------------------------------------------------
    async def reconcile(self) -> list[str]:
        """Rows for the names wanted now (bounded), rows dropped for names gone; starts the
        orders that are due. Returns the names it started."""
        wanted = self._bounded(await self._names.wanted())
        rows = await self.store.all()
        known = {row.name for row in rows}
        waiting = sum(1 for row in rows if row.state != "issued")
        room = max(0, self.config.max_waiting - waiting)
        fresh = [w for w in wanted if w.name not in known]
        if len(fresh) > room:
            log.warning(
                "%d new TLS names wait: %d without a certificate", len(fresh) - room, waiting
            )
        keep = [w for w in wanted if w.name in known] + fresh[:room]
        await self.store.want(keep, self._clock())
        names = {w.name for w in wanted}
        await self.store.forget(row.name for row in rows if row.name not in names)
        await self.store.withdraw((), self._clock())  # challenges an order left behind (a crash)
        if not self.config.directory:
            return []
        started = []
        for row in await self.store.due(self._clock(), limit=4 * self.config.concurrency):
            if row.name in self._inflight:
                continue
            task = asyncio.create_task(self._order_logged(row.name), name=f"tls-order:{row.name}")
            self._inflight[row.name] = task
            task.add_done_callback(self._forget_task)
            started.append(row.name)
        return started

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        for name, held in list(self._inflight.items()):
            if held is task:
                del self._inflight[name]

    def _bounded(self, wanted: list[WantedRow]) -> list[WantedRow]:
        """Drop names the operator's certificate covers, and an app's beyond its bound."""
        per_app: dict[int, int] = {}
        kept = []
        for item in wanted:
            if self._operator is not None and all(
                pem.covers(self._operator.hostnames, host) for host in item.hostnames
            ):
                continue
            if item.app_id is not None:
                count = per_app.get(item.app_id, 0) + len(item.hostnames)
                if count > self.config.max_names_per_app:
                    continue
                per_app[item.app_id] = count
            kept.append(item)
        return kept

    # -- one order --------------------------------------------------------------------------
    async def order(self, name: str) -> None:
        """Obtain (or renew) the certificate ``name``, unless another replica does it now."""
        lease = self.config.order_timeout + self.config.publish_timeout + 60
        if not await self.store.claim(name, self.replica, lease):
            return
        row = await self.store.get(name)
        if row is None:
            return
        self.states.put(row)  # ``issuing`` (or ``renewing``) here at once
        now = self._clock()
        if row.next_try > now:  # another replica renewed it since this one looked
            await self.store.settle(name, self.replica)
            return
        limit = self.config.orders_per_tenant_hour
        if row.tenant_id is not None and not await self.store.take_order(row.tenant_id, now, limit):
            metrics.ORDERS.labels("limited").inc()
            wait = backoff(1, 300.0, 3600.0, self._rng)
            await self.store.settle(
                name,
                self.replica,
                last_error=f"waiting: at most {limit} orders per hour per tenant",
                next_try=now + wait,
                updated_at=now,
            )
            return
        started = time.monotonic()
        try:
            chain, key = await self._obtain(row)
        except ca.CaError as exc:
            await self._failed(row, str(exc))
            return
        except Exception:
            log.exception("ordering the certificate %s failed", name)
            await self._failed(row, "the order failed inside the platform")
            return
        await self._issued(row, chain, key)
        metrics.ISSUANCE.observe(time.monotonic() - started)
        if row.purpose == "domain" and self._verified is not None:
            for host in row.hostnames:
                try:
                    await self._verified(host, "acme")
                except Exception:  # the certificate stands; the domains' own check remains
                    log.exception("marking %s verified after its certificate failed", host)

    async def _order_logged(self, name: str) -> None:
        """:meth:`order` as a background task: a failure is logged, never left unseen; the
        outcome is in :attr:`states` at once (other replicas see it at their next load)."""
        try:
            async with self._slots:  # before the lease: a queued order holds none
                await self.order(name)
            row = await self.store.get(name)
            if row is not None:
                self.states.put(row)
        except Exception:
            log.exception("the order of certificate %s failed", name)

    async def _obtain(self, row: CertRow) -> tuple[pem.Chain, bytes]:
        """The ACME conversation for ``row``: its chain (checked) and fresh key."""
        account = await self._account()
        key = pem.new_key()
        request = pem.csr(key, row.hostnames)
        order = await asyncio.to_thread(ca.begin, account, request)
        tokens = [answer.token for answer in order.answers]
        try:
            if order.answers:
                await self._publish(row.name, {a.token: a.key_authorization for a in order.answers})
            deadline = time.monotonic() + self.config.order_timeout
            chain_pem = await asyncio.to_thread(ca.finish, account, order, deadline)
        finally:
            for token in tokens:
                self.challenges.drop(token)
            await self.store.withdraw(tokens, self._clock())
        try:
            chain = pem.read_chain(chain_pem.encode())
            pem.check_pair(chain, key, self._clock())
        except pem.BadCertificate as exc:
            raise ca.CaError(f"the CA's certificate is unusable: {exc}") from None
        if not set(row.hostnames) <= set(chain.hostnames):
            raise ca.CaError("the CA's certificate does not cover the names ordered")
        return chain, key

    async def _account(self) -> ca.Account:
        """Connect to the CA with the shared account (generated and registered once)."""
        directory = self.config.directory
        assert directory is not None
        stored = await self.store.account(directory)
        if stored is None:
            fresh = self._sealer.seal(ca.new_account_key().decode())
            await self.store.create_account(directory, fresh, self._clock())
            stored = await self.store.account(directory)
            assert stored is not None
        sealed, uri = stored
        key = self._sealer.open(sealed).encode()
        verify: str | bool = str(self.config.ca_bundle) if self.config.ca_bundle else True
        account = await asyncio.to_thread(
            ca.connect, directory, key, uri, self.config.email, verify
        )
        if uri is None:
            await self.store.set_account_uri(directory, account.uri)
        return account

    async def _publish(self, name: str, answers: dict[str, str]) -> None:
        """Answers in the database and this data plane; then wait (bounded) until every live
        replica's data plane serves them too, so the CA finds them wherever it lands."""
        expires = self._clock() + self.config.order_timeout + self.config.publish_timeout
        await self.store.publish(name, answers, expires)
        for token, key_authorization in answers.items():
            self.challenges.put(token, key_authorization)
        if await self._in_data_plane():  # else the wait below runs out (logged there)
            await self.store.ack(answers, self.replica)
        if self._broadcast is not None:
            try:
                await self._broadcast.publish(CHANNEL, b"")
            except Exception:  # noqa: BLE001 - the others follow at their next turn anyway
                log.warning("the TLS doorbell could not be rung; replicas follow in time")
        if self._live is None:
            return
        deadline = time.monotonic() + self.config.publish_timeout
        while True:
            live = await self._live()
            acked = await self.store.acked(answers)
            if all(live <= seen for seen in acked.values()):
                return
            if time.monotonic() > deadline:
                log.warning("challenges for %s: not every replica served them in time", name)
                return
            await asyncio.sleep(0.1)

    async def _issued(self, row: CertRow, chain: pem.Chain, key: bytes) -> None:
        now = self._clock()
        chain_sealed = self._sealer.seal(chain.pem.decode())
        kept = await self.store.settle(
            row.name,
            self.replica,
            state="issued",
            chain_sealed=chain_sealed,
            key_sealed=self._sealer.seal(key.decode()),
            issuer=chain.issuer,
            not_before=chain.not_before,
            not_after=chain.not_after,
            last_error=None,
            attempts=0,
            next_try=renew_at(chain.not_before, chain.not_after),
            updated_at=now,
        )
        if not kept:
            return
        metrics.ORDERS.labels("issued").inc()
        self.certificates.put(row.name, Certificate(row.hostnames, chain.pem, key, chain.not_after))
        self._loaded[row.name] = chain_sealed
        log.info(
            "certificate %s issued by %s until %s", row.name, chain.issuer, iso(chain.not_after)
        )

    async def _failed(self, row: CertRow, reason: str) -> None:
        now = self._clock()
        attempts = row.attempts + 1
        wait = backoff(attempts, self.config.backoff_base, self.config.backoff_cap, self._rng)
        valid = row.not_after is not None and row.not_after > now
        await self.store.settle(
            row.name,
            self.replica,
            state="issued" if valid else "failed",
            last_error=reason,
            attempts=attempts,
            next_try=now + wait,
            updated_at=now,
        )
        metrics.ORDERS.labels("failed").inc()
        log.warning("certificate %s: %s (try %d; next in %.0f s)", row.name, reason, attempts, wait)

    # -- what the agent sees ----------------------------------------------------------------
    async def status_of(self, host: str) -> dict[str, Any] | None:
        """The TLS state of ``host`` for ``get_app_url`` (the domains' ``TlsStatus`` port);
        None when nothing here manages it."""
        name = normalize(host) if len(host) <= 300 else None
        if name is None:
            return None
        host = name
        row = await self.store.get(cert_name(host))
        if row is None:
            chain = self._operator
            if chain is not None and pem.covers(chain.hostnames, host):
                return {
                    "state": "issued",
                    "not_after": iso(chain.not_after),
                    "renew_at": None,
                    "issuer": chain.issuer,
                    "error": None,
                    "next_try": None,
                }
            return None
        self.states.put(row)
        return describe(row, self._clock(), bool(self.config.directory))

    # -- the loop ---------------------------------------------------------------------------
    async def run_forever(self, stopping: asyncio.Event) -> None:
        """Follow challenges every ``follow_seconds``; load, reconcile and order every
        ``check_seconds``. Stops between database writes when ``stopping`` is set."""
        next_check = 0.0
        while not stopping.is_set():
            try:
                await self.follow()
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.config.check_seconds
                    await self.load()
                    await self.reconcile()
            except Exception:
                log.exception("the TLS loop failed a turn")
            await self._pause(stopping)
        await self.close()

    async def _pause(self, stopping: asyncio.Event) -> None:
        """Until the next turn, the doorbell, or ``stopping``."""
        waits = [asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(
                waits, timeout=self.config.follow_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiting in waits:
                waiting.cancel()
        self._wake.clear()

    async def settled(self) -> None:
        """Wait for the orders this replica runs now (the caller bounds the wait)."""
        while self._inflight:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)

    async def close(self) -> None:
        """Let orders in flight end (bounded), then cancel the rest."""
        tasks = list(self._inflight.values())
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.config.publish_timeout)
            for task in late:
                task.cancel()
