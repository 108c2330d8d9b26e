"""The JSON-lines logs of releases: the writer the instance shims and the driver append with
(one line per JSON object, numbered, rotated at a cap, safe between processes through a lock
file), and the line splitter that turns a byte stream into bounded lines.

Stdlib-only: the instance shim, which runs by path under ``python -I -S``, loads this file
beside it. Reading the logs back is :mod:`.logs`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

LINE_MAX_BYTES = 8 * 1024
"""A log line longer than this (in bytes, before JSON escaping) is cut and marked."""

LOG_MAX_BYTES = 10 * 1024 * 1024
"""The default on-disk cap of one log (current file + one rotated file) of one release."""

TRUNCATED_MARK = " …[truncated]"
_SEQ_WIDTH = 20
LOCK_WITHIN_S = 0.25
"""How long a batch waits for the log's lock before its lines are dropped. Every holder keeps
it for one append (microseconds); a holder stopped inside it (SIGSTOP, a paused VM) would
otherwise stall every writer of the release: a server's whole event loop (the writes are
synchronous), or a shim and, once its pipe filled, the app that prints."""
_LOCK_FIRST_PAUSE_S = 0.0005
_LOCK_MAX_PAUSE_S = 0.01


def lock_within(fd: int, seconds: float = LOCK_WITHIN_S) -> None:
    """An exclusive ``flock`` on ``fd``, waited for at most ``seconds`` (short pauses, doubling);
    :class:`TimeoutError` after that."""
    deadline = time.monotonic() + seconds
    pause = _LOCK_FIRST_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    "the log's lock is held by a writer that does not let go"
                ) from None
        time.sleep(pause)
        pause = min(pause * 2, _LOCK_MAX_PAUSE_S)


class LineSplitter:
    """Turns chunks of a byte stream into text lines, each at most ``limit`` bytes.

    A longer line is cut at the limit, marked, and the rest of it (up to the next newline) is
    dropped. Invalid UTF-8 is replaced, a trailing ``\\r`` removed.
    """

    def __init__(self, limit: int = LINE_MAX_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._discarding = False

    def feed(self, data: bytes) -> list[str]:
        lines: list[str] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            piece = data[start:newline]
            start = newline + 1
            if self._discarding:
                self._discarding = False
                continue
            self._buffer += piece
            lines.append(self._take())
        if not self._discarding:
            self._buffer += data[start:]
            if len(self._buffer) > self.limit:
                lines.append(self._take())
                self._discarding = True
        return lines

    def flush(self) -> list[str]:
        """What is left when the stream ends (a last line without a newline)."""
        self._discarding = False
        return [self._take()] if self._buffer else []

    def _take(self) -> str:
        raw = bytes(self._buffer)
        self._buffer.clear()
        if len(raw) > self.limit:
            return raw[: self.limit].decode("utf-8", "replace") + TRUNCATED_MARK
        return raw.removesuffix(b"\r").decode("utf-8", "replace")


def encode_line(seq: int, ts: float, stream: str, text: str, instance: int | None) -> bytes:
    """One JSON line; ``seq`` first, so that readers can find it without parsing the line."""
    entry: dict[str, object] = {"seq": seq, "ts": round(ts, 6), "stream": stream}
    if instance is not None:
        entry["instance"] = instance
    entry["text"] = text
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def line_seq(raw: bytes) -> int | None:
    """The ``seq`` of an encoded line, without parsing it; None for anything malformed."""
    if not raw.startswith(b'{"seq":') or not raw.endswith(b"\n"):
        return None
    comma = raw.find(b",", 7, 40)
    try:
        return int(raw[7:comma]) if comma > 0 else None
    except ValueError:
        return None


def rotated_path(path: Path) -> Path:
    return path.with_name(path.name + ".1")


def seq_path(path: Path) -> Path:
    return path.with_name(path.name + ".seq")


class LogWriter:
    """Appends JSON lines (seq, ts, stream, instance, text) to one log of one release.

    Several processes write the same log: the shims of all the release's instances and the
    driver (``system`` lines). ``<log>.seq`` holds the next sequence number and is the lock:
    each batch takes an exclusive ``flock`` on it, reserves its numbers (written first, so a
    crash leaves a gap, never a duplicate), and appends with one ``write``. When the file has
    grown past half the cap it is renamed ``<log>.1`` (replacing the older one) and a new file
    is started: at most ``max_bytes`` on disk, and always the newest lines.

    Errors writing the log never propagate: an app must not stop because its log cannot be
    written (the lines are lost instead), nor wait long for the lock (:data:`LOCK_WITHIN_S`).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = LOG_MAX_BYTES,
        instance: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.max_bytes = max(max_bytes, 2 * 4096)
        self.instance = instance
        self.clock = clock
        self._lock_fd: int | None = None
        self._fd: int | None = None

    def system(self, text: str, *, instance: int | None = None) -> None:
        self.write([("system", text)], instance=instance)

    def write(
        self,
        entries: Sequence[tuple[str, str]],
        *,
        ts: float | None = None,
        instance: int | None = None,
    ) -> None:
        """Append ``(stream, text)`` entries, all stamped ``ts`` (default: now) and attributed
        to ``instance`` (default: the writer's)."""
        if not entries:
            return
        stamp = self.clock() if ts is None else ts
        try:
            self._write(entries, stamp, self.instance if instance is None else instance)
        except OSError:
            self.close()

    def close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._lock_fd = None

    def _write(
        self, entries: Sequence[tuple[str, str]], stamp: float, instance: int | None
    ) -> None:
        if self._lock_fd is None:
            self._lock_fd = os.open(
                seq_path(self.path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        lock_fd = self._lock_fd
        lock_within(lock_fd)  # else TimeoutError: the batch is lost, as on a write error
        try:
            first = self._next_seq(lock_fd)
            os.pwrite(lock_fd, f"{first + len(entries):0{_SEQ_WIDTH}d}\n".encode(), 0)
            fd = self._current_fd()
            size = os.fstat(fd).st_size
            data = bytearray()
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data += b"\n"  # a writer died in the middle of a line: keep ours whole
            for offset, (stream, text) in enumerate(entries):
                if size + len(data) >= self.max_bytes // 2:
                    self._append(fd, data)
                    os.replace(self.path, rotated_path(self.path))
                    fd = self._current_fd()
                    size = 0
                    data = bytearray()
                data += encode_line(first + offset, stamp, stream, text, instance)
            self._append(fd, data)
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)

    @staticmethod
    def _append(fd: int, data: bytearray) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def _next_seq(self, lock_fd: int) -> int:
        raw = os.pread(lock_fd, _SEQ_WIDTH + 1, 0)
        try:
            return max(int(raw.strip()), 1) if raw.strip() else self._recover_seq()
        except ValueError:
            return self._recover_seq()

    def _recover_seq(self) -> int:
        """The seq file is missing or damaged: continue after the last line of the log."""
        best = 0
        for candidate in (rotated_path(self.path), self.path):
            try:
                with open(candidate, "rb") as handle:
                    handle.seek(max(handle.seek(0, os.SEEK_END) - 256 * 1024, 0))
                    for raw in handle:
                        # A torn last line (no newline) still took its number.
                        best = max(best, line_seq(raw.rstrip(b"\n") + b"\n") or 0)
            except OSError:
                continue
        return best + 1

    def _current_fd(self) -> int:
        """The descriptor of the file at ``path`` now (another writer may have rotated it)."""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            on_disk = None
        if self._fd is not None:
            mine = os.fstat(self._fd)
            if on_disk is not None and (mine.st_ino, mine.st_dev) == (
                on_disk.st_ino,
                on_disk.st_dev,
            ):
                return self._fd
            os.close(self._fd)
            self._fd = None
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd
