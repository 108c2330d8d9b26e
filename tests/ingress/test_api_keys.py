"""The ingress's API-key check, end to end (an httpx client or a raw socket → IngressServer with
a KeyGate → a test app): 401 without a valid key, 403 for a read-only key on another method,
neither reaching the app nor its counters; the key never forwarded, the key id instead; a
client's X-AppDeck-* always dropped; hostile header values refused cleanly."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import pytest

from appdeck.common.tokens import new_secret, token_hash
from appdeck.ingress import Backend, Counters, RouteTable
from appdeck.ingress.keys import GateKey, KeyGate
from tests.ingress.conftest import StartIngress, StartUpstream
from tests.ingress.upstreams import Upstream

SHOP = "shop.localhost"
WRITE_KEY = new_secret("adk_key_", 32)
READ_KEY = new_secret("adk_key_", 32)
OTHER_APPS_KEY = new_secret("adk_key_", 32)


@dataclass
class Keyed:
    client: httpx.AsyncClient
    gate: KeyGate
    app: Upstream
    port: int

    def last(self, name: bytes) -> list[bytes]:
        """The values of header ``name`` in the last request the app got."""
        return [v for k, v in self.app.seen[-1].headers if k == name]

    async def raw(self, head: bytes) -> bytes:
        """Send ``head`` (a request without body) on a socket; the whole answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(head)
            await writer.drain()
            async with asyncio.timeout(5):
                return await reader.read(65536)
        finally:
            writer.close()


@pytest.fixture
async def keyed(routes: RouteTable, upstream: StartUpstream, ingress: StartIngress) -> Keyed:
    """``shop`` (app 1) requires a key (one read-write, one read-only); ``blog`` (app 2)
    does not, and has a key of its own that must not open ``shop``."""
    app = await upstream("shop-r1")
    routes.set("shop", [Backend("r1", 100, [app.address])])
    routes.set("blog", [Backend("r1", 100, [app.address])])
    gate = KeyGate()
    gate.replace({1: "shop"}, [])
    gate.add(token_hash(WRITE_KEY), GateKey(1, "key_writer0001", write=True, expires_at=None))
    gate.add(token_hash(READ_KEY), GateKey(1, "key_reader0001", write=False, expires_at=None))
    gate.add(token_hash(OTHER_APPS_KEY), GateKey(2, "key_blog000001", write=True, expires_at=None))
    client = await ingress()
    client.ingress.proxy.keys = gate  # type: ignore[attr-defined]
    return Keyed(client, gate, app, client.ingress.port)  # type: ignore[attr-defined]


async def test_without_a_key_the_ingress_answers_401_and_the_app_sees_nothing(
    keyed: Keyed, counters: Counters
) -> None:
    r = await keyed.client.get("/orders", headers={"host": SHOP})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "ApiKey"
    assert r.headers["content-type"].startswith("text/html")
    assert "X-API-Key" in r.text
    r = await keyed.client.post("/orders", headers={"host": SHOP, "accept": "application/json"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "api_key_required"
    assert r.json()["error"]["app"] == "shop"
    assert keyed.app.seen == []
    assert counters.get("shop", "r1").requests == 0  # not the app's traffic
    assert keyed.gate.take_used() == {}


async def test_a_valid_key_goes_through_as_its_id_never_as_itself(
    keyed: Keyed, counters: Counters
) -> None:
    r = await keyed.client.post("/orders", headers={"host": SHOP, "x-api-key": WRITE_KEY})
    assert r.status_code == 200
    assert keyed.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    assert keyed.last(b"x-api-key") == []
    bearer = {"host": SHOP, "authorization": f"bearer  {WRITE_KEY}"}
    assert (await keyed.client.get("/", headers=bearer)).status_code == 200
    assert keyed.last(b"authorization") == []
    assert keyed.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    apps_own = {"host": SHOP, "x-api-key": WRITE_KEY, "authorization": "Bearer eyJ.app.token"}
    assert (await keyed.client.get("/", headers=apps_own)).status_code == 200
    assert keyed.last(b"authorization") == [b"Bearer eyJ.app.token"]  # the app's, kept
    assert counters.get("shop", "r1").requests == 3
    assert set(keyed.gate.take_used()) == {"key_writer0001"}


async def test_a_read_only_key_reads_and_gets_403_for_the_rest(
    keyed: Keyed, counters: Counters
) -> None:
    for method in ("GET", "HEAD", "OPTIONS"):
        r = await keyed.client.request(method, "/", headers={"host": SHOP, "x-api-key": READ_KEY})
        assert r.status_code == 200, method
    seen = len(keyed.app.seen)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        r = await keyed.client.request(
            method,
            "/",
            headers={"host": SHOP, "x-api-key": READ_KEY, "accept": "application/json"},
        )
        assert r.status_code == 403, method
        assert r.json()["error"]["code"] == "insufficient_scope"
        assert "www-authenticate" not in r.headers
    assert len(keyed.app.seen) == seen
    assert counters.get("shop", "r1").requests == 3


@pytest.mark.parametrize(
    "headers",
    [
        {"x-api-key": OTHER_APPS_KEY},  # another app's key
        {"x-api-key": "adk_key_" + "A" * 43},  # unknown
        {"x-api-key": WRITE_KEY[:-1]},  # cut short
        {"x-api-key": WRITE_KEY + "x"},
        {"x-api-key": ""},
        {"x-api-key": "adk_key_" + "A" * 60_000},  # huge
        {"x-api-key": token_hash(WRITE_KEY)},  # its hash is not the key
        {"authorization": f"Basic {WRITE_KEY}"},  # a key, but not as a bearer token
        {"authorization": "Bearer"},
        {"authorization": f"Bearer\t{WRITE_KEY}"},
        {"authorization": f"Bearer {WRITE_KEY} trailing"},
        {"authorization": f"Bearer {READ_KEY}", "x-api-key": WRITE_KEY},  # two keys
    ],
)
async def test_anything_but_one_valid_key_gets_401(
    keyed: Keyed, counters: Counters, headers: dict[str, str]
) -> None:
    r = await keyed.client.get("/", headers={"host": SHOP, **headers})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "ApiKey"
    assert keyed.app.seen == []
    assert counters.get("shop", "r1").requests == 0


async def test_many_key_headers_pass_only_when_they_all_carry_the_same_key(keyed: Keyed) -> None:
    same = [("host", SHOP)] + [("x-api-key", WRITE_KEY)] * 90
    assert (await keyed.client.get("/", headers=same)).status_code == 200
    assert keyed.last(b"x-api-key") == []
    mixed = [*same, ("x-api-key", READ_KEY)]
    assert (await keyed.client.get("/", headers=mixed)).status_code == 401


async def test_a_clients_x_appdeck_headers_never_reach_an_app(keyed: Keyed) -> None:
    spoofed = {"x-appdeck-key-id": "key_admin", "X-AppDeck-Release": "r0"}
    r = await keyed.client.get("/", headers={"host": "blog.localhost", **spoofed})
    assert r.status_code == 200
    assert [k for k, _ in keyed.app.seen[-1].headers if k.startswith(b"x-appdeck-")] == []
    r = await keyed.client.get("/", headers={"host": SHOP, "x-api-key": READ_KEY, **spoofed})
    assert r.status_code == 200
    assert [(k, v) for k, v in keyed.app.seen[-1].headers if k.startswith(b"x-appdeck-")] == [
        (b"x-appdeck-key-id", b"key_reader0001")
    ]


async def test_a_connection_header_cannot_drop_the_key_id(keyed: Keyed) -> None:
    headers = {"host": SHOP, "x-api-key": WRITE_KEY, "connection": "x-appdeck-key-id, x-api-key"}
    assert (await keyed.client.get("/", headers=headers)).status_code == 200
    assert keyed.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    assert keyed.last(b"x-api-key") == []


async def test_a_route_without_api_auth_forwards_x_api_key_as_the_apps_own(keyed: Keyed) -> None:
    r = await keyed.client.get("/", headers={"host": "blog.localhost", "x-api-key": "app-secret"})
    assert r.status_code == 200
    assert keyed.last(b"x-api-key") == [b"app-secret"]
    assert keyed.last(b"x-appdeck-key-id") == []


async def test_a_revoked_key_gets_401_from_the_next_request(keyed: Keyed) -> None:
    headers = {"host": SHOP, "x-api-key": WRITE_KEY}
    assert (await keyed.client.get("/", headers=headers)).status_code == 200
    keyed.gate.remove("key_writer0001")
    assert (await keyed.client.get("/", headers=headers)).status_code == 401


async def test_an_expired_key_gets_401(keyed: Keyed) -> None:
    key = new_secret("adk_key_", 32)
    keyed.gate.add(token_hash(key), GateKey(1, "key_expired001", write=True, expires_at=1.0))
    r = await keyed.client.get(
        "/", headers={"host": SHOP, "x-api-key": key, "accept": "application/json"}
    )
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "api_key_expired"


async def test_a_gate_not_loaded_yet_answers_503_for_every_route(
    keyed: Keyed, counters: Counters
) -> None:
    keyed.client.ingress.proxy.keys = KeyGate()  # type: ignore[attr-defined]
    for host in (SHOP, "blog.localhost"):
        r = await keyed.client.get("/", headers={"host": host, "x-api-key": WRITE_KEY})
        assert r.status_code == 503
        assert "retry-after" in r.headers
        assert "loading" in r.text
    assert keyed.app.seen == []
    assert counters.get("blog", "r1").requests == 0


@pytest.mark.parametrize(
    "value",
    [
        b"adk_key_\xff\xfe" + b"A" * 41,  # not ASCII
        b"adk_key_" + b"\x01" * 43,  # control characters
        WRITE_KEY.encode()[:20] + b"\x00" + WRITE_KEY.encode()[21:],  # NUL
        b"\x00",
        b"   ",
        b"\t" + WRITE_KEY.encode() + b"x",
    ],
    # the keys are random: fixed ids, so that every pytest-xdist worker collects the same tests
    ids=["not-ascii", "control-characters", "nul-inside", "nul", "spaces", "tab-and-tail"],
)
async def test_raw_hostile_key_values_never_reach_the_app(keyed: Keyed, value: bytes) -> None:
    head = b"GET / HTTP/1.1\r\nHost: " + SHOP.encode() + b"\r\nX-API-Key: " + value + b"\r\n\r\n"
    answer = await keyed.raw(head)
    assert answer.split(b" ", 2)[1] in (b"400", b"401"), answer[:200]
    assert keyed.app.seen == []


async def test_a_huge_authorization_header_is_refused_without_trouble(keyed: Keyed) -> None:
    head = (
        b"GET / HTTP/1.1\r\nHost: "
        + SHOP.encode()
        + b"\r\nAuthorization: Bearer adk_key_"
        + b"k" * 200_000
        + b"\r\n\r\n"
    )
    answer = await keyed.raw(head)
    assert answer.split(b" ", 2)[1] in (b"401", b"431"), answer[:200]
    assert keyed.app.seen == []
