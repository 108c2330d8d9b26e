"""Which names get a certificate: deployed apps under the apps domain, claimed custom
domains, the public host; bounded per app and in total; forgotten when no longer wanted."""

from __future__ import annotations

import time
from pathlib import Path

import sqlalchemy as sa

from appdeck.ingress.certs import NAME, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.platform.crypto import Sealer
from appdeck.platform.tls import PlatformNames, TlsConfig, TlsService, cert_name
from appdeck.storage import Storage
from appdeck.storage.schema import apps, deployments
from appdeck.storage.tls import WantedRow


async def add_app(storage: Storage, tenant: str, name: str, state: str | None) -> int:
    now = time.time()
    async with storage.engine.begin() as conn:
        done = await conn.execute(
            sa.insert(apps).values(
                tenant_id=tenant,
                name=name,
                spec={},
                spec_version=1,
                created_by="u",
                created_at=now,
                updated_at=now,
                needs_restart=False,
            )
        )
        app_id = int(done.inserted_primary_key[0])
        if state is not None:
            await conn.execute(
                sa.insert(deployments).values(
                    app_id=app_id,
                    number=1,
                    state=state,
                    strategy="all_at_once",
                    spec={},
                    env="",
                    source={},
                    created_by="u",
                    created_at=now,
                    updated_at=now,
                    steps=[],
                    traffic=100,
                )
            )
    return app_id


class Claimed:
    def __init__(self, *rows: tuple[int, str, str]) -> None:
        self.rows = list(rows)

    async def claimed(self) -> list[tuple[int, str, str]]:
        return list(self.rows)


async def test_deployed_apps_claimed_domains_and_the_public_host_are_wanted(
    storage: Storage,
) -> None:
    shop = await add_app(storage, "acme", "shop", "live")
    await add_app(storage, "acme", "draft", None)  # never deployed: no public name yet
    await add_app(storage, "acme", "broken", "failed")
    names = PlatformNames(
        storage.engine,
        apps_domain="apps.example.test",
        public_host="AppDeck.Example.Test",
        domains=Claimed((shop, "acme", "Shop.Example.Test."), (shop, "acme", "bad host\x00")),
    )
    assert await names.wanted() == [
        WantedRow("appdeck.example.test", ("appdeck.example.test",), "control"),
        WantedRow(
            "shop--acme.apps.example.test", ("shop--acme.apps.example.test",), "app", "acme", shop
        ),
        WantedRow("shop.example.test", ("shop.example.test",), "domain", "acme", shop),
    ]
    assert await PlatformNames(storage.engine, apps_domain=None, public_host=None).wanted() == []


def test_a_hostname_too_long_for_a_certificate_name_gets_a_digest() -> None:
    long = ".".join(["a" * 60] * 4) + ".test"
    assert NAME.fullmatch(cert_name(long))
    assert cert_name(long) != cert_name(long[:-1] + "x")
    assert cert_name("shop.example.test") == "shop.example.test"


async def test_names_are_bounded_per_app_and_in_total_and_forgotten_when_gone(
    storage: Storage, tmp_path: Path
) -> None:
    class Fixed:
        rows: list[WantedRow] = []

        async def wanted(self) -> list[WantedRow]:
            return list(self.rows)

    def host(n: int, app_id: int) -> WantedRow:
        name = f"d{n}.example.test"
        return WantedRow(name, (name,), "domain", "acme", app_id)

    source = Fixed()
    source.rows = [host(n, 1) for n in range(5)] + [host(n, 2) for n in range(5, 9)]
    service = TlsService(
        storage.engine,
        Sealer.from_settings("k", tmp_path),
        Certificates(),
        Challenges(),
        TlsConfig(max_names_per_app=3, max_waiting=5),
        names=source,
        replica="r1",
    )
    assert await service.reconcile() == []  # no directory: rows, no orders
    kept = sorted(row.name for row in await service.store.all())
    assert kept == [
        "d0.example.test",
        "d1.example.test",
        "d2.example.test",
        "d5.example.test",
        "d6.example.test",
    ]  # 3 per app, 5 waiting at most
    status = await service.status_of("d0.example.test")
    assert status is not None
    assert status["state"] == "none"  # ACME is off
    assert await service.status_of("d4.example.test") is None
    assert await service.status_of("x" * 10_000) is None
    assert await service.status_of("bad\nhost") is None

    source.rows = [host(0, 1)]  # the others' apps or domains are gone
    await service.reconcile()
    assert [row.name for row in await service.store.all()] == ["d0.example.test"]
