"""URL client ids: the metadata document is fetched (from a real loopback HTTP server here),
checked, cached, and refused from non-public addresses unless development allows them."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from appdeck.auth.server import cimd

from .conftest import REDIRECT, WorldFactory
from .helpers import authorize_url, parse_consent, pkce_pair, post_form, query_of, redeem


@dataclass
class MetadataServer:
    port: int
    document: dict[str, Any] = field(default_factory=dict)
    cache_control: str = "max-age=60"
    hits: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    @property
    def client_id(self) -> str:
        return f"http://127.0.0.1:{self.port}/client.json"


@pytest.fixture
def metadata_server() -> Iterator[MetadataServer]:
    state = MetadataServer(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits.append(self.path)
            state.hosts.append(self.headers.get("Host", ""))
            body = json.dumps(state.document).encode()
            self.send_response(200 if self.path == "/client.json" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", state.cache_control)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = httpd.server_address[1]
    state.document = {
        "client_id": state.client_id,
        "client_name": "Loopback Tool",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive()


async def test_a_metadata_document_client_signs_in_when_loopback_is_allowed(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=True)
    verifier, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(metadata_server.client_id, challenge))
    assert page.status_code == 200, page.text
    assert "Loopback Tool" in page.text
    assert "127.0.0.1" in page.text
    r = await post_form(authz.http, parse_consent(page.text))
    assert r.status_code == 303
    code = query_of(r.headers["location"])["code"]

    token = await redeem(authz.http, metadata_server.client_id, code, verifier)

    assert token.status_code == 200, token.text
    claims = authz.verifier().verify(token.json()["access_token"])
    assert claims["client_id"] == metadata_server.client_id
    assert metadata_server.hits == ["/client.json"]  # fetched once, then served from the cache
    cached = await authz.oauth.get_client(metadata_server.client_id)
    assert cached is not None
    assert cached.kind == "cimd"
    assert cached.name == "Loopback Tool"
    assert cached.expires_at is not None
    assert 299 <= cached.expires_at - cached.created_at <= 301  # max-age=60 raised to 5 min


async def test_the_fetch_goes_to_the_checked_address_under_the_documents_host_name(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=True)
    client_id = f"http://localhost:{metadata_server.port}/client.json"
    metadata_server.document["client_id"] = client_id
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(client_id, challenge))
    assert page.status_code == 200, page.text
    assert metadata_server.hosts == [f"localhost:{metadata_server.port}"]


async def test_a_loopback_metadata_document_is_refused_in_production(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=False)
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(metadata_server.client_id, challenge))
    assert page.status_code == 400
    assert "location" not in page.headers
    assert "https" in page.text
    assert metadata_server.hits == []
    assert await authz.oauth.get_client(metadata_server.client_id) is None


async def test_a_host_that_resolves_to_loopback_is_refused_before_any_request(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=False)
    _, challenge = pkce_pair()
    client_id = f"https://localhost:{metadata_server.port}/client.json"
    page = await authz.http.get(authorize_url(client_id, challenge))
    assert page.status_code == 400
    assert "non-public address" in page.text
    assert "127.0.0.1" not in page.text.split("role=alert", 1)[-1]  # no address is named
    assert metadata_server.hits == []


async def test_an_unresolvable_host_reads_like_a_private_one(make_world: WorldFactory) -> None:
    authz = await make_world()
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url("https://no-such-host.invalid/c.json", challenge))
    assert page.status_code == 400
    assert "does not resolve to a public address" in page.text


async def test_a_document_naming_another_client_id_is_refused(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=True)
    metadata_server.document["client_id"] = "https://evil.example/client.json"
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(metadata_server.client_id, challenge))
    assert page.status_code == 400
    assert "exactly its URL" in page.text
    assert await authz.oauth.get_client(metadata_server.client_id) is None  # errors not cached


async def test_a_document_asking_for_a_shared_secret_is_refused(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=True)
    metadata_server.document["token_endpoint_auth_method"] = "client_secret_basic"
    _, challenge = pkce_pair()
    page = await authz.http.get(authorize_url(metadata_server.client_id, challenge))
    assert page.status_code == 400
    assert "public clients" in page.text


async def test_a_redirect_uri_missing_from_the_document_is_not_trusted(
    make_world: WorldFactory, metadata_server: MetadataServer
) -> None:
    authz = await make_world(cimd_allow_loopback=True)
    _, challenge = pkce_pair()
    url = authorize_url(
        metadata_server.client_id, challenge, redirect_uri="https://evil.example/cb"
    )
    page = await authz.http.get(url)
    assert page.status_code == 400
    assert "location" not in page.headers


@pytest.mark.parametrize(
    ("client_id", "reason"),
    [
        ("https://app.example", "path"),
        ("https://app.example/", "path"),
        ("https://user@app.example/c.json", "user information"),
        ("https://app.example/a/../c.json", "dot segments"),
        ("http://app.example/c.json", "https"),
        ("ftp://app.example/c.json", "https"),
    ],
)
def test_unusable_client_id_urls_are_refused(client_id: str, reason: str) -> None:
    with pytest.raises(cimd.MetadataError, match=reason):
        cimd.check_url(client_id, allow_loopback=False)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "::1",
        "fc00::1",
        "fe80::1",
        "224.0.0.1",
        "0.0.0.0",
        "::ffff:127.0.0.1",
        "100.64.0.1",
    ],
)
async def test_non_public_addresses_are_refused(address: str) -> None:
    with pytest.raises(cimd.MetadataError, match="non-public"):
        await cimd.resolve(address, 443, allow_loopback=False)


async def test_link_local_addresses_are_refused_even_in_development() -> None:
    with pytest.raises(cimd.MetadataError):
        await cimd.resolve("169.254.169.254", 80, allow_loopback=True)
    assert str(await cimd.resolve("127.0.0.1", 80, allow_loopback=True)) == "127.0.0.1"


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, 3600.0),
        ("max-age=60", 300.0),
        ("public, max-age=7200", 7200.0),
        ("max-age=9999999", 86400.0),
        ("no-store", 300.0),
    ],
)
def test_the_cache_lifetime_follows_max_age_within_bounds(
    header: str | None, seconds: float
) -> None:
    assert cimd.cache_seconds(header) == seconds
