"""uvicorn's HTTP/1.1 request cycle, with its per-request steps done in fewer operations.

Every request through uvicorn's httptools protocol makes a ``RequestResponseCycle`` (eleven
keyword arguments) and, for its response head, runs two regular expressions over every header
name and value and lower-cases every name again. On AppDeck's ``tools/call`` that was ~3 µs of
the HTTP layer's ~19 (``bench/callpath_parts.py``, issue 26 §1). Here:

- :class:`LeanCycle` is made from the protocol directly (:meth:`LeanCycle.of`), with the same
  attributes as uvicorn's (``tests/transport/test_cycle.py`` compares them, so an upgrade of
  uvicorn that adds one fails a test instead of a request);
- its ``send`` writes the common response head (no access log, the flow not paused) in one
  pass: a header name already seen valid is looked up, not searched again (a memo bounded in
  entries and in the length of what it keeps), and so is a value (never a cookie's, a
  redirect's or a challenge's: :data:`UNKEPT`); and a body that fits its
  ``content-length`` without a second coroutine; everything else (chunked or ``HEAD``
  responses, a body longer or shorter than announced, a paused flow) is uvicorn's own
  ``send``;
- its ``receive`` does not await an event that is already set.

The checks are uvicorn's: a header name or value it would refuse is refused here too, with
the same ``RuntimeError``, before anything is written.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import TYPE_CHECKING, Any

import httptools
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

MEMO_SIZE = 1024
"""Header names (and values) remembered as valid; the memo is emptied when it is full."""
MEMO_LONGEST = 256
"""Longer names and values are checked every time, never kept: a client can make a response
carry a value of its choosing (an OAuth redirect's ``location``), and 1,024 of 64 KiB each
would be held for nothing."""

UNKEPT: frozenset[bytes] = frozenset({b"set-cookie", b"location", b"www-authenticate"})
"""Headers whose values are checked every time and never kept: they carry secrets (a console
session's cookie, an OAuth redirect's code) or a client's words, used once."""

_NAMES: dict[bytes, bytes] = {}
"""A header name as an app sent it -> lower-cased, once checked valid."""
_VALUES: set[bytes] = set()
"""Header values checked valid."""


def _name(name: bytes) -> bytes:
    try:
        lower = _NAMES.get(name)
    except TypeError:  # a bytearray: checked every time
        lower = None
    if lower is None:
        if HEADER_RE.search(name):
            raise RuntimeError("Invalid HTTP header name.")
        lower = bytes(name.lower())
        if type(name) is bytes and len(name) <= MEMO_LONGEST:
            if len(_NAMES) >= MEMO_SIZE:
                _NAMES.clear()
            _NAMES[name] = lower
    return lower


def _value(value: bytes, name: bytes) -> None:
    if type(value) is not bytes or name in UNKEPT:  # a bytearray, a secret: checked every time
        if HEADER_VALUE_RE.search(value):
            raise RuntimeError("Invalid HTTP header value.")
        return
    if value in _VALUES:
        return
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    if len(value) > MEMO_LONGEST:
        return
    if len(_VALUES) >= MEMO_SIZE:
        _VALUES.clear()
    _VALUES.add(value)


class LeanCycle(RequestResponseCycle):
    """uvicorn's request cycle (see the module)."""

    @classmethod
    def of(cls, protocol: HttpToolsProtocol, keep_alive: bool) -> LeanCycle:
        """The cycle of ``protocol``'s current request (its ``scope``), as uvicorn's
        ``on_headers_complete`` makes it, without the keyword plumbing."""
        self = cls.__new__(cls)
        self.scope = protocol.scope
        self.transport = protocol.transport
        self.flow = protocol.flow
        self.logger = protocol.logger
        self.access_logger = protocol.access_logger
        self.access_log = protocol.access_log
        self.default_headers = protocol.server_state.default_headers
        self.message_event = asyncio.Event()
        self.on_response = protocol.on_response_complete
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = protocol.expect_100_continue
        self.body = bytearray()
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked_encoding = None
        self.expected_content_length = 0
        return self

    async def send(self, message: Any) -> None:
        if self.access_log or self.flow.write_paused or self.disconnected:
            await RequestResponseCycle.send(self, message)
            return
        kind = message["type"]
        if not self.response_started and kind == "http.response.start":
            self._start(message)
            return
        if (
            kind == "http.response.body"
            and self.chunked_encoding is False
            and not self.response_complete
            and self.scope["method"] != "HEAD"
        ):
            body = message.get("body", b"")
            more_body = message.get("more_body", False)
            left = self.expected_content_length - len(body)
            if left >= 0 and (more_body or not left):  # else uvicorn's own errors, below
                self._body(body, more_body, left)
                return
        await RequestResponseCycle.send(self, message)

    def _body(self, body: bytes, more_body: bool, left: int) -> None:
        """A body of a response with a ``content-length`` that it does not overrun (nor
        fall short of, when it is the last), as uvicorn writes it."""
        self.expected_content_length = left
        self.transport.write(body)
        if not more_body:
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _start(self, message: Any) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status: int = message["status"]
        content = [STATUS_LINE[status]]
        close = False
        for headers in (self.default_headers, message.get("headers", ())):
            for name, value in headers:
                name = _name(name)
                _value(value, name)
                if name == b"content-length" and self.chunked_encoding is None:
                    self.expected_content_length = int(value.decode())
                    self.chunked_encoding = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    self.expected_content_length = 0
                    self.chunked_encoding = True
                elif name == b"connection" and b"close" in [
                    token.lower().strip() for token in value.split(b",")
                ]:
                    self.keep_alive = False
                    close = True
                content += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close:
            content.append(b"connection: close\r\n")
        if (
            self.chunked_encoding is None
            and self.scope["method"] != "HEAD"
            and status not in (204, 304)
        ):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    async def receive(self) -> Any:
        if (
            self.message_event.is_set()
            and not self.waiting_for_100_continue
            and not self.disconnected
            and not self.response_complete
        ):
            flow = self.flow
            if flow.read_paused:
                flow.resume_reading()
            self.message_event.clear()
            message = {
                "type": "http.request",
                "body": bytes(self.body),
                "more_body": self.more_body,
            }
            self.body = bytearray()
            return message
        return await RequestResponseCycle.receive(self)


if TYPE_CHECKING:
    _Protocol = HttpToolsProtocol
else:  # a mixin before uvicorn's class at run time
    _Protocol = object


class LeanRequests(_Protocol):
    """uvicorn's ``on_headers_complete``, making a :class:`LeanCycle`."""

    def on_headers_complete(self) -> None:
        parser = self.parser
        http_version = parser.get_http_version()
        scope = self.scope
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        if parser.should_upgrade() and self._should_upgrade():
            return
        parsed_url = httptools.parse_url(self.url)
        raw_path: bytes = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        root = self.root_path
        if root:
            scope["path"] = root + path
            scope["raw_path"] = root.encode("ascii") + raw_path
        else:
            scope["path"] = path
            scope["raw_path"] = raw_path
        scope["query_string"] = parsed_url.query or b""
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app: Any = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        else:
            app = self.app
        existing = self.cycle
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        self.cycle = cycle = LeanCycle.of(self, keep_alive)
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, app)
        else:  # a pipelined request waits for the one before it
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, app))
