"""The stream hub: per session, events reach the bus in seq order, even when the log commits
two appends out of order (what two PostgreSQL transactions may do)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from appdeck.events.bus import Delivery, InProcessBus
from appdeck.events.ports import StoredEvent
from appdeck.transport.hub import StreamHub
from appdeck.transport.sse import GET_STREAM


class SlowFirstLog:
    """A log that numbers an append when it starts (as the database's sequence does) and holds
    the first one until ``release`` is set, so a later append can finish first."""

    def __init__(self) -> None:
        self.numbers = itertools.count(1)
        self.release = asyncio.Event()
        self.first_started = asyncio.Event()

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent:
        seq = next(self.numbers)
        if seq == 1:
            self.first_started.set()
            await self.release.wait()
        return StoredEvent(session_id, stream, seq, payload)

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]:
        return [await self.append(*item) for item in items]

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        return []

    async def drop_session(self, session_id: str) -> None:
        return None

    async def trim(self, older_than: float) -> int:
        return 0


async def _delivered(hub: StreamHub, session_id: str, count: int) -> list[int]:
    listener = hub.listen(session_id)
    seqs = []
    for _ in range(count):
        item = await listener.get(5)
        assert isinstance(item, Delivery)
        seqs.append(item.event.seq)
    return seqs


async def test_a_sessions_events_reach_the_bus_in_seq_order_when_appends_race() -> None:
    log = SlowFirstLog()
    hub = StreamHub(log, InProcessBus())
    reader = asyncio.create_task(_delivered(hub, "s1", 2))
    await asyncio.sleep(0)  # the reader listens
    first = asyncio.create_task(hub.publish("s1", GET_STREAM, {"n": 1}))
    await asyncio.wait_for(log.first_started.wait(), 5)
    second = asyncio.create_task(hub.to_sessions(["s1"], {"n": 2}))
    await asyncio.sleep(0.01)  # without the hub's order, the second would be delivered now
    log.release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert await asyncio.wait_for(reader, 5) == [1, 2]


async def test_other_sessions_are_not_held_up_by_a_slow_append() -> None:
    log = SlowFirstLog()
    hub = StreamHub(log, InProcessBus())
    first = asyncio.create_task(hub.publish("slow", GET_STREAM, {"n": 1}))
    await asyncio.wait_for(log.first_started.wait(), 5)
    other = next(f"s{n}" for n in range(1000) if hash(f"s{n}") % 256 != hash("slow") % 256)
    event = await asyncio.wait_for(hub.publish(other, GET_STREAM, {"n": 2}), 5)
    assert event.seq == 2
    log.release.set()
    await asyncio.wait_for(first, 5)
