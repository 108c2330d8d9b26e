"""The control plane behind the data plane: ``X-Forwarded-*`` trusted only from HAProxy.

When ``APPDECK_PUBLIC_URL`` is served by the data plane, HAProxy terminates TLS and forwards
to uvicorn on loopback: every request then comes from 127.0.0.1, and the per-IP limits
(authentication failures, sign-in attempts, client registrations) would count every client
as one. HAProxy's control-plane backend (``appdeck.ingress.haproxy.edge``) replaces
``X-Forwarded-For`` with the address it accepted the connection from and adds
``X-AppDeck-Edge: <secret>``, a random value in the data plane's directory that only root
reads. This middleware believes ``X-Forwarded-For`` / ``-Proto`` only on a request that
carries exactly that secret over a loopback connection: then ``scope["client"]`` and
``scope["scheme"]`` become the client's. Anything else (a client's own ``X-Forwarded-For``
sent straight to the port, a wrong or repeated secret) changes nothing. The secret header is
always removed, so no handler, log or error ever sees it. The base URL is not derived from
any header: it is ``APPDECK_PUBLIC_URL`` (settings), so a forged Host changes no URL.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from typing import Final

from appdeck.common.types import ASGIApp, Receive, Scope, Send

__all__ = ["EDGE_HEADER", "TrustEdge", "is_loopback"]

EDGE_HEADER: Final = b"x-appdeck-edge"
_ADDRESS: Final = re.compile(rb"[0-9A-Fa-f:.]{2,45}")
"""What HAProxy's ``%[src]`` writes: an IPv4 or IPv6 address, no zone, no list."""
_PROTOS: Final = {b"http": "http", b"https": "https"}


class TrustEdge:
    """ASGI middleware (see the module)."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        if len(secret) < 32:
            raise ValueError("the edge secret is at least 32 characters")
        self.app = app
        self._secret = secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            scope = self._rewrite(scope)
        await self.app(scope, receive, send)

    def _rewrite(self, scope: Scope) -> Scope:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        presented = [v for k, v in headers if k == EDGE_HEADER]
        if not presented:
            return scope
        scope = dict(scope)
        scope["headers"] = [(k, v) for k, v in headers if k != EDGE_HEADER]
        if len(presented) != 1 or not hmac.compare_digest(presented[0], self._secret):
            return scope
        if not _loopback(scope.get("client")):
            return scope
        forwarded_for = [v for k, v in headers if k == b"x-forwarded-for"]
        proto = [v for k, v in headers if k == b"x-forwarded-proto"]
        if len(forwarded_for) == 1 and _ADDRESS.fullmatch(forwarded_for[0]):
            try:
                address = ipaddress.ip_address(forwarded_for[0].decode())
            except ValueError:
                address = None
            if address is not None:
                scope["client"] = (str(address), 0)
        if len(proto) == 1 and proto[0] in _PROTOS:
            scope["scheme"] = _PROTOS[proto[0]]
        return scope


def _loopback(client: object) -> bool:
    if not isinstance(client, (tuple, list)) or not client:
        return False
    return is_loopback(str(client[0]))


def is_loopback(host: str) -> bool:
    """True for a loopback IP address (127.0.0.0/8, ::1); False for anything else, names too."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
