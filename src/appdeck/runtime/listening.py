"""Which TCP ports an instance listens on, read from the kernel (``/proc``), to say why a
health check found nobody: "nothing listens on $PORT=8000; the app listens on 5000".

Everything here is the kernel's account of the instance (socket tables, fd links), never a
file the app wrote. A sandboxed instance has a network namespace of its own, so every
listening socket in it is the app's; an unsandboxed one shares the host's, so only sockets
held by the instance's process group count. Bounded: at most ``MAX_PROCS`` processes and
``MAX_FDS`` fds each are looked at.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

PROC: Final = Path("/proc")
LISTEN: Final = "0A"
MAX_PROCS: Final = 4096
MAX_FDS: Final = 4096
MAX_LINES: Final = 65_536


def listening_ports(pid: int, *, own_netns: bool, proc: Path = PROC) -> set[int] | None:
    """The ports the instance rooted at ``pid`` listens on; None when it can't be told
    (the process is gone, /proc unreadable)."""
    try:
        sockets = _listening(proc / str(pid) / "net")
        if own_netns:
            return set(sockets.values())
        held = _socket_inodes(_group(pid, proc), proc)
    except OSError:
        return None
    return {port for inode, port in sockets.items() if inode in held}


def _listening(net: Path) -> dict[str, int]:
    """inode -> port of every listening TCP socket in ``net/tcp`` and ``net/tcp6``."""
    found: dict[str, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            with (net / name).open() as table:
                next(table, None)  # the header
                for count, line in enumerate(table):
                    if count >= MAX_LINES:
                        break
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == LISTEN:
                        found[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
        except FileNotFoundError:
            continue  # no IPv6 here
    return found


def _group(pid: int, proc: Path) -> list[int]:
    """The processes of ``pid``'s process group (the shim's group holds the app)."""
    group = os.getpgid(pid)
    members: list[int] = []
    for count, entry in enumerate(os.scandir(proc)):
        if count >= MAX_PROCS * 4 or len(members) >= MAX_PROCS:
            break
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) == group:
                members.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return members


def _socket_inodes(pids: list[int], proc: Path) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            with os.scandir(proc / str(pid) / "fd") as fds:
                for count, fd in enumerate(fds):
                    if count >= MAX_FDS:
                        break
                    try:
                        target = os.readlink(fd.path)
                    except OSError:
                        continue
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def explain(port: int, listening: set[int] | None) -> str | None:
    """In words: what listens, against the port the platform told the app (``$PORT``)."""
    if listening is None or port in listening:
        return None
    if not listening:
        return f"nothing listens on $PORT={port} (the app listens on no TCP port yet)"
    others = ", ".join(str(p) for p in sorted(listening)[:5])
    return (
        f"nothing listens on $PORT={port}, but the app listens on {others}: listen on the "
        "port in $PORT"
    )
