"""The control plane's servers behind HAProxy: one per replica on the host.

Replicas share one HAProxy, and each renders the whole config when it reloads it: each must
list every replica's listener in the control plane's backend, not only its own. So each
replica registers its listener in ``control.servers`` (the edge directory, shared by the
install's replicas) before every start or reload, and the backend lists what the file holds:

    control = ControlServers(paths.root / "control.servers", ("127.0.0.1:8080",))
    control.register()    # before HAProxy starts or reloads (under the plane's lock)
    control.all()         # the backend's servers: this replica's and the others' listening
    control.unregister()  # this replica stops: its servers leave the file

A replica that died without unregistering is dropped by the next one that registers once its
port refuses connections (HAProxy's health check has marked it down meanwhile). Only
``ip:port`` lines are read back: nothing else reaches the config.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from appdeck.common.flocks import flock_within
from appdeck.ingress.haproxy.edge import ADDRESS, write_atomic

log = logging.getLogger("appdeck.ingress")

PROBE_S: Final = 0.2
"""How long a registered listener may take to accept a connection before it counts as gone
(loopback: a live one accepts at once, a dead one refuses at once)."""
MAX_SERVERS: Final = 64
LOCK_WITHIN_S: Final = 0.2
"""How long a change of ``control.servers`` waits for its lock (held for a read and a write)."""


def listening(address: str) -> bool:
    """Whether something accepts TCP connections at ``address`` (``ip:port``, ``[v6]:port``)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_S):
            return True
    except OSError:
        return False


class ControlServers:
    """This replica's control plane listeners (``own``) and the others' from ``path``."""

    def __init__(self, path: Path, own: Sequence[str]) -> None:
        if any(not ADDRESS.fullmatch(a) for a in own):
            raise ValueError("a control plane server is ip:port")
        self.path = path
        self.own = tuple(own)

    def all(self) -> list[str]:
        """Every registered listener and this replica's, sorted (a stable config)."""
        return sorted({*self.own, *self._read()})[:MAX_SERVERS]

    def register(self) -> None:
        """Add this replica's listeners; drop other entries nobody listens on any more.
        Skipped (logged) when the file's lock is not had in time: :meth:`all` lists this
        replica's listeners anyway, and the next reload registers them."""
        if not self.own:
            return
        with self._locked() as held:
            if held:
                others = [a for a in self._read() if a not in self.own and listening(a)]
                self._write([*self.own, *others])

    def unregister(self) -> None:
        """Remove this replica's listeners (skipped when the lock is not had in time: the
        next replica to register drops them once nothing listens there)."""
        if not self.own:
            return
        with self._locked() as held:
            if held:
                self._write([a for a in self._read() if a not in self.own])

    def _read(self) -> list[str]:
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        return [line for line in lines if ADDRESS.fullmatch(line)]

    def _write(self, addresses: Sequence[str]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        text = "".join(f"{a}\n" for a in sorted(set(addresses))[:MAX_SERVERS])
        write_atomic(self.path, text.encode())

    @contextlib.contextmanager
    def _locked(self) -> Iterator[bool]:
        """Replicas registering at once (a file lock beside the list): whether it was had
        within :data:`LOCK_WITHIN_S`. Taken in the event loop, at every reload: never waited
        on for long, since a replica stopped inside it (SIGSTOP, a paused VM) would stall
        every other replica's loop for as long as it is away."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            held = flock_within(fd, LOCK_WITHIN_S)
            if not held:
                log.warning("%s is locked by a replica that does not let go", self.path)
            yield held
        finally:
            os.close(fd)
