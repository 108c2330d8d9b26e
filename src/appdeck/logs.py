"""Structured logs (structlog) for our code and for the libraries that use stdlib logging.

Two levels: ``level`` (``--log-level``, ``APPDECK_LOG_LEVEL``) for AppDeck's own loggers
(``appdeck.*``, among them the activity lines of :mod:`appdeck.activity`), and ``libraries``
(``APPDECK_LOG_LIBRARIES``; default ``warning``, or ``level`` when higher) for all the others:
the database drivers, SQLAlchemy, alembic, httpx, uvicorn, multipart. So ``--log-level debug``
shows AppDeck's debug lines without hundreds of driver lines per request;
``APPDECK_LOG_LIBRARIES=debug`` shows those too. The levels are set on the loggers (root and
``appdeck``), not filtered at the handler, so a library's debug record is never even built
unless asked for.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import time
import weakref
from datetime import UTC, datetime
from typing import Any, Final, TextIO

import orjson
import structlog

OURS = "appdeck"
ACTIVITY = "appdeck.activity"
SELF_LEVELLED = ("sqlalchemy",)
"""Libraries that give their own top logger a level when imported (SQLAlchemy: WARN), which
would otherwise ignore the libraries' level."""


def configure(level: str = "info", fmt: str = "console", libraries: str | None = None) -> None:
    """Log to stderr: ``appdeck.*`` at ``level``, every other logger at ``libraries`` (when
    not given: ``warning``, or ``level`` when that is higher)."""
    if libraries is None:
        libraries = max(level, "warning", key=_rank)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = _Formatter(
        json=fmt == "json",
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    # what no line shows is not gathered (the logging HOWTO's "Optimization"): the caller's
    # file, line and function (a walk up the stack for every record) and the process's ids;
    # ~3.5 µs of the ~15 an activity line costs, and one of those goes with every tools/call
    logging._srcfile = None
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = _Handler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for replaced in root.handlers:  # what one still buffers goes out before the new lines
        with contextlib.suppress(Exception):
            replaced.flush()
    root.handlers[:] = [handler]
    root.setLevel(libraries.upper())  # every library, whatever its logger's name
    for name in SELF_LEVELLED:
        logging.getLogger(name).setLevel(libraries.upper())
    logging.getLogger(OURS).setLevel(level.upper())  # appdeck.*: records propagate to root's
    # handler without root's level being checked again
    logging.getLogger("uvicorn.access").disabled = True
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


ACTIVITY_FLUSH_S: Final = 0.2
"""How long an activity line may wait in the buffer before it is written out."""


class _Handler(logging.StreamHandler[TextIO]):
    """stderr, written out after every record but the activity lines: those (one per
    tools/call) wait in a buffer of this handler's own on stderr's file for at most
    :data:`ACTIVITY_FLUSH_S`, or until the next other record, and go out in one write (a
    write per line cost ~6 µs a call, bench/RESULTS.md). A process killed outright loses at
    most that much of them, as it loses the audit writer's queue. Where stderr is no file (a
    test's capture), every record goes straight to it, as before."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(_buffered(stream))
        self._buffering = self.stream is not stream
        self._due = threading.Event()
        self._flusher: threading.Thread | None = None
        _HANDLERS.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
            if not self._buffering or record.name != ACTIVITY or record.levelno > logging.INFO:
                self.flush()
            elif not self._due.is_set():
                self._due.set()
                if self._flusher is None:
                    self._flusher = threading.Thread(
                        target=self._flush_when_due, name="log-flusher", daemon=True
                    )
                    self._flusher.start()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 (logging's rule: a handler reports, never raises)
            self.handleError(record)

    def flush(self) -> None:
        self._due.clear()
        super().flush()

    def _flush_when_due(self) -> None:
        while True:
            self._due.wait()
            time.sleep(ACTIVITY_FLUSH_S)  # lines gather meanwhile
            self.acquire()
            try:
                with contextlib.suppress(Exception):  # stderr gone: nothing to tell it with
                    if self._due.is_set():
                        self.flush()
            finally:
                self.release()

    def _forked(self) -> None:
        """In a forked child: no flusher thread there (the buffer was flushed before)."""
        self._due = threading.Event()
        self._flusher = None


_HANDLERS: Final[weakref.WeakSet[_Handler]] = weakref.WeakSet()


def _before_fork() -> None:
    for handler in list(_HANDLERS):  # what is buffered goes out once, not in both processes
        with contextlib.suppress(Exception):
            handler.flush()


def _after_fork_in_child() -> None:
    for handler in list(_HANDLERS):
        handler._forked()


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def _buffered(stream: TextIO) -> TextIO:
    """A block-buffered writer on ``stream``'s file (its own buffer; the file stays open
    when it goes), or ``stream`` itself when it has no file."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return stream
    return io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(fd, "w", closefd=False), 1 << 16),
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors="backslashreplace",
    )


def _rank(level: str) -> int:
    return logging.getLevelNamesMapping().get(level.upper(), logging.INFO)


class _Formatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter, with a short road for the activity lines (one per tools/call:
    ~36 µs through the processor chain, a few µs here) that renders them as it would: the
    console line ``<time> [info     ] <message> [appdeck.activity]``, or in JSON the message
    with the line's fields as keys of their own."""

    def __init__(self, *, json: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._json = json

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "activity", None)
        if record.name != ACTIVITY or type(fields) is not dict or record.exc_info:
            return super().format(record)
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z")
        level = record.levelname.lower()
        if self._json:
            line = {"event": record.getMessage(), **fields, "level": level}
            line |= {"logger": record.name, "timestamp": stamp}
            return orjson.dumps(line, default=str).decode()
        return f"{stamp} [{level:<9}] {record.getMessage()} [{record.name}]"
