"""The data plane's lease: one process at a time changes this host's HAProxy (writes its
files, starts or reloads it, sets weights), and one that stops in the middle of a change
(paused by SIGSTOP, starved, killed) holds the others up for :data:`LEASE_S` at most, not
for as long as it is stopped.

    lease = PlaneLease(layout.lease)
    async with lease.hold() as held:   # waits (bounded) for the holder, or its lease's end
        held.check()                   # before each change to HAProxy: LeaseLost if taken over
        ...

The lease is a small file (one fixed-width record, ``holder fence expires``; ``expires``
on the host's monotonic clock, which every process on the host shares) read and rewritten
in place under its flock, held for that alone (microseconds), never across the work. While
a block runs, its lease is renewed every ``ttl / 3``. A holder stopped past its lease's end
is taken over: the taker's fence is one higher, and the stopped one, once it runs again,
finds the file no longer names it at its next :meth:`Held.check` and changes nothing more.
(A flock held for the whole change stalled every route change on the host while its holder
was stopped: ~35 s a change for the other replicas, each waiting out its bounds.)
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

LEASE_S: Final = 5.0
"""How long a lease lasts unrenewed: the longest a stopped holder holds the others up."""
WAIT_S: Final = 20.0
"""How long :meth:`PlaneLease.hold` waits for a lease held and renewed by a running holder."""
POLL_S: Final = 0.02
NAMES_TRIES: Final = 50
RECORD: Final = 128
"""The record's fixed width in bytes (``holder fence expires``, padded)."""


class LeaseBusy(RuntimeError):
    """Another process held the data plane's lease (renewing it) for the whole wait."""


class LeaseLost(RuntimeError):
    """This holder's lease was taken over (it was stopped past its end): it changes nothing
    more; the taker does."""


@dataclass(frozen=True, slots=True)
class _State:
    holder: str
    fence: int
    expires: float

    @classmethod
    def parse(cls, text: str) -> _State | None:
        try:
            holder, fence, expires = text.split()
            return cls(holder, int(fence), float(expires))
        except ValueError:
            return None

    def text(self) -> str:
        return f"{self.holder} {self.fence} {self.expires!r}"


class PlaneLease:
    """The lease of one data plane (its ``lock`` and ``path`` files), taken as ``holder``."""

    def __init__(self, path: Path, *, ttl: float = LEASE_S) -> None:
        self.path = path
        self.ttl = ttl
        self.holder = f"{os.getpid()}:{secrets.token_hex(4)}"

    @contextlib.asynccontextmanager
    async def hold(self, wait_s: float = WAIT_S) -> AsyncIterator[Held]:
        """The lease, renewed while the block runs and let go after; :class:`LeaseBusy`
        when a running holder kept it for ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while (fence := self._take()) is None:
            if time.monotonic() > deadline:
                raise LeaseBusy("another process holds the data plane's lease")
            await asyncio.sleep(POLL_S)
        held = Held(self, fence)
        renewer = asyncio.create_task(held.renew_every(self.ttl / 3), name="haproxy-lease")
        try:
            yield held
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            self._give_back(fence)

    def _take(self) -> int | None:
        """The fence of the lease just taken (or kept), None while another holder's runs."""
        with self._guarded() as fd:
            if fd is None:
                return None
            now = time.monotonic()
            current = _read(fd)
            if current is None:
                fence = 1
            elif current.holder == self.holder:
                fence = current.fence
            elif current.expires <= now:
                fence = current.fence + 1
            else:
                return None
            _write(fd, _State(self.holder, fence, now + self.ttl))
            return fence

    def renew(self, fence: int) -> bool | None:
        """Extend the lease taken with ``fence``: False when it is no longer this holder's,
        None when the file was busy (try again)."""
        with self._guarded() as fd:
            if fd is None:
                return None
            if not self._names(fd, fence):
                return False
            _write(fd, _State(self.holder, fence, time.monotonic() + self.ttl))
            return True

    def names(self, fence: int) -> bool:
        """Whether the file still names this holder with ``fence`` (its flock is held for
        microseconds: a few tries, then not known to: False)."""
        for _ in range(NAMES_TRIES):
            with self._guarded() as fd:
                if fd is not None:
                    return self._names(fd, fence)
            time.sleep(POLL_S / 20)
        return False

    def _names(self, fd: int, fence: int) -> bool:
        current = _read(fd)
        return current is not None and (current.holder, current.fence) == (self.holder, fence)

    def _give_back(self, fence: int) -> None:
        with self._guarded() as fd:
            if fd is not None and self._names(fd, fence):
                _write(fd, _State(self.holder, fence, 0.0))  # the fence stays: it only grows

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[int | None]:
        """The lease file, open and flocked (not waited for: None when another process
        has it now)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            yield fd
        finally:
            os.close(fd)  # releases the flock


def _read(fd: int) -> _State | None:
    return _State.parse(os.pread(fd, RECORD, 0).decode(errors="replace"))


def _write(fd: int, state: _State) -> None:
    """Rewrite the record in place, at its fixed width: no rename, no truncation (on ext4
    either makes the write wait for the disk: ~1-2 ms each, twice a route change)."""
    os.pwrite(fd, state.text().encode().ljust(RECORD - 1) + b"\n", 0)


class Held:
    """One hold of the lease (see the module docs)."""

    def __init__(self, lease: PlaneLease, fence: int) -> None:
        self.lease = lease
        self.fence = fence
        self.lost = False

    def check(self) -> None:
        """:class:`LeaseLost` when another holder took the lease over: call it right
        before each change to HAProxy (it reads the file: a holder just woken from a stop
        learns it here, whatever its renewer has not run yet)."""
        if self.lost or not self.lease.names(self.fence):
            self.lost = True
            raise LeaseLost(f"the data plane's lease (fence {self.fence}) was taken over")

    async def renew_every(self, every_s: float) -> None:
        while not self.lost:
            await asyncio.sleep(every_s)
            renewed = self.lease.renew(self.fence)
            while renewed is None:  # the file's flock is held for microseconds
                await asyncio.sleep(POLL_S)
                renewed = self.lease.renew(self.fence)
            self.lost = not renewed
