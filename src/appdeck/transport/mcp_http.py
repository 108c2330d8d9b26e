"""Streamable HTTP at ``/mcp`` (MCP 2025-11-25), as a raw ASGI app: this is the hot path.

Two protocol eras share the endpoint. A POST in the stateless era (MCP 2026-07-28: no session,
the version and client capabilities in each request's ``_meta``; see
:mod:`appdeck.protocol.envelope` for how a POST's era is told) is answered by
:meth:`McpHttpApp._post_stateless`, when the server has that era switched on. The rest of
this docstring is the handshake era's.

POST carries one JSON-RPC message (a batch only for 2025-03-26); GET opens the session's
standalone SSE stream or resumes a stream after ``Last-Event-ID``; DELETE ends the session.
Status codes follow the specification and the reference TypeScript SDK (406, 415, 400 for a
missing session header, 404 for an unknown session, 405 with ``Allow``, 409 for a second
stream, 403 for a bad Host/Origin or another owner's session, 401 with a challenge).

This module owns HTTP only (media types, body size, Host/Origin, SSE). What a message may do
is the protocol core's: :func:`appdeck.protocol.inbound.read` routes or rejects a POST,
:meth:`McpServer.open` finds the session and checks its owner, and every rejection is an
:class:`~appdeck.protocol.errors.McpError` that carries its HTTP status and headers, mapped to
HTTP in :meth:`McpHttpApp.__call__` and nowhere else.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from appdeck.common.identity import Principal
from appdeck.common.outages import redis_errors
from appdeck.observability import mcp as metrics
from appdeck.protocol import envelope, inbound, listen, versions
from appdeck.protocol import errors as rpc
from appdeck.protocol.call import Call
from appdeck.protocol.jsonrpc import Kind
from appdeck.protocol.server import Answer, McpServer
from appdeck.protocol.sessions import Session
from appdeck.transport.guard import Guard, HttpError
from appdeck.transport.hub import StreamHub
from appdeck.transport.listen_stream import ListenStream
from appdeck.transport.responses import Receive, Scope, Send, read_body, send_empty, send_json
from appdeck.transport.security import HostPolicy
from appdeck.transport.sse import GET_STREAM, parse_event_id
from appdeck.transport.stateless_stream import StatelessStream
from appdeck.transport.streams import RETRY_SOON, GetStream, PostStream

log = logging.getLogger("appdeck.transport")
JsonObject = dict[str, Any]
ALLOW = [(b"allow", b"GET, POST, DELETE")]
ALLOW_STATELESS = [(b"allow", b"POST")]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_seconds: float = 30.0
    retry_ms: int = 1000
    stateless: bool = False
    """Serve the stateless era (MCP 2026-07-28) beside the handshake era."""


AUTH_FIRST_BYTES = 64 * 1024
"""Bodies larger than this (or of unknown length) need a valid token before they are read."""


def _large(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    if length is None:
        return b"transfer-encoding" in headers  # chunked: of unknown length
    return not length.isdigit() or len(length) > 12 or int(length) > AUTH_FIRST_BYTES


class McpHttpApp:
    def __init__(
        self,
        server: McpServer,
        hub: StreamHub,
        guard: Guard,
        policy: HostPolicy,
        settings: HttpSettings | None = None,
    ) -> None:
        self.server = server
        self.hub = hub
        self.guard = guard
        self.policy = policy
        self.settings = settings or HttpSettings()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: dict[bytes, bytes] = dict(scope["headers"])
        try:
            if not self.policy.host_ok(headers.get(b"host")):
                raise HttpError(403, rpc.SERVER_ERROR, "Forbidden: invalid Host header")
            if not self.policy.origin_ok(headers.get(b"origin")):
                raise HttpError(403, rpc.SERVER_ERROR, "Forbidden: invalid Origin header")
            method = scope["method"]
            peer = scope.get("client")
            client = peer[0] if peer else None  # proxy headers are not trusted
            if method == "POST":
                await self._post(receive, send, headers, client)
            elif method == "GET":
                await self._get(receive, send, headers, client)
            elif method == "DELETE":
                await self._delete(send, headers, client)
            else:
                raise HttpError(405, rpc.SERVER_ERROR, "Method not allowed.", ALLOW)
        except rpc.McpError as exc:  # HttpError included: the one place rejections become HTTP
            await send_json(send, exc.http_status, rpc.error_response(None, exc), exc.headers)

    # -- shared checks --------------------------------------------------------------------

    @staticmethod
    def _check_version_header(headers: dict[bytes, bytes]) -> None:
        rejection = inbound.version_rejection(headers.get(b"mcp-protocol-version"))
        if rejection is not None:
            raise rejection

    async def _session(self, headers: dict[bytes, bytes], principal: Principal | None) -> Session:
        raw = headers.get(b"mcp-session-id")
        session_id = raw.decode("latin-1") if raw is not None else None
        return await self.server.session_for(session_id, principal)

    # -- POST -----------------------------------------------------------------------------

    async def _post(
        self, receive: Receive, send: Send, headers: dict[bytes, bytes], client: str | None
    ) -> None:
        accept = headers.get(b"accept", b"")
        # find(), not `in`: bytes.__contains__ tries its argument as an int first, raising
        # and clearing a TypeError for every bytes needle (three per POST)
        if accept.find(b"*/*") < 0 and (
            accept.find(b"application/json") < 0 or accept.find(b"text/event-stream") < 0
        ):
            raise HttpError(
                406,
                rpc.SERVER_ERROR,
                "Not Acceptable: Client must accept both application/json and text/event-stream",
            )
        if not headers.get(b"content-type", b"").startswith(b"application/json"):
            raise HttpError(
                415,
                rpc.SERVER_ERROR,
                "Unsupported Media Type: Content-Type must be application/json",
            )
        # a body past AUTH_FIRST_BYTES is only read for a caller with a valid token
        early = (
            await self.guard.principal(headers, True, "POST", client) if _large(headers) else None
        )
        body = await read_body(receive, self.settings.max_body_bytes)
        if body is None:
            raise HttpError(
                413,
                rpc.INVALID_REQUEST,
                f"Request body too large (limit {self.settings.max_body_bytes} bytes)",
            )
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise rpc.ParseError("Parse error: Invalid JSON") from None
        if self.settings.stateless and envelope.is_stateless(
            headers.get(b"mcp-session-id"), headers.get(b"mcp-protocol-version"), data
        ):
            await self._post_stateless(receive, send, headers, data, early, client)
            return
        route = inbound.read(
            data, headers.get(b"mcp-session-id"), headers.get(b"mcp-protocol-version")
        )
        if isinstance(route, rpc.McpError):
            raise route
        principal = early or await self.guard.principal(
            headers, route.needs_token, route.label, client
        )
        call = await self.server.open(route, principal)
        if not route.batch and route.kinds[0] is Kind.REQUEST:  # the hot path
            await self._answer_one(send, route.messages[0], call)
            return
        requests: list[JsonObject] = []
        for kind, message in zip(route.kinds, route.messages, strict=True):
            if kind is Kind.REQUEST:
                requests.append(message)
            elif kind is Kind.NOTIFICATION:
                await self.server.handle_notification(message, call)
            else:
                await self.server.handle_response(message, call)
        if not requests:
            await send_empty(send, 202)
        else:
            await self._answer_batch(send, requests, call)

    async def _answer_batch(self, send: Send, requests: list[JsonObject], call: Call) -> None:
        answered: list[JsonObject] = []
        for request in requests:
            reply, _status, _headers = await self.server.handle_request(request, call)
            if reply is not None:
                answered.append(reply)
        if answered:
            await send_json(send, 200, answered)
        else:
            await send_empty(send, 202)

    async def _answer_one(self, send: Send, request: JsonObject, call: Call) -> None:
        session = call.session
        stream = PostStream(
            send,
            self.hub,
            call,
            retry_ms=self.settings.retry_ms,
            resumable=versions.has_priming_event(
                session.protocol_version if session else versions.LEGACY
            ),
        )
        call.channel = stream
        try:
            answer = await self._answer(request, call, stream)
        finally:
            # the call and its stream refer to each other: left so, the pair (and through the
            # stream's ``send`` uvicorn's request cycle, its scope and headers) would wait for
            # the cyclic collector instead of going when the request ends. Contexts built
            # during the call hold the stream themselves (issue 26 §1).
            call.channel = None
        if answer is None:
            return
        response, status, extra = answer
        if response is None:
            await send_empty(send, 202)
            return
        session = call.session  # initialize has just created it
        if session is not None:
            session_header = (b"mcp-session-id", session.id.encode())
            extra = [session_header, *extra] if extra else [session_header]
        await send_json(send, status, response, extra)

    async def _answer(
        self, message: JsonObject, call: Call, stream: PostStream | StatelessStream
    ) -> Answer | None:
        """The core's answer to a POSTed request; None when the answer went out on the SSE
        stream the request started (finished here, and counted closed however it ends)."""
        try:
            answer = await self.server.handle_request(message, call)
            if stream.started:
                await stream.finish(answer[0])
                return None
            return answer
        finally:
            if stream.started:
                metrics.stream_closed("post")

    async def _post_stateless(
        self,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        data: object,
        early: Principal | None,
        client: str | None,
    ) -> None:
        got = envelope.read(
            data,
            headers.get(b"mcp-protocol-version"),
            headers.get(b"mcp-method"),
            headers.get(b"mcp-name"),
        )
        if isinstance(got, envelope.Refused):
            error = got.error
            await send_json(
                send, error.http_status, rpc.error_response(got.request_id, error), error.headers
            )
            return
        message = got.message
        principal = early or await self.guard.principal(headers, True, message["method"], client)
        if got.kind is not Kind.REQUEST:
            await send_empty(send, 202)  # no notification of this era asks anything of us
            return
        if message["method"] == listen.METHOD:  # an SSE stream that stays open
            peer = got.peer
            await ListenStream(receive, send, self.settings.keepalive_seconds).run(
                lambda channel: self.server.handle_request(
                    message, Call(principal, None, channel, peer)
                )
            )
            return
        stream = StatelessStream(send)
        call = Call(principal, None, stream, got.peer)
        call.headers = headers  # its Mcp-Param-* are read only for a tool that annotates any
        answer = await self._answer(message, call, stream)
        if answer is None:
            return
        response, status, extra = answer
        if response is None:
            await send_empty(send, 202)
        else:
            await send_json(send, status, response, extra)

    def _stateless_get_or_delete(self, headers: dict[bytes, bytes]) -> None:
        """A GET or DELETE of the stateless era (a version header of that era and no
        session): 405, as the era has no session to stream or end."""
        if not self.settings.stateless or b"mcp-session-id" in headers:
            return
        version = headers.get(b"mcp-protocol-version")
        if version is not None and envelope.is_stateless(None, version, None):
            raise HttpError(405, rpc.SERVER_ERROR, "Method not allowed.", ALLOW_STATELESS)

    # -- GET ------------------------------------------------------------------------------

    async def _get(
        self, receive: Receive, send: Send, headers: dict[bytes, bytes], client: str | None
    ) -> None:
        accept = headers.get(b"accept", b"")
        if b"text/event-stream" not in accept and b"*/*" not in accept:
            raise HttpError(
                406, rpc.SERVER_ERROR, "Not Acceptable: Client must accept text/event-stream"
            )
        principal = await self.guard.principal(headers, True, "GET", client)
        self._stateless_get_or_delete(headers)
        self._check_version_header(headers)
        session = await self._session(headers, principal)
        raw_last = headers.get(b"last-event-id")
        after: int | None = None  # a new standalone stream starts at its tail
        if raw_last is not None:
            parsed = parse_event_id(raw_last.decode("latin-1"))
            if parsed is None:
                raise HttpError(400, rpc.SERVER_ERROR, "Bad Request: invalid Last-Event-ID")
            stream, after = parsed
        else:
            stream = GET_STREAM
        try:
            if stream != GET_STREAM and not await self.hub.known_stream(session.id, stream):
                raise HttpError(400, rpc.SERVER_ERROR, "Bad Request: unknown Last-Event-ID")
            # a resumption takes the lease: its previous connection is gone for the client
            lease = await self.hub.claim(session.id, stream, take_over=raw_last is not None)
        except redis_errors():
            log.warning("stream state unreachable", exc_info=True)
            raise HttpError(
                503, rpc.SERVER_ERROR, "Service Unavailable: try again", RETRY_SOON
            ) from None
        if lease is None:
            if stream == GET_STREAM:
                raise HttpError(
                    409, rpc.SERVER_ERROR, "Conflict: Only one SSE stream is allowed per session"
                )
            raise HttpError(
                409, rpc.SERVER_ERROR, "Conflict: Stream already has an active connection"
            )
        try:
            reader = GetStream(receive, send, self.hub, session, stream, lease)
            await reader.run(after, self.settings.keepalive_seconds, self.settings.retry_ms)
        finally:
            await self.hub.release(session.id, stream, lease)

    # -- DELETE ---------------------------------------------------------------------------

    async def _delete(self, send: Send, headers: dict[bytes, bytes], client: str | None) -> None:
        principal = await self.guard.principal(headers, True, "DELETE", client)
        self._stateless_get_or_delete(headers)
        self._check_version_header(headers)
        session = await self._session(headers, principal)
        await self.server.sessions.drop(session)
        await send_empty(send, 200)
