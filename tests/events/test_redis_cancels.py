"""A task cancelled while it sends Redis commands is cancelled (Python 3.11's ``wait_for``
under redis-py's writes dropped about one such cancel in twelve; see the module)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from appdeck.events.redis_cancels import keeping_cancels
from tests.support.redis import connect

pytestmark = pytest.mark.usefixtures("redis_prefix")


async def _lost_cancels(client: Redis, tries: int) -> int:
    """Cancel a loop of PINGs at a random moment ``tries`` times: how many ran to their end."""
    lost = 0
    rng = random.Random(7)
    for _ in range(tries):

        async def pings() -> None:
            for _ in range(100):
                await client.ping()

        task = asyncio.create_task(pings())
        await asyncio.sleep(rng.uniform(0, 0.003))
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            continue
        lost += 1
    return lost


async def test_a_loop_of_commands_is_cancelled_every_time_it_is_asked() -> None:
    client: Redis = connect()
    try:
        assert await _lost_cancels(client, 100) == 0
        assert await client.ping()  # the connections closed on a cancel are replaced
    finally:
        await client.aclose()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12's wait_for keeps cancels")
async def test_the_same_loop_on_redis_pys_own_connections_loses_cancels() -> None:
    """The check above can fail: without the fix, cancels are lost (CPython gh-86296). When a
    redis-py release stops writing under ``wait_for``, this fails, and the module can go."""
    client: Redis = connect()
    client.connection_pool.connection_class = Connection
    try:
        assert await _lost_cancels(client, 100) > 0
    finally:
        await client.aclose()


class _Swallowing(Connection):
    """A write during which a cancel is asked and dropped, as 3.11's ``wait_for`` drops it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closed = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.closed += 1


async def test_a_dropped_cancel_is_raised_after_the_write_and_the_connection_closed() -> None:
    connection = keeping_cancels(_Swallowing)()
    assert isinstance(connection, _Swallowing)
    with pytest.raises(asyncio.CancelledError):
        await connection.send_packed_command(b"PING\r\n")
    assert connection.closed == 1


async def test_a_write_nobody_cancels_returns_and_keeps_its_connection() -> None:
    class Quiet(_Swallowing):
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            await asyncio.sleep(0)

    connection = keeping_cancels(Quiet)()
    await connection.send_packed_command(b"PING\r\n")
    assert connection.closed == 0
    assert keeping_cancels(type(connection)) is type(connection)
