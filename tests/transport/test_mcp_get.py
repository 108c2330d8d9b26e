"""GET /mcp: the standalone SSE stream, keepalives and resumption (through a live uvicorn)."""

import asyncio

import httpx

from appdeck.app import Services
from tests.support.mcp import Event, headers, initialize, request, sse_events
from tests.support.wait import until

TOKEN = "alice-token"


def get_headers(session: str, token: str = TOKEN, **extra: str) -> dict[str, str]:
    out = headers(session, token, **extra)
    out["accept"] = "text/event-stream"
    return out


async def _collect(live: httpx.AsyncClient, hdrs: dict[str, str], count: int) -> list[Event]:
    events: list[Event] = []
    async with asyncio.timeout(5), live.stream("GET", "/mcp", headers=hdrs) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"] == "text/event-stream"
        async for event in sse_events(r, count):
            events.append(event)
    return events


async def test_a_get_stream_opens_with_a_priming_event_and_carries_updates(
    live: httpx.AsyncClient, services: Services
) -> None:
    sid = await initialize(live, TOKEN)
    r = await live.post(
        "/mcp",
        json=request("resources/subscribe", {"uri": "test://items/1"}),
        headers=headers(sid, TOKEN),
    )
    assert r.json()["result"] == {}

    async def announce() -> None:
        await until(lambda: services.hub._standalone.get(sid))
        await services.server.resources.updated("test://items/1")

    pusher = asyncio.create_task(announce())
    events = await _collect(live, get_headers(sid), 2)
    await pusher
    priming, update = events
    assert priming.data == ""
    assert priming.id is not None
    assert priming.id.startswith("g.")
    assert update.json() == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "test://items/1"},
    }


async def test_an_idle_stream_carries_keepalive_comments(live: httpx.AsyncClient) -> None:
    sid = await initialize(live, TOKEN)
    text = ""
    async with asyncio.timeout(5), live.stream("GET", "/mcp", headers=get_headers(sid)) as r:
        async for chunk in r.aiter_text():
            text += chunk
            if ": keepalive" in text:
                break
    assert ": keepalive\n\n" in text


async def test_a_second_standalone_stream_is_409(
    live: httpx.AsyncClient, services: Services
) -> None:
    sid = await initialize(live, TOKEN)
    async with asyncio.timeout(5), live.stream("GET", "/mcp", headers=get_headers(sid)) as first:
        assert first.status_code == 200
        second = await live.get("/mcp", headers=get_headers(sid))
        assert second.status_code == 409


async def test_get_needs_event_stream_accept(live: httpx.AsyncClient) -> None:
    sid = await initialize(live, TOKEN)
    r = await live.get("/mcp", headers=headers(sid, TOKEN, accept="application/json"))
    assert r.status_code == 406


async def test_a_bad_last_event_id_is_400(live: httpx.AsyncClient) -> None:
    sid = await initialize(live, TOKEN)
    for bad in ("garbage", "g.x", "zz9.5", "../etc.1"):
        r = await live.get("/mcp", headers=get_headers(sid, last_event_id=bad))
        assert r.status_code == 400, bad
    # latin-1 bytes that are digits or letters to str methods but not to int() or the log
    for raw in (b"g.\xb2", b"g.\xb9\xb2", b"\xe9t\xe9.1"):
        request_headers = {**get_headers(sid), "last-event-id": raw}
        r = await live.get("/mcp", headers=request_headers)  # type: ignore[dict-item]
        assert r.status_code == 400, raw


async def test_missed_events_are_replayed_after_last_event_id(
    live: httpx.AsyncClient, services: Services
) -> None:
    sid = await initialize(live, TOKEN)
    first = await _collect(live, get_headers(sid), 1)
    resume_from = first[0].id
    assert resume_from is not None
    await until(lambda: not services.hub._standalone.get(sid))
    for i in range(3):  # sent while no stream is open
        await services.hub.to_session(
            sid,
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": i},
            },
        )
    replayed = await _collect(live, get_headers(sid, last_event_id=resume_from), 3)
    assert [e.json()["params"]["data"] for e in replayed] == [0, 1, 2]
    assert len({e.id for e in replayed}) == 3
    await until(lambda: not services.hub._standalone.get(sid))
    again = await _collect(live, get_headers(sid, last_event_id=replayed[1].id or ""), 1)
    assert again[0].json()["params"]["data"] == 2


async def test_replay_never_crosses_sessions(live: httpx.AsyncClient, services: Services) -> None:
    mine = await initialize(live, TOKEN)
    theirs = await initialize(live, TOKEN)
    first = await _collect(live, get_headers(mine), 1)
    await until(lambda: not services.hub._standalone.get(mine))
    await services.hub.to_session(
        theirs,
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "theirs"},
        },
    )
    await services.hub.to_session(
        mine,
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": "mine"},
        },
    )
    replayed = await _collect(live, get_headers(mine, last_event_id=first[0].id or ""), 1)
    assert replayed[0].json()["params"]["data"] == "mine"


async def test_a_closed_post_stream_is_resumed_by_get(live: httpx.AsyncClient) -> None:
    sid = await initialize(live, TOKEN)
    r = await live.post(
        "/mcp",
        json=request("tools/call", {"name": "hangup", "arguments": {}}, id=41),
        headers=headers(sid, TOKEN),
    )
    assert r.headers["content-type"] == "text/event-stream"
    from tests.support.mcp import parse_sse

    posted = parse_sse(r.text)
    assert posted[0].data == ""  # the priming event, then the server hung up
    last = posted[-1].id
    assert last is not None
    resumed = await _collect(live, get_headers(sid, last_event_id=last), 3)
    messages = [e.json() for e in resumed if e.data]
    assert messages[-1]["id"] == 41
    assert messages[-1]["result"]["content"][0]["text"] == "finished after hang-up"
    assert any(m.get("params", {}).get("data") == "after the hang-up" for m in messages)


async def test_deleting_the_session_ends_its_stream(
    live: httpx.AsyncClient, services: Services
) -> None:
    sid = await initialize(live, TOKEN)
    async with asyncio.timeout(5), live.stream("GET", "/mcp", headers=get_headers(sid)) as r:
        assert r.status_code == 200
        await until(lambda: services.hub._standalone.get(sid))
        d = await live.delete("/mcp", headers=headers(sid, TOKEN))
        assert d.status_code == 200
        async for _ in r.aiter_bytes():
            pass  # the server closes the stream; the loop ends (bounded by the timeout)
