"""A release's prepared workspace as one tar stream (what a Kubernetes pod fetches: issue 25).

The workspace is tenant-written (its source, then whatever its build step made), so this
module reads it under the same rules as :mod:`.workspace`'s copy, and like the copy it runs
*inside* the app's sandbox, as the app's uid, with the workspace mounted read-only at
``/source`` (``python3 -I -S -c <this file>``): root never reads what a tenant wrote, and a
link that escapes resolves inside the sandbox, where nothing of the host's is.

What the tar holds:

- directories, regular files and symlinks, under relative names made from the walk itself
  (never absolute, never ``..``, never below a symlink: a member is never written through a
  link an earlier member made);
- a symlink *as a link* (its target as it is: a ``.venv``'s ``python -> /usr/bin/python3``
  must stay one), never followed: the pod resolves it in its own filesystem;
- no FIFO, socket or device (skipped and counted); a hard link as a plain file; modes without
  set-id or sticky bits; owner 0 with no names (the pod unpacks with ``--no-same-owner``);
- every file opened with ``O_NOFOLLOW`` and checked (type, inode, size) against the scan: a
  file swapped or changed between the scan and the write ends the stream with an error.

Protocol: the script first prints one JSON line, ``{"size": N, "entries": k, "skipped": s}``
(``N`` the exact byte count of the tar that follows) or ``{"error": "quota" | "invalid",
"message": ...}`` (exit 1) — so a workspace over the limit is refused before any byte of it
is sent — then the tar (PAX format). It is stdlib-only: it runs in the sandbox.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Final

FORMAT: Final = tarfile.PAX_FORMAT
ENCODING: Final = "utf-8"
ERRORS: Final = "surrogateescape"
"""A file name that is not UTF-8 goes into the tar byte for byte."""
BLOCK: Final = tarfile.BLOCKSIZE
RECORD: Final = tarfile.RECORDSIZE
CHUNK: Final = 1024 * 1024


class Refused(Exception):
    """The workspace cannot be served: ``kind`` is ``quota`` or ``invalid``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class Entry:
    info: tarfile.TarInfo
    path: str
    """Where it is (under the root), to open it again; the identity it had when scanned:"""
    device: int
    inode: int


@dataclass(frozen=True, slots=True)
class Scan:
    entries: list[Entry]
    size: int
    """The exact length of the tar :func:`write` makes of ``entries``."""
    skipped: int


def scan(root: str, max_bytes: int, max_entries: int) -> Scan:
    """What the tar of ``root`` will hold, and its size; :class:`Refused` over the limits."""
    entries: list[Entry] = []
    size = 0
    skipped = 0

    def walk_error(error: OSError) -> None:
        raise Refused("invalid", f"cannot read the workspace: {error.strerror}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error, followlinks=False):
        relative = os.path.relpath(dirpath, root)
        prefix = "" if relative == "." else relative + "/"
        descend = []
        for name in sorted(dirnames) + sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                found = os.lstat(path)
            except OSError as error:
                raise Refused(
                    "invalid", f"cannot read {prefix}{name!r}: {error.strerror}"
                ) from None
            info = tarfile.TarInfo(prefix + name)
            info.mode = stat.S_IMODE(found.st_mode) & 0o777
            info.mtime = max(0, int(found.st_mtime))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if stat.S_ISDIR(found.st_mode):
                info.type = tarfile.DIRTYPE
                descend.append(name)
            elif stat.S_ISLNK(found.st_mode):
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink(path)
                info.mode = 0o777
            elif stat.S_ISREG(found.st_mode):
                if not os.access(path, os.R_OK, follow_symlinks=False):
                    raise Refused("invalid", f"{prefix}{name!r} cannot be read by the app")
                info.type = tarfile.REGTYPE
                info.size = found.st_size
            else:  # a FIFO, socket or device: no place in a workspace
                skipped += 1
                continue
            entries.append(Entry(info, path, found.st_dev, found.st_ino))
            size += len(info.tobuf(FORMAT, ENCODING, ERRORS)) + _padded(info.size)
            if len(entries) > max_entries:
                raise Refused("quota", f"the workspace has more than {max_entries} entries")
            if size + 2 * BLOCK > max_bytes:
                raise Refused("quota", f"the workspace's tar is larger than {_mib(max_bytes)}")
        # os.walk descends into what is left in dirnames: directories, never links to them
        dirnames[:] = [name for name in dirnames if name in descend]
        dirnames.sort()
    total = size + 2 * BLOCK  # the end-of-archive blocks, then the last record's padding
    return Scan(entries, total + (-total % RECORD), skipped)


def write(found: Scan, out: BinaryIO) -> None:
    """The tar of ``found`` on ``out``, exactly ``found.size`` bytes; :class:`Refused` when a
    file is no longer what was scanned (the stream is then cut short)."""
    with tarfile.open(
        fileobj=out, mode="w|", format=FORMAT, encoding=ENCODING, errors=ERRORS
    ) as archive:
        for entry in found.entries:
            if entry.info.type != tarfile.REGTYPE:
                archive.addfile(entry.info)
                continue
            try:
                fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError as error:
                raise Refused("invalid", f"{entry.info.name!r}: {error.strerror}") from None
            with os.fdopen(fd, "rb") as handle:
                now = os.fstat(handle.fileno())
                if (
                    not stat.S_ISREG(now.st_mode)
                    or (now.st_dev, now.st_ino) != (entry.device, entry.inode)
                    or now.st_size != entry.info.size
                ):
                    raise Refused("invalid", f"{entry.info.name!r} changed while it was read")
                archive.addfile(entry.info, handle)


def _padded(size: int) -> int:
    return size + (-size % BLOCK)


def _mib(count: int) -> str:
    return f"{count / (1024 * 1024):g} MiB"


def main(argv: list[str]) -> int:
    """``<root> <max_bytes> <max_entries>``: the JSON line, then the tar, on stdout."""
    root, max_bytes, max_entries = argv
    out = sys.stdout.buffer
    try:
        found = scan(root, int(max_bytes), int(max_entries))
    except Refused as refused:
        out.write(json.dumps({"error": refused.kind, "message": refused.message}).encode() + b"\n")
        return 1
    head = {"size": found.size, "entries": len(found.entries), "skipped": found.skipped}
    out.write(json.dumps(head).encode() + b"\n")
    out.flush()
    try:
        write(found, out)
    except (Refused, OSError) as error:  # the stream is cut short: the reader sees it
        print(getattr(error, "message", None) or str(error), file=sys.stderr)
        return 1
    out.flush()
    return 0
