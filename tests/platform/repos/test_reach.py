"""A repository URL's host must pass the egress rule before git touches the network: loopback,
metadata, private, mapped and oddly spelled addresses are refused before git runs (at connect
and at a deploy's fetch); an allowed address is reached, through the address that was checked."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from appdeck.common.errors import InvalidArgument, Unavailable
from appdeck.platform.repos import reach
from appdeck.platform.repos.git import Git, Limits
from appdeck.runtime.egress import Address, EgressPolicy
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes

TOKEN = "ghp_s3cr3tTOKENvalue0123456789"


class Listener:
    """A loopback TCP listener that counts the connections it gets (and closes them)."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self.seen = asyncio.Event()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.seen.set()
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    found = Listener()
    server = await asyncio.start_server(found._accept, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    async with server:
        yield found


class Spy(Git):
    """A Git that records every command it would run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[list[str]] = []

    async def run(self, args: Sequence[str], **kwargs: Any) -> str:
        self.ran.append(list(args))
        return await super().run(args, **kwargs)


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


def _spy(on: OnFakes, tmp_path: Path, **kwargs: Any) -> Spy:
    spy = Spy(tmp_path / "spy-repos", Limits(timeout_s=20), **kwargs)
    on.platform.repos.sources.git = spy
    return spy


def _refused_urls(port: int) -> list[str]:
    return [
        f"https://127.0.0.1:{port}/x.git",
        "https://127.0.0.1/x.git",
        "https://169.254.169.254/x",
        "https://10.0.0.1/x",
        "https://localhost:5432/x",
        f"https://localhost:{port}/x",
        "https://[::1]/x",
        f"https://[::1]:{port}/x",
        f"https://[::ffff:127.0.0.1]:{port}/x",
        f"https://2130706433:{port}/x",
        f"https://0177.0.0.1:{port}/x",
        f"https://0x7f.1:{port}/x",
        f"https://localhost.:{port}/x",
        "https://100.64.0.1/x",
        "https://224.0.0.1/x",
        "https://0.0.0.0/x",
        "https://[fe80::1]/x",
    ]


async def test_internal_addresses_are_refused_at_connect_before_git_runs(
    on: OnFakes, tmp_path: Path, listener: Listener
) -> None:
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    spy = _spy(on, tmp_path, policy=EgressPolicy())
    for url in _refused_urls(listener.port):
        with pytest.raises(InvalidArgument) as refused:
            await on.platform.repos.connect(on.alice, app_id, url, token=TOKEN)
        message = refused.value.message
        assert "not a public address" in message or "not a name or a dotted" in message, url
        assert TOKEN not in message
    assert spy.ran == []
    assert listener.connections == 0
    with pytest.raises(InvalidArgument, match="git:// is not allowed"):
        await on.platform.repos.connect(on.alice, app_id, f"git://127.0.0.1:{listener.port}/r")
    assert spy.ran == []


async def test_a_name_is_refused_if_any_of_its_addresses_is_internal(tmp_path: Path) -> None:
    async def rebinding(host: str, port: int) -> list[Address]:
        return [ipaddress.ip_address("93.184.216.34"), ipaddress.ip_address("127.0.0.1")]

    with pytest.raises(InvalidArgument, match=r"is at 127\.0\.0\.1"):
        await reach.pin("https://mixed.example/x.git", EgressPolicy(), rebinding)


async def test_a_name_that_resolves_nowhere_in_time_is_unavailable() -> None:
    async def stuck(host: str, port: int) -> list[Address]:
        await asyncio.Event().wait()
        return []

    with pytest.raises(Unavailable, match="longer than"):
        await reach.pin("https://slow.example/x.git", EgressPolicy(), stuck, timeout_s=0.05)


async def test_an_allowed_internal_network_is_pinned_to_the_checked_address() -> None:
    async def internal(host: str, port: int) -> list[Address]:
        return [ipaddress.ip_address("10.1.2.3")]

    allow = EgressPolicy(blocked=frozenset(), networks=(ipaddress.ip_network("10.0.0.0/8"),))
    pinned = await reach.pin("https://Mirror.corp:8443/x.git", allow, internal)
    assert pinned == ["-c", "http.curloptResolve=mirror.corp:8443:10.1.2.3"]
    with pytest.raises(InvalidArgument, match="not a public address"):
        await reach.pin("https://mirror.corp:8443/x.git", EgressPolicy(), internal)


async def test_a_deploy_fetch_is_refused_before_git_runs(
    on: OnFakes, tmp_path: Path, listener: Listener
) -> None:
    app = (await on.platform.apps.register(on.alice, "shop")).app
    await on.platform.repos._store.put(
        app_id=app.id,
        url=f"https://localhost:{listener.port}/o/r.git",  # stored before the rule, say
        token=None,
        branch="main",
        webhook_secret=on.platform.repos._sealer.seal("s"),
        auto_deploy=False,
        connected_by="alice",
    )
    spy = _spy(on, tmp_path, policy=EgressPolicy())
    with pytest.raises(InvalidArgument, match="not a public address"):
        await on.platform.repos.source(app, None)
    assert not any("fetch" in args for args in spy.ran)
    assert listener.connections == 0


async def test_an_allowed_address_is_reached_through_the_pinned_address(
    on: OnFakes, tmp_path: Path, listener: Listener
) -> None:
    async def to_loopback(host: str, port: int) -> list[Address]:
        return [ipaddress.ip_address("127.0.0.1")]  # a name no real resolver knows

    allowed = EgressPolicy(extra_allowed=(("127.0.0.1", listener.port),))
    spy = _spy(on, tmp_path, policy=allowed, resolve=to_loopback)
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    url = f"https://repo.appdeck-test.invalid:{listener.port}/o/r.git"
    with pytest.raises(Unavailable) as failed:  # the listener is no git server
        await on.platform.repos.connect(on.alice, app_id, url, token=TOKEN)
    assert TOKEN not in str(failed.value)
    await asyncio.wait_for(listener.seen.wait(), 10)
    assert listener.connections >= 1
    pin = f"http.curloptResolve=repo.appdeck-test.invalid:{listener.port}:127.0.0.1"
    assert spy.ran[0][:3] == ["-c", pin, "ls-remote"]
