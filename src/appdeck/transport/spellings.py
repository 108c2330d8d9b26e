"""The ``WWW-Authenticate`` challenges of a loopback server, spelled as the client spelled it.

A challenge names the protected resource metadata by URL (RFC 9728 §5.1); a client that was
given ``http://localhost:8080/mcp`` must be sent to ``http://localhost:8080/.well-known/…``,
not to the canonical ``127.0.0.1`` spelling, or it finds metadata for another resource and
stops. Only a ``Host`` that is one of :class:`~appdeck.auth.urls.PublicUrls`' spellings is
followed; any other Host gets the canonical URL (and /mcp refuses it anyway: DNS rebinding).
Requests under the canonical spelling pass through untouched.
"""

from __future__ import annotations

from appdeck.auth.urls import PublicUrls
from appdeck.transport.responses import ASGIApp, Message, Receive, Scope, Send


def host_of(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"host":
            return bytes(value).decode("latin-1")
    return None


class SpelledChallenges:
    def __init__(self, app: ASGIApp, urls: PublicUrls) -> None:
        self._app = app
        self._urls = urls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._urls.by_host:
            await self._app(scope, receive, send)
            return
        base = self._urls.base_for(host_of(scope))
        if base == self._urls.base:
            await self._app(scope, receive, send)
            return
        old, new = self._urls.base.encode(), base.encode()

        async def spelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v.replace(old, new) if k.lower() == b"www-authenticate" else v)
                    for k, v in message.get("headers", [])
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self._app(scope, receive, spelled)
