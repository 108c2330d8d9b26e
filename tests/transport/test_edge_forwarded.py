"""TrustEdge: X-Forwarded-For/-Proto believed only with the data plane's secret over loopback;
the secret never reaches a handler."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.common.types import Receive, Scope, Send
from appdeck.transport.edge_forwarded import TrustEdge

SECRET = "s" * 64


async def _seen(headers: list[tuple[bytes, bytes]], client: tuple[str, int] | None) -> Scope:
    got: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        got.append(scope)

    async def nothing(*_: Any) -> Any:
        return None

    scope = {"type": "http", "scheme": "http", "headers": headers, "client": client}
    await TrustEdge(app, SECRET)(scope, nothing, nothing)
    return got[0]


FORWARDED = [(b"x-forwarded-for", b"203.0.113.9"), (b"x-forwarded-proto", b"https")]


async def test_the_data_planes_request_carries_the_clients_address_and_scheme() -> None:
    scope = await _seen([*FORWARDED, (b"x-appdeck-edge", SECRET.encode())], ("127.0.0.1", 5))
    assert scope["client"] == ("203.0.113.9", 0)
    assert scope["scheme"] == "https"
    assert all(k != b"x-appdeck-edge" for k, _ in scope["headers"])


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        (FORWARDED, ("127.0.0.1", 5)),  # no secret: a client talking to the port itself
        ([*FORWARDED, (b"x-appdeck-edge", b"guess")], ("127.0.0.1", 5)),
        ([*FORWARDED, (b"x-appdeck-edge", SECRET.encode() + b"x")], ("127.0.0.1", 5)),
        ([*FORWARDED, (b"x-appdeck-edge", SECRET.encode())] * 2, ("127.0.0.1", 5)),
        ([*FORWARDED, (b"x-appdeck-edge", SECRET.encode())], ("198.51.100.7", 5)),  # not loopback
        ([*FORWARDED, (b"x-appdeck-edge", SECRET.encode())], None),
    ],
    ids=["no-secret", "wrong", "longer", "twice", "remote-peer", "no-peer"],
)
async def test_anything_else_changes_nothing(
    headers: list[tuple[bytes, bytes]], client: tuple[str, int] | None
) -> None:
    scope = await _seen(headers, client)
    assert scope["client"] == client
    assert scope["scheme"] == "http"
    assert all(k != b"x-appdeck-edge" for k, _ in scope["headers"])


@pytest.mark.parametrize(
    "value", [b"203.0.113.9, 10.0.0.1", b"not-an-ip", b"\xff", b"1" * 5000, b"::1%eth0\x00"]
)
async def test_a_forwarded_for_that_is_not_one_address_is_ignored(value: bytes) -> None:
    headers = [(b"x-forwarded-for", value), (b"x-appdeck-edge", SECRET.encode())]
    scope = await _seen(headers, ("127.0.0.1", 5))
    assert scope["client"] == ("127.0.0.1", 5)


def test_a_short_secret_is_refused() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    with pytest.raises(ValueError, match="at least 32"):
        TrustEdge(app, "short")
