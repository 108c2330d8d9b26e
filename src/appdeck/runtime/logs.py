"""Reading a release's JSON-lines logs (written by :class:`~.shim.LogWriter`).

A log is ``<name>.log.1`` (older, may be absent) followed by ``<name>.log``. Readers take no
lock: the current file is opened before the rotated one, so a rotation in between makes both
handles name the same file, and lines at or below the last ``seq`` seen are skipped. A line
being written (no newline yet) or damaged is skipped.

Paging after a cursor seeks by bisection on byte offsets (lines are in ``seq`` order), so
following a 10 MiB log costs a few reads, not a scan.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from appdeck.runtime.driver import LogLine, LogPage
from appdeck.runtime.logfile import line_seq, rotated_path, seq_path

_BISECT_STOP = 64 * 1024


class _Matcher:
    """Case-insensitive substring match on the text of a line."""

    def __init__(self, grep: str | None) -> None:
        self.needle = grep.lower() if grep else None
        # For a plain ASCII needle, an ASCII line that does not contain it anywhere (JSON
        # escaping does not touch such characters) cannot match: skip it without parsing.
        plain = (
            self.needle is not None
            and self.needle.isascii()
            and self.needle.isprintable()
            and '"' not in self.needle
            and "\\" not in self.needle
        )
        self.raw_needle = self.needle.encode() if plain and self.needle else None

    def parse(self, raw: bytes) -> LogLine | None:
        if self.raw_needle is not None and raw.isascii() and self.raw_needle not in raw.lower():
            return None
        line = _decode(raw)
        if line is None or (self.needle is not None and self.needle not in line.text.lower()):
            return None
        return line


def _decode(raw: bytes) -> LogLine | None:
    try:
        entry = json.loads(raw)
        stream = entry["stream"]
        if stream not in ("stdout", "stderr", "system"):
            return None
        instance = entry.get("instance")
        return LogLine(
            ts=float(entry["ts"]),
            stream=stream,
            text=str(entry["text"]),
            seq=int(entry["seq"]),
            instance=int(instance) if instance is not None else None,
        )
    except (ValueError, KeyError, TypeError):
        return None


def last_seq(log: Path) -> int:
    """The highest seq handed out for ``log`` so far (0 when none)."""
    try:
        raw = seq_path(log).read_bytes()
        return max(int(raw.strip()) - 1, 0) if raw.strip() else 0
    except (OSError, ValueError):
        return 0


def read_page(log: Path, cursor: int | None, limit: int, grep: str | None) -> LogPage:
    """See :meth:`~appdeck.runtime.driver.Driver.logs`. Blocking: run it in a thread."""
    matcher = _Matcher(grep)
    with ExitStack() as stack:
        handles = [
            stack.enter_context(handle)
            for handle in (_open(log), _open(rotated_path(log)))
            if handle is not None
        ]
        files = list(reversed(handles))  # oldest first
        if cursor is None:
            return _tail(files, limit, matcher)
        return _after(files, cursor, limit, matcher)


def _open(path: Path) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except OSError:
        return None


def _lines(files: list[BinaryIO], cursor: int) -> Iterator[tuple[int, bytes]]:
    """``(seq, raw)`` of every well-formed line with seq > cursor, in order."""
    seen = cursor
    for handle in files:
        _seek_after(handle, seen)
        for raw in handle:
            seq = line_seq(raw)
            if seq is None or seq <= seen:
                continue
            seen = seq
            yield seq, raw


def _after(files: list[BinaryIO], cursor: int, limit: int, matcher: _Matcher) -> LogPage:
    lines: list[LogLine] = []
    last = cursor
    for seq, raw in _lines(files, cursor):
        last = seq
        line = matcher.parse(raw)
        if line is not None:
            lines.append(line)
            if len(lines) >= limit:
                break
    return LogPage(lines, last)


def _tail(files: list[BinaryIO], limit: int, matcher: _Matcher) -> LogPage:
    last = 0
    if matcher.needle is None:
        # The newest ``limit`` lines: only the end of the files needs reading.
        raws: deque[bytes] = deque(maxlen=limit)
        for handle in files:
            _seek_tail(handle, limit)
        for seq, raw in _lines(files, 0):
            last = seq
            raws.append(raw)
        decoded = [_decode(raw) for raw in raws]
        return LogPage([line for line in decoded if line is not None], last)
    found: deque[LogLine] = deque(maxlen=limit)
    for seq, raw in _lines(files, 0):
        last = seq
        line = matcher.parse(raw)
        if line is not None:
            found.append(line)
    return LogPage(list(found), last)


def _seek_after(handle: BinaryIO, cursor: int) -> None:
    """Move to a line boundary at or before the first line with seq > cursor (bisection)."""
    here = handle.tell()
    size = handle.seek(0, os.SEEK_END)
    low, high = here, size
    while high - low > _BISECT_STOP:
        middle = (low + high) // 2
        handle.seek(middle)
        handle.readline()  # the rest of a line that started before middle
        seq = line_seq(handle.readline())
        if seq is not None and seq <= cursor:
            low = middle
        else:
            high = middle
    handle.seek(low)
    if low > here:
        handle.readline()  # low is inside a line whose successor has seq <= cursor


def _seek_tail(handle: BinaryIO, limit: int) -> None:
    """Move to a line boundary far enough from the end to hold ``limit`` lines."""
    size = handle.seek(0, os.SEEK_END)
    block = 64 * 1024
    position = size
    newlines = 0
    while position > 0 and newlines <= limit:
        step = min(block, position)
        position -= step
        handle.seek(position)
        newlines += handle.read(step).count(b"\n")
    handle.seek(position)
    if position > 0:
        handle.readline()


def tail_text(log: Path, count: int) -> list[str]:
    """The text of the last ``count`` lines (for error messages)."""
    return [line.text for line in read_page(log, None, count, None).lines]
