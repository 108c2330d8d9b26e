"""``appdeck app list|logs|stop|start`` (issue 20, item 10) beside a server running in this
process on the same data dir: stop and start are recorded in the database and applied by the
server's deploy watch, never by the CLI itself."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.cli import cli
from appdeck.common.identity import Principal
from appdeck.settings import Settings

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Services, int]]:
    source = tmp_path / "src" / "hello"
    shutil.copytree(HELLO, source)
    settings = Settings.model_validate(
        {"data_dir": tmp_path / "data", "source_roots": [tmp_path / "src"]}
    )
    services = await Services.start(settings)
    try:
        admin = IdentityAdmin(services.identities, services.token_issuer)
        await admin.create_tenant("acme")
        user = await admin.create_user("acme", "alice", None, role="admin")
        alice = Principal("acme", user.id, kind="oauth")
        platform = services.platform
        spec = {
            "source_path": str(source),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 5},
            "env": {"GREETING": "hi"},
        }
        app = await platform.apps.register(alice, "hello", spec)
        await platform.env.set_vars(alice, app.app.id, {"TOKEN": "s3cr3t-value"}, secret=True)
        view = await platform.deployments.deploy(alice, app.app.id, wait_s=None)
        assert view.record.state == "live"
        yield services, app.app.id
    finally:
        await services.stop(stop_apps=True)


async def _cli(data_dir: Path, *args: str) -> str:
    """The command run as an operator would, in a thread (it runs its own event loop)."""
    runner = CliRunner()
    result = await asyncio.to_thread(
        runner.invoke, cli, ["app", *args, "--data-dir", str(data_dir)]
    )
    assert result.exit_code == 0, result.output
    return str(result.stdout)


async def _status(services: Services, http: httpx.AsyncClient) -> int:
    assert services.ingress is not None
    answer = await http.get(
        f"http://127.0.0.1:{services.ingress.port}/",
        # a connection each: one kept alive may still be held by HAProxy's previous worker
        headers={"host": "hello--acme.localhost", "connection": "close"},
    )
    return answer.status_code


async def _until(services: Services, status: int) -> int:
    """The ingress's answer once it is ``status``, or the last one after 60 s (the deploy
    watch runs every 5 s). One client for the whole wait: each new one builds an SSL context
    (~20 ms of CPU), even for plain HTTP."""
    seen = 0
    async with httpx.AsyncClient(timeout=5) as http:
        for _ in range(300):
            seen = await _status(services, http)
            if seen == status:
                break
            await asyncio.sleep(0.2)
    return seen


async def test_the_operator_lists_stops_starts_and_reads_the_logs_of_an_app(
    served: tuple[Services, int], tmp_path: Path
) -> None:
    services, app_id = served
    data = tmp_path / "data"
    listed = json.loads(await _cli(data, "list", "--json"))["apps"]
    assert listed == [
        {
            "app_id": app_id,
            "tenant": "acme",
            "name": "hello",
            "live": 1,
            "instances": 1,
            "state": "running",
        }
    ]
    assert "hello" in await _cli(data, "list")

    said = await _cli(data, "stop", "hello", "--tenant", "acme")
    assert "recorded" in said
    pending = json.loads(await _cli(data, "list", "--json"))["apps"][0]["state"]
    assert pending in ("stop pending", "stopped")  # the server may have applied it already
    assert await _until(services, 503) == 503  # applied by the server, not by the CLI
    assert json.loads(await _cli(data, "list", "--json"))["apps"][0]["state"] == "stopped"
    runtime = services.platform.deploys.runtime
    # the route says "stopped" first (HAProxy has it), then the instances stop
    for _ in range(100):
        if not await runtime.running(f"{app_id}-1"):
            break
        await asyncio.sleep(0.1)
    assert await runtime.running(f"{app_id}-1") == []

    await _cli(data, "start", str(app_id))
    assert await _until(services, 200) == 200
    assert json.loads(await _cli(data, "list", "--json"))["apps"][0]["state"] == "running"

    logs = json.loads(await _cli(data, "logs", str(app_id), "--json"))
    assert logs["number"] == 1
    assert logs["lines"]
    assert all("s3cr3t-value" not in line for line in logs["lines"])
    assert "the app's output" in await _cli(data, "logs", "hello", "--tenant", "acme")


def test_an_unknown_app_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    assert (
        runner.invoke(cli, ["tenant", "create", "acme", "--data-dir", str(tmp_path)]).exit_code == 0
    )
    result = runner.invoke(cli, ["app", "stop", "42", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "no app 42" in result.output
    result = runner.invoke(cli, ["app", "stop", "hello", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--tenant" in result.output


async def test_app_status_reports_the_live_release_and_an_instances_crash(
    served: tuple[Services, int], tmp_path: Path
) -> None:
    services, app_id = served
    data_dir = tmp_path / "data"
    first = json.loads(await _cli(data_dir, "status", str(app_id), "--json"))
    assert first["state"] == "running"
    assert first["live"]["number"] == 1
    assert first["instances"] == {"up": 1, "desired": 1}
    [instance] = first["instance_details"]
    assert (instance["state"], instance["restarts"], instance["last_exit"]) == ("running", 0, None)
    assert first["traffic"] is None  # the server's counters: its /metrics has them

    assert services.platform is not None
    [ref] = await services.platform._driver.handles(f"{app_id}-1")
    os.kill(ref.pid, signal.SIGKILL)  # the instance's first process, as an OOM killer might

    async def restarted() -> dict[str, Any]:
        return dict(json.loads(await _cli(data_dir, "status", str(app_id), "--json")))

    seen = await restarted()
    for _ in range(150):
        if seen["instance_details"] and seen["instance_details"][0]["restarts"] == 1:
            break
        await asyncio.sleep(0.2)
        seen = await restarted()
    [instance] = seen["instance_details"]
    assert (instance["restarts"], instance["last_exit"]) == (1, "signal SIGKILL")
    text = await _cli(data_dir, "status", "hello", "--tenant", "acme")
    assert "running, release #1 (rolling), 1/1 instance(s) up" in text
