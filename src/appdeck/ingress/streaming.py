"""Relaying bodies between the client and an upstream connection: the rest of a streamed
request body up as the client sends it, and the client's disconnect noticed while a
response body streams down."""

from __future__ import annotations

import asyncio
import logging

from appdeck.common.types import Receive
from appdeck.ingress.config import ProxyConfig
from appdeck.ingress.errors import _ClientGone, _TooLarge
from appdeck.ingress.headers import _chunk
from appdeck.ingress.upstream import _Connection

log = logging.getLogger("appdeck.ingress")


async def watch(receive: Receive, conn: _Connection) -> None:
    """Wait for the client to disconnect while a response body streams."""
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                conn.client_gone()
                return
    except Exception:  # a server-side failure reads as the client gone
        log.debug("ingress: receive failed while streaming", exc_info=True)
        conn.client_gone()


async def upload(
    conn: _Connection, receive: Receive, sent: int, rechunk: bool, config: ProxyConfig
) -> None:
    """Stream the rest of the request body to the upstream as the client sends it."""
    limit = config.max_body_size
    while True:
        if conn.headers_done or conn.error is not None:
            conn.reusable = False  # it answered before the whole body: do not reuse
            return
        if conn.write_paused:
            await conn.drain(config.idle_timeout)
        try:
            async with asyncio.timeout(config.idle_timeout):
                message = await receive()
        except TimeoutError:
            raise _ClientGone from None
        if message["type"] != "http.request":
            raise _ClientGone
        data: bytes = message.get("body", b"")
        more: bool = message.get("more_body", False)
        sent += len(data)
        if sent > limit:
            raise _TooLarge
        out = _chunk(data, not more) if rechunk else data
        if out:
            conn.send(out)
        if not more:
            return
