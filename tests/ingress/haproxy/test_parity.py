"""What the Python ingress did for apps, against the HAProxy data plane (issue 21 §1: nothing
is lost): routing by weight, request and response bodies, failures, headers, connections."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import select
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.routes import Backend
from tests.ingress.conftest import StartUpstream
from tests.ingress.haproxy.conftest import StartPlane
from tests.ingress.upstreams import dead_address
from tests.support.wait import until

BLOG = {"host": "blog.localhost"}
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def headers_of(body: dict[str, Any]) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for name, value in body["headers"]:
        seen.setdefault(name, []).append(value)
    return seen


async def blog_on(
    plane: StartPlane, upstream: StartUpstream, proxy: ProxyConfig | None = None
) -> tuple[Any, httpx.AsyncClient]:
    """A data plane routing ``blog`` to one test app: (the app, a client)."""
    data_plane, client = await plane(proxy)
    app = await upstream("r1")
    data_plane.table.set("blog", [Backend("r1", 100, [app.address])])
    assert await data_plane.synced()
    return app, client


async def raw_app(handle: Handler) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


# --- routing and counters --------------------------------------------------------------------


async def test_a_zero_weight_release_gets_no_traffic(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    green, blue = await upstream("green"), await upstream("blue")
    data_plane.table.set(
        "blog", [Backend("green", 100, [green.address]), Backend("blue", 0, [blue.address])]
    )
    assert await data_plane.synced()
    for _ in range(50):
        assert (await client.get("/", headers=BLOG)).headers["x-upstream"] == "green"
    assert blue.seen == []


async def test_counters_count_each_status_class_per_release(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    app = await upstream("r1")
    data_plane.table.set("blog", [Backend("r1", 100, [app.address])])
    assert await data_plane.synced()
    for path in ("/", "/", "/status/404", "/status/500", "/status/503", "/status/302"):
        await client.get(path, headers=BLOG)
    await until(lambda: data_plane.counters.get("blog", "r1").requests >= 6, within=10)
    stats = data_plane.counters.get("blog", "r1")
    assert (stats.requests, stats.status_2xx, stats.status_3xx) == (6, 2, 1)
    assert (stats.status_4xx, stats.status_5xx, stats.upstream_errors) == (1, 2, 0)


# --- streaming -------------------------------------------------------------------------------


async def test_a_streamed_response_arrives_before_the_upstream_has_finished(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream)
    arrivals: list[float] = []
    async with asyncio.timeout(60):
        start = time.monotonic()
        async with client.stream("GET", "/stream?n=3&delay=1.5", headers=BLOG) as r:
            assert r.status_code == 200
            assert "content-length" not in r.headers
            async for chunk in r.aiter_raw():
                arrivals.append(time.monotonic() - start)
                assert chunk.startswith(b"chunk ")
    assert len(arrivals) == 3  # one piece at a time, never coalesced by the proxy
    # the first piece came long before the upstream finished (a lower bound a loaded
    # machine cannot break)
    assert arrivals[-1] - arrivals[0] >= 2.5, arrivals


async def test_server_sent_events_pass_one_by_one(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream)
    events: list[tuple[str, float]] = []
    async with asyncio.timeout(60):
        start = time.monotonic()
        async with client.stream("GET", "/sse?n=3&delay=1.5", headers=BLOG) as r:
            assert r.headers["content-type"] == "text/event-stream"
            async for line in r.aiter_lines():
                if line:
                    events.append((line, time.monotonic() - start))
    assert [e for e, _ in events] == ["data: 0", "data: 1", "data: 2"]
    assert events[-1][1] - events[0][1] >= 2.5, events


async def test_an_event_stream_idle_longer_than_the_response_timeout_is_kept(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """HAProxy has one inactivity timer toward the app: the longer of the two limits, so a
    stream silent for less than ``idle_timeout`` is never cut by ``response_timeout``."""
    _, client = await blog_on(plane, upstream, ProxyConfig(response_timeout=0.3, idle_timeout=5))
    async with asyncio.timeout(30), client.stream("GET", "/sse?n=3&delay=1", headers=BLOG) as r:
        events = [line async for line in r.aiter_lines() if line]
    assert events == ["data: 0", "data: 1", "data: 2"]


async def test_a_client_leaving_mid_stream_ends_the_upstream_stream(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(plane, upstream)
    async with asyncio.timeout(10), client.stream("GET", "/sse?n=100&delay=0.1", headers=BLOG) as r:
        async for _ in r.aiter_raw():
            break  # leave after the first event: the connection is closed
    await until(lambda: app.disconnects == 1, within=10)


async def test_a_request_body_streams_to_the_upstream(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(plane, upstream)
    sent: list[float] = []

    async def body() -> AsyncIterator[bytes]:
        for i in range(3):
            if i:
                await asyncio.sleep(0.3)
            sent.append(time.monotonic())
            yield f"part {i};".encode()

    async with asyncio.timeout(10):
        r = await client.post("/upload", headers=BLOG, content=body())
    assert r.status_code == 200
    assert r.json()["body_length"] == len(b"part 0;part 1;part 2;")
    seen = app.seen[-1]
    assert seen.body == b"part 0;part 1;part 2;"
    assert seen.header(b"transfer-encoding") == b"chunked"
    # the upstream had the first part before the client had even produced the last one
    assert seen.chunk_times[0] < sent[-1]
    assert len(seen.chunk_times) >= 2


async def test_large_bodies_pass_intact_both_ways(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(plane, upstream)
    payload = bytes(range(256)) * 12_000  # ~3 MiB
    r = await client.put("/blob", headers=BLOG, content=payload)
    assert r.json()["body_length"] == len(payload)
    assert r.json()["body_sha256"] == hashlib.sha256(payload).hexdigest()
    assert app.seen[-1].header(b"content-length") == str(len(payload)).encode()


def post_chunked(port: int, pieces: int, accept: str) -> bytes:
    """POST ``pieces`` chunks of 400 bytes on a socket, as curl does: stop sending once an
    answer is there; the answer (a blocking client: run it in a thread)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        head = f"POST / HTTP/1.1\r\nHost: blog.localhost\r\nAccept: {accept}\r\n"
        conn.sendall(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
        with contextlib.suppress(OSError):  # refused mid-body: the answer is read below
            for _ in range(pieces):
                if select.select([conn], [], [], 0.05)[0]:
                    break
                conn.sendall(b"190\r\n" + b"y" * 400 + b"\r\n")
            else:
                conn.sendall(b"0\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < 10:
            if not (data := conn.recv(65536)):
                break
            answer += data
        return answer


async def test_a_body_of_unannounced_size_over_the_limit_gets_a_413(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """A chunked body is counted as it streams (the body-limit filter of the route's ``bc_``
    backend): past the limit the request fails with the 413 page, and the app never gets
    more than the limit."""
    data_plane, client = await plane(ProxyConfig(max_body_size=1000))
    app = await upstream("r1")
    data_plane.table.set("blog", [Backend("r1", 100, [app.address])])
    assert await data_plane.synced()
    port = data_plane.port
    answer = await asyncio.to_thread(post_chunked, port, 5, "application/json")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"content-type: application/json" in answer
    assert b'"code":"body_too_large"' in answer
    answer = await asyncio.to_thread(post_chunked, port, 5, "text/html")
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"larger than 1000 bytes" in answer
    assert all(len(seen.body) <= 1000 for seen in app.seen)
    answer = await asyncio.to_thread(post_chunked, port, 2, "application/json")  # 800 bytes
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b'"body_length":800' in answer
    assert app.seen[-1].header(b"transfer-encoding") == b"chunked"
    assert (await client.post("/", headers=BLOG, content=b"x" * 1000)).status_code == 200
    r = await client.post("/", headers=BLOG, content=b"x" * 1001)  # announced: refused at once
    assert r.status_code == 413


# --- failures --------------------------------------------------------------------------------


async def test_a_dead_upstream_gives_a_502_without_waiting_for_the_connect_timeout(
    plane: StartPlane,
) -> None:
    data_plane, client = await plane(ProxyConfig(connect_timeout=60))
    data_plane.table.set("blog", [Backend("r1", 100, [dead_address()])])
    assert await data_plane.synced()
    start = time.monotonic()
    r = await client.get("/", headers={**BLOG, "accept": "application/json"})
    # a refused connection is answered at once (20 s: a loaded machine's margin, not 60)
    assert time.monotonic() - start < 20
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_unavailable"
    await until(lambda: data_plane.counters.get("blog", "r1").upstream_errors >= 1, within=10)


async def test_a_dead_instance_is_skipped_for_the_next_one_of_the_release(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    app = await upstream("alive")
    data_plane.table.set("blog", [Backend("r1", 100, [dead_address(), app.address])])
    assert await data_plane.synced()
    for _ in range(4):  # round robin starts on the dead one every other request
        r = await client.get("/", headers=BLOG)
        assert r.status_code == 200
        assert r.json()["upstream"] == "alive"


async def test_a_slow_upstream_gets_a_504_and_its_request_is_dropped(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(
        plane, upstream, ProxyConfig(response_timeout=0.3, idle_timeout=0.3)
    )
    start = time.monotonic()
    r = await client.get("/slow?delay=60", headers=BLOG)
    assert r.status_code == 504
    assert time.monotonic() - start < 20  # the 0.3 s timeout, long before the app's 60 s
    await until(lambda: app.disconnects == 1, within=10)


async def test_an_upstream_silent_mid_body_longer_than_the_idle_timeout_is_cut_off(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream, ProxyConfig(response_timeout=0.3, idle_timeout=0.3))
    got: list[bytes] = []

    async def fetch() -> None:
        async with client.stream("GET", "/stream?n=3&delay=2", headers=BLOG) as r:
            async for chunk in r.aiter_raw():
                got.append(chunk)

    async with asyncio.timeout(10):
        with pytest.raises(httpx.RemoteProtocolError):
            await fetch()
    assert b"".join(got) == b"chunk 0 from r1\n"


# --- headers ---------------------------------------------------------------------------------


async def test_hop_by_hop_and_a_clients_x_appdeck_request_headers_are_dropped(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream)
    r = await client.get(
        "/",
        headers={
            **BLOG,
            "connection": "keep-alive, x-private",
            "x-private": "secret",
            "keep-alive": "timeout=5",
            "te": "trailers",
            "proxy-authorization": "Basic eDp5",
            "upgrade": "h2c",
            "x-kept": "yes",
            "x-appdeck-release": "r0",
            "X-AppDeck-Anything": "spoofed",
        },
    )
    seen = headers_of(r.json())
    for name in ("keep-alive", "te", "proxy-authorization", "upgrade"):
        assert name not in seen, name
    assert [name for name in seen if name.startswith("x-appdeck-")] == []
    assert seen["x-kept"] == ["yes"]
    # headers the Connection header names are passed on (HAProxy cannot drop a header whose
    # name comes from the request): harmless to the app, documented in data-plane-edge.md
    assert seen["x-private"] == ["secret"]


async def test_hop_by_hop_response_headers_are_dropped(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream)
    r = await client.get("/hop", headers=BLOG)
    assert r.text == "ok"
    assert r.headers["x-public"] == "yes"
    for name in ("keep-alive", "proxy-authenticate", "connection"):
        assert name not in r.headers, name
    assert r.headers["x-private"] == "secret"  # named by Connection: passed on (see above)


async def test_head_gets_headers_only_and_the_connection_stays_usable(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(plane, upstream)
    r = await client.head("/", headers=BLOG)
    assert r.status_code == 200
    assert int(r.headers["content-length"]) > 0
    assert r.content == b""
    r = await client.get("/", headers=BLOG)
    assert r.json()["method"] == "GET"
    assert len({s.client_port for s in app.seen}) == 1


async def test_no_content_and_not_modified_pass_without_a_body(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    _, client = await blog_on(plane, upstream)
    for status in (204, 304):
        r = await client.get(f"/status/{status}", headers=BLOG)
        assert r.status_code == status
        assert r.content == b""
    assert (await client.get("/", headers=BLOG)).status_code == 200


# --- connections and route changes -----------------------------------------------------------


async def test_upstream_connections_are_kept_alive_and_reused(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    app, client = await blog_on(plane, upstream)
    for _ in range(5):
        await client.get("/", headers=BLOG)
    assert len({s.client_port for s in app.seen}) == 1


async def test_a_request_on_a_kept_alive_connection_the_app_closed_is_never_replayed(
    plane: StartPlane,
) -> None:
    """An app that closes a keep-alive connection as the next request arrives: the request is
    not sent again (the app may have acted on it); HAProxy closes the client's connection
    unanswered, as the app did. (The Python ingress replayed idempotent ones: HAProxy's
    ``retry-on empty-response`` would, at ~15 % of its throughput on every request.)"""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the second request: hang up unanswered
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    data_plane, client = await plane()
    async for address in raw_app(handle):
        data_plane.table.set("blog", [Backend("r1", 100, [address])])
        assert await data_plane.synced()
        assert (await client.get("/", headers=BLOG)).text == "first"
        with pytest.raises(httpx.RemoteProtocolError):
            await client.post("/", headers=BLOG, content=b"x")
        assert connections == 1


async def test_switching_blue_to_green_keeps_in_flight_requests_whole(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    blue, green = await upstream("blue"), await upstream("green")
    data_plane.table.set(
        "blog", [Backend("blue", 100, [blue.address]), Backend("green", 0, [green.address])]
    )
    assert await data_plane.synced()
    received = b""
    async with asyncio.timeout(30):
        async with client.stream("GET", "/stream?n=3&delay=1", headers=BLOG) as r:
            async for chunk in r.aiter_raw():
                if not received:  # mid-stream: switch the live release
                    data_plane.table.set(
                        "blog",
                        [
                            Backend("blue", 0, [blue.address]),
                            Backend("green", 100, [green.address]),
                        ],
                    )
                    assert await data_plane.synced()
                    after = await client.get("/", headers=BLOG)
                    assert after.json()["upstream"] == "green"
                received += chunk
    assert received == b"".join(f"chunk {i} from blue\n".encode() for i in range(3))


async def test_a_reload_keeps_an_open_event_stream_whole(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """A new route reloads HAProxy: the old worker finishes the streams it holds."""
    data_plane, client = await plane()
    app = await upstream("r1")
    data_plane.table.set("blog", [Backend("r1", 100, [app.address])])
    assert await data_plane.synced()
    events: list[str] = []
    async with asyncio.timeout(30):
        async with client.stream("GET", "/sse?n=4&delay=0.5", headers=BLOG) as r:
            async for line in r.aiter_lines():
                if line and not events:
                    data_plane.table.set("shop", [Backend("r1", 100, [app.address])])
                    assert await data_plane.synced()
                if line:
                    events.append(line)
    assert events == [f"data: {i}" for i in range(4)]
    # the new worker serves the new route (a connection the old worker kept gets one more
    # answer from it: a fresh one)
    async with httpx.AsyncClient(base_url=str(client.base_url), timeout=10) as fresh:
        assert (await fresh.get("/", headers={"host": "shop.localhost"})).status_code == 200


async def test_bytes_after_a_whole_response_retire_the_connection(plane: StartPlane) -> None:
    """A second, unasked-for response on the connection (smuggling, or a confused app) never
    reaches the next client."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                    b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    data_plane, client = await plane()
    async for address in raw_app(handle):
        data_plane.table.set("blog", [Backend("r1", 100, [address])])
        assert await data_plane.synced()
        for _ in range(3):
            r = await client.get("/", headers=BLOG)
            assert (r.status_code, r.text) == (200, "ok")


async def test_a_websocket_upgrade_reaches_the_app_and_carries_both_ways(
    plane: StartPlane,
) -> None:
    """Apps may serve websockets (the Python ingress refused them): the Upgrade passes, then
    bytes flow both ways until one side closes or ``timeout tunnel`` (idle_timeout) passes."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
            )
            while data := await reader.read(1024):
                writer.write(b"echo:" + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    data_plane, _ = await plane()
    async for address in raw_app(handle):
        data_plane.table.set("blog", [Backend("r1", 100, [address])])
        assert await data_plane.synced()
        reader, writer = await asyncio.open_connection("127.0.0.1", data_plane.port)
        try:
            writer.write(
                b"GET /ws HTTP/1.1\r\nHost: blog.localhost\r\nConnection: Upgrade\r\n"
                b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            )
            async with asyncio.timeout(10):
                answer = await reader.readuntil(b"\r\n\r\n")
                assert answer.startswith(b"HTTP/1.1 101")
                for word in (b"one", b"two"):
                    writer.write(word)
                    assert await reader.readexactly(5 + len(word)) == b"echo:" + word
        finally:
            writer.close()
    assert b"upgrade: websocket" in heads[0].lower()


async def test_a_reloads_old_worker_holding_a_stream_is_stopped_after_the_drain_limit(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """Old workers do not pile up: ``hard-stop-after`` ends the streams they still hold."""
    data_plane, client = await plane(ProxyConfig(reload_drain_timeout=1))
    app = await upstream("r1")
    data_plane.table.set("blog", [Backend("r1", 100, [app.address])])
    assert await data_plane.synced()
    events: list[str] = []

    async def listen() -> None:
        async with client.stream("GET", "/sse?n=200&delay=0.1", headers=BLOG) as r:
            async for line in r.aiter_lines():
                if line and not events:
                    data_plane.table.set("shop", [Backend("r1", 100, [app.address])])
                    assert await data_plane.synced()
                if line:
                    events.append(line)

    async with asyncio.timeout(30):
        with pytest.raises(httpx.RemoteProtocolError):
            await listen()
    assert 1 <= len(events) < 200
    assert "hard-stop-after 1000ms" in data_plane.layout.config.read_text()
