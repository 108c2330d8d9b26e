"""The few response helpers the raw ASGI apps share (the ASGI types are in
:mod:`appdeck.common.types`)."""

from __future__ import annotations

from typing import Any

import orjson

from appdeck.common.types import ASGIApp as ASGIApp
from appdeck.common.types import Headers as Headers
from appdeck.common.types import Message as Message
from appdeck.common.types import Receive as Receive
from appdeck.common.types import Scope as Scope
from appdeck.common.types import Send as Send

JSON_HEADERS: Headers = [(b"content-type", b"application/json")]


def header_map(scope: Scope) -> dict[bytes, bytes]:
    """Request headers by lower-case name (ASGI already lower-cases them); last one wins."""
    return dict(scope["headers"])


async def send_json(send: Send, status: int, body: Any, headers: Headers | None = None) -> None:
    payload = orjson.dumps(body)
    out = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    if headers:
        out += headers
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": payload})


async def send_empty(send: Send, status: int, headers: Headers | None = None) -> None:
    out: Headers = [(b"content-length", b"0")]
    if headers:
        out.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": b""})


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
