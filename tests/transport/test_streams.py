"""GetStream's live path: the publisher writes an idle stream's next event itself; a send that
must wait (the transport paused: a slow client) is finished by the stream's reader, in order,
and holds up no publisher. On the real event log (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from appdeck.events.bus import InProcessBus
from appdeck.protocol.sessions import Session
from appdeck.storage import Storage
from appdeck.transport.hub import StreamHub
from appdeck.transport.sse import GET_STREAM
from appdeck.transport.streams import GetStream
from tests.support.wait import until


class Client:
    """The ASGI side of one GET: what was sent, a transport that can be paused (as uvicorn's
    send waits for its flow control to drain), and a disconnect."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.writable = asyncio.Event()
        self.writable.set()
        self.gone = asyncio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        await self.writable.wait()
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def events(self) -> list[bytes]:
        return [b for b in self.bodies if b.startswith(b"event: message")]


def _note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}


async def test_a_paused_stream_gets_its_events_in_order_and_holds_up_no_publisher(
    storage: Storage,
) -> None:
    bus = InProcessBus()
    hub = StreamHub(storage.events, bus)
    session = Session("s1", "acme", "alice", "2025-11-25")
    lease = await hub.claim(session.id, GET_STREAM)
    assert lease is not None
    client = Client()
    reader = GetStream(client.receive, client.send, hub, session, GET_STREAM, lease)
    task = asyncio.create_task(reader.run(None, keepalive_seconds=30, retry_ms=1000))
    try:
        await until(lambda: any(li._idle for li in bus._listeners.get(session.id, ())))
        await hub.to_session(session.id, _note(1))
        assert len(client.events()) == 1  # written in the publisher's pass

        client.writable.clear()  # the client stops reading
        async with asyncio.timeout(5):  # the publisher does not wait for it
            await hub.to_sessions([session.id], _note(2))
            await hub.to_session(session.id, _note(3))
        assert len(client.events()) == 1

        client.writable.set()
        await until(lambda: len(client.events()) == 3)
        stored = await storage.events.replay(session.id, GET_STREAM, 0)
        expected = [f"id: g.{e.seq}\ndata: ".encode() + e.payload for e in stored]
        assert [e.split(b"\n", 1)[1].rstrip(b"\n") for e in client.events()] == expected
        notes = [orjson.loads(e.split(b"data: ", 1)[1]) for e in client.events()]
        assert [note["params"]["n"] for note in notes] == [1, 2, 3]
    finally:
        client.gone.set()
        async with asyncio.timeout(5):
            await task
