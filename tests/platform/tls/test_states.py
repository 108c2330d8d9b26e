"""The certificate orders' states as get_app_url reads them: synchronously, from a cache the
TLS service refreshes from the shared database (another replica's orders included)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from appdeck.ingress.certs import Certificate, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.platform.crypto import Sealer
from appdeck.platform.domains.proof import ServedCertificates
from appdeck.platform.tls import TlsConfig, TlsService
from appdeck.platform.tls.states import TlsStates, describe, iso
from appdeck.storage import Storage
from appdeck.storage.tls import CertRow, WantedRow

HOST = "shop--acme.apps.example.test"
NOW = 1_800_000_000.0


def row(**values: object) -> CertRow:
    base: dict[str, object] = {
        "name": HOST,
        "hostnames": (HOST,),
        "purpose": "app",
        "tenant_id": "acme",
        "app_id": 1,
        "state": "none",
        "chain_sealed": None,
        "key_sealed": None,
        "issuer": None,
        "not_before": None,
        "not_after": None,
        "last_error": None,
        "attempts": 0,
        "next_try": NOW,
    }
    base.update(values)
    return CertRow(**base)  # type: ignore[arg-type]


def issued(**values: object) -> CertRow:
    fields: dict[str, object] = {
        "state": "issued",
        "chain_sealed": "sealed",
        "key_sealed": "sealed",
        "issuer": "Pebble Intermediate CA",
        "not_before": NOW - 100,
        "not_after": NOW + 200,
        "next_try": NOW + 100,
    }
    fields.update(values)
    return row(**fields)


def test_a_failed_order_shows_failed_with_its_reason_and_next_try() -> None:
    status = describe(
        row(state="failed", last_error="validation failed: no answer", next_try=NOW + 60),
        NOW,
        acme=True,
    )
    assert status["state"] == "failed"
    assert status["error"] == "validation failed: no answer"
    assert status["next_try"] == iso(NOW + 60)
    assert status["not_after"] is None


def test_a_wanted_name_is_pending_then_issuing_while_a_replica_holds_its_order() -> None:
    assert describe(row(), NOW, acme=True)["state"] == "pending"
    held = row(holder="r2", held_until=NOW + 30)
    assert describe(held, NOW, acme=True)["state"] == "issuing"
    assert describe(row(holder="r2", held_until=NOW - 1), NOW, acme=True)["state"] == "pending"
    assert describe(row(), NOW, acme=False)["state"] == "none"


def test_an_issued_certificate_shows_its_expiry_then_renewing_then_expired() -> None:
    status = describe(issued(), NOW, acme=True)
    assert status["state"] == "issued"
    assert status["not_after"] == iso(NOW + 200)
    assert status["renew_at"] == iso(NOW + 100)
    assert status["next_try"] is None
    assert describe(issued(), NOW + 150, acme=True)["state"] == "renewing"
    late = describe(issued(last_error="the CA said no", next_try=NOW + 400), NOW + 300, True)
    assert late["state"] == "expired"
    assert late["error"] == "the CA said no"
    assert late["next_try"] == iso(NOW + 400)


def test_a_failed_renewal_keeps_issued_and_shows_the_error_and_next_try() -> None:
    status = describe(issued(last_error="rate limited", next_try=NOW + 50), NOW, acme=True)
    assert status["state"] == "issued"
    assert status["error"] == "rate limited"
    assert status["next_try"] == iso(NOW + 50)


def test_the_cache_answers_by_hostname_and_wildcard_and_refuses_oversized_names() -> None:
    states = TlsStates(acme=True, clock=lambda: NOW)
    assert states.status_of(HOST) is None
    states.replace([row(), row(name="wild", hostnames=("*.example.com",), state="failed")])
    assert states.status_of(HOST.upper() + ".") == describe(row(), NOW, True)
    wild = states.status_of("blog.example.com")
    assert wild is not None
    assert wild["state"] == "failed"
    assert states.status_of("x" * 10_000) is None
    states.replace([])
    assert states.status_of(HOST) is None
    assert states.counts()["pending"] == 0


def test_served_certificates_add_the_order_state_to_what_the_data_plane_serves() -> None:
    certificates = Certificates()
    states = TlsStates(acme=True, clock=lambda: NOW)
    tls = ServedCertificates(certificates, 8443, clock=lambda: NOW, orders=states)
    assert tls.status_of(HOST) is None
    states.put(row(state="failed", last_error="no TXT", next_try=NOW + 60))
    status = tls.status_of(HOST)
    assert status is not None
    assert (status["live"], status["state"], status["error"]) == (False, "failed", "no TXT")
    states.put(issued())
    certificates.put(HOST, Certificate((HOST,), b"chain", b"key", NOW + 200))
    status = tls.status_of(HOST)
    assert status is not None
    assert (status["live"], status["state"], status["port"]) == (True, "issued", 8443)


async def test_every_replica_sees_another_replicas_order_outcome_after_its_load(
    storage: Storage, tmp_path: Path
) -> None:
    now = [NOW]
    config = TlsConfig(directory="https://ca.invalid/dir")  # never asked: no reconcile

    def replica(name: str) -> TlsService:
        return TlsService(
            storage.engine,
            Sealer.from_settings("s3cret", tmp_path),
            Certificates(),
            Challenges(),
            config,
            names=_Nothing(),
            replica=name,
            clock=lambda: now[0],
        )

    ordering, watching = replica("r1"), replica("r2")
    await ordering.store.want([WantedRow(HOST, (HOST,), "app", "acme", 1)], now[0])
    await watching.load()
    pending = watching.states.status_of(HOST)
    assert pending is not None
    assert pending["state"] == "pending"
    assert pending["error"] is None

    assert await ordering.store.claim(HOST, "r1", 600)
    await ordering.store.settle(
        HOST, "r1", state="failed", last_error="validation failed: x", next_try=now[0] + 90
    )
    await watching.load()
    status = watching.states.status_of(HOST)
    assert status is not None
    assert status["state"] == "failed"
    assert status["error"] == "validation failed: x"
    assert status["next_try"] == iso(now[0] + 90)
    failed = REGISTRY.get_sample_value("appdeck_tls_certificates", {"state": "failed"})
    assert failed == 1.0


class _Nothing:
    async def wanted(self) -> list[WantedRow]:
        return []
