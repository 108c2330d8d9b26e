"""Live changes: from the platform's change feed, through the broadcast (in-process or Redis,
every replica), to the streams of the change's tenant (and app); and the SSE endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import uvicorn
from redis.asyncio import Redis

from appdeck.console.live import END, PER_OWNER, QUEUE, RESYNC, LiveChanges, TooManyStreams
from appdeck.events.signals import LocalBroadcast, RedisBroadcast
from appdeck.platform.changes import Change
from tests.console.conftest import ConsoleWorld
from tests.support.wait import until


async def test_a_change_reaches_the_streams_of_its_tenant_and_app_only() -> None:
    live = LiveChanges(LocalBroadcast())
    await live.start()
    async with (
        live.follow("acme", 1) as app_one,
        live.follow("acme", None) as overview,
        live.follow("acme", 2) as app_two,
        live.follow("globex", None) as stranger,
    ):
        await live.publish(Change("deployment.updated", "acme", 1, deployment=3))
        event = app_one.get_nowait()
        assert (event.kind, event.app_id, event.deployment) == ("deployment.updated", 1, 3)
        assert overview.get_nowait().app_id == 1
        assert app_two.empty()
        assert stranger.empty()
    assert live.streams == 0


async def test_a_stalled_stream_gets_one_resync_instead_of_an_unbounded_queue() -> None:
    live = LiveChanges(LocalBroadcast())
    await live.start()
    async with live.follow("acme", None) as queue:
        for n in range(QUEUE * 3):
            await live.publish(Change("app.updated", "acme", n + 1))
        assert queue.qsize() <= QUEUE
        kinds = [queue.get_nowait().kind for _ in range(queue.qsize())]
        assert "resync" in kinds


async def test_ending_all_streams_hands_each_the_end_marker() -> None:
    live = LiveChanges(LocalBroadcast())
    await live.start()
    async with live.follow("acme", 1) as queue:
        await live.publish(Change("app.updated", "acme", 1))
        live.end_all()
        assert queue.get_nowait() is END


async def test_a_malformed_broadcast_message_is_dropped() -> None:
    broadcast = LocalBroadcast()
    live = LiveChanges(broadcast)
    await live.start()
    async with live.follow("acme", None) as queue:
        for payload in [b"not json", b"{}", orjson.dumps({"t": "acme", "k": "x", "a": "NaN"})]:
            await broadcast.publish("console", payload)
        assert queue.empty()


async def test_a_change_on_one_replica_reaches_the_streams_of_another(
    redis: Redis, redis_prefix: str
) -> None:
    here, there = RedisBroadcast(redis, redis_prefix), RedisBroadcast(redis, redis_prefix)
    await here.start()
    await there.start()
    sender, receiver = LiveChanges(here), LiveChanges(there)
    await sender.start()
    await receiver.start()
    try:
        async with receiver.follow("acme", 7) as queue:
            await sender.publish(Change("deployment.updated", "acme", 7, deployment=2))
            async with asyncio.timeout(10):
                event = await queue.get()
            assert (event.kind, event.app_id, event.deployment) == ("deployment.updated", 7, 2)
    finally:
        await sender.close()
        await receiver.close()
        await here.close()
        await there.close()


def test_the_resync_event_names_no_app() -> None:
    assert orjson.loads(RESYNC.wire()) == {"kind": "resync", "app": None, "deployment": None}


@pytest.fixture
async def served(world: ConsoleWorld) -> AsyncIterator[str]:
    """The world's server behind a real uvicorn (streams need one)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        world.services.asgi(),
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started, within=10)
    yield f"http://127.0.0.1:{port}"
    world.services.drain()
    server.should_exit = True
    async with asyncio.timeout(10):
        await task
    sock.close()


async def test_the_app_page_stream_names_each_change_to_the_app(
    world: ConsoleWorld, served: str
) -> None:
    bob = await world.agent("bob")
    app_id = (await bob.ok("register_app", name="shop"))["app_id"]
    browser = world.browser()
    await browser.sign_in("bob")
    cookies = {"appdeck_console": browser.client.cookies["appdeck_console"]}
    async with (
        httpx.AsyncClient(base_url=served, cookies=cookies, timeout=10) as http,
        asyncio.timeout(20),
        http.stream("GET", f"/console/apps/{app_id}/events") as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.aiter_lines()
        assert (await anext(lines)).startswith("retry: ")
        await until(
            lambda: world.services.console is not None and world.services.console.live.streams == 1
        )
        await bob.ok("manage_app", app_id=app_id, action="update", description="new")
        data = ""
        async for line in lines:
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                break
        assert orjson.loads(data) == {"kind": "app.updated", "app": app_id, "deployment": None}


async def test_a_members_overview_stream_never_names_an_app_they_have_no_role_on(
    world: ConsoleWorld, served: str
) -> None:
    alice = await world.agent("alice")  # a tenant admin: her apps are not carol's
    hidden = (await alice.ok("register_app", name="hidden"))["app_id"]
    shared = (await alice.ok("register_app", name="shared"))["app_id"]
    await alice.ok("manage_app", app_id=shared, action="grant", user="carol", role="viewer")
    carol = world.browser()
    await carol.sign_in("carol")
    cookies = {"appdeck_console": carol.client.cookies["appdeck_console"]}
    named: list[int] = []
    async with (
        httpx.AsyncClient(base_url=served, cookies=cookies, timeout=10) as http,
        asyncio.timeout(20),
        http.stream("GET", "/console/events") as stream,
    ):
        lines = stream.aiter_lines()
        assert (await anext(lines)).startswith("retry: ")
        await until(
            lambda: world.services.console is not None and world.services.console.live.streams == 1
        )
        await alice.ok("manage_app", app_id=hidden, action="update", description="secret move")
        await alice.ok("manage_app", app_id=shared, action="update", description="seen")
        async for line in lines:
            if line.startswith("data: "):
                named.append(orjson.loads(line.removeprefix("data: "))["app"])
                if shared in named:
                    break
    assert hidden not in named
    assert named == [shared]


async def test_one_session_holds_a_bounded_number_of_streams() -> None:
    live = LiveChanges(LocalBroadcast())
    await live.start()
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(PER_OWNER):
            await stack.enter_async_context(live.follow("acme", None, owner="s1"))
        with pytest.raises(TooManyStreams):
            await stack.enter_async_context(live.follow("acme", None, owner="s1"))
        await stack.enter_async_context(live.follow("acme", None, owner="s2"))  # others may
    async with live.follow("acme", None, owner="s1"):  # all given back
        assert live.streams == 1


async def test_a_received_commit_is_not_streamed_its_app_update_is() -> None:
    """The console shows a push through ``app.updated`` (emitted with ``commit.received``):
    the commit event itself would only make the overview fetch twice."""
    live = LiveChanges(LocalBroadcast())
    await live.start()
    async with live.follow("acme", 1) as app_page, live.follow("acme", None) as overview:
        await live.publish(Change("app.updated", "acme", 1))
        await live.publish(Change("commit.received", "acme", 1, commit="a" * 40))
        for queue in (app_page, overview):
            assert [queue.get_nowait().kind for _ in range(queue.qsize())] == ["app.updated"]
