"""The calls running here: a cancel ends one with RequestCancelled, once however often it is
asked, and a call that took the cancel for its own is cancelled again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from appdeck.protocol import inflight
from appdeck.protocol.inflight import InFlightCalls, RequestCancelled


async def test_a_cancel_for_a_call_not_running_here_says_so() -> None:
    assert InFlightCalls().cancel(("s", 1)) is False


async def test_a_cancelled_call_ends_with_request_cancelled_and_is_forgotten() -> None:
    calls = InFlightCalls()
    started = asyncio.Event()

    async def call() -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    running = asyncio.create_task(calls.run(("s", 1), call()))
    async with asyncio.timeout(5):
        await started.wait()
    assert calls.cancel(("s", 1)) is True
    assert calls.cancel(("s", 1)) is True  # asked again (a forwarded cancel sent twice)
    with pytest.raises(RequestCancelled):
        async with asyncio.timeout(5):
            await running
    assert calls.cancel(("s", 1)) is False


async def test_a_call_that_took_the_cancel_for_its_own_is_cancelled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inflight, "CANCEL_CHECKS", (0.05, 0.1))
    calls = InFlightCalls()
    started, took = asyncio.Event(), asyncio.Event()

    async def call() -> str:
        task = asyncio.current_task()
        assert task is not None
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            task.uncancel()
        took.set()
        await asyncio.Event().wait()
        return "never"

    running = asyncio.create_task(calls.run(("s", "r"), call()))
    async with asyncio.timeout(5):
        await started.wait()
    calls.cancel(("s", "r"))
    with pytest.raises(RequestCancelled):
        async with asyncio.timeout(5):
            await running
    assert took.is_set()


async def test_a_call_still_running_after_its_cancel_is_logged_with_where_it_waits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(inflight, "CANCEL_CHECKS", (0.05,))
    calls = InFlightCalls()
    started, logged = asyncio.Event(), asyncio.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "still runs" in record.getMessage():
                logged.set()

    seen = Seen()
    logging.getLogger("appdeck.protocol").addHandler(seen)

    async def unwinding_slowly() -> None:
        await logged.wait()

    async def call() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            await unwinding_slowly()
        return "never"

    running = asyncio.create_task(calls.run(("s", 2), call()))
    async with asyncio.timeout(5):
        await started.wait()
    calls.cancel(("s", 2))
    try:
        with pytest.raises(RequestCancelled):
            async with asyncio.timeout(5):
                await running
    finally:
        logging.getLogger("appdeck.protocol").removeHandler(seen)
    assert "request 2 still runs 0 s after its cancel, in wait (locks.py" in caplog.text
    assert "< unwinding_slowly (test_inflight.py:" in caplog.text
