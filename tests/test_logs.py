"""logs.configure: AppDeck's loggers at --log-level, every library at its own level, so debug
shows our lines and not the drivers' chatter unless APPDECK_LOG_LIBRARIES asks for it."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator

import pytest
import structlog

from appdeck import activity, logs

LIBRARIES = ("aiosqlite", "asyncpg", "sqlalchemy.engine.Engine", "httpx", "uvicorn.error")


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    ours = logging.getLogger(logs.OURS)
    saved = (root.handlers[:], root.level, ours.level)
    # what logs.configure turns off for the server (pytest's captured logs show file:line)
    gathered = (logging._srcfile, logging.logProcesses, logging.logMultiprocessing)
    # another test in this worker may have run uvicorn with its own logging config (its
    # loggers' levels, handlers, propagate): these tests judge logs.configure alone
    names = [*LIBRARIES, "uvicorn", "sqlalchemy", "sqlalchemy.engine"]
    libraries = {n: logging.getLogger(n) for n in names}
    kept = {n: (g.level, g.handlers[:], g.propagate, g.disabled) for n, g in libraries.items()}
    for logger in libraries.values():
        logger.setLevel(logging.NOTSET)
        logger.handlers[:] = []
        logger.propagate, logger.disabled = True, False
    try:
        yield
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        logging._srcfile, logging.logProcesses, logging.logMultiprocessing = gathered
        ours.setLevel(saved[2])
        for name, (level, handlers, propagate, disabled) in kept.items():
            logger = libraries[name]
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate, logger.disabled = propagate, disabled
        structlog.reset_defaults()


def _emit_everywhere() -> None:
    for name in LIBRARIES:
        logging.getLogger(name).debug("driver chatter from %s", name)
    logging.getLogger("appdeck.protocol").debug("our own debug line")


@pytest.mark.usefixtures("restored")
def test_debug_shows_our_lines_and_no_driver_chatter(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("debug")
    _emit_everywhere()
    err = capsys.readouterr().err
    assert "our own debug line" in err
    assert "driver chatter" not in err


@pytest.mark.usefixtures("restored")
def test_libraries_debug_shows_the_driver_lines_too(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("debug", libraries="debug")
    _emit_everywhere()
    err = capsys.readouterr().err
    assert all(f"driver chatter from {name}" in err for name in LIBRARIES)


@pytest.mark.usefixtures("restored")
def test_a_library_warning_shows_at_info_but_not_when_error_is_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("info")
    logging.getLogger("sqlalchemy.pool").warning("pool trouble")
    assert "pool trouble" in capsys.readouterr().err
    logs.configure("error")
    logging.getLogger("sqlalchemy.pool").warning("pool trouble")
    logging.getLogger("appdeck.x").warning("our warning")
    assert capsys.readouterr().err == ""


@pytest.mark.usefixtures("restored")
def test_activity_lines_show_at_the_default_level_and_as_keys_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("info", "json")
    activity.tool_call(
        tool="list_apps", action="list", app_id=7, failed=False, ms=2.0, tenant="t", user="u"
    )
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["event"].startswith("tool call tool=list_apps action=list app=7")
    assert record["activity"] == "tool call"
    assert (record["tool"], record["app"], record["outcome"]) == ("list_apps", 7, "ok")
    assert record["level"] == "info"


@pytest.mark.usefixtures("restored")
def test_an_activity_line_on_the_console_looks_like_every_other_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("info")
    activity.token_revoked(kind="pat", tenant="t", user="u", client=None, token_id="p1")
    logging.getLogger("appdeck.x").info("another line")
    ours, other = capsys.readouterr().err.splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z \[info     \] "
    assert re.fullmatch(
        stamp + r"token revoked kind=pat tenant=t user=u client=- id=p1 \[appdeck\.activity\]",
        ours,
    )
    assert re.fullmatch(stamp + r"another line +\[appdeck\.x\]", other)


class _Stderr:
    """A pipe standing in for the server's stderr (a file: the handler buffers on it)."""

    def __init__(self) -> None:
        self.read_fd, write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.file = os.fdopen(write_fd, "w")

    def read(self) -> str:
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.read_fd, 1 << 16):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def close(self) -> None:
        self.file.close()
        os.close(self.read_fd)


@pytest.fixture
def stderr_pipe(restored: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Stderr]:
    """logs.configure("info") with sys.stderr a pipe (set up here: pytest's capture puts its
    own sys.stderr in place again as the test starts)."""
    pipe = _Stderr()
    _configure(pipe, monkeypatch)
    yield pipe
    logging.getLogger().handlers[0].flush()
    pipe.close()


def _configure(pipe: _Stderr, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stderr", pipe.file)
        logs.configure("info")


def _revoked(token_id: str) -> None:
    activity.token_revoked(kind="pat", tenant="t", user="u", client=None, token_id=token_id)


def _read_until(pipe: _Stderr, text: str, within_s: float = 10.0) -> str:
    seen = ""
    deadline = time.monotonic() + within_s
    while text not in seen and time.monotonic() < deadline:
        time.sleep(0.02)
        seen += pipe.read()
    return seen


def test_activity_lines_go_out_together_soon_and_before_any_other_line(
    stderr_pipe: _Stderr,
) -> None:
    for n in range(3):
        _revoked(f"p{n}")
    assert stderr_pipe.read() == ""  # buffered: one write for the lot
    seen = _read_until(stderr_pipe, "id=p2")  # the flusher's, within ACTIVITY_FLUSH_S
    assert [ln.split(" id=")[1][:2] for ln in seen.splitlines()] == ["p0", "p1", "p2"]
    _revoked("p3")
    logging.getLogger("appdeck.x").warning("at once")  # any other record: out now, in order
    lines = stderr_pipe.read().splitlines()
    assert len(lines) == 2
    assert "id=p3" in lines[0]
    assert "at once" in lines[1]


def test_a_forked_child_writes_what_the_parent_buffered_never_and_its_own_lines_soon(
    stderr_pipe: _Stderr,
) -> None:
    _revoked("parent")
    pid = os.fork()
    if pid == 0:  # the child: its own activity line, flushed by a flusher of its own
        try:
            _revoked("kid")
            time.sleep(logs.ACTIVITY_FLUSH_S * 5)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    seen = _read_until(stderr_pipe, "id=kid")
    assert seen.count("id=parent") == 1  # flushed before the fork, not copied into the child
    assert seen.count("id=kid") == 1


def test_configured_again_the_lines_buffered_before_come_first(
    stderr_pipe: _Stderr, monkeypatch: pytest.MonkeyPatch
) -> None:
    _revoked("first")
    _configure(stderr_pipe, monkeypatch)
    logging.getLogger("appdeck.x").warning("second")
    lines = stderr_pipe.read().splitlines()
    assert len(lines) == 2
    assert "id=first" in lines[0]
    assert "second" in lines[1]
