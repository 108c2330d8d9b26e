"""The domain service on a real database with a resolver made of a dict: the periodic round
proves pending claims in bounded batches, lookups that fail are noted, the ACME call, and the
host map following the database (resync, renames)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from appdeck.ingress.certs import Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.hosts import HostMap
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer
from appdeck.platform.domains import AppUrls, DomainService
from appdeck.platform.domains.proof import LookupFailed
from appdeck.platform.tls import PlatformNames
from appdeck.settings import load
from appdeck.storage import Storage
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.domains import DomainStore
from appdeck.tls_setup import _proved_by_acme, tls_of


class Dns:
    """TXT records by name; a name in ``broken`` fails its lookup; every lookup counted."""

    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.broken: set[str] = set()
        self.asked: list[str] = []

    async def txt(self, name: str) -> list[str]:
        self.asked.append(name)
        if name in self.broken:
            raise LookupFailed("DNS gave no answer within 3 s")
        return self.records.get(name, [])


def _service(
    storage: Storage, dns: Dns, hosts: HostMap, tmp_path: Path, **options: Any
) -> DomainService:
    return DomainService(
        DomainStore(storage.engine),
        hosts,
        apps=AppStore(storage.engine),
        sealer=Sealer.from_settings("test-secret", tmp_path),
        resolver=dns,
        urls=AppUrls(8088, "apps.example.test"),
        recheck_seconds=60.0,
        **options,
    )


async def _app(storage: Storage, tenant: str, domains: list[str]) -> AppRecord:
    return await AppStore(storage.engine).create(tenant, "shop", None, {"domains": domains}, "u")


async def test_the_periodic_round_proves_pending_claims_in_bounded_batches(
    storage: Storage, tmp_path: Path
) -> None:
    dns, hosts = Dns(), HostMap()
    service = _service(storage, dns, hosts, tmp_path)
    names = [f"d{i}.example.test" for i in range(5)]
    app = await _app(storage, "acme", names)
    await service.claim(app)
    for name in names:
        dns.records[f"_appdeck-challenge.{name}"] = [service.token(name, app.id)]
    dns.broken.add("_appdeck-challenge.d4.example.test")
    assert await service.recheck(limit=2) == 2  # the batch bound
    assert len(dns.asked) == 2
    assert await service.recheck(limit=10) == 2  # the rest, not the ones just checked
    assert len(hosts.items()) == 4
    assert set(hosts.items().values()) == {"shop--acme"}
    held = await service.store.get_many(["d4.example.test"])
    assert held["d4.example.test"].last_error == (
        "the TXT lookup of _appdeck-challenge.d4.example.test failed: DNS gave no answer within 3 s"
    )
    assert await service.recheck(limit=10) == 0  # checked within the period: not again
    assert len(dns.asked) == 5


async def test_tokens_are_per_app_and_per_host_and_stable(storage: Storage, tmp_path: Path) -> None:
    service = _service(storage, Dns(), HostMap(), tmp_path)
    again = _service(storage, Dns(), HostMap(), tmp_path)  # another replica, same secret
    token = service.token("shop.example.test", 1)
    assert token == again.token("shop.example.test", 1)
    assert token != service.token("shop.example.test", 2)
    assert token != service.token("www.example.test", 1)
    assert token.startswith("appdeck-")
    assert len(token) == len("appdeck-") + 32


async def test_the_acme_call_verifies_the_holder_and_the_map_follows_renames_and_resyncs(
    storage: Storage, tmp_path: Path
) -> None:
    hosts = HostMap()
    service = _service(storage, Dns(), hosts, tmp_path)
    app = await _app(storage, "acme", ["shop.example.test"])
    await service.claim(app)
    assert hosts.items() == {}
    assert await service.mark_verified("SHOP.example.test.")  # normalized like a Host header
    assert not await service.mark_verified("not a host")
    assert hosts.items() == {"shop.example.test": "shop--acme"}
    renamed = await AppStore(storage.engine).update(app.id, name="store")
    service.moved(app, renamed)
    assert hosts.items() == {"shop.example.test": "store--acme"}
    hosts.set("stale.example.test", "gone--acme")  # what another replica released
    assert await service.resync() == 1
    assert hosts.items() == {"shop.example.test": "store--acme"}


async def test_a_deploy_claims_what_the_spec_lists_once_the_holder_let_it_go(
    storage: Storage, tmp_path: Path
) -> None:
    service = _service(storage, Dns(), HostMap(), tmp_path)
    feed = ChangeFeed()
    service.attach(feed)
    holder = await _app(storage, "acme", ["shop.example.test"])
    waiting = await _app(storage, "globex", ["shop.example.test"])
    await service.claim(holder)
    await feed.emit(Change("deployment.updated", "globex", waiting.id, deployment=1))
    held = await service.store.get_many(["shop.example.test"])
    assert held["shop.example.test"].app_id == holder.id  # still the first claimant's
    await service.release_all(holder)
    await feed.emit(Change("spec.updated", "globex", waiting.id))  # not a deploy: nothing
    assert await service.store.get_many(["shop.example.test"]) == {}
    await feed.emit(Change("deployment.updated", "globex", waiting.id, deployment=2))
    held = await service.store.get_many(["shop.example.test"])
    assert held["shop.example.test"].app_id == waiting.id
    assert held["shop.example.test"].state == "pending"


async def test_tls_is_told_every_claim_and_its_certificate_proves_the_domain(
    storage: Storage, tmp_path: Path
) -> None:
    hosts = HostMap()
    service = _service(storage, Dns(), hosts, tmp_path)
    app = await _app(storage, "acme", ["shop.example.test", "www.example.test"])
    await service.claim(app)
    assert sorted(await service.claimed()) == [
        (app.id, "acme", "shop.example.test"),
        (app.id, "acme", "www.example.test"),
    ]
    settings = load(data_dir=tmp_path, acme_directory="https://acme.example.test/dir")
    assert tls_of(settings, storage.engine, IngressPlane(), "r1", None, service) is not None
    names = PlatformNames(storage.engine, apps_domain=None, public_host=None, domains=service)
    wanted = {h for row in await names.wanted() for h in row.hostnames}
    assert wanted == {"shop.example.test", "www.example.test"}  # TLS orders for the claims
    proved = _proved_by_acme(service)
    await proved("shop.example.test", "acme")
    assert hosts.items() == {"shop.example.test": "shop--acme"}
    assert {h for _, _, h in await service.claimed()} == {"shop.example.test", "www.example.test"}


class IngressPlane:
    def __init__(self) -> None:
        self.certificates = Certificates()
        self.challenges = Challenges()


DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_an_unproved_claim_expires_and_another_tenant_may_claim_the_name(
    storage: Storage, tmp_path: Path
) -> None:
    clock = Clock()
    service = _service(storage, Dns(), HostMap(), tmp_path, claim_ttl=7 * DAY, clock=clock)
    squatter = await _app(storage, "acme", ["shop.example.test"])
    other = await _app(storage, "globex", ["shop.example.test"])
    await service.claim(squatter)
    await service.claim(other)  # refused meanwhile: the name is held
    held = await service.store.get_many(["shop.example.test"])
    assert held["shop.example.test"].app_id == squatter.id
    [state] = await service.describe(other)
    assert state["state"] == "refused"

    clock.now += 6 * DAY
    await service.claim(squatter)  # claiming again never refreshes a claim
    await service.claim(other)
    held = await service.store.get_many(["shop.example.test"])
    assert held["shop.example.test"].app_id == squatter.id

    clock.now += 2 * DAY  # past the TTL: another app's claim takes its place at once
    await service.claim(other)
    held = await service.store.get_many(["shop.example.test"])
    assert held["shop.example.test"].app_id == other.id
    [state] = await service.describe(squatter)
    assert state["state"] == "refused"


async def test_the_periodic_round_drops_expired_claims_in_bounded_batches(
    storage: Storage, tmp_path: Path
) -> None:
    clock = Clock()
    service = _service(storage, Dns(), HostMap(), tmp_path, claim_ttl=DAY, clock=clock)
    names = [f"d{i}.example.test" for i in range(3)]
    await service.claim(await _app(storage, "acme", names))
    await service.recheck(limit=10)
    assert len(await service.store.get_many(names)) == 3  # young: kept
    clock.now += 2 * DAY
    await service.recheck(limit=2)
    assert len(await service.store.get_many(names)) == 1
    await service.recheck(limit=2)
    assert await service.store.get_many(names) == {}


async def test_a_txt_verified_domain_whose_record_is_gone_past_the_grace_stops_being_served(
    storage: Storage, tmp_path: Path
) -> None:
    clock, dns, hosts = Clock(), Dns(), HostMap()
    service = _service(storage, dns, hosts, tmp_path, txt_grace=DAY, clock=clock)
    app = await _app(storage, "acme", ["shop.example.test"])
    record = "_appdeck-challenge.shop.example.test"
    dns.records[record] = [service.token("shop.example.test", app.id)]
    [state] = await service.describe(app, verify=True)
    assert state["state"] == "verified"
    assert hosts.items() == {"shop.example.test": "shop--acme"}

    clock.now += 2 * 3600  # re-checked, still there
    await service.recheck()
    assert dns.asked.count(record) == 2
    del dns.records[record]
    clock.now += 2 * 3600  # gone: still served during the grace, the agent told why
    await service.recheck()
    [state] = await service.describe(app)
    assert state["state"] == "verified"
    assert state["last_check"] == f"no TXT record at {record}"
    assert hosts.items() == {"shop.example.test": "shop--acme"}

    clock.now += DAY  # gone for longer than the grace: pending again, not served
    await service.recheck()
    assert hosts.items() == {}
    [state] = await service.describe(app)
    assert state["state"] == "pending"
    assert state["last_check"].startswith("no longer served: its TXT proof has failed since ")
    assert state["last_check"].endswith(f"(no TXT record at {record})")


async def test_a_txt_record_back_within_the_grace_clears_the_failure(
    storage: Storage, tmp_path: Path
) -> None:
    clock, dns, hosts = Clock(), Dns(), HostMap()
    service = _service(storage, dns, hosts, tmp_path, txt_grace=DAY, clock=clock)
    app = await _app(storage, "acme", ["shop.example.test"])
    record = "_appdeck-challenge.shop.example.test"
    token = service.token("shop.example.test", app.id)
    dns.records[record] = [token]
    await service.describe(app, verify=True)
    dns.broken.add(record)
    clock.now += 2 * 3600
    await service.recheck()
    assert (await service.store.get_many(["shop.example.test"]))[
        "shop.example.test"
    ].failing_since is not None
    dns.broken.clear()
    clock.now += 20 * 3600  # back before the grace ended
    await service.recheck()
    held = (await service.store.get_many(["shop.example.test"]))["shop.example.test"]
    assert (held.state, held.failing_since, held.last_error) == ("verified", None, None)
    clock.now += 2 * DAY
    await service.recheck()
    assert hosts.items() == {"shop.example.test": "shop--acme"}


async def test_a_change_of_what_is_served_answers_only_once_the_data_plane_has_it(
    storage: Storage, tmp_path: Path
) -> None:
    hosts = HostMap()
    seen: list[dict[str, str]] = []

    async def published() -> None:  # the data plane's read-back: the map as it is then
        seen.append(hosts.items())

    service = _service(storage, Dns(), hosts, tmp_path, published=published)
    app = await _app(storage, "acme", ["shop.example.test"])
    await service.claim(app)  # a pending claim serves nothing: nothing changed, no wait
    assert seen == []
    assert await service.mark_verified("shop.example.test")
    assert seen == [{"shop.example.test": "shop--acme"}]
    await service.claim(app)  # the same again: nothing to wait for
    assert len(seen) == 1
    released = await AppStore(storage.engine).update_spec(app, {"domains": []})
    await service.claim(released)  # set_app_spec dropping the domain
    assert seen == [{"shop.example.test": "shop--acme"}, {}]
    await service.release_all(released)  # nothing left to release: no wait
    assert len(seen) == 2


async def test_a_deploy_of_an_app_that_lists_and_holds_no_domain_leaves_the_data_plane_alone(
    storage: Storage, tmp_path: Path
) -> None:
    hosts = HostMap()
    seen: list[dict[str, str]] = []

    async def published() -> None:
        seen.append(hosts.items())

    service = _service(storage, Dns(), hosts, tmp_path, published=published)
    feed = ChangeFeed()
    service.attach(feed)
    shop = await _app(storage, "acme", ["shop.example.test"])
    plain = await AppStore(storage.engine).create("acme", "plain", None, {}, "u")
    await service.claim(shop)
    assert await service.mark_verified("shop.example.test")
    assert len(seen) == 1
    hosts.replace({})  # this replica's map behind the database's: only a resync restores it
    for number in range(1, 4):  # every update of a deploy of the app with no domain
        await feed.emit(Change("deployment.updated", "acme", plain.id, deployment=number))
    assert len(seen) == 1
    assert hosts.items() == {}  # nothing of its own to serve or wait for
    assert await service.store.of_app(plain.id) == []
    await service.resync()  # the periodic backstop
    assert hosts.items() == {"shop.example.test": "shop--acme"}
