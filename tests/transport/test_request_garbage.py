"""A request leaves no reference cycle behind: what it made is freed by reference counting
when it ends, not by the cyclic collector's next pass. Before, every tools/call of the
handshake era left its ``Call`` and ``PostStream`` pointing at each other, and through the
stream's ``send`` uvicorn's request cycle, its scope and headers: ~16 objects a call that only
the collector freed, and its passes cost ~8 % of the call path (issue 26 §1)."""

from __future__ import annotations

import collections
import gc
from collections.abc import Awaitable, Callable, Iterator

import httpx
import pytest

from appdeck.protocol.call import Call
from appdeck.protocol.context import ToolContext
from appdeck.transport.stateless_stream import StatelessStream
from appdeck.transport.streams import PostStream
from tests.support.mcp import headers, initialize, parse_sse, request
from tests.support.stateless import StatelessCaller

TOKEN = "alice-token"
# the request path is the same on either store; one is enough (each collection walks the
# worker's whole heap)
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

REQUEST_TYPES = (Call, PostStream, StatelessStream, ToolContext)
"""What only a request makes (the server's background loops make none of them)."""


@pytest.fixture
def saved_garbage() -> Iterator[Callable[[], collections.Counter[str]]]:
    """Keeps what the collector finds unreachable (instead of freeing it); the fixture's
    value says which request objects were among it since the fixture began."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)

    def found() -> collections.Counter[str]:
        gc.collect()
        return collections.Counter(
            type(o).__name__ for o in gc.garbage if isinstance(o, REQUEST_TYPES)
        )

    try:
        yield found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def _times(n: int, post: Callable[[], Awaitable[httpx.Response]]) -> None:
    for _ in range(n):
        r = await post()
        assert r.status_code == 200, r.text


async def test_tools_calls_answered_as_json_and_as_sse_leave_no_cycle(
    client: httpx.AsyncClient, saved_garbage: Callable[[], collections.Counter[str]]
) -> None:
    sid = await initialize(client, TOKEN)

    async def echo() -> httpx.Response:
        message = request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        r = await client.post("/mcp", json=message, headers=headers(sid, TOKEN))
        assert r.json()["result"]["content"][0]["text"] == "hi"
        return r

    async def chatty() -> httpx.Response:
        params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": 1}}
        message = request("tools/call", params)
        r = await client.post("/mcp", json=message, headers=headers(sid, TOKEN))
        assert parse_sse(r.text)[-1].json()["result"]["content"][0]["text"] == "chatty done"
        return r

    await _times(20, echo)
    await _times(10, chatty)
    assert saved_garbage() == {}


async def test_failed_and_unknown_calls_leave_no_cycle(
    client: httpx.AsyncClient, saved_garbage: Callable[[], collections.Counter[str]]
) -> None:
    sid = await initialize(client, TOKEN)
    for message in (
        request("tools/call", {"name": "no-such-tool", "arguments": {}}),
        request("tools/call", {"name": "hangup", "arguments": {}}),
        request("no/such-method"),
        request("tools/list"),
    ):

        async def post(message: dict[str, object] = message) -> httpx.Response:
            return await client.post("/mcp", json=message, headers=headers(sid, TOKEN))

        await _times(5, post)
    assert saved_garbage() == {}


async def test_stateless_calls_leave_no_cycle(
    client: httpx.AsyncClient, saved_garbage: Callable[[], collections.Counter[str]]
) -> None:
    """The 2026-07-28 era: no session, a stream of its own per request."""
    caller = StatelessCaller(client, TOKEN)

    async def echo() -> httpx.Response:
        r = await caller.post("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert r.json()["result"]["content"][0]["text"] == "hi"
        return r

    async def chatty() -> httpx.Response:
        params = {"name": "chatty", "arguments": {}, "_meta": {"progressToken": 1}}
        r = await caller.post("tools/call", params)
        assert parse_sse(r.text)[-1].json()["result"]["content"][0]["text"] == "chatty done"
        return r

    await _times(10, echo)
    await _times(5, chatty)
    assert saved_garbage() == {}
