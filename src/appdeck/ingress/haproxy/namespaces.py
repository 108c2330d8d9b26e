"""Named network namespaces for HAProxy's ``namespace <name>`` server keyword.

A sandboxed instance listens on the loopback of its own, unnamed network namespace (the
driver holds an fd of it). HAProxy opens ``/run/netns/<name>``, so each routed instance's
namespace is bind-mounted there as ``appdeck-<install>-<release>.<index>-<inode>``: the
install id keeps two installs apart, the inode makes a restarted instance (a new namespace)
a new name (and so a reload: the plane checks for one every second, :meth:`moved`, since
a crash's restart changes no route). Only root writes ``/run/netns``: no tenant picks a name there.
Mounts are made when an instance is routed and removed (umount, unlink) soon after it leaves
every route (:meth:`Namespaces.sweep`, which the plane runs ~0.5 s after a render), and all of
this install's on :meth:`Namespaces.clear`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

log = logging.getLogger("appdeck.ingress.haproxy")

NETNS_DIR: Final = Path("/run/netns")
_MS_BIND: Final = 4096
_MNT_DETACH: Final = 2
MAX_STACKED: Final = 16
"""Binds unmounted from one name at most (each replica on the host may have made one)."""


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once: ``find_library`` runs ``ldconfig -p`` (a fork and exec,
    3-10 ms) each time, and a rollback's route change mounts and unmounts four names."""
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _bind(source: str, target: Path) -> None:
    if _libc().mount(source.encode(), str(target).encode(), None, _MS_BIND, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _unmount(target: Path) -> None:
    """Unmount every bind on ``target`` (two replicas of one install may both have named an
    instance at once: two binds, one over the other), then remove it; a name still busy is
    logged and left for the next sweep."""
    libc = _libc()
    for _ in range(MAX_STACKED):
        if libc.umount2(str(target).encode(), _MNT_DETACH) != 0:
            break  # not (or no longer) a mount point
    try:
        target.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove the namespace name %s: %s", target.name, exc)


class Namespaces:
    """This install's named namespaces. ``fd_of("<release>.<index>")`` is the driver's
    (:meth:`appdeck.runtime.local.LocalDriver.netns_fd`): an fd valid while the instance
    runs, or None."""

    def __init__(
        self,
        install_id: str,
        fd_of: Callable[[str], int | None],
        *,
        directory: Path = NETNS_DIR,
    ) -> None:
        self.prefix = f"appdeck-{install_id}-"
        self.fd_of = fd_of
        self.directory = directory
        self._names: dict[str, str] = {}
        """Instance key -> the name mounted for it now."""

    def name(self, key: str) -> str | None:
        """The mounted name of instance ``key`` (after :meth:`ensure`), or None."""
        return self._names.get(key)

    def ensure(self, keys: Iterable[str]) -> None:
        """Mount a name for each instance in ``keys`` (those the driver has a namespace of);
        :meth:`sweep` removes this install's other names (the plane calls it soon after,
        off the path of the route change: an unmount blocks ~0.2 ms)."""
        wanted: dict[str, str] = {}
        for key in set(keys):
            fd = self.fd_of(key)
            if fd is None:
                log.warning("instance %s has no network namespace to route to", key)
                continue
            try:
                inode = os.fstat(fd).st_ino
            except OSError:
                continue
            name = f"{self.prefix}{key}-{inode}"
            target = self.directory / name
            if not _mounted(target, inode):
                try:
                    self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
                    target.touch(mode=0o444, exist_ok=True)
                    _bind(f"/proc/{os.getpid()}/fd/{fd}", target)
                except OSError as exc:
                    log.error("could not name the namespace of %s: %s", key, exc)
                    _unmount(target)
                    continue
            wanted[key] = name
        self._names = wanted

    def sweep(self) -> None:
        """Remove this install's names that the last :meth:`ensure` did not want."""
        self._sweep(set(self._names.values()))

    def moved(self) -> bool:
        """Whether an instance named here has a new namespace now (it crashed and was
        restarted: same key, another namespace): HAProxy must be told its new name."""
        for key, name in list(self._names.items()):
            fd = self.fd_of(key)
            if fd is None:
                continue  # gone, or not restarted yet: a route change takes it away
            try:
                inode = os.fstat(fd).st_ino
            except OSError:
                continue
            if name != f"{self.prefix}{key}-{inode}":
                return True
        return False

    def clear(self) -> None:
        """Remove every name of this install."""
        self._names = {}
        self._sweep(set())

    def _sweep(self, keep: set[str]) -> None:
        try:
            entries = list(self.directory.iterdir())
        except FileNotFoundError:
            return
        for entry in entries:
            if entry.name.startswith(self.prefix) and entry.name not in keep:
                _unmount(entry)


def _mounted(target: Path, inode: int) -> bool:
    try:
        return target.stat().st_ino == inode
    except OSError:
        return False
