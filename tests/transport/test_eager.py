"""start_eagerly: a coroutine's first step in the caller's stack, the rest for whoever awaits."""

from __future__ import annotations

import asyncio

import pytest

from appdeck.transport.eager import Rest, start_eagerly


async def test_a_coroutine_that_never_waits_runs_to_its_end_at_once() -> None:
    done: list[str] = []

    async def write() -> None:
        done.append("written")

    assert start_eagerly(write()) is None
    assert done == ["written"]


async def test_a_coroutine_that_waits_is_finished_by_whoever_awaits_its_rest() -> None:
    steps: list[str] = []
    writable = asyncio.Event()

    async def write() -> None:
        steps.append("started")
        await writable.wait()
        steps.append("written")

    rest = start_eagerly(write())
    assert rest is not None
    assert steps == ["started"]
    finisher = asyncio.create_task(_await(rest))
    await asyncio.sleep(0)
    assert steps == ["started"]
    writable.set()
    async with asyncio.timeout(5):
        await finisher
    assert steps == ["started", "written"]


async def test_cancelling_the_task_that_awaits_the_rest_cancels_the_coroutine() -> None:
    seen: list[str] = []

    async def write() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    rest = start_eagerly(write())
    assert rest is not None
    finisher = asyncio.create_task(_await(rest))
    await asyncio.sleep(0)
    finisher.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await finisher
    assert seen == ["cancelled"]


async def test_an_error_before_the_first_wait_reaches_the_caller() -> None:
    async def write() -> None:
        raise ConnectionResetError

    with pytest.raises(ConnectionResetError):
        start_eagerly(write())


async def _await(rest: Rest) -> None:
    await rest
