"""HAProxy's life under the data plane: reloads lose no request, a killed HAProxy comes
back with every route, a second "serve" adopts the running one, sandboxed instances are
reached in their own network namespaces."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from pathlib import Path

import httpx
import pytest

from appdeck.common.listen import ListenError
from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.listening import free_port
from appdeck.ingress.haproxy.namespaces import NETNS_DIR, Namespaces
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
from appdeck.ingress.routes import Backend
from appdeck.runtime import netns
from tests.ingress.conftest import StartUpstream
from tests.ingress.haproxy.conftest import StartPlane
from tests.support.wait import until

BLOG = {"host": "blog.localhost"}


def _pids(answer: str) -> list[str]:
    return [line for line in answer.splitlines() if line.startswith("Pid:")]


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "host"])
async def test_reloads_lose_no_request_under_a_probe(
    plane: StartPlane, upstream: StartUpstream, sandboxed: bool
) -> None:
    """Two probes, one with a new connection per request, one keeping its connection alive
    across the reloads (an old worker answers its next request, then closes it), see no
    failure, whether the app is sandboxed (reached in its namespace) or not."""
    install = secrets.token_hex(6)
    space, port, server = await _in_a_namespace(b"inside!")
    names = Namespaces(install, lambda key: space if key == "r1.0" else None)
    failures: list[str] = []
    answered = 0
    done = asyncio.Event()
    try:
        data_plane, client = await plane(namespaces=names)
        if sandboxed:
            data_plane.table.set("blog", [Backend("r1", 100, [f"r1.0@127.0.0.1:{port}"])])
        else:
            blog = await upstream("blog")
            data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
        assert await data_plane.synced()

        async def probe(close: bool) -> None:
            nonlocal answered
            headers = {**BLOG, "connection": "close"} if close else BLOG
            async with httpx.AsyncClient(base_url=str(client.base_url), timeout=10) as mine:
                while not done.is_set():
                    try:
                        r = await mine.get("/", headers=headers)
                        if r.status_code != 200:
                            failures.append(f"{r.status_code} {r.text[:200]}")
                    except httpx.HTTPError as exc:
                        failures.append(repr(exc))
                    answered += 1
                    await asyncio.sleep(0)

        tasks = [asyncio.create_task(probe(close)) for close in (True, False)]
        others = [await upstream(f"other{i}") for i in range(10)]
        for i, other in enumerate(others):  # each new route is a reload
            data_plane.table.set(f"other{i}", [Backend("r1", 100, [other.address])])
            assert await data_plane.synced()
        done.set()
        await asyncio.gather(*tasks)
    finally:
        done.set()
        names.clear()
        server.close()
        os.close(space)
    assert answered > 20
    assert failures == []


async def test_a_killed_haproxy_is_back_with_every_route_within_2_s(
    plane: StartPlane, upstream: StartUpstream
) -> None:
    data_plane, client = await plane()
    blog = await upstream("blog")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    pid = data_plane.process.master_pid()
    assert pid is not None
    workers = [
        int(line.split()[0])
        for line in (await data_plane.process.master.raw("show proc")).splitlines()
        if " worker " in line
    ]
    for victim in [pid, *workers]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    async with asyncio.timeout(30):  # a bound against hanging; the figure is asserted below
        while True:
            try:
                r = await client.get("/", headers=BLOG)
                if r.status_code == 200 and data_plane.process.master_pid() not in (None, pid):
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.01)
    back = time.monotonic() - killed
    print(f"routes back {back:.3f} s after kill -9")
    assert back < 2.0
    await until(lambda: data_plane.restarts == 1, within=10)


async def test_a_second_serve_adopts_the_running_haproxy_without_restarting_it(
    plane: StartPlane, upstream: StartUpstream, run_dir: Path
) -> None:
    first, client = await plane()
    blog = await upstream("blog")
    first.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await first.synced()
    master, worker = (
        first.process.master_pid(),
        _pids(await first.process.stats.command("show info")),
    )
    await first.stop()  # "appdeck serve" exits; HAProxy keeps serving
    assert (await client.get("/", headers=BLOG)).status_code == 200

    table = HAProxyTable()
    second = HAProxyDataPlane(
        table, HAProxyCounters(), Layout(run_dir / "haproxy"), port=first.port
    )
    await second.start()
    try:
        assert (await client.get("/", headers=BLOG)).status_code == 200  # held until settled
        table.set("blog", [Backend("r1", 100, [blog.address])])
        second.settle()
        assert await second.synced()
        assert second.process.master_pid() == master
        assert _pids(await second.process.stats.command("show info")) == worker  # no reload
        assert (await client.get("/", headers=BLOG)).json()["upstream"] == "blog"
    finally:
        await second.stop()


async def test_a_replica_with_another_ingress_port_is_refused_and_the_running_one_kept(
    plane: StartPlane, upstream: StartUpstream, run_dir: Path
) -> None:
    """Replicas on one host share one HAProxy: one started with another port would move
    everyone's listener; it is refused at start, naming the port in use."""
    first, client = await plane()
    blog = await upstream("blog")
    first.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await first.synced()
    other = free_port("127.0.0.1")
    second = HAProxyDataPlane(
        HAProxyTable(), HAProxyCounters(), Layout(run_dir / "haproxy"), port=other
    )
    with pytest.raises(ListenError, match=f"port {other} .* on port {first.port}") as refused:
        await second.start()
    assert refused.value.port == other
    assert (await client.get("/", headers=BLOG)).json()["upstream"] == "blog"
    third = HAProxyDataPlane(HAProxyTable(), HAProxyCounters(), Layout(run_dir / "haproxy"), port=0)
    assert await third.start() == first.port  # 0: the running one's
    await third.stop()


async def test_a_sandboxed_instance_is_reached_in_its_own_namespace(
    plane: StartPlane,
) -> None:
    space = netns.new_loopback_only()
    sock = netns.socket_in(space)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\ninside!")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, sock=sock)
    install = secrets.token_hex(6)
    names = Namespaces(install, lambda key: space if key == "r1.0" else None)
    try:
        data_plane, client = await plane(namespaces=names)
        data_plane.table.set("blog", [Backend("r1", 100, [f"r1.0@127.0.0.1:{port}"])])
        assert await data_plane.synced()
        r = await client.get("/", headers=BLOG)
        assert (r.status_code, r.text) == (200, "inside!")
        mounted = [p.name for p in NETNS_DIR.iterdir() if p.name.startswith(f"appdeck-{install}-")]
        assert mounted == [f"appdeck-{install}-r1.0-{os.fstat(space).st_ino}"]
        data_plane.table.remove("blog")  # left every route: the name goes, soon after
        assert await data_plane.synced()
        await until(
            lambda: (
                not [p for p in NETNS_DIR.iterdir() if p.name.startswith(f"appdeck-{install}-")]
            ),
            within=15,
        )
    finally:
        names.clear()
        server.close()
        os.close(space)


async def _in_a_namespace(reply: bytes, port: int = 0) -> tuple[int, int, asyncio.Server]:
    """A server answering ``reply`` in a new loopback-only network namespace, as a sandboxed
    instance listens: (the namespace's fd, the port, the server)."""
    space = netns.new_loopback_only()
    sock = netns.socket_in(space)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (len(reply), reply)
        )
        await writer.drain()
        writer.close()

    return space, sock.getsockname()[1], await asyncio.start_server(answer, sock=sock)


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandboxed", "host"])
async def test_a_request_an_old_worker_receives_after_a_reload_is_answered(
    plane: StartPlane, upstream: StartUpstream, sandboxed: bool
) -> None:
    """A connection accepted before a reload whose request arrives after it is the old
    worker's to answer; a soft-stopping HAProxy worker has closed its network namespaces, so
    it hands such requests to the current worker instead of answering 502."""
    install = secrets.token_hex(6)
    space, port, server = await _in_a_namespace(b"inside!")
    names = Namespaces(install, lambda key: space if key == "r1.0" else None)
    pending: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    try:
        data_plane, _ = await plane(namespaces=names)
        if sandboxed:
            data_plane.table.set("blog", [Backend("r1", 100, [f"r1.0@127.0.0.1:{port}"])])
            expected = "inside!"
        else:
            blog = await upstream("blog")
            data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
            expected = '"upstream":"blog"'
        assert await data_plane.synced()
        old = _pids(await data_plane.process.stats.command("show info"))
        for _ in range(3):  # requests half sent to the current worker
            reader, writer = await asyncio.open_connection("127.0.0.1", data_plane.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: blog.localhost\r\n")
            await writer.drain()
            pending.append((reader, writer))
        other = await upstream("other")
        data_plane.table.set("other", [Backend("r1", 100, [other.address])])  # a reload
        assert await data_plane.synced()
        assert _pids(await data_plane.process.stats.command("show info")) != old
        for reader, writer in pending:  # the rest of each request reaches the old worker
            writer.write(b"Connection: close\r\n\r\n")
            await writer.drain()
            async with asyncio.timeout(10):
                answer = (await reader.read()).decode("latin-1")
            assert answer.startswith("HTTP/1.1 200"), answer
            assert expected in answer.replace(" ", "")
    finally:
        for _, writer in pending:
            writer.close()
        names.clear()
        server.close()
        os.close(space)


async def test_counters_survive_a_reload_by_another_driver(
    plane: StartPlane, upstream: StartUpstream, run_dir: Path
) -> None:
    data_plane, client = await plane()
    blog = await upstream("blog")
    data_plane.table.set("blog", [Backend("r1", 100, [blog.address])])
    assert await data_plane.synced()
    for _ in range(6):
        await client.get("/", headers=BLOG)
    await until(lambda: data_plane.counters.get("blog", "r1").requests == 6, within=10)
    mark = data_plane.counters.mark("blog", "r1")
    # another replica on the host reloads HAProxy with a config of its own
    other_table = HAProxyTable()
    other_table.set("blog", [Backend("r1", 100, [blog.address])])
    other_table.set("shop", [Backend("r1", 100, [blog.address])])
    other = HAProxyDataPlane(
        other_table, HAProxyCounters(), Layout(run_dir / "haproxy"), port=data_plane.port
    )
    await other.start()
    other.settle()
    try:
        assert await other.synced()
        # a new connection: the old worker closed the one the client kept
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=10) as fresh:
            for _ in range(4):
                assert (await fresh.get("/", headers=BLOG)).status_code == 200
        await until(lambda: data_plane.counters.get("blog", "r1").requests == 10, within=10)
        assert data_plane.counters.since(mark).requests == 4
    finally:
        await other.stop()


async def test_a_sandboxed_instance_restarted_in_a_new_namespace_is_reached_there(
    plane: StartPlane,
) -> None:
    """A crash's restart changes no route, only the instance's namespace (same port, on a
    new loopback): the plane notices (``Namespaces.moved``) and HAProxy gets the new name."""
    first, port, old_server = await _in_a_namespace(b"first")
    second, _, new_server = await _in_a_namespace(b"again", port)
    current = {"r1.0": first}
    names = Namespaces(secrets.token_hex(6), current.get)
    try:
        data_plane, client = await plane(namespaces=names)
        data_plane.table.set("blog", [Backend("r1", 100, [f"r1.0@127.0.0.1:{port}"])])
        assert await data_plane.synced()
        assert (await client.get("/", headers=BLOG)).text == "first"
        old_server.close()
        current["r1.0"] = second  # the restart: no route changed
        seen = ""
        async with asyncio.timeout(15):
            while seen != "again":
                seen = (await client.get("/", headers=BLOG)).text
                await asyncio.sleep(0.1)
    finally:
        names.clear()
        old_server.close()
        new_server.close()
        os.close(first)
        os.close(second)
