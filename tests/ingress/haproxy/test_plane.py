"""The HAProxy data plane against a real HAProxy and real (in-process) apps: routes, canary
weights, error pages, forwarded headers, counters."""

from __future__ import annotations

import asyncio
import collections
import contextlib

import httpx
import pytest

from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.haproxy.config import Rendered
from appdeck.ingress.haproxy.listening import addresses
from appdeck.ingress.haproxy.plane import HAProxyDataPlane, HAProxyTable
from appdeck.ingress.haproxy.runtime_api import RuntimeApiError
from appdeck.ingress.routes import STOPPED, Backend
from tests.ingress.conftest import StartUpstream
from tests.ingress.haproxy.conftest import StartPlane
from tests.ingress.upstreams import dead_address
from tests.support.wait import until

BLOG = {"host": "blog.localhost"}
JSON = {"accept": "application/json"}


async def test_a_route_reaches_its_app_by_host(plane: StartPlane, upstream: StartUpstream) -> None:
    data_plane, client = await plane()
    blog, shop = await upstream("blog-r1"), await upstream("shop-r1")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    data_plane.table.set("shop", [Backend("r1", 100, [shop.address])])
    assert await data_plane.synced()
    r = await client.get("/posts?page=2", headers=BLOG)
    assert r.status_code == 200
    assert r.json()["upstream"] == "blog-r1"
    assert (r.json()["path"], r.json()["query"]) == ("/posts", "page=2")
    for host in ("SHOP.LocalHost:8088", "shop.localhost.", "shop.localhost"):
        assert (await client.get("/", headers={"host": host})).json()["upstream"] == "shop-r1"


async def test_an_extra_domain_names_the_same_apps(
    plane: StartPlane, upstream: StartUpstream
) -> None:

    data_plane, client = await plane(table=HAProxyTable(extra_domains=["apps.example.com"]))
    blog = await upstream("blog-r1")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    r = await client.get("/", headers={"host": "blog.apps.example.com"})
    assert r.json()["upstream"] == "blog-r1"
    r = await client.get("/", headers={"host": "blog.apps.example.org"})
    assert r.status_code == 404


async def test_canary_weights_are_honoured_over_2000_requests(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    old = [await upstream("old"), await upstream("old")]
    new = await upstream("new")
    data_plane.table.set(
        "blog",
        [Backend("r1", 90, [u.address for u in old]), Backend("r2", 10, [new.address])],
    )
    assert await data_plane.synced()
    seen: collections.Counter[str] = collections.Counter()
    for _ in range(2000):
        seen[(await client.get("/", headers=BLOG)).json()["upstream"]] += 1
    assert abs(seen["new"] / 2000 - 0.10) <= 0.03, seen
    assert old[0].seen  # the old release's two instances share its share
    assert old[1].seen


async def test_a_weight_change_takes_effect_without_a_reload_and_is_read_back(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    a, b = await upstream("a"), await upstream("b")
    data_plane.table.set("blog", [Backend("r1", 100, [a.address]), Backend("r2", 0, [b.address])])
    assert await data_plane.synced()
    worker = await data_plane.process.stats.command("show info")
    data_plane.table.set("blog", [Backend("r1", 0, [a.address]), Backend("r2", 100, [b.address])])
    assert await data_plane.synced()
    for _ in range(20):
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "b"
    after = await data_plane.process.stats.command("show info")
    pid = [line for line in worker.splitlines() if line.startswith("Pid:")]
    assert pid == [line for line in after.splitlines() if line.startswith("Pid:")]
    assert "weight 100" not in data_plane.process.layout.config.read_text()  # scaled
    assert "r2-0 127.0.0.1" in data_plane.process.layout.config.read_text()


def _pid(info: str) -> list[str]:
    return [line for line in info.splitlines() if line.startswith("Pid:")]


async def test_a_server_leaving_the_route_goes_to_weight_0_without_a_reload(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    a, b = await upstream("a"), await upstream("b")
    data_plane.table.set("blog", [Backend("r1", 100, [a.address, b.address])])
    assert await data_plane.synced()
    worker = await data_plane.process.stats.command("show info")

    data_plane.table.set("blog", [Backend("r1", 100, [a.address])])
    assert await data_plane.synced()

    assert _pid(await data_plane.process.stats.command("show info")) == _pid(worker)
    state = await data_plane.process.stats.command("show servers state be_blog")
    weights = {f[3]: f[7] for f in (line.split() for line in state.splitlines()[2:]) if len(f) > 7}
    assert (weights["r1-0"], weights["r1-1"]) == ("256", "0")
    for _ in range(10):
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "a"
    config = data_plane.process.layout.config  # the next reload's, written (in a thread)
    await until(lambda: "r1-1" not in config.read_text())  # once the weights are in effect


async def test_an_expected_instance_is_routed_later_without_a_reload(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    a, b = await upstream("a"), await upstream("b")
    data_plane.table.set("blog", [Backend("r1", 100, [a.address])])
    assert await data_plane.synced()

    data_plane.table.expect("blog", "r2", 0, b.address)
    async with asyncio.timeout(30):  # the reload that adds its server, in the background
        while "r2-0" not in await data_plane.process.stats.command("show servers state"):  # noqa: ASYNC110 - HAProxy's state, no event
            await asyncio.sleep(0.01)
    worker = await data_plane.process.stats.command("show info")
    for _ in range(10):  # weight 0 until routed
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "a"
    data_plane.table.set("blog", [Backend("r2", 100, [b.address])])
    assert await data_plane.synced()

    assert _pid(await data_plane.process.stats.command("show info")) == _pid(worker)
    for _ in range(10):
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "b"


async def _reloads(data_plane: HAProxyDataPlane) -> int:
    """How often HAProxy's master reloaded (``show proc``; the master re-executes itself on
    a reload and answers again a moment after the new worker does)."""
    async with asyncio.timeout(30):
        while True:
            with contextlib.suppress(RuntimeApiError):
                for line in (await data_plane.process.master.raw("show proc")).splitlines():
                    if " master " in line:
                        return int(line.split()[2])
            await asyncio.sleep(0.01)


async def _servers(data_plane: HAProxyDataPlane, *names: str) -> None:
    """Until HAProxy's worker has every server in ``names`` (bounded)."""
    async with asyncio.timeout(30):
        while True:
            state = await data_plane.process.stats.command("show servers state")
            if all(name in state for name in names):
                return
            await asyncio.sleep(0.01)


async def test_two_instances_expected_close_together_are_added_by_one_reload(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """A blue/green's second instance starts ~40 ms after the first, while the first one's
    reload writes its config: the config is rendered again, and one reload takes both."""
    data_plane, client = await plane()
    a, b, c = await upstream("a"), await upstream("b"), await upstream("c")
    data_plane.table.set("blog", [Backend("r1", 100, [a.address])])
    assert await data_plane.synced()
    before = await _reloads(data_plane)
    write = data_plane.process.write

    def second_starts_while_the_first_is_written(
        rendered: Rendered, *, config_only: bool = False
    ) -> None:
        # the reload's own write (on the loop), not a weights-only one (in a thread)
        if not config_only and "r2-1" not in data_plane.table.expected().get("blog", {}):
            data_plane.table.expect("blog", "r2", 1, c.address, of=2)
        write(rendered, config_only=config_only)

    data_plane.process.write = second_starts_while_the_first_is_written  # type: ignore[method-assign]
    data_plane.table.expect("blog", "r2", 0, b.address, of=2)
    await _servers(data_plane, "r2-0", "r2-1")

    assert await _reloads(data_plane) == before + 1
    for _ in range(10):  # weight 0 until routed
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "a"
    data_plane.table.set("blog", [Backend("r2", 100, [b.address, c.address])])
    assert await data_plane.synced()
    assert await _reloads(data_plane) == before + 1  # the traffic moves by weights alone
    seen = {(await client.get("/", headers=BLOG)).json()["upstream"] for _ in range(20)}
    assert seen == {"b", "c"}


async def test_a_route_change_while_an_expected_instance_s_config_is_written_is_in_that_reload(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """A route that changes while the reload adding an expected instance writes its config
    (here: to a server that reload lacks) is put in effect, read back, by that reload."""
    data_plane, client = await plane()
    a, b, c = await upstream("a"), await upstream("b"), await upstream("c")
    data_plane.table.set("blog", [Backend("r1", 100, [a.address])])
    assert await data_plane.synced()
    before = await _reloads(data_plane)
    write, moved = data_plane.process.write, asyncio.Event()

    def traffic_moves_while_it_is_written(rendered: Rendered, *, config_only: bool = False) -> None:
        if not config_only and not moved.is_set():  # the reload's write, on the loop
            moved.set()
            data_plane.table.set(
                "blog", [Backend("r1", 0, [a.address]), Backend("r3", 100, [c.address])]
            )
        write(rendered, config_only=config_only)

    data_plane.process.write = traffic_moves_while_it_is_written  # type: ignore[method-assign]
    data_plane.table.expect("blog", "r2", 0, b.address)
    async with asyncio.timeout(30):
        await moved.wait()
    assert await data_plane.synced()

    assert await _reloads(data_plane) == before + 1
    for _ in range(10):
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "c"
    assert "r2-0" in await data_plane.process.stats.command("show servers state")


async def test_error_pages_match_the_python_ingress(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    data_plane.table.set("fresh", [])
    data_plane.table.set("off", [Backend(STOPPED, 0)])
    blog = await upstream("blog-r1")
    data_plane.table.set("gone", [Backend("r1", 100, [blog.address])])
    data_plane.table.set("gone", [])
    assert await data_plane.synced()

    r = await client.get("/", headers={"host": "nope.localhost"})
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "no app named nope" in r.text
    r = await client.get("/", headers={"host": "nope.localhost", **JSON})
    assert r.json()["error"] == {
        "status": 404,
        "code": "no_such_app",
        "message": "no app named nope",
        "app": "nope",
    }
    r = await client.get("/", headers={"host": "<b>x</b>.example.com"})
    assert r.status_code == 404
    assert "<b>" not in r.text
    for host, code in (("fresh", "not_deployed"), ("off", "stopped"), ("gone", "no_live_release")):
        r = await client.get("/", headers={"host": f"{host}.localhost", **JSON})
        assert r.status_code == 503, host
        assert r.headers["retry-after"] == "5"
        assert r.json()["error"]["code"] == code
        assert r.json()["error"]["app"] == host
        r = await client.get("/", headers={"host": f"{host}.localhost"})
        assert r.headers["content-type"] == "text/html; charset=utf-8"


async def test_a_dead_upstream_gives_a_502_naming_the_app_that_is_counted(
    plane: StartPlane,
) -> None:
    data_plane, client = await plane()
    data_plane.table.set("blog", [Backend("r1", 100, [dead_address()])])
    assert await data_plane.synced()
    r = await client.get("/", headers={**BLOG, **JSON})
    assert r.status_code == 502
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]["app"] == "blog"
    assert r.json()["error"]["code"] == "upstream_unavailable"
    r = await client.get("/", headers=BLOG)
    assert r.status_code == 502
    assert "app blog" in r.text

    await until(lambda: data_plane.counters.get("blog", "r1").status_5xx >= 2, within=10)


async def test_a_slow_app_gets_a_504_and_a_big_body_a_413(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane(
        ProxyConfig(response_timeout=0.3, idle_timeout=0.3, max_body_size=1000)
    )
    blog = await upstream("blog-r1")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    r = await client.get("/slow?delay=2", headers={**BLOG, **JSON})
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"
    r = await client.post("/", headers={**BLOG, **JSON}, content=b"x" * 1001)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "body_too_large"
    r = await client.post("/", headers=BLOG, content=b"x" * 1000)
    assert r.json()["body_length"] == 1000


async def test_a_request_without_host_gets_a_400(plane: StartPlane) -> None:
    data_plane, _ = await plane()
    reader, writer = await asyncio.open_connection("127.0.0.1", data_plane.port)
    writer.write(b"GET / HTTP/1.0\r\naccept: application/json\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(10):
        answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400")
    assert b'"code":"bad_request"' in answer


async def test_forwarded_headers_are_set_by_haproxy_and_the_clients_dropped(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    blog = await upstream("blog-r1")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    r = await client.get(
        "/",
        headers={
            "host": "blog.localhost:8088",
            "x-forwarded-for": "6.6.6.6",
            "x-forwarded-proto": "https",
            "x-forwarded-host": "evil.example",
            "forwarded": "for=6.6.6.6",
            "x-kept": "yes",
        },
    )
    seen: dict[str, list[str]] = {}
    for name, value in r.json()["headers"]:
        seen.setdefault(name, []).append(value)
    assert "forwarded" not in seen
    assert seen["host"] == ["blog.localhost:8088"]
    assert seen["x-forwarded-for"] == ["127.0.0.1"]
    assert seen["x-forwarded-proto"] == ["http"]
    assert seen["x-forwarded-host"] == ["blog.localhost:8088"]
    assert seen["x-kept"] == ["yes"]


@pytest.mark.parametrize("errors", [0, 3])
async def test_counters_count_requests_and_5xx_per_release_since_a_mark(
    plane: StartPlane, upstream: StartUpstream, errors: int
) -> None:
    data_plane, client = await plane()
    a, b = await upstream("a"), await upstream("b")
    data_plane.table.set("blog", [Backend("r1", 50, [a.address]), Backend("r2", 50, [b.address])])
    assert await data_plane.synced()
    await client.get("/", headers=BLOG)
    await asyncio.sleep(0.6)  # one stats round: the mark starts after it
    mark = data_plane.counters.mark("blog", "r2")
    for _ in range(10):
        await client.get("/", headers=BLOG)
    for _ in range(errors):
        await client.get("/status/500", headers={**BLOG})

    await until(lambda: data_plane.counters.since(mark).requests >= 5 + errors // 2, within=10)
    stats = data_plane.counters.since(mark)
    assert stats.status_5xx <= errors
    assert stats.status_2xx >= 5


async def test_a_loopback_host_is_held_on_both_loopbacks(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, _ = await plane()
    if addresses("127.0.0.1", data_plane.port) != ["127.0.0.1", "[::1]"]:
        pytest.skip("this host has no IPv6 loopback")
    blog = await upstream("blog-r1")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    async with httpx.AsyncClient(base_url=f"http://[::1]:{data_plane.port}", timeout=10) as v6:
        assert (await v6.get("/", headers=BLOG)).json()["upstream"] == "blog-r1"


async def test_a_slow_release_shows_a_higher_mean_latency_than_a_fast_one(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    """Canary analysis may compare releases' mean latency: HAProxy's per-server times fill
    it (the time to response headers, as the Python ingress counted)."""

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await asyncio.sleep(0.3)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nslow")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    data_plane, client = await plane()
    fast = await upstream("fast")
    server = await asyncio.start_server(slow, "127.0.0.1", 0)
    try:
        slow_address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        data_plane.table.set(
            "blog", [Backend("r1", 50, [fast.address]), Backend("r2", 50, [slow_address])]
        )
        assert await data_plane.synced()
        for _ in range(12):
            await client.get("/", headers=BLOG)
        counters = data_plane.counters
        await until(
            lambda: counters.get("blog", "r1").requests + counters.get("blog", "r2").requests >= 12,
            within=10,
        )
    finally:
        server.close()
        await server.wait_closed()
    quick, late = counters.get("blog", "r1"), counters.get("blog", "r2")
    assert quick.requests >= 3
    assert late.requests >= 3
    assert late.mean_latency >= 0.25  # the app's 0.3 s before its headers
    assert late.mean_latency > quick.mean_latency


class _Syslog(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self.lines.append(data.decode(errors="replace"))


async def test_the_request_log_names_each_requests_status_and_termination_state(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    loop = asyncio.get_running_loop()
    transport, syslog = await loop.create_datagram_endpoint(_Syslog, local_addr=("127.0.0.1", 0))
    try:
        port = transport.get_extra_info("sockname")[1]
        data_plane, client = await plane(ProxyConfig(log_target=f"127.0.0.1:{port}"))
        blog = await upstream("blog-r1")
        data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
        data_plane.table.set("news", [Backend("r1", 100, [dead_address()])])
        assert await data_plane.synced()
        assert (await client.get("/?served", headers=BLOG)).status_code == 200
        news = {"host": "news.localhost"}
        assert (await client.get("/?refused", headers=news)).status_code == 502

        def logged(path: str) -> list[str]:
            return [line for line in syslog.lines if f'"GET {path} HTTP/1.1"' in line]

        await until(lambda: logged("/?served") and logged("/?refused"), within=10)
    finally:
        transport.close()
    [served], [refused] = logged("/?served"), logged("/?refused")
    assert " 200 " in served
    assert " ---- " in served
    assert " 502 " in refused
    assert " SC-- " in refused
    assert served.startswith("<134>")  # local0.info
