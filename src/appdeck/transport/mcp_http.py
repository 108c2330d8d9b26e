"""Streamable HTTP at ``/mcp`` (MCP 2025-11-25), as a raw ASGI app: this is the hot path.

POST carries one JSON-RPC message (a batch only for 2025-03-26); GET opens the session's
standalone SSE stream or resumes a stream after ``Last-Event-ID``; DELETE ends the session.
Status codes follow the specification and the reference TypeScript SDK (406, 415, 400 for a
missing session header, 404 for an unknown session, 405 with ``Allow``, 409 for a second
stream, 403 for a bad Host/Origin or another owner's session, 401 with a challenge).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import orjson

from appdeck.common.identity import Principal
from appdeck.events.bus import CLOSE, Delivery
from appdeck.protocol import errors as rpc
from appdeck.protocol import versions
from appdeck.protocol.call import Call
from appdeck.protocol.jsonrpc import Kind, classify
from appdeck.protocol.server import OPEN_METHODS, McpServer
from appdeck.protocol.sessions import Session
from appdeck.transport.responses import Headers, Receive, Scope, Send, read_body, send_empty, send_json
from appdeck.transport.guard import Guard, HttpError
from appdeck.transport.hub import StreamHub
from appdeck.transport.security import HostPolicy
from appdeck.transport.sse import (
    GET_STREAM,
    KEEPALIVE,
    SSE_HEADERS,
    encode_event,
    event_id,
    parse_event_id,
    priming,
)
from appdeck.transport.streams import PostStream

log = logging.getLogger("appdeck.transport")
JsonObject = dict[str, Any]
ALLOW = [(b"allow", b"GET, POST, DELETE")]
SUPPORTED_BYTES = frozenset(v.encode() for v in versions.SUPPORTED)
SUPPORTED_LIST = ", ".join(sorted(versions.SUPPORTED, reverse=True))


@dataclass(frozen=True, slots=True)
class HttpSettings:
    max_body_bytes: int = 4 * 1024 * 1024
    keepalive_seconds: float = 30.0
    retry_ms: int = 1000


def _from_mcp(exc: rpc.McpError) -> HttpError:
    return HttpError(exc.http_status, exc.code, exc.message)


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
            if method == "POST":
                await self._post(receive, send, headers)
            elif method == "GET":
                await self._get(receive, send, headers)
            elif method == "DELETE":
                await self._delete(send, headers)
            else:
                raise HttpError(405, rpc.SERVER_ERROR, "Method not allowed.", ALLOW)
        except HttpError as exc:
            await send_json(send, exc.status, exc.body(), exc.headers)

    # -- shared checks --------------------------------------------------------------------

    def _check_version_header(self, headers: dict[bytes, bytes]) -> None:
        raw = headers.get(b"mcp-protocol-version")
        if raw is not None and raw not in SUPPORTED_BYTES:
            raise HttpError(
                400,
                rpc.SERVER_ERROR,
                f"Bad Request: Unsupported protocol version: {raw.decode('latin-1')[:40]} "
                f"(supported versions: {SUPPORTED_LIST})",
            )

    async def _session(self, headers: dict[bytes, bytes], principal: Principal | None) -> Session:
        raw = headers.get(b"mcp-session-id")
        if raw is None:
            raise HttpError(400, rpc.SERVER_ERROR, "Bad Request: Mcp-Session-Id header is required")
        session = await self.server.sessions.get(raw.decode("latin-1"))
        if session is None:
            raise HttpError(404, rpc.SESSION_NOT_FOUND, "Session not found")
        if principal is not None:
            try:
                await self.server.sessions.check_owner(session, principal)
            except rpc.Forbidden as exc:
                self.guard.refused(principal, 403, "session owner mismatch: session dropped")
                raise _from_mcp(exc) from None
        return session

    # -- POST -----------------------------------------------------------------------------

    async def _post(self, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> None:
        accept = headers.get(b"accept", b"")
        if b"*/*" not in accept and (
            b"application/json" not in accept or b"text/event-stream" not in accept
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
            raise HttpError(400, rpc.PARSE_ERROR, "Parse error: Invalid JSON") from None
        self._check_version_header(headers)
        batch = isinstance(data, list)
        messages: list[Any] = data if batch else [data]
        if batch and not messages:
            raise HttpError(400, rpc.INVALID_REQUEST, "Invalid Request: empty batch")
        kinds: list[Kind] = []
        is_init = False
        needs_auth = False
        for message in messages:
            try:
                kind = classify(message)
            except rpc.InvalidRequest as exc:
                raise HttpError(400, rpc.INVALID_REQUEST, exc.message) from None
            kinds.append(kind)
            if kind is Kind.RESPONSE:
                needs_auth = True
            else:
                name = message["method"]
                is_init = is_init or (kind is Kind.REQUEST and name == "initialize")
                needs_auth = needs_auth or name not in OPEN_METHODS
        if is_init and len(messages) > 1:
            raise HttpError(
                400,
                rpc.INVALID_REQUEST,
                "Invalid Request: Only one initialization request is allowed",
            )
        first = messages[0].get("method") if len(messages) == 1 else "batch"
        principal = await self.guard.principal(headers, needs_auth, first)
        lone_ping = (
            len(messages) == 1
            and kinds[0] is Kind.REQUEST
            and messages[0]["method"] == "ping"
            and b"mcp-session-id" not in headers
        )
        # a ping needs neither token nor session: a liveness check answers even before
        # initialize (with a session header, the session is still checked)
        session = None if is_init or lone_ping else await self._session(headers, principal)
        if batch:
            version = session.protocol_version if session else versions.LATEST
            if not versions.allows_batches(version):
                raise HttpError(
                    400,
                    rpc.INVALID_REQUEST,
                    "Invalid Request: JSON-RPC batches are not supported in protocol version "
                    + version,
                )
        call = Call(principal, session)
        requests: list[JsonObject] = []
        for kind, message in zip(kinds, messages, strict=True):
            if kind is Kind.REQUEST:
                requests.append(message)
            elif kind is Kind.NOTIFICATION:
                await self.server.handle_notification(message, call)
            else:
                await self.server.handle_response(message, call)
        if not requests:
            await send_empty(send, 202)
        elif batch:
            await self._answer_batch(send, requests, call)
        else:
            await self._answer_one(send, requests[0], call, headers)

    async def _answer_batch(self, send: Send, requests: list[JsonObject], call: Call) -> None:
        answered: list[JsonObject] = []
        for request in requests:
            started = time.perf_counter()
            reply, status = await self.server.handle_request(request, call)
            self.guard.answered(call.principal, request, reply, status, started)
            if reply is not None:
                answered.append(reply)
        if answered:
            await send_json(send, 200, answered)
        else:
            await send_empty(send, 202)

    async def _answer_one(
        self, send: Send, request: JsonObject, call: Call, headers: dict[bytes, bytes]
    ) -> None:
        session = call.session
        version = session.protocol_version if session else versions.LEGACY
        stream = PostStream(
            send,
            self.hub,
            call,
            retry_ms=self.settings.retry_ms,
            resumable=versions.has_priming_event(version),
        )
        call.channel = stream
        started = time.perf_counter()
        response, status = await self.server.handle_request(request, call)
        self.guard.answered(call.principal, request, response, status, started)
        if stream.started:
            await stream.finish(response)
            return
        if response is None:
            await send_empty(send, 202)
            return
        extra: Headers = []
        if call.session is not None:
            extra.append((b"mcp-session-id", call.session.id.encode()))
        if status == 403:
            data = response.get("error", {}).get("data")
            if isinstance(data, dict) and "scope" in data:
                extra.append(
                    (b"www-authenticate", self.guard.insufficient_scope(str(data["scope"])))
                )
        await send_json(send, status, response, extra)

    # -- GET ------------------------------------------------------------------------------

    async def _get(self, receive: Receive, send: Send, headers: dict[bytes, bytes]) -> None:
        accept = headers.get(b"accept", b"")
        if b"text/event-stream" not in accept and b"*/*" not in accept:
            raise HttpError(
                406, rpc.SERVER_ERROR, "Not Acceptable: Client must accept text/event-stream"
            )
        principal = await self.guard.principal(headers, True, "GET")
        self._check_version_header(headers)
        session = await self._session(headers, principal)
        raw_last = headers.get(b"last-event-id")
        if raw_last is not None:
            parsed = parse_event_id(raw_last.decode("latin-1"))
            if parsed is None:
                raise HttpError(400, rpc.SERVER_ERROR, "Bad Request: invalid Last-Event-ID")
            stream, after = parsed
            if stream != GET_STREAM and not await self._known_request_stream(session, stream):
                raise HttpError(400, rpc.SERVER_ERROR, "Bad Request: unknown Last-Event-ID")
        else:
            stream, after = GET_STREAM, self.hub.high_water
        if stream == GET_STREAM:
            if not self.hub.claim_standalone(session.id):
                raise HttpError(
                    409, rpc.SERVER_ERROR, "Conflict: Only one SSE stream is allowed per session"
                )
        elif not self.hub.claim_resumed(session.id, stream):
            raise HttpError(
                409, rpc.SERVER_ERROR, "Conflict: Stream already has an active connection"
            )
        try:
            await self._stream(receive, send, session, stream, after, fresh=raw_last is None)
        finally:
            if stream == GET_STREAM:
                self.hub.release_standalone(session.id)
            else:
                self.hub.release_resumed(session.id, stream)

    async def _known_request_stream(self, session: Session, stream: str) -> bool:
        if self.hub.request_stream_open(session.id, stream):
            return True
        return bool(await self.hub.log.replay(session.id, stream, 0, limit=1))

    async def _stream(
        self, receive: Receive, send: Send, session: Session, stream: str, after: int, fresh: bool
    ) -> None:
        listener = self.hub.listen(session.id)
        gone = asyncio.Event()

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()
            listener.put(CLOSE)

        watcher = asyncio.create_task(watch_disconnect())
        try:
            out = [*SSE_HEADERS, (b"mcp-session-id", session.id.encode())]
            await send({"type": "http.response.start", "status": 200, "headers": out})
            if fresh and versions.has_priming_event(session.protocol_version):
                await self._chunk(send, priming(event_id(stream, after), self.settings.retry_ms))
            last = after
            for event in await self.hub.log.replay(session.id, stream, after):
                await self._chunk(send, encode_event(event_id(stream, event.seq), event.payload))
                last = event.seq
                if stream != GET_STREAM and _is_response(orjson.loads(event.payload)):
                    return
            while not gone.is_set():
                item = await listener.get(self.settings.keepalive_seconds)
                if item is None:
                    await self._chunk(send, KEEPALIVE)
                    continue
                if item is CLOSE or listener.overflowed or not isinstance(item, Delivery):
                    return
                event = item.event
                if event.stream != stream or event.seq <= last:
                    continue
                await self._chunk(send, encode_event(event_id(stream, event.seq), event.payload))
                last = event.seq
                if stream != GET_STREAM and _is_response(item.message):
                    return
        except OSError:
            return
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self.hub.unlisten(listener)
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _chunk(send: Send, data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    # -- DELETE ---------------------------------------------------------------------------

    async def _delete(self, send: Send, headers: dict[bytes, bytes]) -> None:
        principal = await self.guard.principal(headers, True, "DELETE")
        self._check_version_header(headers)
        session = await self._session(headers, principal)
        await self.server.sessions.drop(session)
        await send_empty(send, 200)


def _is_response(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and "id" in message
        and ("result" in message or "error" in message)
    )
