"""The app lock: one deploy, rollback or restart of an app at a time, cluster-wide.

A :class:`Hold` is a lease on the app's ``app_locks`` row (:mod:`appdeck.storage.app_locks`)
under a holder name of its own (``<instance>:<random>``), so two operations of one process
are two holders too. While it runs, the hold renews the lease every ``ttl / 3``; a renewal
refused (someone took the app over) or failing past the lease's end marks it ``lost``, and
the writes it guards stop: the database refuses them anyway (every deployment write of the
holder carries the fence), this only stops them sooner.

The embedded default uses the same table on SQLite; one process then never loses a lease
unless its event loop stalls past ``ttl``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Final

from appdeck.common.errors import Conflict
from appdeck.storage.app_locks import AppLockStore, Fenced, Lease

log = logging.getLogger("appdeck.deploy")

LEASE_TTL_S: Final = 15.0
"""How long a lease lasts without renewal: a dead replica's app is free again after this."""
WAIT_POLL_S: Final = 0.25
WAIT_S: Final = 300.0
"""How long a rollback or restart waits for the app's lock before answering ``conflict``."""
UNTIMED: Final[contextlib.AbstractContextManager[None]] = contextlib.nullcontext()


class Hold:
    """One operation's lease on an app (see the module docs)."""

    def __init__(self, locks: AppLocks, lease: Lease) -> None:
        self._locks = locks
        self.lease = lease
        self.lost = False
        self._renewer: asyncio.Task[None] | None = None
        self._let_go = False

    @property
    def app_id(self) -> int:
        return self.lease.app_id

    def check(self) -> None:
        """Raise :class:`Fenced` once the lease is known lost (before writing anything)."""
        if self.lost:
            raise Fenced(f"app {self.app_id}: the lease fenced {self.lease.fence} was lost")

    async def confirm(self) -> bool:
        """Take the lease again under the same holder (renewing it): False when another
        holder took it meanwhile (then the hold is lost)."""
        store = self._locks.store
        again = await store.acquire(self.app_id, self.lease.holder, self._locks.ttl)
        if again is None or again.fence != self.lease.fence:
            if again is not None:  # taken over and let go since: not ours to keep
                await store.release(again)
            self.lost = True
            return False
        self.lease = again
        return True

    def start(self) -> None:
        """Renew the lease in the background until :meth:`release`."""
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew(), name=f"lease-{self.app_id}")

    async def _renew(self) -> None:
        ttl = self._locks.ttl
        good_until = time.monotonic() + ttl
        while not self.lost:
            await asyncio.sleep(ttl / 3)
            try:
                renewed = await self._locks.store.renew(self.lease, ttl)
            except Exception:  # the database is away: try again until the lease ends
                log.exception("app %s: renewing its lock failed", self.app_id)
                if time.monotonic() >= good_until:
                    self.lost = True
                continue
            if renewed is None:
                self.lost = True
                break
            self.lease = renewed
            good_until = time.monotonic() + ttl
        log.warning(
            "app %s: lost its lock (fence %s); this operation writes no more",
            self.app_id,
            self.lease.fence,
        )

    async def quiet(self) -> None:
        """Stop renewing: before the holder's last write, which lets the lease go with it
        (a renewal after that write would find the lease expired, and call it lost). The
        lease lasts ``ttl`` from its last renewal, far longer than one write."""
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    def let_go(self) -> None:
        """The lease was let go in the transaction of the holder's last write:
        :meth:`release` writes nothing more."""
        self._let_go = True

    async def release(self) -> None:
        """Stop renewing and let the lease go (a lost one is left to its new holder, one let
        go already is left as it is)."""
        self._locks.holds.discard(self)
        await self.quiet()
        if not self.lost and not self._let_go:
            try:
                await self._locks.store.release(self.lease)
            except Exception:  # it expires by itself
                log.exception("app %s: releasing its lock failed", self.app_id)


class AppLocks:
    """Takes app leases for this replica (``instance_id``)."""

    def __init__(self, store: AppLockStore, instance_id: str, *, ttl: float = LEASE_TTL_S) -> None:
        self.store = store
        self.instance_id = instance_id
        self.ttl = ttl
        self.holds: set[Hold] = set()
        """The holds taken and not yet released (:meth:`held` counts them for metrics)."""

    def held(self) -> int:
        """How many app leases this replica holds now (taken, not released, not lost)."""
        return sum(1 for hold in self.holds if not hold.lost)

    def _hold(self, lease: Lease) -> Hold:
        hold = Hold(self, lease)
        self.holds.add(hold)
        return hold

    def holder(self) -> str:
        return f"{self.instance_id}:{secrets.token_hex(4)}"

    async def try_take(self, app_id: int) -> Hold | None:
        """The app's lease under a new holder, or ``None`` when someone holds it."""
        lease = await self.store.acquire(app_id, self.holder(), self.ttl)
        return None if lease is None else self._hold(lease)

    async def take(self, app_id: int, *, wait_s: float = WAIT_S) -> Hold:
        """The app's lease, waiting up to ``wait_s`` for its holder to let it go (or lose
        it); then ``conflict``."""
        holder = self.holder()
        deadline = time.monotonic() + wait_s
        while True:
            lease = await self.store.acquire(app_id, holder, self.ttl)
            if lease is not None:
                return self._hold(lease)
            if time.monotonic() >= deadline:
                raise Conflict(
                    "another deploy, rollback or restart of this app is under way",
                    hint="wait for it (list_deployments), then try again",
                )
            await asyncio.sleep(WAIT_POLL_S)

    @contextlib.asynccontextmanager
    async def hold(
        self,
        app_id: int,
        *,
        wait_s: float = WAIT_S,
        timed: contextlib.AbstractContextManager[None] = UNTIMED,
    ) -> AsyncIterator[Hold]:
        """Take the lease (waiting, inside ``timed``), renew it while the block runs, release
        it after."""
        with timed:
            held = await self.take(app_id, wait_s=wait_s)
        held.start()
        try:
            yield held
        finally:
            await held.release()
