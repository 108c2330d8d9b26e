"""Network namespaces: how a sandboxed instance gets a loopback of its own, and how the
platform reaches into it.

Every sandboxed instance runs in a network namespace that holds nothing but ``lo``: it can
listen on any port (its own ``127.0.0.1:8000`` is not the host's), and it reaches neither the
control plane, nor host services (Redis, PostgreSQL), nor other apps. The platform reaches
*it* without any forwarder process: a socket belongs to the namespace of the thread that
created it, so :func:`socket_in` enters the namespace (``setns``) on the calling thread just
long enough to create a socket, then returns to the host's. Connecting, reading and writing
then happen on the event loop as for any socket. ``setns`` of a network namespace is
per-thread and allowed in a threaded process; it needs ``CAP_SYS_ADMIN`` (root).

Namespaces made here have no names (nothing under ``/run/netns``): each lives while a process
or a descriptor holds it, so two installs on one host have nothing here to share or clash on
(see :mod:`appdeck.runtime.install`).

This module is stdlib-only: the instance shim, which runs by path under ``python -I -S``,
loads it to create its namespace (:func:`unshare_loopback_only`).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

_libc: ctypes.CDLL | None = None
_host = threading.local()


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _check(result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace ``fd`` refers to."""
    _check(int(_c().setns(fd, CLONE_NEWNET)))


def unshare_loopback_only() -> None:
    """Move this process (its calling thread: call it before starting any other) into a new
    network namespace with only ``lo``, up; ports below 1024 may be bound by anyone there
    (the namespace is the app's alone)."""
    _check(int(_c().unshare(CLONE_NEWNET)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
    try:
        with open("/proc/sys/net/ipv4/ip_unprivileged_port_start", "w", encoding="ascii") as f:
            f.write("0")
    except OSError:
        pass  # an older kernel: the app keeps to ports >= 1024


def new_loopback_only() -> int:
    """A new loopback-only network namespace, as an fd (the caller closes it; the namespace
    lives while a process or an fd holds it). Made on a short-lived thread of its own, since
    ``unshare`` moves only the calling thread: the server's threads stay where they are."""
    made: list[int] = []
    failed: list[BaseException] = []

    def make() -> None:
        try:
            unshare_loopback_only()
            made.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            failed.append(exc)

    worker = threading.Thread(target=make, name="appdeck-netns")
    worker.start()
    worker.join()
    if failed:
        raise failed[0]
    return made[0]


def host_inode() -> int:
    """The inode of the server's own network namespace (to tell a namespace from it)."""
    return os.stat("/proc/self/ns/net").st_ino


def open_of(pid: int) -> int | None:
    """An fd of the network namespace of process ``pid``, or None when it has none of its
    own (yet): it is gone, or it still shares the server's namespace. The caller checks that
    ``pid`` is still the process it meant (its start ticks) *after* this returns."""
    try:
        fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if os.fstat(fd).st_ino == host_inode():
        os.close(fd)
        return None
    return fd


def _home_fd() -> int:
    fd: int | None = getattr(_host, "fd", None)
    if fd is None:
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        _host.fd = fd
    return fd


def socket_in(netns_fd: int, family: int = socket.AF_INET) -> socket.socket:
    """A non-blocking TCP socket that belongs to the namespace ``netns_fd``; the calling
    thread is back in its own namespace when this returns (or raises)."""
    home = _home_fd()
    setns(netns_fd)
    try:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    finally:
        setns(home)
    sock.setblocking(False)
    return sock
