"""EdgeMirror against a real HAProxy: custom hostnames, ACME answers, SNI certificates and the
key gate copied through the runtime API, in effect when ``sync`` returns, with no reload (the
worker's pid is unchanged); the files it writes restore everything in a new HAProxy."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from appdeck.common.tokens import new_secret, token_hash
from appdeck.ingress.certs import Certificate, Certificates
from appdeck.ingress.challenges import Challenges
from appdeck.ingress.haproxy import edge
from appdeck.ingress.haproxy.mirror import EdgeMirror
from appdeck.ingress.haproxy.runtime_api import RuntimeApi
from appdeck.ingress.hosts import HostMap
from appdeck.ingress.keys import GateKey, KeyGate
from tests.ingress.haproxy.edge_harness import Edge, running_edge
from tests.support.wait import until


class IssuingCa:
    """A CA that issues leaf certificates (what Pebble is in the end-to-end test)."""

    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "edge test CA")])
        self.name = name
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, *hostnames: str, days: float = 30) -> Certificate:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        until = now + datetime.timedelta(days=days)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(until)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(h) for h in hostnames]), critical=False
            )
            .sign(self.key, hashes.SHA256())
        )
        return Certificate(
            hostnames=hostnames,
            chain_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            not_after=until.timestamp(),
        )


@dataclass
class Mirrored:
    edge: Edge
    mirror: EdgeMirror
    hosts: HostMap
    challenges: Challenges
    certs: Certificates
    gate: KeyGate
    ca: IssuingCa
    http: httpx.AsyncClient

    async def tls_get(
        self, sni: str, path: str = "/", verify: bool = True
    ) -> tuple[int, x509.Certificate, bytes]:
        """GET over TLS to the HTTPS frontend with ``sni`` (Host too): status, the served
        certificate, the whole answer."""
        context = ssl.create_default_context(cadata=self.ca.pem.decode())
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.edge.https_port, ssl=context, server_hostname=sni
        )
        try:
            served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {sni}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            async with asyncio.timeout(5):
                answer = await reader.read()
        finally:
            writer.close()
        return int(answer.split(b" ", 2)[1]), x509.load_der_x509_certificate(served), answer


def _options(https: int, app: str) -> edge.EdgeOptions:
    return edge.EdgeOptions(
        https_bind=f"127.0.0.1:{https}",
        https_port=https,
        hsts_seconds=600,
        control_host="appdeck.example.test",
        control_servers=(app,),
        metrics_port=None,
    )


@pytest.fixture
async def mirrored(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Mirrored]:
    async with running_edge(tmp_path, _options) as running:
        hosts, challenges, certs, gate = HostMap(), Challenges(), Certificates(), KeyGate()
        if getattr(request, "param", "open") == "open":
            gate.replace({}, [])  # loaded, no app requires a key (else: never loaded)
        mirror = EdgeMirror(
            running.api, running.paths, hosts, challenges, certs, gate, use_poll_s=3600
        )
        await mirror.start()
        base = f"http://127.0.0.1:{running.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            try:
                yield Mirrored(running, mirror, hosts, challenges, certs, gate, IssuingCa(), http)
            finally:
                await mirror.stop()


async def test_a_custom_domain_routes_once_synced_and_stops_when_removed(
    mirrored: Mirrored,
) -> None:
    pid = await mirrored.edge.worker_pid()
    assert (await mirrored.http.get("/", headers={"host": "Shop.Example.TEST."})).status_code == 404
    mirrored.hosts.set("shop.example.test", "shop")
    await mirrored.mirror.sync()
    r = await mirrored.http.get("/x", headers={"host": "Shop.Example.TEST.:80"})
    assert r.status_code == 200
    assert mirrored.edge.app.seen[-1].header(b"x-forwarded-proto") == b"http"
    mirrored.hosts.remove("shop.example.test")
    await mirrored.mirror.sync()
    assert (await mirrored.http.get("/", headers={"host": "shop.example.test"})).status_code == 404
    assert await mirrored.edge.worker_pid() == pid
    assert "shop.example.test shop" not in mirrored.edge.paths.map("hosts").read_text()


async def test_the_background_task_applies_a_change_without_being_asked(
    mirrored: Mirrored,
) -> None:
    mirrored.hosts.set("blog.example.test", "blog")
    async with asyncio.timeout(30):  # a bound, not a speed
        while True:  # polling HAProxy itself, bounded
            r = await mirrored.http.get("/", headers={"host": "blog.example.test"})
            if r.is_success:
                break
            await asyncio.sleep(0.02)


async def test_an_acme_challenge_is_answered_on_any_host_and_never_reaches_an_app(
    mirrored: Mirrored,
) -> None:
    mirrored.challenges.put("tok_EN-1", "tok_EN-1.thumbprint_x")
    # a live certificate for the host: the challenge path is still answered on plain HTTP
    mirrored.certs.put("shop", mirrored.ca.issue("shop.localhost"))
    await mirrored.mirror.sync()
    for host in ("shop.localhost", "unknown.example.test"):
        r = await mirrored.http.get("/.well-known/acme-challenge/tok_EN-1", headers={"host": host})
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/plain"
        assert r.text == "tok_EN-1.thumbprint_x"
    for path in ("tok_EN-2", "tok_EN-1/x", "", "tok%0aEN"):
        r = await mirrored.http.get(
            f"/.well-known/acme-challenge/{path}", headers={"host": "shop.localhost"}
        )
        assert r.status_code == 404, path
    assert [s.path for s in mirrored.edge.app.seen if s.path != "/healthz"] == []  # its checks
    mirrored.challenges.drop("tok_EN-1")
    await mirrored.mirror.sync()
    r = await mirrored.http.get("/.well-known/acme-challenge/tok_EN-1", headers={"host": "x.test"})
    assert r.status_code == 404


async def test_sni_picks_exact_then_wildcard_then_the_default_certificate(
    mirrored: Mirrored,
) -> None:
    exact = mirrored.ca.issue("shop.apps.example.test")
    wildcard = mirrored.ca.issue("*.apps.example.test")
    mirrored.certs.put("wild", wildcard)
    mirrored.certs.put("shop", exact)
    await mirrored.mirror.sync()
    status, served, answer = await mirrored.tls_get("shop.apps.example.test")
    assert status == 200
    assert served.serial_number == x509.load_pem_x509_certificate(exact.chain_pem).serial_number
    assert mirrored.edge.app.seen[-1].header(b"x-forwarded-proto") == b"https"
    assert b"strict-transport-security: max-age=600" in answer.lower()
    _, served, _ = await mirrored.tls_get("blog.apps.example.test")
    assert served.serial_number == x509.load_pem_x509_certificate(wildcard.chain_pem).serial_number
    with pytest.raises(ssl.SSLCertVerificationError):
        await mirrored.tls_get("other.example.test")
    _, served, _ = await mirrored.tls_get("other.example.test", verify=False)
    assert "appdeck default certificate" in served.subject.rfc4514_string()


async def test_a_certificate_is_added_replaced_and_removed_without_reload(
    mirrored: Mirrored,
) -> None:
    pid = await mirrored.edge.worker_pid()
    with pytest.raises(ssl.SSLCertVerificationError):
        await mirrored.tls_get("shop.localhost")
    first = mirrored.ca.issue("shop.localhost")
    mirrored.certs.put("shop", first)
    await mirrored.mirror.sync()
    _, served, _ = await mirrored.tls_get("shop.localhost")
    assert served.serial_number == x509.load_pem_x509_certificate(first.chain_pem).serial_number
    second = mirrored.ca.issue("shop.localhost", "blog.localhost")
    mirrored.certs.put("shop", second)
    await mirrored.mirror.sync()
    for host in ("shop.localhost", "blog.localhost"):
        _, served, _ = await mirrored.tls_get(host)
        assert (
            served.serial_number == x509.load_pem_x509_certificate(second.chain_pem).serial_number
        )
    mirrored.certs.drop("shop")
    await mirrored.mirror.sync()
    with pytest.raises(ssl.SSLCertVerificationError):
        await mirrored.tls_get("shop.localhost")
    assert not mirrored.edge.paths.cert("shop").exists()
    assert await mirrored.edge.worker_pid() == pid


async def test_plain_http_redirects_to_https_only_while_a_certificate_is_live(
    mirrored: Mirrored,
) -> None:
    shop = {"host": "shop.localhost"}
    assert (await mirrored.http.get("/a?b=1", headers=shop)).status_code == 200
    mirrored.certs.put("shop", mirrored.ca.issue("shop.localhost"))
    mirrored.certs.put("old", mirrored.ca.issue("blog.localhost", days=-0.5))  # expired
    await mirrored.mirror.sync()
    r = await mirrored.http.post("/a?b=1", headers=shop)
    assert r.status_code == 308
    assert r.headers["location"] == f"https://shop.localhost:{mirrored.edge.https_port}/a?b=1"
    assert "strict-transport-security" not in r.headers  # never on plain HTTP
    assert (await mirrored.http.get("/", headers={"host": "blog.localhost"})).status_code == 200


@pytest.mark.parametrize("mirrored", ["closed"], indirect=True)
async def test_the_key_gate_is_copied_closed_gate_left_as_is_then_opened(
    mirrored: Mirrored,
) -> None:
    shop = {"host": "shop.localhost"}
    assert (await mirrored.http.get("/", headers=shop)).status_code == 503  # never had keys
    key, other = new_secret("adk_key_", 32), new_secret("adk_key_", 32)
    mirrored.gate.replace(
        {1: "shop"},
        [
            (token_hash(key), GateKey(1, "key_one", write=False, expires_at=None)),
            (token_hash(other), GateKey(1, "key_two", write=True, expires_at=time.time() + 3600)),
        ],
    )
    await mirrored.mirror.sync()
    assert (await mirrored.http.get("/", headers={**shop, "x-api-key": key})).status_code == 200
    assert (await mirrored.http.post("/", headers={**shop, "x-api-key": key})).status_code == 403
    assert (await mirrored.http.post("/", headers={**shop, "x-api-key": other})).status_code == 200
    assert (await mirrored.http.get("/", headers={"host": "blog.localhost"})).status_code == 200
    assert await mirrored.mirror.collect_key_use() == {
        "key_one": pytest.approx(time.time(), abs=5),
        "key_two": pytest.approx(time.time(), abs=5),
    }
    assert set(mirrored.gate.take_used()) == {"key_one", "key_two"}
    mirrored.gate.remove("key_one")
    await mirrored.mirror.sync()
    assert (await mirrored.http.get("/", headers={**shop, "x-api-key": key})).status_code == 401
    mirrored.gate.set_app(1, "shop", required=False)
    await mirrored.mirror.sync()
    assert (await mirrored.http.get("/", headers=shop)).status_code == 200


async def test_many_keys_are_replaced_atomically_and_read_back(mirrored: Mirrored) -> None:
    keys = [new_secret("adk_key_", 32) for _ in range(500)]
    mirrored.gate.replace(
        {1: "shop"},
        [(token_hash(k), GateKey(1, f"key_{i:05}", True, None)) for i, k in enumerate(keys)],
    )
    await mirrored.mirror.sync()
    shop = {"host": "shop.localhost"}
    for k in (keys[0], keys[250], keys[-1]):
        assert (await mirrored.http.get("/", headers={**shop, "x-api-key": k})).status_code == 200
    assert len(mirrored.edge.paths.map("keys").read_text().splitlines()) == 500


async def test_the_control_plane_host_goes_to_the_control_plane_with_the_edge_secret(
    mirrored: Mirrored,
) -> None:
    spoofed = {"x-forwarded-for": "203.0.113.9", "x-appdeck-edge": "guess"}
    status, _, _ = await mirrored.tls_get("appdeck.example.test", "/healthz", verify=False)
    assert status == 200
    r = await mirrored.http.get("/mcp", headers={"host": "appdeck.example.test", **spoofed})
    assert r.status_code == 200
    seen = mirrored.edge.app.seen[-1]
    assert seen.header(b"x-forwarded-for") == b"127.0.0.1"
    assert seen.header(b"x-appdeck-edge") == edge.control_secret(mirrored.edge.paths).encode()
    assert seen.header(b"x-forwarded-proto") == b"http"


async def test_a_new_haproxy_restores_everything_from_the_files(tmp_path: Path) -> None:
    ca = IssuingCa()
    cert = ca.issue("shop.example.test")
    async with running_edge(tmp_path, _options) as first:
        hosts, challenges, certs, gate = HostMap(), Challenges(), Certificates(), KeyGate()
        mirror = EdgeMirror(first.api, first.paths, hosts, challenges, certs, gate)
        hosts.set("shop.example.test", "shop")
        certs.put("shop", cert)
        gate.replace({}, [])
        await mirror.resync()
    # the same files, a new HAProxy: nothing mirrored yet
    async with running_edge(tmp_path, _options) as second:
        base = f"http://127.0.0.1:{second.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            r = await client.get("/", headers={"host": "shop.example.test"})
        assert r.status_code == 308
        state = Mirrored(second, mirror, hosts, challenges, certs, gate, ca, client)
        status, served, _ = await state.tls_get("shop.example.test")
        assert status == 200
        assert served.serial_number == x509.load_pem_x509_certificate(cert.chain_pem).serial_number
        mirror.api = second.api
        await mirror.resync()  # and a resync on it is a no-op that reads back
        assert (await second.api.command(f"show map {second.paths.map('gate')}")).count("open") == 1


async def test_a_certificate_with_a_hostile_name_is_left_out_and_the_others_served(
    mirrored: Mirrored,
) -> None:
    good = mirrored.ca.issue("shop.localhost")
    bad = mirrored.ca.issue("blog.localhost")
    mirrored.certs.put("good", good)
    for names in (("blog.localhost\n/etc/shadow",), ("blog.localhost [verify none]",), ()):
        mirrored.certs.put("bad", Certificate(names, bad.chain_pem, bad.key_pem, bad.not_after))
        await mirrored.mirror.sync()
        _, served, _ = await mirrored.tls_get("shop.localhost")
        assert served.serial_number == x509.load_pem_x509_certificate(good.chain_pem).serial_number
        assert not mirrored.edge.paths.cert("bad").exists()
        assert "bad" not in mirrored.edge.paths.crt_list.read_text()


async def test_without_https_the_tls_map_is_kept_as_a_file_only(tmp_path: Path) -> None:
    async with running_edge(tmp_path) as plain:
        hosts, challenges, certs, gate = HostMap(), Challenges(), Certificates(), KeyGate()
        certs.put("shop", IssuingCa().issue("shop.localhost"))
        hosts.set("shop.example.test", "shop")
        gate.replace({}, [])
        mirror = EdgeMirror(plain.api, plain.paths, hosts, challenges, certs, gate)
        await mirror.resync()
        assert "shop.localhost" in plain.paths.map("tls").read_text()
        base = f"http://127.0.0.1:{plain.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            r = await client.get("/", headers={"host": "shop.example.test"})
        assert r.status_code == 200  # routed, and not redirected: there is no HTTPS here


async def test_a_pass_that_failed_is_tried_again_until_haproxy_holds_the_state(
    mirrored: Mirrored, tmp_path: Path
) -> None:
    real = mirrored.mirror.api
    mirrored.mirror.retry_s = 0.05
    mirrored.mirror.api = RuntimeApi(tmp_path / "gone.sock", timeout_s=1)  # HAProxy away
    mirrored.hosts.set("blog.example.test", "blog")
    await until(lambda: mirrored.edge.paths.map("hosts").read_text() != "")  # files first
    assert (await mirrored.http.get("/", headers={"host": "blog.example.test"})).status_code == 404
    mirrored.mirror.api = real  # back: the next retry replaces the maps whole
    async with asyncio.timeout(30):  # a bound, not a speed
        while True:
            r = await mirrored.http.get("/", headers={"host": "blog.example.test"})
            if r.is_success:
                break
            await asyncio.sleep(0.02)


async def test_names_that_read_like_errors_are_applied_like_any_other(mirrored: Mirrored) -> None:
    # HAProxy's answers echo names back: "error", "failed", "invalid" in them are not refusals
    mirrored.hosts.set("error-failed.example.test", "shop")
    cert = mirrored.ca.issue("invalid-error.localhost")
    mirrored.certs.put("failed-unable-invalid", cert)
    await mirrored.mirror.sync()
    r = await mirrored.http.get("/", headers={"host": "error-failed.example.test"})
    assert r.status_code == 200
    _, served, _ = await mirrored.tls_get("invalid-error.localhost")
    assert served.serial_number == x509.load_pem_x509_certificate(cert.chain_pem).serial_number
    mirrored.certs.drop("failed-unable-invalid")
    await mirrored.mirror.sync()
    with pytest.raises(ssl.SSLCertVerificationError):
        await mirrored.tls_get("invalid-error.localhost")


class _Overtaken(RuntimeApi):
    """A runtime API client that lets ``rival`` replace every map once, between its own first
    ``prepare map`` and that version's ``commit map``: a second replica of the install
    starting at the same moment."""

    def __init__(self, api: RuntimeApi, rival: EdgeMirror) -> None:
        super().__init__(api.socket_path, timeout_s=5)
        self.rival: EdgeMirror | None = rival
        self.refused: list[str] = []

    async def raw(self, line: str, payload: str | None = None, *, checked: bool = False) -> str:
        rival = self.rival
        if rival is not None and line.startswith("commit map @"):
            self.rival = None
            await rival.resync()  # its commits come first: ours is now out of range
        answer = await super().raw(line, payload, checked=checked)
        if line.startswith("commit map @") and answer.strip():
            self.refused.append(answer.strip())
        return answer


async def test_two_replicas_replacing_the_same_maps_at_once_both_end_with_them(
    mirrored: Mirrored,
) -> None:
    mirrored.hosts.set("blog.example.test", "blog")
    await mirrored.mirror.sync()
    paths, gate = mirrored.edge.paths, mirrored.gate
    rival = EdgeMirror(
        mirrored.mirror.api, paths, mirrored.hosts, Challenges(), Certificates(), gate
    )
    late = EdgeMirror(
        mirrored.mirror.api, paths, mirrored.hosts, Challenges(), Certificates(), gate
    )
    api = _Overtaken(mirrored.mirror.api, rival)
    late.api = api
    await late.resync()  # its first pass: every map replaced whole, one of them overtaken
    assert api.rival is None  # the rival did run in between
    assert any(answer.startswith("Version number out of range") for answer in api.refused)
    assert (await mirrored.http.get("/", headers={"host": "blog.example.test"})).is_success


class _Rewritten(RuntimeApi):
    """A runtime API client that lets ``rival`` (another view of the state) replace every map
    once, right after its own first successful ``commit map``: what was committed is not what
    is read back."""

    def __init__(self, api: RuntimeApi, rival: EdgeMirror) -> None:
        super().__init__(api.socket_path, timeout_s=5)
        self.rival: EdgeMirror | None = rival

    async def raw(self, line: str, payload: str | None = None, *, checked: bool = False) -> str:
        answer = await super().raw(line, payload, checked=checked)
        rival = self.rival
        if rival is not None and line.startswith("commit map @") and not answer.strip():
            self.rival = None
            await rival.resync()
        return answer


async def test_a_first_pass_that_reads_back_another_replicas_maps_is_made_again(
    mirrored: Mirrored,
) -> None:
    paths, gate = mirrored.edge.paths, mirrored.gate
    other_view = HostMap()
    other_view.set("old.example.test", "old")
    rival = EdgeMirror(mirrored.mirror.api, paths, other_view, Challenges(), Certificates(), gate)
    mirrored.hosts.set("blog.example.test", "blog")
    starting = EdgeMirror(
        mirrored.mirror.api, paths, mirrored.hosts, Challenges(), Certificates(), gate,
        retry_s=0.01,
    )  # fmt: skip
    api = _Rewritten(mirrored.mirror.api, rival)
    starting.api = api
    await starting.start()  # the first pass reads back the rival's hosts; the second holds
    try:
        assert api.rival is None  # the rival did run in between
        blog = await mirrored.http.get("/", headers={"host": "blog.example.test"})
        old = await mirrored.http.get("/", headers={"host": "old.example.test"})
        assert (blog.status_code, old.status_code) == (200, 404)
    finally:
        await starting.stop()
