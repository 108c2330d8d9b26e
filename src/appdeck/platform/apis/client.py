"""AppHttp: requests to an app's live release **through the ingress**, and nowhere else.

The only address this client ever connects to is the ingress's own listening address; which
app answers is chosen by the ``Host`` header (the app's hostname, made by
:mod:`appdeck.model.hostnames`, never by a caller). So no argument of a caller can make the
server open a connection to another host, another port or a metadata address: the request
target is a path (``/...``, never ``//...``, never an absolute URL), redirects are never
followed (the 3xx is returned as it is), the proxy environment is ignored, and the body read is
capped (the rest is left unread and the connection dropped).

Every request has **one deadline**, ``timeout_s`` from when it is asked for: waiting for a
slot, connecting, sending, the answer's headers and its whole body. An app that trickles its
answer a byte at a time cannot stretch it (a per-read timeout would restart at every byte).
And every request holds a slot of its tenant's share of the pool (:mod:`.shares`), so one
tenant's slow calls never use up the connections another tenant's calls need.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import httpx

from appdeck.common.errors import FailedPrecondition, InvalidArgument, Unavailable
from appdeck.common.failures import http_failure
from appdeck.platform.apis.shares import OutboundLimits, OutboundShares

__all__ = ["AppHttp", "AppResponse"]

DEFAULT_TIMEOUT: Final = 10.0
MAX_TIMEOUT: Final = 60.0


@dataclass(frozen=True, slots=True)
class AppResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncated: bool
    """The body was longer than ``max_body``: ``body`` holds its first ``max_body`` bytes."""
    latency_ms: float
    """From sending the request to the last byte read (or the cap)."""

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


class AppHttp:
    """One client per server; ``await aclose()`` at shutdown."""

    def __init__(
        self,
        ingress_host: str,
        ingress_port: int,
        limits: OutboundLimits | None = None,
        *,
        through_ingress: bool = True,
    ) -> None:
        host = "127.0.0.1" if ingress_host in ("0.0.0.0", "", "*") else ingress_host
        host = "::1" if host == "::" else host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.base = f"http://{host}:{ingress_port}"
        self.through_ingress = through_ingress
        """False: no ingress on this host (a cluster's gateway serves the apps): refused."""
        self._client: httpx.AsyncClient | None = None
        self.shares = OutboundShares(limits or OutboundLimits())
        """Each tenant's share of the pool (its size is the pool's)."""

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,  # never a proxy from the environment
                # no kept connections: after a route change reloads HAProxy, a kept one
                # reaches the old worker, which answers its next request with the old routes
                limits=httpx.Limits(
                    max_connections=self.shares.limits.total, max_keepalive_connections=0
                ),
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def request(
        self,
        tenant: str,
        host: str,
        method: str,
        target: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | None = None,
        max_body: int = 256 * 1024,
        timeout_s: float = DEFAULT_TIMEOUT,
    ) -> AppResponse:
        """``method target`` to the app at ``host`` (its hostname, e.g. ``blog--acme.localhost``)
        of ``tenant`` (whose share of the pool the request holds).

        ``target`` is an origin-form request target (``/path?query``), already percent-encoded.
        Raises :class:`InvalidArgument` for anything else, :class:`Unavailable` when the
        ingress cannot be reached, the tenant's share stays taken, or the whole answer (body
        included) has not arrived within ``timeout_s`` seconds.
        """
        if not self.through_ingress:
            raise FailedPrecondition(
                "calling an app from the platform needs this host's ingress, which "
                "APPDECK_RUNTIME=kubernetes does not run (the cluster's gateway serves the apps)",
                hint="call the app at its URL (get_app_url) from where the gateway is reachable",
            )
        if not target.startswith("/") or target.startswith("//") or not target.isprintable():
            raise InvalidArgument("the request target must be a path starting with one /")
        if any(c in target for c in " \\#") or len(target) > 8192:
            raise InvalidArgument("the request target holds a space, \\ or #, or is too long")
        timeout = min(max(timeout_s, 0.1), MAX_TIMEOUT)
        sent = [(k, v) for k, v in headers if k.lower() != "host"]
        sent.append(("host", host))
        request = self._http().build_request(
            method,
            httpx.URL(self.base + target),
            headers=sent,
            content=body,
            timeout=httpx.Timeout(timeout),
        )
        deadline = asyncio.get_running_loop().time() + timeout
        async with self.shares.slot(tenant, deadline=deadline):
            started = time.perf_counter()
            try:
                async with asyncio.timeout_at(deadline):
                    response, chunks, truncated = await self._exchange(request, max_body)
            except TimeoutError:
                raise Unavailable(
                    f"the app did not answer within {timeout:g} s (one deadline for "
                    "connecting, the headers and the whole body)",
                    hint="raise timeout_s if the app is just slow",
                ) from None
        latency = (time.perf_counter() - started) * 1000
        return AppResponse(
            status=response.status_code,
            headers=tuple((k, v) for k, v in response.headers.multi_items()),
            body=b"".join(chunks),
            truncated=truncated,
            latency_ms=round(latency, 2),
        )

    async def _exchange(
        self, request: httpx.Request, max_body: int
    ) -> tuple[httpx.Response, list[bytes], bool]:
        """Send ``request`` and read at most ``max_body`` bytes of the answer (the caller
        bounds the whole by its deadline)."""
        try:
            response = await self._http().send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise TimeoutError from exc
        except httpx.HTTPError as exc:
            raise Unavailable(f"the ingress could not be reached: {http_failure(exc)}") from exc
        chunks: list[bytes] = []
        size = 0
        truncated = False
        try:
            async for chunk in response.aiter_bytes():
                if size + len(chunk) > max_body:
                    chunks.append(chunk[: max_body - size])
                    truncated = True
                    break
                chunks.append(chunk)
                size += len(chunk)
        except httpx.TimeoutException as exc:
            raise TimeoutError from exc
        except httpx.HTTPError as exc:
            raise Unavailable(f"the app's answer broke off: {http_failure(exc)}") from exc
        finally:
            await response.aclose()
        return response, chunks, truncated
