"""The ingress router end to end: an httpx client → IngressServer → test apps on loopback."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from appdeck.ingress import Backend, Counters, ProxyConfig, RouteTable
from tests.ingress.conftest import StartIngress, StartUpstream
from tests.ingress.upstreams import dead_address
from tests.support.wait import until

BLOG = {"host": "blog.localhost"}


def headers_of(body: dict[str, Any]) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for name, value in body["headers"]:
        seen.setdefault(name, []).append(value)
    return seen


# --- routing -------------------------------------------------------------------------------


async def test_the_host_picks_the_app(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    blog, shop = await upstream("blog-r1"), await upstream("shop-r1")
    routes.set("blog", [Backend("r1", 100, [blog.address])])
    routes.set("shop", [Backend("r1", 100, [shop.address])])
    client = await ingress()

    r = await client.get("/posts?page=2", headers=BLOG)
    assert r.status_code == 200
    assert r.json()["upstream"] == "blog-r1"
    assert (r.json()["path"], r.json()["query"]) == ("/posts", "page=2")
    r = await client.get("/", headers={"host": "SHOP.LocalHost:8088"})
    assert r.json()["upstream"] == "shop-r1"


async def test_an_unknown_app_gets_a_404_page_naming_it(
    routes: RouteTable, ingress: StartIngress
) -> None:
    client = await ingress()
    r = await client.get("/", headers={"host": "nope.localhost"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "no app named nope" in r.text

    r = await client.get("/", headers={"host": "nope.localhost", "accept": "application/json"})
    assert r.status_code == 404
    assert r.json()["error"] == {
        "status": 404,
        "code": "no_such_app",
        "message": "no app named nope",
        "app": "nope",
    }


async def test_a_host_outside_the_base_domains_gets_a_404_with_the_host_escaped(
    ingress: StartIngress,
) -> None:
    client = await ingress()
    r = await client.get("/", headers={"host": "<b>x</b>.example.com"})
    assert r.status_code == 404
    assert "<b>" not in r.text
    assert "&lt;b&gt;" in r.text


async def test_an_app_whose_live_release_is_gone_gets_a_503_with_retry_after(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    warm = await upstream("blue")
    routes.set("blog", [Backend("blue", 100, [warm.address])])
    routes.set("blog", [Backend("blue", 0, [warm.address])])  # live once, now warm only
    routes.set("gone", [Backend("r1", 100, [warm.address])])
    routes.set("gone", [])  # a recreate between stop and start
    client = await ingress(ProxyConfig(retry_after=7))
    for host in ("blog.localhost", "gone.localhost"):
        r = await client.get("/", headers={"host": host})
        assert r.status_code == 503
        assert r.headers["retry-after"] == "7"
        assert "has no live release" in r.text
    r = await client.get("/", headers={"host": "gone.localhost", "accept": "application/json"})
    assert r.json()["error"]["code"] == "no_live_release"
    assert counters.no_release("gone") == 2
    assert warm.seen == []


async def test_weights_split_1000_requests_90_10(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    stable, canary = await upstream("stable"), await upstream("canary")
    routes.set(
        "blog", [Backend("stable", 90, [stable.address]), Backend("canary", 10, [canary.address])]
    )
    client = await ingress()
    served: Counter[str] = Counter()

    async def worker(n: int) -> None:
        for _ in range(n):
            r = await client.get("/", headers=BLOG)
            served[r.headers["x-upstream"]] += 1

    await asyncio.gather(*(worker(100) for _ in range(10)))
    assert served["stable"] + served["canary"] == 1000
    assert 860 <= served["stable"] <= 940  # seeded: the same split every run
    snap = counters.snapshot("blog")
    assert snap["stable"].requests == served["stable"]
    assert snap["canary"].requests == served["canary"]


async def test_a_zero_weight_release_gets_no_traffic(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    green, blue = await upstream("green"), await upstream("blue")
    routes.set("blog", [Backend("green", 100, [green.address]), Backend("blue", 0, [blue.address])])
    client = await ingress()
    for _ in range(50):
        assert (await client.get("/", headers=BLOG)).headers["x-upstream"] == "green"
    assert blue.seen == []


async def test_counters_count_requests_and_5xx_per_release(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    mark = counters.mark("blog", "r1")
    for path in ("/", "/", "/status/404", "/status/500", "/status/503", "/status/302"):
        await client.get(path, headers=BLOG)
    stats = counters.get("blog", "r1")
    assert (stats.requests, stats.status_2xx, stats.status_3xx) == (6, 2, 1)
    assert (stats.status_4xx, stats.status_5xx, stats.upstream_errors) == (1, 2, 0)
    assert stats.latency_sum > 0
    assert counters.since(mark).requests == 6


# --- streaming -----------------------------------------------------------------------------


async def test_a_streamed_response_arrives_before_the_upstream_has_finished(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
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
    # the first piece came long before the upstream finished (it sleeps 1.5 s twice after
    # it): a lower bound a loaded machine cannot break, unlike "within 0.3 s"
    assert arrivals[-1] - arrivals[0] >= 2.5, arrivals


async def test_server_sent_events_pass_one_by_one(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    events: list[tuple[str, float]] = []
    async with asyncio.timeout(60):
        start = time.monotonic()
        async with client.stream("GET", "/sse?n=3&delay=1.5", headers=BLOG) as r:
            assert r.headers["content-type"] == "text/event-stream"
            async for line in r.aiter_lines():
                if line:
                    events.append((line, time.monotonic() - start))
    assert [e for e, _ in events] == ["data: 0", "data: 1", "data: 2"]
    # each event passed as it came, not when the stream ended (1.5 s apart upstream)
    assert events[-1][1] - events[0][1] >= 2.5, events


async def test_a_client_leaving_mid_stream_ends_the_upstream_stream(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    async with asyncio.timeout(5), client.stream("GET", "/sse?n=100&delay=0.1", headers=BLOG) as r:
        async for _ in r.aiter_raw():
            break  # leave after the first event: the connection is closed
    await until(lambda: app.disconnects == 1, within=5)
    await until(lambda: counters.get("blog", "r1").aborted == 1, within=5)


async def test_a_request_body_streams_to_the_upstream(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    sent: list[float] = []

    async def body() -> AsyncIterator[bytes]:
        for i in range(3):
            if i:
                await asyncio.sleep(0.3)
            sent.append(time.monotonic())
            yield f"part {i};".encode()

    async with asyncio.timeout(5):
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
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    payload = bytes(range(256)) * 12_000  # ~3 MiB
    r = await client.put("/blob", headers=BLOG, content=payload)
    assert r.json()["body_length"] == len(payload)
    assert r.json()["body_sha256"] == hashlib.sha256(payload).hexdigest()
    assert app.seen[-1].header(b"content-length") == str(len(payload)).encode()


async def test_a_body_over_the_limit_gets_a_413(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress(ProxyConfig(max_body_size=1000))
    r = await client.post("/", headers=BLOG, content=b"x" * 1001)
    assert r.status_code == 413
    assert app.seen == []  # refused on its Content-Length, before any upstream work

    async def body() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 400
            await asyncio.sleep(0.01)

    r = await client.post("/", headers=BLOG, content=body())
    assert r.status_code == 413
    assert (await client.post("/", headers=BLOG, content=b"x" * 1000)).status_code == 200


# --- failures ------------------------------------------------------------------------------


async def test_a_dead_upstream_gives_a_quick_502_that_is_counted(
    routes: RouteTable, counters: Counters, ingress: StartIngress
) -> None:
    routes.set("blog", [Backend("r1", 100, [dead_address()])])
    client = await ingress(ProxyConfig(connect_timeout=60))
    start = time.monotonic()
    r = await client.get("/", headers=BLOG)
    # quick: the refused connection answered at once, the 60 s connect timeout was not
    # waited for (well under 0.1 s on a quiet machine; 20 s is a loaded one's margin)
    assert time.monotonic() - start < 20
    assert r.status_code == 502
    assert "Bad gateway" in r.text
    r = await client.get("/", headers={**BLOG, "accept": "application/json"})
    assert r.json()["error"]["code"] == "upstream_unavailable"
    assert r.json()["error"]["release"] == "r1"
    stats = counters.get("blog", "r1")
    assert (stats.requests, stats.status_5xx, stats.upstream_errors) == (2, 2, 2)


async def test_a_dead_instance_is_skipped_for_the_next_one_of_the_release(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("alive")
    routes.set("blog", [Backend("r1", 100, [dead_address(), app.address])])
    client = await ingress()
    for _ in range(4):  # round robin starts on the dead one every other request
        r = await client.get("/", headers=BLOG)
        assert r.status_code == 200
        assert r.json()["upstream"] == "alive"
    assert counters.get("blog", "r1").upstream_errors == 0


async def test_a_slow_upstream_gets_a_504(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("slow")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress(ProxyConfig(response_timeout=0.3))
    start = time.monotonic()
    r = await client.get("/slow?delay=60", headers=BLOG)  # it answers nothing once we left
    elapsed = time.monotonic() - start
    assert r.status_code == 504
    assert 0.25 <= elapsed < 20  # the 0.3 s timeout, long before the upstream's 60 s
    assert counters.get("blog", "r1").upstream_errors == 1
    await until(lambda: app.disconnects == 1, within=5)  # the upstream request was dropped


async def test_an_upstream_silent_mid_body_is_cut_off(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress(ProxyConfig(idle_timeout=0.3))
    got: list[bytes] = []

    async def fetch() -> None:
        async with client.stream("GET", "/stream?n=3&delay=2", headers=BLOG) as r:
            async for chunk in r.aiter_raw():
                got.append(chunk)

    async with asyncio.timeout(5):
        with pytest.raises(httpx.RemoteProtocolError):
            await fetch()
    assert b"".join(got) == b"chunk 0 from r1\n"
    assert counters.get("blog", "r1").aborted == 1


# --- headers -------------------------------------------------------------------------------


async def test_hop_by_hop_headers_are_dropped_and_forwarded_headers_set(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    r = await client.get(
        "/",
        headers={
            "host": "blog.localhost:8088",
            "connection": "keep-alive, x-private",
            "x-private": "secret",
            "keep-alive": "timeout=5",
            "te": "trailers",
            "proxy-authorization": "Basic eDp5",
            "upgrade": "h2c",
            "x-forwarded-for": "6.6.6.6",
            "x-forwarded-proto": "https",
            "x-forwarded-host": "evil.example",
            "forwarded": "for=6.6.6.6",
            "x-kept": "yes",
        },
    )
    seen = headers_of(r.json())
    for name in ("x-private", "keep-alive", "te", "proxy-authorization", "upgrade", "forwarded"):
        assert name not in seen, name
    assert seen["host"] == ["blog.localhost:8088"]  # the client's Host, unchanged
    assert seen["x-forwarded-for"] == ["127.0.0.1"]
    assert seen["x-forwarded-proto"] == ["http"]
    assert seen["x-forwarded-host"] == ["blog.localhost:8088"]
    assert seen["x-kept"] == ["yes"]
    assert seen.get("connection") in (None, ["keep-alive"])


async def test_a_trusted_front_proxy_extends_the_forwarded_headers(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress(ProxyConfig(trust_forwarded=True, release_header=True))
    r = await client.get(
        "/",
        headers={**BLOG, "x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"},
    )
    seen = headers_of(r.json())
    assert seen["x-forwarded-for"] == ["203.0.113.9, 127.0.0.1"]
    assert seen["x-forwarded-proto"] == ["https"]
    assert seen["x-forwarded-host"] == ["blog.localhost"]
    assert r.headers["x-appdeck-release"] == "r1"


async def test_hop_by_hop_response_headers_are_dropped(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    r = await client.get("/hop", headers=BLOG)
    assert r.text == "ok"
    assert r.headers["x-public"] == "yes"
    for name in ("x-private", "keep-alive", "proxy-authenticate"):
        assert name not in r.headers, name


async def test_head_gets_headers_only_and_the_connection_stays_usable(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    r = await client.head("/", headers=BLOG)
    assert r.status_code == 200
    assert int(r.headers["content-length"]) > 0
    assert r.content == b""
    r = await client.get("/", headers=BLOG)
    assert r.json()["method"] == "GET"
    assert len({s.client_port for s in app.seen}) == 1


async def test_no_content_and_not_modified_pass_without_a_body(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    for status in (204, 304):
        r = await client.get(f"/status/{status}", headers=BLOG)
        assert r.status_code == status
        assert r.content == b""
    assert (await client.get("/", headers=BLOG)).status_code == 200


async def test_websocket_upgrades_are_refused(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    r = await client.get(
        "/",
        headers={
            **BLOG,
            "connection": "upgrade",
            "upgrade": "websocket",
            "sec-websocket-version": "13",
            "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        },
    )
    assert r.status_code == 403
    assert app.seen == []


# --- connections and route changes ---------------------------------------------------------


async def test_upstream_connections_are_kept_alive_and_reused(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    for _ in range(5):
        await client.get("/", headers=BLOG)
    assert len({s.client_port for s in app.seen}) == 1


@pytest.mark.parametrize(("method", "status"), [("GET", 200), ("PUT", 200), ("POST", 502)])
async def test_a_pooled_connection_the_app_closed_is_retried_when_idempotent(
    routes: RouteTable, ingress: StartIngress, method: str, status: int
) -> None:
    """An app that closes a keep-alive connection just as the next request arrives: an
    idempotent request (nothing of it answered) goes again on a fresh connection; a POST is
    not replayed (the app may have acted on it) and gets a 502."""
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

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        routes.set("blog", [Backend("r1", 100, [f"127.0.0.1:{port}"])])
        client = await ingress()
        assert (await client.get("/", headers=BLOG)).text == "first"
        r = await client.request(method, "/", headers=BLOG, content=b"x")
        assert r.status_code == status
        if status == 200:
            assert r.text == "first"
            assert connections == 2
        else:
            assert connections == 1
    finally:
        server.close()
        await server.wait_closed()


async def test_switching_blue_to_green_keeps_in_flight_requests_whole(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    blue, green = await upstream("blue"), await upstream("green")
    routes.set("blog", [Backend("blue", 100, [blue.address])])
    client = await ingress()
    received = b""
    async with asyncio.timeout(5):
        async with client.stream("GET", "/stream?n=3&delay=0.3", headers=BLOG) as r:
            async for chunk in r.aiter_raw():
                if not received:  # mid-stream: switch the live release
                    routes.set(
                        "blog",
                        [
                            Backend("blue", 0, [blue.address]),
                            Backend("green", 100, [green.address]),
                        ],
                    )
                    after = await client.get("/", headers=BLOG)
                    assert after.json()["upstream"] == "green"
                received += chunk
    assert received == b"".join(f"chunk {i} from blue\n".encode() for i in range(3))
    assert counters.get("blog", "blue").aborted == 0
    assert counters.get("blog", "green").requests == 1


async def test_stop_closes_the_port_and_can_be_called_twice(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    server = client.ingress  # type: ignore[attr-defined]
    assert server.url_for("blog") == f"http://blog.localhost:{server.port}"
    assert (await client.get("/", headers=BLOG)).status_code == 200
    await server.stop()
    await server.stop()
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=2) as fresh:
            await fresh.get(f"http://127.0.0.1:{server.port}/", headers=BLOG)


async def test_bytes_after_a_whole_response_retire_the_connection(
    routes: RouteTable, ingress: StartIngress
) -> None:
    """A second, unasked-for response on the connection (smuggling, or a confused app) never
    reaches the next client: the connection is dropped."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
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

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        routes.set("blog", [Backend("r1", 100, [f"127.0.0.1:{port}"])])
        client = await ingress()
        for _ in range(3):
            r = await client.get("/", headers=BLOG)
            assert (r.status_code, r.text) == (200, "ok")
        assert connections == 3
    finally:
        server.close()
        await server.wait_closed()


async def test_stopping_the_ingress_ends_an_open_event_stream_cleanly(
    routes: RouteTable, counters: Counters, upstream: StartUpstream, ingress: StartIngress
) -> None:
    app = await upstream("r1")
    routes.set("blog", [Backend("r1", 100, [app.address])])
    client = await ingress()
    server = client.ingress  # type: ignore[attr-defined]
    server.graceful_shutdown = 0.3
    events: list[str] = []
    async with asyncio.timeout(5):
        async with client.stream("GET", "/sse?n=1000&delay=0.05", headers=BLOG) as r:
            stopping = None
            async for line in r.aiter_lines():
                if line:
                    events.append(line)
                if stopping is None:
                    stopping = asyncio.create_task(server.stop())
        await stopping
    assert 1 <= len(events) < 1000  # ended early, and without a protocol error
    assert counters.get("blog", "r1").aborted == 0
    await until(lambda: app.disconnects == 1, within=5)


async def test_a_registered_app_never_deployed_gets_a_503_saying_so(
    routes: RouteTable, ingress: StartIngress
) -> None:
    """Issue 20, item 15: it answered 404 "No such app", and its agent went looking for a
    wrong name."""
    routes.set("shop", [])  # registered (AppRoutes.follow), no release live yet
    client = await ingress()
    r = await client.get("/", headers={"host": "shop.localhost", "accept": "application/json"})
    assert r.status_code == 503
    assert r.headers["retry-after"]
    assert r.json()["error"]["code"] == "not_deployed"
    assert "not deployed yet" in r.json()["error"]["message"]
    page = await client.get("/", headers={"host": "shop.localhost"})
    assert "Not deployed yet" in page.text
    gone = await client.get("/", headers={"host": "nope.localhost"})
    assert gone.status_code == 404


# --- ACME HTTP-01 (issue 21 §3) --------------------------------------------------------------


async def test_a_pending_acme_challenge_is_answered_on_any_host_and_never_reaches_an_app(
    routes: RouteTable, upstream: StartUpstream, ingress: StartIngress
) -> None:
    blog = await upstream("blog-r1")
    routes.set("blog", [Backend("r1", 100, [blog.address])])
    client = await ingress()
    client.ingress.proxy.challenges.put("tok_en-1", "tok_en-1.thumb")  # type: ignore[attr-defined]
    prefix = "/.well-known/acme-challenge/"

    found = await client.get(prefix + "tok_en-1", headers={"host": "anything.example.test"})
    assert (found.status_code, found.text) == (200, "tok_en-1.thumb")
    assert found.headers["content-type"] == "text/plain"
    for path in (prefix + "other", prefix + "tok_en-1/x", prefix):
        missing = await client.get(path, headers=BLOG)  # an app's host: still not the app's
        assert missing.status_code == 404
        assert "upstream" not in missing.text
    posted = await client.post(prefix + "tok_en-1", headers=BLOG, content=b"x")
    assert posted.status_code == 404
    assert (await client.get("/", headers=BLOG)).json()["upstream"] == "blog-r1"
