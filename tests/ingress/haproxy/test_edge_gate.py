"""The API-key gate in HAProxy (edge.py's rules and edge.lua) against a real HAProxy: the
contract the Python ingress's KeyGate had (its tests went with it): 401 without a valid key,
403 for a read-only key on another method, 503 ``starting`` while the gate is closed; the app
never sees a key, only its id; the key's last use lands in the stick table. A revoked key:
test_wiring.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from appdeck.common.tokens import new_secret, token_hash
from tests.ingress.haproxy.edge_harness import Edge, running_edge

SHOP = "shop.localhost"
WRITE_KEY = new_secret("adk_key_", 32)
READ_KEY = new_secret("adk_key_", 32)
OTHER_APPS_KEY = new_secret("adk_key_", 32)
EXPIRED_KEY = new_secret("adk_key_", 32)


def keys_map() -> str:
    expired_ms = int((time.time() - 60) * 1000)
    return (
        f"{token_hash(WRITE_KEY)} 1:w:0:key_writer0001\n"
        f"{token_hash(READ_KEY)} 1:r:0:key_reader0001\n"
        f"{token_hash(OTHER_APPS_KEY)} 2:w:0:key_blog000001\n"
        f"{token_hash(EXPIRED_KEY)} 1:w:{expired_ms}:key_expired001\n"
    )


@dataclass
class Gated:
    edge: Edge
    client: httpx.AsyncClient

    def last(self, name: bytes) -> list[bytes]:
        """The values of header ``name`` in the last request the app got."""
        return [v for k, v in self.edge.app.seen[-1].headers if k == name]

    async def raw(self, head: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.edge.http_port)
        try:
            writer.write(head)
            await writer.drain()
            async with asyncio.timeout(5):
                return await reader.read(65536)
        finally:
            writer.close()


async def _gated(tmp_path: Path, gate: str) -> AsyncIterator[Gated]:
    maps = {"required": "shop 1\n", "keys": keys_map(), "gate": gate}
    async with running_edge(tmp_path, maps=maps) as running:
        base = f"http://127.0.0.1:{running.http_port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            yield Gated(running, client)


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[Gated]:
    """``shop`` (app 1) requires a key; ``blog`` (app 2) does not; the gate is open."""
    async for value in _gated(tmp_path, "open 1\n"):
        yield value


async def test_without_a_key_haproxy_answers_401_and_the_app_sees_nothing(gated: Gated) -> None:
    r = await gated.client.get("/orders", headers={"host": SHOP})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "ApiKey"
    assert r.headers["content-type"].startswith("text/html")
    assert "X-API-Key" in r.text
    assert "app shop:" in r.text
    r = await gated.client.post("/orders", headers={"host": SHOP, "accept": "application/json"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "api_key_required"
    assert r.json()["error"]["app"] == "shop"
    assert gated.edge.app.seen == []


async def test_a_valid_key_goes_through_as_its_id_never_as_itself(gated: Gated) -> None:
    r = await gated.client.post("/orders", headers={"host": SHOP, "x-api-key": WRITE_KEY})
    assert r.status_code == 200
    assert gated.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    assert gated.last(b"x-api-key") == []
    bearer = {"host": SHOP, "authorization": f"bearer  {WRITE_KEY}"}
    assert (await gated.client.get("/", headers=bearer)).status_code == 200
    assert gated.last(b"authorization") == []
    assert gated.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    apps_own = {"host": SHOP, "x-api-key": WRITE_KEY, "authorization": "Bearer eyJ.app.token"}
    assert (await gated.client.get("/", headers=apps_own)).status_code == 200
    assert gated.last(b"authorization") == [b"Bearer eyJ.app.token"]  # the app's, kept


async def test_a_read_only_key_reads_and_gets_403_for_the_rest(gated: Gated) -> None:
    for method in ("GET", "HEAD", "OPTIONS"):
        r = await gated.client.request(method, "/", headers={"host": SHOP, "x-api-key": READ_KEY})
        assert r.status_code == 200, method
    seen = len(gated.edge.app.seen)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        r = await gated.client.request(
            method, "/", headers={"host": SHOP, "x-api-key": READ_KEY, "accept": "application/json"}
        )
        assert r.status_code == 403, method
        assert r.json()["error"]["code"] == "insufficient_scope"
        assert "www-authenticate" not in r.headers
    assert len(gated.edge.app.seen) == seen


@pytest.mark.parametrize(
    "headers",
    [
        {"x-api-key": OTHER_APPS_KEY},  # another app's key
        {"x-api-key": "adk_key_" + "A" * 43},  # unknown
        {"x-api-key": WRITE_KEY[:-1]},  # cut short
        {"x-api-key": WRITE_KEY + "x"},
        {"x-api-key": ""},
        {"x-api-key": "adk_key_" + "A" * 5000},  # long (past the length bound, under HAProxy's)
        {"x-api-key": token_hash(WRITE_KEY)},  # its hash is not the key
        {"authorization": f"Basic {WRITE_KEY}"},  # a key, but not as a bearer token
        {"authorization": "Bearer"},
        {"authorization": f"Bearer\t{WRITE_KEY}"},
        {"authorization": f"Bearer {WRITE_KEY} trailing"},
        {"authorization": f"Bearer {READ_KEY}", "x-api-key": WRITE_KEY},  # two keys
        {"x-api-key": f"{WRITE_KEY}, {WRITE_KEY}"},  # one header, a comma: not split
    ],
    ids=lambda h: "-".join(f"{k}{len(v)}" for k, v in h.items()),
)
async def test_anything_but_one_valid_key_gets_401(gated: Gated, headers: dict[str, str]) -> None:
    r = await gated.client.get("/", headers={"host": SHOP, **headers})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "ApiKey"
    assert gated.edge.app.seen == []


async def test_an_expired_key_gets_401_expired(gated: Gated) -> None:
    r = await gated.client.get(
        "/", headers={"host": SHOP, "x-api-key": EXPIRED_KEY, "accept": "application/json"}
    )
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "api_key_expired"


async def test_many_key_headers_pass_only_when_they_all_carry_the_same_key(gated: Gated) -> None:
    same = [("host", SHOP)] + [("x-api-key", WRITE_KEY)] * 90
    assert (await gated.client.get("/", headers=same)).status_code == 200
    assert gated.last(b"x-api-key") == []
    mixed = [("host", SHOP), ("x-api-key", WRITE_KEY), ("x-api-key", READ_KEY)]
    mixed += [("x-api-key", WRITE_KEY)] * 5
    r = await gated.client.get("/", headers=[*mixed, ("accept", "application/json")])
    assert r.status_code == 401
    assert r.json()["error"]["message"].endswith("send exactly one")


async def test_a_clients_key_id_header_never_reaches_an_app(gated: Gated) -> None:
    spoofed = {"x-appdeck-key-id": "key_admin", "x-appdeck-edge": "guess"}
    assert (await gated.client.get("/", headers={"host": "blog.localhost", **spoofed})).is_success
    assert gated.last(b"x-appdeck-key-id") == []
    assert gated.last(b"x-appdeck-edge") == []
    r = await gated.client.get("/", headers={"host": SHOP, "x-api-key": READ_KEY, **spoofed})
    assert r.status_code == 200
    assert gated.last(b"x-appdeck-key-id") == [b"key_reader0001"]


async def test_a_connection_header_cannot_drop_the_key_id(gated: Gated) -> None:
    headers = {"host": SHOP, "x-api-key": WRITE_KEY, "connection": "x-appdeck-key-id, x-api-key"}
    assert (await gated.client.get("/", headers=headers)).status_code == 200
    assert gated.last(b"x-appdeck-key-id") == [b"key_writer0001"]
    assert gated.last(b"x-api-key") == []


async def test_a_route_without_api_auth_forwards_x_api_key_as_the_apps_own(gated: Gated) -> None:
    r = await gated.client.get("/", headers={"host": "blog.localhost", "x-api-key": "app-secret"})
    assert r.status_code == 200
    assert gated.last(b"x-api-key") == [b"app-secret"]
    assert gated.last(b"x-appdeck-key-id") == []


async def test_an_admitted_key_is_counted_in_the_key_use_table(gated: Gated) -> None:
    before = int(time.time())
    assert (await gated.client.get("/", headers={"host": SHOP, "x-api-key": READ_KEY})).is_success
    table = await gated.edge.api.command("show table edge_key_use")
    line = next(x for x in table.splitlines() if token_hash(READ_KEY) in x)
    assert int(line.rsplit("gpt0=", 1)[1].split()[0]) >= before
    assert token_hash(WRITE_KEY) not in table


async def test_a_closed_gate_answers_503_starting_for_every_route(tmp_path: Path) -> None:
    async for closed in _gated(tmp_path, ""):
        for host in (SHOP, "blog.localhost"):
            r = await closed.client.get("/", headers={"host": host, "x-api-key": WRITE_KEY})
            assert r.status_code == 503
            assert r.headers["retry-after"] == "5"
            assert "loading" in r.text
        r = await closed.client.get("/", headers={"host": "nothing.example", "accept": "x/json"})
        assert r.status_code == 404  # no route: not the gate's
        assert closed.edge.app.seen == []


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
    ids=["not-ascii", "control-characters", "nul-inside", "nul", "spaces", "tab-and-tail"],
)
async def test_raw_hostile_key_values_never_reach_the_app(gated: Gated, value: bytes) -> None:
    head = b"GET / HTTP/1.1\r\nHost: " + SHOP.encode() + b"\r\nX-API-Key: " + value + b"\r\n\r\n"
    answer = await gated.raw(head)
    assert answer.split(b" ", 2)[1] in (b"400", b"401"), answer[:200]
    assert gated.edge.app.seen == []


async def test_a_huge_authorization_header_is_refused_without_trouble(gated: Gated) -> None:
    head = (
        b"GET / HTTP/1.1\r\nHost: "
        + SHOP.encode()
        + b"\r\nAuthorization: Bearer adk_key_"
        + b"k" * 200_000
        + b"\r\n\r\n"
    )
    answer = await gated.raw(head)
    assert answer.split(b" ", 2)[1] in (b"400", b"401", b"431"), answer[:200]
    assert gated.edge.app.seen == []
