"""McpServer between replicas: a client's answer or cancel that lands on another replica
reaches the one that sent the request or runs the call (over the Broadcast port)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from appdeck.events.signals import LocalBroadcast
from appdeck.protocol import inflight, relay
from appdeck.protocol.call import Call
from appdeck.protocol.relay import RELAY_WAITS
from appdeck.protocol.server import CANCEL_CHANNEL, REPLY_CHANNEL

from .conftest import ALICE
from .doubles import MemorySessionStore, RecordingChannel
from .replicas import Replica, elicitations, until


class LossyBroadcast(LocalBroadcast):
    """LocalBroadcast that loses the first ``lose`` messages on channels ``matching``."""

    def __init__(self, matching: Callable[[str], bool], lose: int) -> None:
        super().__init__()
        self._matching = matching
        self.lose = lose
        self.published: list[str] = []

    async def publish(self, channel: str, payload: bytes) -> None:
        self.published.append(channel)
        if self._matching(channel) and self.lose > 0:
            self.lose -= 1
            return
        await super().publish(channel, payload)


@pytest.fixture
def broadcast() -> LocalBroadcast:
    return LocalBroadcast()


@pytest.fixture
async def pair(broadcast: LocalBroadcast) -> AsyncIterator[tuple[Replica, Replica]]:
    store = MemorySessionStore()
    a, b = Replica("aaaa", store, broadcast), Replica("bbbb", store, broadcast)
    await a.server.start()
    await b.server.start()
    yield a, b
    await a.close()
    await b.close()


async def _elicit_on(a: Replica) -> tuple[asyncio.Task[Any], RecordingChannel, str]:
    session = await a.init(ALICE, {"elicitation": {}})
    channel = RecordingChannel()
    running = asyncio.create_task(
        a.request("tools/call", {"name": "ask", "arguments": {}}, Call(ALICE, session, channel))
    )
    await until(lambda: bool(elicitations(channel)))
    return running, channel, session.id


async def test_client_bound_request_ids_name_the_replica_that_sent_them(
    pair: tuple[Replica, Replica],
) -> None:
    a, _ = pair
    running, channel, _ = await _elicit_on(a)
    request_id = elicitations(channel)[0]["id"]
    assert isinstance(request_id, str)
    assert request_id.startswith("aaaa-")
    assert a.server.requests.owner_of(request_id) == "aaaa"
    running.cancel()


async def test_an_elicitation_sent_by_one_replica_is_answered_through_another(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    running, channel, session_id = await _elicit_on(a)
    request_id = elicitations(channel)[0]["id"]
    answer = {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"action": "accept", "content": {"name": "Ada"}},
    }
    await b.server.handle_response(answer, await b.call(ALICE, session_id))
    async with asyncio.timeout(5):
        reply = await running
    assert reply["result"]["structuredContent"] == {"text": "hello Ada"}


async def test_an_answer_lost_once_between_replicas_is_sent_again_until_acknowledged() -> None:
    lossy = LossyBroadcast(lambda channel: channel.startswith(REPLY_CHANNEL), lose=2)
    store = MemorySessionStore()
    a, b = Replica("aaaa", store, lossy), Replica("bbbb", store, lossy)
    await a.server.start()
    await b.server.start()
    try:
        running, channel, session_id = await _elicit_on(a)
        request_id = elicitations(channel)[0]["id"]
        answer = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "decline"}}
        await b.server.handle_response(answer, await b.call(ALICE, session_id))
        async with asyncio.timeout(5):
            reply = await running
        assert reply["result"]["structuredContent"] == {"text": "hello None"}
        assert lossy.published.count(REPLY_CHANNEL + "aaaa") == 3  # lost twice, then acked
        assert b.server.relay_dropped == 0
    finally:
        await a.close()
        await b.close()


async def test_an_answer_for_another_session_never_resolves_the_request(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    running, channel, _ = await _elicit_on(a)
    request_id = elicitations(channel)[0]["id"]
    other = await b.init(ALICE)
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept"}}
    await b.server.handle_response(answer, Call(ALICE, other))
    await asyncio.sleep(0.1)  # the forward is acknowledged by A, which finds nothing to resolve
    assert not running.done()
    running.cancel()


async def test_a_cancel_posted_to_another_replica_stops_the_call_on_its_replica(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    session = await a.init(ALICE)
    running = asyncio.create_task(
        a.request("tools/call", {"name": "hold", "arguments": {}}, Call(ALICE, session), "r-7")
    )
    async with asyncio.timeout(5):
        await a.entered.wait()
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": "r-7", "reason": "user"},
    }
    await b.server.handle_notification(cancel, await b.call(ALICE, session.id))
    # the issue: a cancel via B stops the call on A within 1 s (about 1 ms here, in one
    # process; the bound is a loaded machine's margin: nothing else could stop the call)
    async with asyncio.timeout(10):
        await a.cancelled.wait()
        assert await running == {}  # RequestCancelled: no response is sent
    assert b.server.relay_dropped == 0


async def test_a_cancel_the_call_took_for_its_own_is_sent_again_until_the_call_ends(
    pair: tuple[Replica, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inflight, "CANCEL_CHECKS", (0.05, 0.1, 0.2))
    a, b = pair
    session = await a.init(ALICE)
    running = asyncio.create_task(
        a.request("tools/call", {"name": "stubborn", "arguments": {}}, Call(ALICE, session), 4)
    )
    async with asyncio.timeout(5):
        await a.entered.wait()
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}}
    await b.server.handle_notification(cancel, await b.call(ALICE, session.id))
    async with asyncio.timeout(10):
        await a.swallowed.wait()
        await a.cancelled.wait()
        assert await running == {}  # RequestCancelled: no response is sent


async def test_a_cancel_that_arrives_before_the_call_started_is_retried_until_it_runs(
    pair: tuple[Replica, Replica],
) -> None:
    a, b = pair
    session = await a.init(ALICE)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}
    await b.server.handle_notification(cancel, await b.call(ALICE, session.id))
    running = asyncio.create_task(
        a.request("tools/call", {"name": "hold", "arguments": {}}, Call(ALICE, session), 9)
    )
    async with asyncio.timeout(5):
        await a.cancelled.wait()
        assert await running == {}


async def test_a_cancel_nobody_runs_gives_up_after_a_few_seconds_and_counts(
    pair: tuple[Replica, Replica], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sum(RELAY_WAITS) < 20  # "a few seconds"; the test waits a tenth of them
    monkeypatch.setattr(relay, "RELAY_WAITS", tuple(wait / 10 for wait in RELAY_WAITS))
    _, b = pair
    session = await b.init(ALICE)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    await b.server.handle_notification(cancel, Call(ALICE, session))
    await until(lambda: b.server.relay_dropped == 1, seconds=sum(RELAY_WAITS) + 15)


async def test_malformed_messages_from_other_replicas_are_dropped_and_readers_go_on(
    pair: tuple[Replica, Replica], broadcast: LocalBroadcast
) -> None:
    a, b = pair
    for payload in (
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"session": 5, "message": {}}',
        b'{"session": "s", "message": []}',
        b'{"session": "s", "message": {"id": {"x": 1}}}',
        b'{"session": "s", "requestId": [1]}',
        b'{"nonce": 1}',
        b"{" * 100_000,
    ):
        await broadcast.publish(REPLY_CHANNEL + "aaaa", payload)
        await broadcast.publish(CANCEL_CHANNEL, payload)
        await broadcast.publish("ack:aaaa", payload)
    # both still work
    running, channel, session_id = await _elicit_on(a)
    answer = {"jsonrpc": "2.0", "id": elicitations(channel)[0]["id"], "result": {}}
    await b.server.handle_response(answer, await b.call(ALICE, session_id))
    async with asyncio.timeout(5):
        assert "result" in await running
