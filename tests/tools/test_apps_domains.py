"""get_app_url and the spec's ``domains`` as agents use them, on a real DNS server
(pebble-challtestsrv) for the TXT proofs: public URLs first; a custom domain pending until its
TXT record is right, then served; one app per hostname across tenants; refusals with reasons;
releases; the ACME proof and the takeover it gives way to."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.ingress.certs import Certificates
from appdeck.platform.domains import AppUrls
from appdeck.platform.domains.proof import ServedCertificates
from appdeck.platform.tls.states import TlsStates, iso
from appdeck.settings import Settings
from appdeck.storage.tls import CertRow
from tests.support.challtestsrv import ChallTestSrv, challtestsrv

from .conftest import Caller, World, _drop_app_databases

APPS = "apps.example.test"
SHOP = "shop.example.test"
CHALLENGE = f"_appdeck-challenge.{SHOP}"


class DomainWorld(World):
    dns: ChallTestSrv

    def served(self, host: str) -> str | None:
        ingress = self.services.ingress
        assert ingress is not None
        return ingress.table.route_of(host.encode())


@pytest.fixture
async def dworld(database_url: str, tmp_path: Path) -> AsyncIterator[DomainWorld]:
    async with challtestsrv() as dns:
        settings = Settings.model_validate(
            {
                "data_dir": tmp_path / "data",
                "database_url": database_url,
                "source_roots": [tmp_path / "src"],
                "rate_limit_per_second": 0,
                "apps_domain": APPS,
                "dns_resolver": dns.dns_address,
            }
        )
        services = await Services.start(settings)
        try:
            admin = IdentityAdmin(services.identities, services.token_issuer)
            for tenant, user in (("acme", "alice"), ("globex", "eve")):
                await admin.create_tenant(tenant)
                await admin.create_user(tenant, user, None, role="admin")
            await admin.create_user("acme", "vic", None)
            transport = httpx.ASGITransport(app=services.asgi())
            async with httpx.AsyncClient(transport=transport, base_url=services.base_url) as c:
                world = DomainWorld(services, c, admin, tmp_path / "src")
                world.dns = dns
                yield world
        finally:
            await _drop_app_databases(services)
            await services.stop(stop_apps=True)


async def _shop(caller: Caller, **spec: object) -> int:
    made = await caller.ok("register_app", name="shop", **({"spec": spec} if spec else {}))
    return int(made["app_id"])


async def test_get_app_url_lists_the_public_url_first(dworld: DomainWorld) -> None:
    alice = await dworld.caller("alice")
    app_id = await _shop(alice)
    got = await alice.ok("get_app_url", app_id=app_id)
    port = dworld.services.ingress.port if dworld.services.ingress else 0
    assert got["url"] == f"http://shop--acme.{APPS}:{port}/"
    assert got["urls"] == [got["url"], f"http://shop--acme.localhost:{port}/"]
    assert got["domains"] == []
    assert dworld.served(f"shop--acme.{APPS}") == "shop--acme"  # the data plane's suffix


async def test_a_custom_domain_is_served_only_once_its_txt_record_proves_control(
    dworld: DomainWorld,
) -> None:
    alice = await dworld.caller("alice")
    app_id = await _shop(alice)
    await alice.ok("set_app_spec", app_id=app_id, spec={"domains": ["Shop.Example.Test."]})
    got = await alice.ok("get_app_url", app_id=app_id)
    (state,) = got["domains"]
    assert state["host"] == SHOP  # normalized
    assert state["state"] == "pending"
    assert state["txt"]["name"] == CHALLENGE
    token = state["txt"]["value"]
    assert dworld.served(SHOP) is None

    checked = await alice.ok("get_app_url", app_id=app_id, verify=True)
    assert checked["domains"][0]["last_check"] == f"no TXT record at {CHALLENGE}"
    await dworld.dns.set_txt(CHALLENGE, "not-the-token")
    dworld.services.platform.domains._verified_at.clear()  # type: ignore[union-attr]
    checked = await alice.ok("get_app_url", app_id=app_id, verify=True)
    assert "'not-the-token'" in checked["domains"][0]["last_check"]
    assert dworld.served(SHOP) is None

    await dworld.dns.set_txt(CHALLENGE, token)
    dworld.services.platform.domains._verified_at.clear()  # type: ignore[union-attr]
    checked = await alice.ok("get_app_url", app_id=app_id, verify=True)
    (verified,) = checked["domains"]
    assert verified["state"] == "verified"
    assert verified["method"] == "txt"
    assert verified["url"].startswith(f"http://{SHOP}:")
    assert verified["tls"] is None
    assert dworld.served(SHOP) == "shop--acme"  # in the data plane's host map at once

    await alice.ok("set_app_spec", app_id=app_id, spec={"domains": []})
    assert dworld.served(SHOP) is None  # released at once


async def test_a_hostname_belongs_to_one_app_across_tenants(dworld: DomainWorld) -> None:
    alice, eve = await dworld.caller("alice"), await dworld.caller("eve", "globex")
    mine = await _shop(alice, domains=[SHOP])
    token = (await alice.ok("get_app_url", app_id=mine))["domains"][0]["txt"]["value"]
    await dworld.dns.set_txt(CHALLENGE, token)
    await alice.ok("get_app_url", app_id=mine, verify=True)
    theirs = await _shop(eve)
    result = await eve.tool("set_app_spec", app_id=theirs, spec={"domains": [SHOP]})
    assert result["isError"] is True
    error = result["structuredContent"]["error"]
    assert error["code"] == "conflict"
    assert f"{SHOP} is taken by another app" in error["message"]
    assert "acme" not in str(error)  # the holder is never named
    assert await eve.error("register_app", name="shop2", spec={"domains": [SHOP]}) == "conflict"
    assert dworld.served(SHOP) == "shop--acme"


async def test_an_acme_proof_serves_a_domain_and_a_txt_proof_by_another_takes_it_over(
    dworld: DomainWorld,
) -> None:
    alice, eve = await dworld.caller("alice"), await dworld.caller("eve", "globex")
    squat = await _shop(alice, domains=[SHOP])
    domains = dworld.services.platform.domains  # type: ignore[union-attr]
    assert await domains.mark_verified(SHOP, method="acme")
    assert not await domains.mark_verified("nobody.example.test")
    assert dworld.served(SHOP) == "shop--acme"
    owner = await _shop(eve, domains=[SHOP])  # accepted: the hold is not final
    got = (await eve.ok("get_app_url", app_id=owner))["domains"][0]
    assert got["state"] == "refused"
    assert "taken by another app" in got["reason"]
    await dworld.dns.set_txt(CHALLENGE, got["txt"]["value"])
    got = (await eve.ok("get_app_url", app_id=owner, verify=True))["domains"][0]
    assert got["state"] == "verified"
    assert dworld.served(SHOP) == "shop--globex"
    lost = (await alice.ok("get_app_url", app_id=squat))["domains"][0]
    assert lost["state"] == "refused"
    assert "txt" not in lost or lost["txt"] is None


async def test_refusals_name_the_reason(dworld: DomainWorld) -> None:
    alice = await dworld.caller("alice")
    app_id = await _shop(alice)
    for bad, reason in (
        ("10.1.2.3", "not a public DNS name"),
        (f"x.{APPS}", "under the platform's apps domain"),
        ("app.localhost", "localhost is this machine"),
        ("a\nb.example.test", "not a public DNS name"),
    ):
        result = await alice.tool("set_app_spec", app_id=app_id, spec={"domains": [bad]})
        assert result["isError"] is True
        assert reason in result["structuredContent"]["error"]["message"]
    many = [f"d{i}.example.test" for i in range(21)]
    assert await alice.error("set_app_spec", app_id=app_id, spec={"domains": many}) == (
        "invalid_argument"
    )
    assert await alice.error("set_app_spec", app_id=app_id, spec={"domains": "x.test"}) == (
        "invalid_argument"
    )


async def test_verifying_needs_the_right_to_change_the_spec_and_deleting_releases(
    dworld: DomainWorld,
) -> None:
    alice, vic = await dworld.caller("alice"), await dworld.caller("vic")
    app_id = await _shop(alice, domains=[SHOP])
    await alice.ok("manage_app", app_id=app_id, action="grant", user="vic", role="viewer")
    assert (await vic.ok("get_app_url", app_id=app_id))["domains"][0]["state"] == "pending"
    assert await vic.error("get_app_url", app_id=app_id, verify=True) == "forbidden"
    domains = dworld.services.platform.domains  # type: ignore[union-attr]
    await domains.mark_verified(SHOP)
    assert dworld.served(SHOP) == "shop--acme"
    await alice.ok("manage_app", app_id=app_id, action="update", name="store")
    assert dworld.served(SHOP) == "store--acme"  # a rename moves its domains
    await alice.ok("manage_app", app_id=app_id, action="delete", confirm=True)
    assert dworld.served(SHOP) is None
    assert await domains.store.get_many([SHOP]) == {}


async def test_get_app_url_is_not_announced_read_only_since_verify_claims_domains(
    dworld: DomainWorld,
) -> None:
    reader = await dworld.caller("alice", scope="apps:read")
    listed = await reader.rpc("tools/list")
    [tool] = [t for t in listed["result"]["tools"] if t["name"] == "get_app_url"]
    assert tool["annotations"]["readOnlyHint"] is False
    assert tool["annotations"]["idempotentHint"] is True


async def test_get_app_url_shows_the_public_urls_certificate_order_failed_with_its_reason(
    dworld: DomainWorld,
) -> None:
    platform = dworld.services.platform
    assert platform is not None
    host, retry = f"shop--acme.{APPS}", time.time() + 600
    states = TlsStates(acme=True)  # what the TLS service keeps current on every replica
    states.put(
        CertRow(host, (host,), "app", "acme", 1, "failed", None, None, None, None, None,
                f"validation failed: {host}: connection refused", 2, retry)
    )  # fmt: skip
    before = platform.domains.urls
    platform.domains.urls = AppUrls(
        before.ingress_port, APPS, None, ServedCertificates(Certificates(), 443, orders=states)
    )
    alice = await dworld.caller("alice")
    got = await alice.ok("get_app_url", app_id=await _shop(alice))
    assert got["tls"]["state"] == "failed"
    assert got["tls"]["live"] is False
    assert got["tls"]["error"] == f"validation failed: {host}: connection refused"
    assert got["tls"]["next_try"] == iso(retry)
    assert got["url"].startswith("http://")  # no certificate served: not https
