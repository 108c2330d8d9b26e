"""Automatic TLS against a real CA: Debian's Pebble, validating HTTP-01 through the HAProxy
data plane, on SQLite and PostgreSQL (nothing mocked)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from appdeck.events.cluster import Cluster
from appdeck.ingress.certs import Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.haproxy.plane import HAProxyDataPlane
from appdeck.platform.crypto import Sealer
from appdeck.platform.tls import BadCertificate, TlsConfig, TlsService
from appdeck.storage import Storage
from appdeck.storage.schema import tls_accounts, tls_certificates
from appdeck.storage.tls import WantedRow
from tests.platform.tls.test_pem import self_signed
from tests.support.challtestsrv import challtestsrv
from tests.support.data_plane import haproxy_plane
from tests.support.mcp import free_port
from tests.support.pebble import Pebble, pebble
from tests.support.redis import REDIS_URL

HOST = "shop--acme.apps.example.test"
ORDER_BOUND = 90  # a bound against hanging on a loaded 2-core machine, not a speed


class Fixed:
    """A names source that wants exactly what the test says."""

    def __init__(self, *rows: WantedRow) -> None:
        self.rows = list(rows)

    async def wanted(self) -> list[WantedRow]:
        return list(self.rows)


def app_host(host: str = HOST, tenant: str = "acme", app_id: int = 1) -> WantedRow:
    return WantedRow(host, (host,), "app", tenant, app_id)


@dataclass
class World:
    storage: Storage
    tmp_path: Path
    ca: Pebble
    ingress: HAProxyDataPlane
    sealer: Sealer
    served: Callable[[], Awaitable[None]] | None = None
    """The data plane's "challenges are served now" (HAProxy's edge sync), as app.py wires it."""

    def service(
        self,
        names: Fixed,
        *,
        replica: str = "r1",
        challenges: Challenges | None = None,
        certificates: Certificates | None = None,
        **config: Any,
    ) -> TlsService:
        settings = TlsConfig(directory=self.ca.directory, ca_bundle=self.ca.ca_bundle, **config)
        return TlsService(
            self.storage.engine,
            self.sealer,
            certificates if certificates is not None else Certificates(),
            challenges if challenges is not None else self.ingress.challenges,
            settings,
            names=names,
            replica=replica,
            served=self.served if challenges is None else None,
        )


@pytest.fixture
async def world(storage: Storage, tmp_path: Path) -> AsyncIterator[World]:
    async with (
        haproxy_plane(tmp_path / "plane") as router,
        challtestsrv() as dns,
        pebble(tmp_path, http_port=router.plane.port, dns=dns.dns_address) as ca,
    ):
        sealer = Sealer.from_settings("s3cret", tmp_path)
        yield World(storage, tmp_path, ca, router.plane, sealer, router.edge.sync)


async def issue(service: TlsService) -> list[str]:
    started = await service.reconcile()
    async with asyncio.timeout(ORDER_BOUND):
        await service.settled()
    return started


async def verify_served(world: World, certificates: Certificates, host: str) -> x509.Certificate:
    """The certificate served for ``host`` chains to Pebble's root and names ``host``."""
    found = certificates.for_host(host)
    assert found is not None
    chain = x509.load_pem_x509_certificates(found[1].chain_pem)
    root = x509.load_pem_x509_certificate(await world.ca.root_pem())
    verifier = PolicyBuilder().store(Store([root])).build_server_verifier(x509.DNSName(host))
    verifier.verify(chain[0], chain[1:])
    return chain[0]


async def test_an_apps_hostname_gets_a_certificate_from_the_ca_through_the_ingress(
    world: World,
) -> None:
    certificates = Certificates()
    service = world.service(Fixed(app_host()), certificates=certificates)
    await service.start()
    assert await service.status_of(HOST) is None  # not wanted yet: reconcile adds it
    began = time.perf_counter()
    assert await issue(service) == [HOST]
    took = time.perf_counter() - began
    print(f"\nissuance against Pebble: {took:.2f} s")

    leaf = await verify_served(world, certificates, HOST)
    status = await service.status_of(HOST)
    assert status is not None
    assert status["state"] == "issued"
    assert status["issuer"].startswith("Pebble Intermediate CA")
    assert status["error"] is None
    life = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    renew = leaf.not_valid_before_utc + life * 2 / 3
    assert status["not_after"] == leaf.not_valid_after_utc.isoformat()
    assert abs((renew - datetime.datetime.fromisoformat(status["renew_at"])).total_seconds()) < 1
    # the challenge is gone from every data plane once the order ended
    assert world.ingress.challenges.items() == {}


async def test_certificate_and_keys_are_stored_sealed_and_a_second_platform_serves_them(
    world: World,
) -> None:
    first = world.service(Fixed(app_host()))
    await first.start()
    await issue(first)
    async with world.storage.engine.connect() as conn:
        row = (await conn.execute(sa.select(tls_certificates))).one()
        account = (await conn.execute(sa.select(tls_accounts))).one()
    for sealed in (row.chain_sealed, row.key_sealed, account.key_sealed):
        assert "-----BEGIN" not in sealed
    assert world.sealer.open(row.key_sealed).startswith("-----BEGIN PRIVATE KEY-----")
    assert account.uri.startswith("https://127.0.0.1:")  # registered once, shared

    elsewhere = Certificates()
    second = world.service(Fixed(app_host()), replica="r2", certificates=elsewhere)
    await second.start()  # at start, from the database: no order of its own
    assert await second.reconcile() == []
    await verify_served(world, elsewhere, HOST)


async def test_a_certificate_due_for_renewal_is_renewed_with_a_fresh_key(world: World) -> None:
    certificates = Certificates()
    service = world.service(Fixed(app_host()), certificates=certificates)
    await service.start()
    await issue(service)
    before = certificates.for_host(HOST)
    assert before is not None
    assert await service.reconcile() == []  # not due: nothing ordered
    await service.store.schedule(HOST, 0.0)  # two thirds of its life have passed
    assert await issue(service) == [HOST]
    after = certificates.for_host(HOST)
    assert after is not None
    assert after[1].key_pem != before[1].key_pem
    assert after[1].chain_pem != before[1].chain_pem
    await verify_served(world, certificates, HOST)
    status = await service.status_of(HOST)
    assert status is not None
    assert status["state"] == "issued"


async def test_a_failed_validation_backs_off_and_shows_failed_with_the_reason(
    world: World,
) -> None:
    nowhere = Challenges()  # answers published where no data plane serves them
    service = world.service(Fixed(app_host()), challenges=nowhere, backoff_base=600.0)
    await service.start()
    before = time.time()
    await issue(service)
    status = await service.status_of(HOST)
    assert status is not None
    assert status["state"] == "failed"
    assert status["error"].startswith(f"validation failed: {HOST}: ")
    assert status["next_try"] is not None  # when it is tried again, backed off
    assert service.states.status_of(HOST) == status  # what get_app_url reads, synchronously
    row = await service.store.get(HOST)
    assert row is not None
    assert row.attempts == 1
    assert before + 300 <= row.next_try <= time.time() + 600  # half to all of the base
    assert await service.reconcile() == []  # never a tight loop against the CA

    await service.store.schedule(HOST, 0.0)
    await issue(service)
    row = await service.store.get(HOST)
    assert row is not None
    assert row.attempts == 2
    assert row.next_try >= time.time() + 600 - 5  # doubled: at least half of 1200 s


async def test_a_challenge_published_by_one_replica_is_answered_by_anothers_data_plane(
    storage: Storage, tmp_path: Path
) -> None:
    # the CA reaches only replica B's data plane; replica A orders
    planes = contextlib.AsyncExitStack()  # each replica's own data plane
    a_plane = (await planes.enter_async_context(haproxy_plane(tmp_path / "a"))).plane
    b_plane = (await planes.enter_async_context(haproxy_plane(tmp_path / "b"))).plane
    b_port = b_plane.port
    verified: list[tuple[str, str]] = []

    async def mark_verified(domain: str, how: str) -> None:
        verified.append((domain, how))

    async def live() -> set[str]:
        return {"a", "b"}

    sealer = Sealer.from_settings("s3cret", tmp_path)
    domain = WantedRow("shop.example.test", ("shop.example.test",), "domain", "acme", 1)
    try:
        async with (
            challtestsrv() as dns,
            pebble(tmp_path, http_port=b_port, dns=dns.dns_address) as ca,
        ):
            config = TlsConfig(directory=ca.directory, ca_bundle=ca.ca_bundle)
            a = TlsService(
                storage.engine,
                sealer,
                Certificates(),
                a_plane.challenges,
                config,
                names=Fixed(domain),
                replica="a",
                live_replicas=live,
                domain_verified=mark_verified,
            )
            b = TlsService(
                storage.engine,
                sealer,
                Certificates(),
                b_plane.challenges,
                TlsConfig(),  # no directory: b orders nothing, it only follows
                names=Fixed(domain),  # every replica wants the same names
                replica="b",
            )
            stopping = asyncio.Event()
            follower = asyncio.create_task(b.run_forever(stopping))
            try:
                await a.start()
                await issue(a)
            finally:
                stopping.set()
                await follower
            status = await a.status_of("shop.example.test")
            assert status is not None
            assert status["state"] == "issued", status
            assert verified == [("shop.example.test", "acme")]  # the proof the domains take
    finally:
        await planes.aclose()


async def test_an_unreachable_ca_fails_with_a_short_reason_and_tenants_are_rate_limited(
    storage: Storage, tmp_path: Path
) -> None:
    closed = f"https://127.0.0.1:{free_port()}/dir"
    names = Fixed(
        app_host("a--acme.apps.example.test"), app_host("b--acme.apps.example.test", app_id=2)
    )
    service = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(directory=closed, orders_per_tenant_hour=1, concurrency=1),
        names=names,
        replica="r1",
    )
    await service.start()
    await issue(service)
    states = {
        host: await service.status_of(host)
        for host in ("a--acme.apps.example.test", "b--acme.apps.example.test")
    }
    errors = sorted(str(s["error"]) for s in states.values() if s is not None)
    assert errors == [
        "the CA could not be reached",
        "waiting: at most 1 orders per hour per tenant",
    ]


async def test_the_operators_certificate_is_served_and_its_names_are_not_ordered(
    storage: Storage, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path / "op", ["*.apps.example.test"])
    certificates = Certificates()
    service = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        certificates,
        Challenges(),
        TlsConfig(directory=f"https://127.0.0.1:{free_port()}/dir", cert_file=cert, key_file=key),
        names=Fixed(app_host()),
        replica="r1",
    )
    await service.start()
    assert certificates.for_host(HOST) is not None
    assert await service.reconcile() == []
    status = await service.status_of(HOST)
    assert status is not None
    assert (status["state"], status["issuer"]) == ("issued", "operator test CA")

    _, wrong = self_signed(tmp_path / "other", ["*.apps.example.test"])
    refused = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(cert_file=cert, key_file=wrong),
        names=Fixed(),
        replica="r1",
    )
    with pytest.raises(BadCertificate, match=r"^the key does not match APPDECK_TLS_CERT$"):
        await refused.start()
    half = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(cert_file=cert),
        names=Fixed(),
        replica="r1",
    )
    with pytest.raises(BadCertificate, match="set both APPDECK_TLS_CERT and APPDECK_TLS_KEY"):
        await half.start()


async def test_a_failed_renewal_keeps_serving_the_valid_certificate_and_shows_the_error(
    world: World,
) -> None:
    first = world.service(Fixed(app_host()))
    await first.start()
    await issue(first)
    issued = await first.store.get(HOST)
    assert issued is not None
    # A fresh ACME account: Pebble would reuse the first order's valid authorization (the
    # renewal passing unvalidated) 1 time in 100 even with PEBBLE_AUTHZREUSE=0, since Pebble
    # creates a new one only when `rand.Intn(100) > percent` (wfe.go, 2.4.0 to 2.9.0).
    async with world.storage.engine.begin() as conn:
        await conn.execute(sa.delete(tls_accounts))
    # a replica whose data plane the CA cannot reach renews it
    certificates = Certificates()
    renewer = world.service(
        Fixed(app_host()), replica="r2", challenges=Challenges(), certificates=certificates
    )
    await renewer.start()
    await renewer.store.schedule(HOST, 0.0)
    assert await issue(renewer) == [HOST]
    status = await renewer.status_of(HOST)
    assert status is not None
    row = await renewer.store.get(HOST)  # said with the status: once seen without an error
    assert status["state"] == "issued", (status, row)
    assert (status["error"] or "").startswith("validation failed: "), (status, row)
    assert row is not None
    assert (row.chain_sealed, row.attempts) == (issued.chain_sealed, 1)
    assert certificates.for_host(HOST) is not None  # still served


async def test_replicas_hear_new_challenges_on_the_cluster_broadcast_at_once(
    storage: Storage, tmp_path: Path, redis_prefix: str
) -> None:
    # b looks at the database only once an hour: only the doorbell can make it serve in time
    planes = contextlib.AsyncExitStack()  # each replica's own data plane
    a_plane = (await planes.enter_async_context(haproxy_plane(tmp_path / "a"))).plane
    b_plane = (await planes.enter_async_context(haproxy_plane(tmp_path / "b"))).plane
    b_port = b_plane.port
    clusters = [await Cluster.connect(REDIS_URL, redis_prefix) for _ in range(2)]

    async def live() -> set[str]:
        return {"a", "b"}

    sealer = Sealer.from_settings("s3cret", tmp_path)
    names = Fixed(app_host())
    try:
        async with (
            challtestsrv() as dns,
            pebble(tmp_path, http_port=b_port, dns=dns.dns_address) as ca,
        ):
            config = TlsConfig(directory=ca.directory, ca_bundle=ca.ca_bundle)
            a = TlsService(
                storage.engine,
                sealer,
                Certificates(),
                a_plane.challenges,
                config,
                names=names,
                replica="a",
                live_replicas=live,
            )
            b = TlsService(
                storage.engine,
                sealer,
                Certificates(),
                b_plane.challenges,
                TlsConfig(follow_seconds=3600, check_seconds=3600),
                names=names,
                replica="b",
            )
            await a.attach(clusters[0].broadcast)
            await b.attach(clusters[1].broadcast)
            stopping = asyncio.Event()
            follower = asyncio.create_task(b.run_forever(stopping))
            try:
                await a.start()
                await issue(a)
            finally:
                stopping.set()
                await follower
            status = await a.status_of(HOST)
            assert status is not None
            assert status["state"] == "issued", status
    finally:
        for cluster in clusters:
            await cluster.close()
        await planes.aclose()


async def test_a_replica_that_saw_a_name_due_orders_nothing_once_another_renewed_it(
    storage: Storage, tmp_path: Path
) -> None:
    late = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(directory=f"https://127.0.0.1:{free_port()}/dir"),
        names=Fixed(app_host()),
        replica="late",
    )
    await late.store.want([app_host()], time.time())
    await late.store.schedule(HOST, time.time() + 86_400)  # renewed meanwhile, elsewhere
    await late.order(HOST)  # it had listed the name as due before that
    row = await late.store.get(HOST)
    assert row is not None
    assert (row.attempts, row.last_error) == (0, None)
    assert await late.store.claim(HOST, "another", 60)  # and it let the lease go


async def test_a_challenge_is_acknowledged_only_once_the_data_plane_serves_it(
    storage: Storage, tmp_path: Path
) -> None:
    """Another replica published a challenge: this one acknowledges it (the CA is told to
    validate once every replica did) only after its data plane took it, not when it is merely
    in memory: else the CA can come first and find a 404 (seen with HAProxy's async copy)."""
    serving = False

    async def served() -> None:
        if not serving:
            raise RuntimeError("HAProxy's maps are not updated yet")

    service = TlsService(
        storage.engine,
        Sealer.from_settings("s3cret", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(directory="https://ca.invalid/dir"),
        names=Fixed(),
        replica="r2",
        served=served,
    )
    await service.store.publish(HOST, {"tok-1": "tok-1.thumb"}, time.time() + 60)
    await service.follow()
    assert service.challenges.items() == {"tok-1": "tok-1.thumb"}  # in memory already
    assert await service.store.acked(["tok-1"]) == {"tok-1": set()}  # not acknowledged
    serving = True
    await service.follow()  # the next turn
    assert await service.store.acked(["tok-1"]) == {"tok-1": {"r2"}}
