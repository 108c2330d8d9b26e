"""logs.configure: AppDeck's loggers at --log-level, every library at its own level, so debug
shows our lines and not the drivers' chatter unless APPDECK_LOG_LIBRARIES asks for it."""

from __future__ import annotations

import json
import logging
import re
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
