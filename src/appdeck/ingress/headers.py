"""Header rewriting between the client and the upstream, and chunked framing.

Request headers lose the hop-by-hop ones (and those ``Connection`` names) and every
``X-AppDeck-*`` a client sent (those are the ingress's to set), and get the ingress's own
``X-Forwarded-*``; on a route that requires an API key they also lose the headers that carried
the key. Response headers lose the hop-by-hop ones. The request head is built as a list of
byte pieces, four per header: name, ``": "``, value, CRLF.
"""

from __future__ import annotations

from appdeck.common.types import Scope
from appdeck.ingress.keys import KEY_HEADERS, bearer_key

# Request headers the proxy never copies as they are; a few are rebuilt below.
_REQUEST_SKIP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"expect",
        b"content-length",
        b"x-forwarded-for",
        b"x-forwarded-proto",
        b"x-forwarded-host",
        b"forwarded",
    }
)
_RESPONSE_SKIP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_CONNECTION_OPTIONS = frozenset({b"", b"close", b"keep-alive", b"upgrade"})


def _chunk(data: bytes, last: bool) -> bytes:
    """``data`` in chunked transfer coding (and the terminating chunk when ``last``)."""
    out = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
    return out + b"0\r\n\r\n" if last else out


def _ends_cleanly(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a response may be ended early without the client taking it for complete
    data: a server-sent event stream (no Content-Length) is, a download is not."""
    event_stream = False
    for name, value in headers:
        if name == b"content-length":
            return False
        if name == b"content-type" and value.lower().startswith(b"text/event-stream"):
            event_stream = True
    return event_stream


def copy_request_headers(
    headers: list[tuple[bytes, bytes]], pieces: list[bytes]
) -> tuple[bytes, bytes, bytes | None, bool, bytes | None, bytes, bytes, bytes]:
    """Append the client's headers that are forwarded as they are to ``pieces`` (never an
    ``X-AppDeck-*``); return what the proxy needs of the others: ``host, accept,
    content-length, chunked, connection, x-forwarded-for, x-forwarded-proto,
    x-forwarded-host``."""
    host = b""
    accept = b""
    length: bytes | None = None
    chunked = False
    connection: bytes | None = None
    forwarded_for = forwarded_proto = forwarded_host = b""
    for name, value in headers:
        if name in _REQUEST_SKIP:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"connection":
                connection = value
            elif name == b"x-forwarded-for":
                forwarded_for = value
            elif name == b"x-forwarded-proto":
                forwarded_proto = value
            elif name == b"x-forwarded-host":
                forwarded_host = value
            continue
        if name == b"host":
            if host:
                continue  # one Host only
            host = value
        elif name == b"accept":
            accept = value
        elif b"x-appdeck-" <= name < b"x-appdeck.":  # startswith, at a third of its cost
            continue  # the ingress's own (X-AppDeck-Key-Id): never the client's
        pieces += (name, b": ", value, b"\r\n")
    return host, accept, length, chunked, connection, forwarded_for, forwarded_proto, forwarded_host


def drop_connection_listed(pieces: list[bytes], connection: bytes) -> list[bytes]:
    """``pieces`` without the headers the client's ``Connection`` header names."""
    drop = {t.strip().lower() for t in connection.split(b",")} - _CONNECTION_OPTIONS
    if drop:
        kept = pieces[:4]
        for i in range(4, len(pieces), 4):
            if pieces[i] not in drop:
                kept += pieces[i : i + 4]
        pieces = kept
    return pieces


def drop_key_headers(pieces: list[bytes]) -> list[bytes]:
    """``pieces`` (changed in place) without the headers that carried an API key: every
    ``X-API-Key``, and an ``Authorization`` that is ``Bearer adk_key_…`` (another
    Authorization is the app's)."""
    for i in range(len(pieces) - 4, 3, -4):  # each header's name, last first; 0-3: the request line
        name = pieces[i]
        if name in KEY_HEADERS and (name == b"x-api-key" or bearer_key(pieces[i + 2]) is not None):
            del pieces[i : i + 4]
    return pieces


def forwarded_headers(
    scope: Scope,
    host: bytes,
    trust_forwarded: bool,
    forwarded_for: bytes,
    forwarded_proto: bytes,
    forwarded_host: bytes,
) -> tuple[bytes, ...]:
    """The ingress's ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` header pieces."""
    client = scope.get("client")
    address = client[0].encode() if client else b""
    if trust_forwarded:
        if forwarded_for:
            address = forwarded_for + b", " + address
        proto = forwarded_proto or scope["scheme"].encode()
        original_host = forwarded_host or host
    else:
        proto = scope["scheme"].encode()
        original_host = host
    return (
        b"x-forwarded-for: ",
        address,
        b"\r\nx-forwarded-proto: ",
        proto,
        b"\r\nx-forwarded-host: ",
        original_host,
        b"\r\n",
    )


def response_headers(raw: list[tuple[bytes, bytes]], status: int) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers to pass on: lower-cased, hop-by-hop ones dropped."""
    headers: list[tuple[bytes, bytes]] = []
    drop: set[bytes] | None = None
    for name, value in raw:
        lower = name.lower()
        if lower in _RESPONSE_SKIP:
            if lower == b"connection":
                drop = {t.strip().lower() for t in value.split(b",")}
            continue
        headers.append((lower, value))
    if status in (204, 304):  # no body, whatever length the app announced
        drop = (drop or set()) | {b"content-length"}
    if drop:
        headers = [(n, v) for n, v in headers if n not in drop]
    return headers
