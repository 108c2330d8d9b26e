"""From a "laptop" (a network namespace of its own, over a veth link, resolving every name to
the host: tests/support/laptop.py), an app deployed on the host answers at its apps-domain
hostname and, once its TXT record proved control, at its custom domain; another tenant cannot
take that domain. Real processes throughout: the app, the ingress bound on the host's veth
address, pebble-challtestsrv as the laptop's DNS and the platform's TXT resolver, curl."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.settings import Settings
from tests.support.laptop import Laptop, laptop, unavailable
from tests.tools.conftest import HELLO, World

APPS = "apps.example.test"
SHOP = "shop.example.test"


@pytest.fixture
async def lap() -> AsyncIterator[Laptop]:
    reason = unavailable()
    assert reason is None, reason  # never skipped: the test needs it
    async with laptop() as made:
        yield made


async def test_a_laptop_resolves_every_name_to_the_host_and_leaves_nothing_behind() -> None:
    async with laptop() as made:
        name, veth = made.name, made.host_veth
        resolved = await made.run("getent", "hosts", "anything--x.apps.example.test")
        assert resolved.stdout.split()[0] == made.host_ip
        address = await made.run("ip", "-br", "addr")
        assert made.laptop_ip in address.stdout
        resolv = await made.run("cat", "/etc/resolv.conf")  # the namespace's own, mounted
        assert f"nameserver {made.host_ip}" in resolv.stdout
    namespaces = await _ip("netns", "list")
    links = await _ip("link", "show")
    assert name not in namespaces
    assert veth not in links
    assert not _exists(Path("/etc/netns") / name)


def _exists(path: Path) -> bool:
    return path.exists()


async def _ip(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(
        "ip", *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    async with asyncio.timeout(10):
        out, _ = await process.communicate()
    return out.decode()


@pytest.fixture
async def world(lap: Laptop, tmp_path: Path) -> AsyncIterator[World]:
    source = tmp_path / "src" / "hello"
    shutil.copytree(HELLO, source)
    settings = Settings.model_validate(
        {
            "data_dir": tmp_path / "data",
            "source_roots": [tmp_path / "src"],
            "rate_limit_per_second": 0,
            "host": lap.host_ip,  # the data plane where the laptop reaches it
            "apps_domain": APPS,
            "dns_resolver": lap.dns.dns_address,
        }
    )
    services = await Services.start(settings)
    try:
        admin = IdentityAdmin(services.identities, services.token_issuer)
        for tenant, user in (("acme", "alice"), ("globex", "eve")):
            await admin.create_tenant(tenant)
            await admin.create_user(tenant, user, None, role="admin")
        transport = httpx.ASGITransport(app=services.asgi())
        async with httpx.AsyncClient(
            transport=transport, base_url=services.base_url, timeout=90
        ) as client:
            yield World(services, client, admin, source)
    finally:
        await services.stop(stop_apps=True)


async def test_an_app_answers_the_laptop_at_its_public_name_and_its_proved_domain(
    lap: Laptop, world: World
) -> None:
    alice = await world.caller("alice")
    spec = {
        "source_path": str(world.source),
        "run_command": "python3 app.py",
        "health_check": {"path": "/healthz", "timeout_s": 2},
        "domains": [SHOP],
    }
    app_id = (await alice.ok("register_app", name="hello", spec=spec))["app_id"]
    deployed = await alice.ok("deploy_app", app_id=app_id, wait_seconds=60)
    assert deployed["state"] == "live", deployed
    got = await alice.ok("get_app_url", app_id=app_id)
    port = world.services.ingress.port  # type: ignore[union-attr]
    assert got["url"] == f"http://hello--acme.{APPS}:{port}/"

    status, body = await lap.curl(got["url"])
    assert status == 200, body
    assert "hello" in body.lower()
    status, _ = await lap.curl(f"http://{SHOP}:{port}/")
    assert status == 404  # claimed, not proved: not served

    (pending,) = got["domains"]
    assert pending["state"] == "pending"
    await lap.dns.set_txt(pending["txt"]["name"], pending["txt"]["value"])
    verified = await alice.ok("get_app_url", app_id=app_id, verify=True)
    assert verified["domains"][0]["state"] == "verified", verified
    status, body = await lap.curl(verified["domains"][0]["url"])
    assert status == 200, body
    assert verified["domains"][0]["url"] == f"http://{SHOP}:{port}/"

    eve = await world.caller("eve", "globex")
    assert await eve.error("register_app", name="hello", spec={"domains": [SHOP]}) == "conflict"

    await alice.ok("set_app_spec", app_id=app_id, spec={"domains": []})
    status, _ = await lap.curl(f"http://{SHOP}:{port}/")
    assert status == 404  # released: no longer served, at once
