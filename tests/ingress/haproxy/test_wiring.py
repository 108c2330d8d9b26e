"""``APPDECK_DATA_PLANE=haproxy`` as ``appdeck serve`` assembles it (``runtime_of``): the
platform's router over HAProxy, a route change in effect once ``published`` returns."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from appdeck.common.tokens import token_hash
from appdeck.ingress.haproxy.edge import control_secret
from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.ingress.keys import GateKey
from appdeck.platform.deploy.ports import Backend
from appdeck.runtime_setup import (
    HAProxyRouter,
    behind_edge,
    disks_of,
    edge_options,
    runtime_of,
)
from appdeck.settings import Settings
from appdeck.transport.edge_forwarded import TrustEdge
from tests.ingress.conftest import StartUpstream
from tests.support.mcp import free_port


@pytest.fixture
def short_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="hxw", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


async def test_the_haproxy_setting_builds_a_router_whose_published_changes_are_in_effect(
    tmp_path: Path, short_root: Path, upstream: StartUpstream
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        runtime_root=short_root,
        data_plane="haproxy",
        ingress_port=0,
        sandbox="off",
    )
    _, ingress, router = runtime_of(settings, None, disks=disks_of(settings, None))
    assert isinstance(ingress, HAProxyDataPlane)
    assert isinstance(router, HAProxyRouter)
    port = await ingress.start()
    ingress.settle()
    router.keys.loaded()  # the platform loads the apps' API keys (none required here)
    await router.edge.start()  # then the edge's mirror (as app.py: after keys and TLS)
    try:
        app = await upstream("blog-r1")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for release in ("r1", "r2"):
                router.route("blog--acme", [Backend(release, 100, (app.address,))])
                await router.published()
                r = await client.get("/", headers={"host": "blog--acme.localhost"})
                assert r.status_code == 200  # at once: published means in effect
            router.forget("blog--acme")
            await router.published()
            r = await client.get("/", headers={"host": "blog--acme.localhost"})
            assert r.status_code == 404
        assert ingress.process.running()
    finally:
        await router.edge.stop()
        await ingress.stop(haproxy=True)  # appdeck serve --stop-apps-on-exit
    assert not ingress.process.running()


@contextlib.asynccontextmanager
async def _serving(settings: Settings, control_port: int = 0) -> AsyncIterator[HAProxyRouter]:
    _, ingress, router = runtime_of(
        settings, None, disks=disks_of(settings, None), control_port=control_port
    )
    assert isinstance(ingress, HAProxyDataPlane)
    assert isinstance(router, HAProxyRouter)
    await ingress.start()
    ingress.settle()
    try:
        yield router
    finally:
        await router.edge.stop()
        await ingress.stop(haproxy=True)


async def test_a_route_that_requires_a_key_is_served_with_it_and_a_revoked_key_stops_at_once(
    tmp_path: Path, short_root: Path, upstream: StartUpstream
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        runtime_root=short_root,
        data_plane="haproxy",
        ingress_port=0,
        sandbox="off",
    )
    async with _serving(settings) as router:
        app = await upstream("shop-r1")
        router.keys.replace({7: "shop--acme"}, [])  # loaded: app 7 requires a key
        assert behind_edge(app.app, router.edge) == app.app  # no control plane through HAProxy
        await router.edge.start()
        router.route("shop--acme", [Backend("r1", 100, (app.address,))])
        await router.published()
        secret = "adk_key_" + "x" * 43
        router.keys.add(token_hash(secret), GateKey(7, "key1", write=True, expires_at=None))
        await router.keys_published()  # what the API-key service awaits before "done"
        port = router.plane.port
        host = {"host": "shop--acme.localhost"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert (await client.get("/", headers=host)).status_code == 401
            r = await client.get("/", headers={**host, "x-api-key": secret})
            assert r.status_code == 200
            assert app.seen[-1].header(b"x-api-key") is None  # the key never reaches the app
            router.keys.remove("key1")
            await router.keys_published()
            r = await client.get("/", headers={**host, "x-api-key": secret})
            assert r.status_code == 401  # at once: published means in effect


async def test_the_control_plane_at_an_https_public_url_is_served_through_haproxy(
    tmp_path: Path, short_root: Path, upstream: StartUpstream
) -> None:
    control = await upstream("control")
    settings = Settings(
        data_dir=tmp_path / "data",
        runtime_root=short_root,
        data_plane="haproxy",
        ingress_port=0,
        sandbox="off",
        public_url="https://appdeck.example.test",
        https_port=free_port(),
    )
    async with _serving(settings, control_port=control.port) as router:
        router.keys.loaded()
        await router.edge.start()
        assert router.edge.options.control_servers == (f"127.0.0.1:{control.port}",)
        assert isinstance(behind_edge(control.app, router.edge), TrustEdge)  # believes HAProxy only
        port = router.plane.port
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            r = await client.get(
                "/healthz",
                headers={"host": "appdeck.example.test", "x-forwarded-for": "6.6.6.6"},
            )
        assert r.status_code == 200  # not "no app named _control"
        seen = control.seen[-1]
        secret = control_secret(router.edge.paths)
        assert seen.header(b"x-appdeck-edge") == secret.encode()
        assert seen.header(b"x-forwarded-for") == b"127.0.0.1"  # the peer, not the client's
        assert seen.header(b"x-forwarded-proto") == b"http"
        https = f"https://127.0.0.1:{settings.https_port}"
        async with httpx.AsyncClient(base_url=https, verify=False, timeout=10) as client:
            r = await client.get("/healthz", headers={"host": "appdeck.example.test"})
        assert r.status_code == 200  # TLS ends at HAProxy (its default certificate here)
        assert control.seen[-1].header(b"x-forwarded-proto") == b"https"


async def test_replicas_on_one_host_each_serve_the_control_plane_until_one_stops(
    tmp_path: Path, short_root: Path, upstream: StartUpstream
) -> None:
    """Replicas share one HAProxy: each one's listener is a server of the control plane's
    backend (added, not replaced by the last to reload), and leaves it when it stops."""
    first_cp, second_cp = await upstream("cp-1"), await upstream("cp-2")
    settings = Settings(
        data_dir=tmp_path / "data",
        runtime_root=short_root,
        data_plane="haproxy",
        ingress_port=0,
        sandbox="off",
        public_url="https://appdeck.example.test",
        https_port=free_port(),
    )
    host = {"host": "appdeck.example.test"}
    async with _serving(settings, control_port=first_cp.port) as first:
        first.keys.loaded()
        await first.edge.start()
        port = first.plane.port
        second_settings = settings.model_copy(update={"ingress_port": port})
        _, ingress, second = runtime_of(
            second_settings,
            None,
            disks=disks_of(second_settings, None),
            control_port=second_cp.port,
        )
        assert isinstance(ingress, HAProxyDataPlane)
        assert isinstance(second, HAProxyRouter)
        await ingress.start()
        ingress.settle()
        assert await ingress.synced()  # the second replica's reload
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for _ in range(6):
                assert (await client.get("/healthz", headers=host)).status_code == 200
            assert first_cp.seen
            assert second_cp.seen  # both replicas serve, not only the last to reload
            await second.edge.stop()
            await ingress.stop()  # the second replica exits; HAProxy stays
            before = len(second_cp.seen)
            for _ in range(6):
                assert (await client.get("/healthz", headers=host)).status_code == 200
            assert len(second_cp.seen) == before
            first.route("blog--acme", [Backend("r1", 100, (first_cp.address,))])
            await first.published()  # the first replica reloads: the second is gone for good
            config = first.plane.layout.config.read_text()
            assert f"127.0.0.1:{first_cp.port} check" in config
            assert f":{second_cp.port}" not in config


def test_the_edge_options_come_from_the_settings(tmp_path: Path) -> None:
    plain = Settings(data_dir=tmp_path, hsts_seconds=60, data_plane_metrics_port=9100)
    options = edge_options(plain, 8080)
    assert options.https_bind is None
    assert options.control_host is None
    assert (options.hsts_seconds, options.metrics_port) == (60, 9100)
    public = Settings(
        data_dir=tmp_path, host="0.0.0.0", public_url="https://Deck.Example.com/", https_port=8443
    )
    options = edge_options(public, 8080)
    assert options.https_bind == ":8443"
    assert options.https_port == 8443
    assert options.control_host == "deck.example.com"
    assert options.control_servers == ("127.0.0.1:8080",)
    http_public = Settings(data_dir=tmp_path, public_url="http://deck.example.com")
    assert edge_options(http_public, 8080).control_servers == ()


async def test_a_killed_haproxy_is_started_again_with_the_edge_and_keys_are_still_checked(
    tmp_path: Path, short_root: Path, upstream: StartUpstream
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        runtime_root=short_root,
        data_plane="haproxy",
        ingress_port=0,
        sandbox="off",
    )
    async with _serving(settings) as router:
        app = await upstream("shop-r1")
        router.keys.replace({7: "shop--acme"}, [])
        await router.edge.start()
        router.route("shop--acme", [Backend("r1", 100, (app.address,))])
        await router.published()
        secret = "adk_key_" + "y" * 43
        router.keys.add(token_hash(secret), GateKey(7, "key1", write=True, expires_at=None))
        await router.keys_published()
        pid = router.plane.process.master_pid()
        assert pid is not None
        workers = (Path("/proc") / str(pid) / "task" / str(pid) / "children").read_bytes().split()
        for victim in (pid, *map(int, workers)):  # kill -9, master and workers
            os.kill(victim, signal.SIGKILL)
        host = {"host": "shop--acme.localhost"}
        url = f"http://127.0.0.1:{router.plane.port}"
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:

            async def served() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    r = await client.get("/", headers={**host, "x-api-key": secret})
                    return r.status_code == 200
                return False

            async with asyncio.timeout(30):  # the watchdog: every route, the edge's files
                while router.plane.restarts < 1 or not await served():  # noqa: ASYNC110 - a bounded poll of another process
                    await asyncio.sleep(0.05)
            assert (await client.get("/", headers=host)).status_code == 401
            later = "adk_key_" + "z" * 43  # the mirror keeps applying after the restart
            router.keys.add(token_hash(later), GateKey(7, "key2", write=True, expires_at=None))
            await router.keys_published()
            assert (await client.get("/", headers={**host, "x-api-key": later})).status_code == 200
