"""A real AppDeck ``workspace.tar`` endpoint for pods to fetch from, and AppDeck's HAProxy data
plane, both on an event loop of their own in a thread: the podman helper blocks (it runs
``podman`` commands), and the endpoint must keep answering the pod's init container while it
does.

The endpoint listens on the host's own address (the one its default route leaves from), not
0.0.0.0 and not loopback: a pod reaches it through its bridge's gateway, as a cluster's pods
reach AppDeck's Service; loopback inside the pod is the pod's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import tempfile
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette

from appdeck.ingress.haproxy.config import Layout
from appdeck.ingress.haproxy.plane import HAProxyCounters, HAProxyDataPlane, HAProxyTable
from appdeck.platform.crypto import Sealer
from appdeck.platform.workspace_tars import WorkspaceTars
from appdeck.runtime import LocalDriver
from appdeck.runtime.export import WorkspaceTar
from appdeck.runtime.sandbox import Sandbox
from appdeck.transport.workspace_tar import workspace_tar_route
from tests.runtime.conftest import kill_everything_under

T = TypeVar("T")
CALL_TIMEOUT_S = 300.0


def host_address() -> str:
    """The address this host's default route leaves from (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("203.0.113.1", 9))  # TEST-NET-3: only the route is looked up
        return str(probe.getsockname()[0])


@dataclass
class AppDeck:
    """The local driver (sandboxed), the endpoint over it, and what the pods fetched."""

    driver: LocalDriver
    tars: WorkspaceTars
    url: str
    loop: asyncio.AbstractEventLoop
    fetched: list[str] = field(default_factory=list)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the endpoint's loop, and wait for it (bounded)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return future.result(timeout=CALL_TIMEOUT_S)


@contextlib.contextmanager
def appdeck_serving(runtime_dir: Path, sandbox: Sandbox) -> Iterator[AppDeck]:
    """The endpoint, serving until the block ends; every process it started is gone after."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="appdeck-endpoint", daemon=True)
    thread.start()
    address = host_address()
    listening = socket.socket()
    listening.bind((address, 0))
    port = int(listening.getsockname()[1])
    fetched: list[str] = []

    async def make() -> tuple[LocalDriver, WorkspaceTars, uvicorn.Server, asyncio.Task[None]]:
        driver = LocalDriver(runtime_dir, sandbox=sandbox)

        async def source(release_id: str, max_bytes: int) -> WorkspaceTar | None:
            fetched.append(release_id)
            return await driver.workspace_tar(release_id, max_bytes)

        tars = WorkspaceTars(Sealer.from_settings("podman test key", runtime_dir).mac, source)
        app = Starlette(routes=[workspace_tar_route(tars)])
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        task = asyncio.create_task(server.serve(sockets=[listening]))
        return driver, tars, server, task

    future = asyncio.run_coroutine_threadsafe(make(), loop)
    driver, tars, server, task = future.result(timeout=CALL_TIMEOUT_S)
    deck = AppDeck(driver, tars, f"http://{address}:{port}", loop, fetched)
    try:
        yield deck
    finally:

        async def stop() -> None:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 30)
            for release_id in await driver.releases():
                with contextlib.suppress(Exception):
                    await driver.remove(release_id)
            await driver.detach()

        with contextlib.suppress(Exception):
            deck.run(stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
        listening.close()
        kill_everything_under(runtime_dir)


@contextlib.contextmanager
def data_plane(deck: AppDeck) -> Iterator[HAProxyDataPlane]:
    """AppDeck's HAProxy data plane on a free loopback port, stopped (HAProxy too) after."""
    directory = Path(tempfile.mkdtemp(prefix="hx", dir="/tmp"))  # unix socket paths are short
    plane = HAProxyDataPlane(
        HAProxyTable(rng=random.Random(7)), HAProxyCounters(), Layout(directory / "h"), port=0
    )
    try:
        deck.run(plane.start())
        plane.settle()
        yield plane
    finally:
        with contextlib.suppress(Exception):
            deck.run(plane.stop(haproxy=True))
        shutil.rmtree(directory, ignore_errors=True)
