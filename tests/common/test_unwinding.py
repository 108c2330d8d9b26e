"""Cleanup that a second cancel must not cut short (appdeck.common.unwinding)."""

from __future__ import annotations

import asyncio

import pytest

from appdeck.common.unwinding import to_the_end


async def test_cleanup_runs_to_its_end_through_repeated_cancels_and_the_cancel_still_ends_the_task() -> (
    None
):
    entered, let_go = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def cleanup() -> None:
        entered.set()
        await let_go.wait()
        done.append("cleaned")

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await to_the_end(cleanup())
            raise

    task = asyncio.ensure_future(work())
    async with asyncio.timeout(10):
        await asyncio.sleep(0)
        task.cancel()
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.sleep(0)
        assert done == []
        let_go.set()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert done == ["cleaned"]


async def test_the_cleanups_own_result_and_error_reach_the_caller() -> None:
    async def answer() -> int:
        return 42

    async def broken() -> None:
        raise ValueError("no")

    assert await to_the_end(answer()) == 42
    with pytest.raises(ValueError, match="no"):
        await to_the_end(broken())
