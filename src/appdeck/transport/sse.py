"""Server-sent events on the wire: event ids, the priming event, keepalives."""

from __future__ import annotations

from typing import Final

SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]
KEEPALIVE: Final = b": keepalive\n\n"
MAX_SEQ: Final = 2**63 - 1
GET_STREAM: Final = "g"
"""Name of a session's standalone stream (the GET stream); request streams get random names."""


def event_id(stream: str, seq: int) -> str:
    """Unique per session: stream names are unique per session and ``seq`` is unique."""
    return f"{stream}.{seq}"


def parse_event_id(value: str) -> tuple[str, int] | None:
    stream, dot, seq = value.strip().rpartition(".")
    if not dot or not stream or len(value) > 64 or not (seq.isascii() and seq.isdigit()):
        return None  # "²".isdigit() holds, and int("²") raises: ASCII digits only
    if not stream.isascii() or not all(c.isalnum() or c in "-_" for c in stream):
        return None
    number = int(seq)
    if number > MAX_SEQ:  # the event log's seq is a signed 64-bit column
        return None
    return stream, number


def encode_event(eid: str, payload: bytes) -> bytes:
    return b"event: message\nid: " + eid.encode() + b"\ndata: " + payload + b"\n\n"


def priming(eid: str, retry_ms: int | None) -> bytes:
    """An event with an id and empty data: the client's first resumption point."""
    retry = f"retry: {retry_ms}\n".encode() if retry_ms is not None else b""
    return b"id: " + eid.encode() + b"\n" + retry + b"data: \n\n"


def retry_only(retry_ms: int) -> bytes:
    return f"retry: {retry_ms}\n\n".encode()
