"""The composition root serves ``/internal/releases/<id>/workspace.tar`` with the platform's
key: the behaviour itself is tested in ``tests/runtime/kubernetes/test_workspace_tar.py``."""

from __future__ import annotations

from pathlib import Path

import httpx

from appdeck.app import Services
from appdeck.settings import Settings
from appdeck.storage import default_sqlite_url


async def test_appdeck_serves_the_endpoint_with_its_own_key(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"data_dir": tmp_path, "database_url": default_sqlite_url(tmp_path)}
    )
    services = await Services.start(settings)
    try:
        assert services.platform is not None
        tars = services.platform.workspaces
        assert tars is not None
        assert tars.max_bytes == 256 * 1024 * 1024  # APPDECK_MAX_SOURCE_MB's default
        transport = httpx.ASGITransport(app=services.asgi())
        async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as http:
            path = "/internal/releases/1-1/workspace.tar"
            refused = await http.get(path, headers={"authorization": "Bearer " + "0" * 64})
            assert refused.status_code == 401
            token = tars.token("1-1")
            missing = await http.get(path, headers={"authorization": f"Bearer {token}"})
            assert missing.status_code == 404  # the key is the server's: no such release here
            other = await http.get(
                "/internal/releases/1-2/workspace.tar",
                headers={"authorization": f"Bearer {token}"},
            )
            assert other.status_code == 401
    finally:
        await services.stop()
