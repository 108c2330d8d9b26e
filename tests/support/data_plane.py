"""A real HAProxy data plane (issue 21) as ``appdeck serve`` assembles it (``runtime_of``), for
platform tests that need apps reached through it: its files in a short temporary directory
(unix socket paths are short), on a free port, stopped (HAProxy too) when the test ends."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.runtime_setup import HAProxyRouter, disks_of, runtime_of
from appdeck.settings import Settings


@asynccontextmanager
async def haproxy_plane(data_dir: Path, **settings: Any) -> AsyncIterator[HAProxyRouter]:
    """The router over a started HAProxy (``router.plane``: its table, port, challenges,
    certificates); no API key required unless the test loads some into ``router.keys``."""
    root = Path(tempfile.mkdtemp(prefix="hxp", dir="/tmp"))
    options = {"ingress_port": 0, "sandbox": "off", **settings}
    config = Settings(data_dir=data_dir, runtime_root=root, **options)
    _, plane, router = runtime_of(config, None, disks=disks_of(config, None))
    assert isinstance(plane, HAProxyDataPlane)
    assert isinstance(router, HAProxyRouter)
    try:
        await plane.start()
        plane.settle()
        router.keys.loaded()  # as Platform.start: the apps' keys (none) are loaded
        await router.edge.start()
        yield router
    finally:
        await router.edge.stop()
        await plane.stop(haproxy=True)
        shutil.rmtree(root, ignore_errors=True)
