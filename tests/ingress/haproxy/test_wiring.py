"""``APPDECK_DATA_PLANE=haproxy`` as ``appdeck serve`` assembles it (``runtime_of``): the
platform's router over HAProxy, a route change in effect once ``published`` returns."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.platform.deploy.ingress_router import published
from appdeck.platform.deploy.ports import Backend
from appdeck.runtime_setup import HAProxyRouter, runtime_of
from appdeck.settings import Settings
from tests.ingress.conftest import StartUpstream


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
    _, ingress, router = runtime_of(settings, None)
    assert isinstance(ingress, HAProxyDataPlane)
    assert isinstance(router, HAProxyRouter)
    port = await ingress.start()
    ingress.settle()
    router.keys.loaded()  # the platform loads the apps' API keys (none required here)
    try:
        app = await upstream("blog-r1")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for release in ("r1", "r2"):
                router.route("blog--acme", [Backend(release, 100, (app.address,))])
                await published(router)
                r = await client.get("/", headers={"host": "blog--acme.localhost"})
                assert r.status_code == 200  # at once: published means in effect
            router.forget("blog--acme")
            await published(router)
            r = await client.get("/", headers={"host": "blog--acme.localhost"})
            assert r.status_code == 404
        assert ingress.process.running()
    finally:
        await ingress.stop(haproxy=True)  # appdeck serve --stop-apps-on-exit
    assert not ingress.process.running()
