"""LeanCycle against uvicorn's own RequestResponseCycle: the same state, the same bytes."""

from __future__ import annotations

import asyncio
import secrets
from types import SimpleNamespace
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from appdeck.transport import cycle as cycle_module
from appdeck.transport.cycle import MEMO_LONGEST, MEMO_SIZE, LeanCycle

DATE = (b"date", b"Sun, 29 Nov 2026 14:00:00 GMT")


class Written:
    """A transport that keeps what is written."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def pair(
    method: str = "POST", *, keep_alive: bool = True, expect_100: bool = False
) -> tuple[RequestResponseCycle, Written, LeanCycle, Written]:
    """uvicorn's cycle and a LeanCycle for the same request, each on its own transport."""
    made: list[Any] = []
    for _ in range(2):
        transport = Written()
        made += [transport, FlowControl(transport)]  # type: ignore[arg-type]
    scope = {"type": "http", "method": method, "headers": []}
    theirs = RequestResponseCycle(
        scope=scope,  # type: ignore[arg-type]
        transport=made[0],
        flow=made[1],
        logger=SimpleNamespace(),  # type: ignore[arg-type]
        access_logger=SimpleNamespace(),  # type: ignore[arg-type]
        access_log=False,
        default_headers=[DATE],
        message_event=asyncio.Event(),
        expect_100_continue=expect_100,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    protocol = SimpleNamespace(
        scope=dict(scope),
        transport=made[2],
        flow=made[3],
        logger=theirs.logger,
        access_logger=theirs.access_logger,
        access_log=False,
        server_state=SimpleNamespace(default_headers=[DATE]),
        on_response_complete=lambda: None,
        expect_100_continue=expect_100,
    )
    ours = LeanCycle.of(protocol, keep_alive)  # type: ignore[arg-type]
    return theirs, made[0], ours, made[2]


STATE = (
    "response_started",
    "response_complete",
    "keep_alive",
    "chunked_encoding",
    "expected_content_length",
    "waiting_for_100_continue",
)


def state(cycle: RequestResponseCycle) -> tuple[Any, ...]:
    return tuple(getattr(cycle, name) for name in STATE)


async def test_a_lean_cycle_has_exactly_the_attributes_of_uvicorns() -> None:
    theirs, _, ours, _ = pair()
    assert set(vars(ours)) == set(vars(theirs))
    assert state(ours) == state(theirs)


HEADS: list[tuple[str, str, int, list[tuple[bytes, bytes]], bool]] = [
    (
        "json",
        "POST",
        200,
        [(b"content-type", b"application/json"), (b"content-length", b"2")],
        True,
    ),
    (
        "mixed case names",
        "POST",
        404,
        [(b"Content-Type", b"text/plain"), (b"Content-Length", b"2")],
        True,
    ),
    ("no length: chunked", "GET", 200, [(b"content-type", b"text/event-stream")], True),
    ("chunked asked", "POST", 200, [(b"transfer-encoding", b"Chunked")], True),
    (
        "connection close",
        "POST",
        200,
        [(b"connection", b"keep-alive, Close"), (b"content-length", b"2")],
        True,
    ),
    ("not kept alive", "POST", 200, [(b"content-length", b"2")], False),
    ("HEAD", "HEAD", 200, [(b"content-type", b"application/json")], True),
    ("204", "DELETE", 204, [], True),
    ("304", "GET", 304, [(b"etag", b'"x"')], True),
    (
        "bytearray header",
        "POST",
        200,
        [(bytearray(b"X-A"), bytearray(b"b")), (b"content-length", b"2")],
        True,
    ),
]


@pytest.mark.parametrize(
    ("case", "method", "status", "headers", "keep_alive"), HEADS, ids=[h[0] for h in HEADS]
)
async def test_a_response_is_written_and_ends_as_uvicorn_writes_and_ends_it(
    case: str, method: str, status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool
) -> None:
    for _ in range(2):  # the second time through the memo
        theirs, their_bytes, ours, our_bytes = pair(method, keep_alive=keep_alive)
        for cycle in (theirs, ours):
            await cycle.send({"type": "http.response.start", "status": status, "headers": headers})
        assert our_bytes.chunks == their_bytes.chunks
        assert state(ours) == state(theirs)
        body = b"" if status in (204, 304) else b"{}"
        for cycle in (theirs, ours):
            await cycle.send({"type": "http.response.body", "body": body})
        assert our_bytes.chunks == their_bytes.chunks
        assert (our_bytes.closed, state(ours)) == (their_bytes.closed, state(theirs))


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ([(b"bad name", b"x")], "Invalid HTTP header name."),
        ([(b"x-ok", b"line\nbreak")], "Invalid HTTP header value."),
        ([(b"x-ok", b"nul\x00")], "Invalid HTTP header value."),
        ([(bytearray(b"bad:"), b"x")], "Invalid HTTP header name."),
        ([(b"x-ok", bytearray(b"\r"))], "Invalid HTTP header value."),
    ],
)
async def test_a_header_uvicorn_refuses_is_refused_every_time_and_nothing_is_written(
    headers: list[tuple[bytes, bytes]], message: str
) -> None:
    for _ in range(2):  # a refused name or value is never remembered as valid
        theirs, their_bytes, ours, our_bytes = pair()
        for cycle in (theirs, ours):
            with pytest.raises(RuntimeError, match=message):
                await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
        assert our_bytes.chunks == their_bytes.chunks == []


async def test_the_memo_of_valid_headers_stays_bounded() -> None:
    for n in range(MEMO_SIZE * 2 + 5):
        _, _, ours, _ = pair()
        await ours.send(
            {"type": "http.response.start", "status": 200, "headers": [(b"x-%d" % n, b"%d" % n)]}
        )
    assert 0 < len(cycle_module._NAMES) <= MEMO_SIZE
    assert 0 < len(cycle_module._VALUES) <= MEMO_SIZE


async def test_a_long_header_is_checked_every_time_and_never_kept() -> None:
    name, value = b"x-" + b"n" * MEMO_LONGEST, b"v" * (MEMO_LONGEST + 1)
    for _ in range(2):
        theirs, their_bytes, ours, our_bytes = pair()
        for cycle in (theirs, ours):
            await cycle.send(
                {"type": "http.response.start", "status": 200, "headers": [(name, value)]}
            )
        assert our_bytes.chunks == their_bytes.chunks
    assert name not in cycle_module._NAMES
    assert value not in cycle_module._VALUES
    _, _, ours, _ = pair()
    with pytest.raises(RuntimeError, match=r"Invalid HTTP header value\."):
        await ours.send(
            {"type": "http.response.start", "status": 200, "headers": [(name, value + b"\n")]}
        )


async def test_a_body_that_came_before_it_is_asked_for_is_received_as_uvicorn_gives_it() -> None:
    theirs, _, ours, _ = pair()
    for cycle in (theirs, ours):
        cycle.body += b'{"jsonrpc"'
        cycle.more_body = False
        cycle.message_event.set()
    got = [await cycle.receive() for cycle in (theirs, ours)]
    assert got[0] == got[1] == {"type": "http.request", "body": b'{"jsonrpc"', "more_body": False}
    assert ours.message_event.is_set() is theirs.message_event.is_set() is False
    assert ours.body == theirs.body == bytearray()


async def test_a_client_expecting_100_continue_is_told_to_go_on_before_its_body_is_read() -> None:
    theirs, their_bytes, ours, our_bytes = pair(expect_100=True)
    for cycle in (theirs, ours):
        cycle.body += b"{}"
        cycle.more_body = False
        cycle.message_event.set()
        await cycle.receive()
    assert our_bytes.chunks == their_bytes.chunks == [b"HTTP/1.1 100 Continue\r\n\r\n"]


async def test_a_request_whose_response_is_complete_receives_a_disconnect() -> None:
    theirs, _, ours, _ = pair()
    for cycle in (theirs, ours):
        cycle.response_complete = True
        cycle.message_event.set()
    got = [await cycle.receive() for cycle in (theirs, ours)]
    assert got[0] == got[1] == {"type": "http.disconnect"}


BODIES: list[tuple[str, list[tuple[bytes, bool, str | None]]]] = [
    ("in pieces", [(b"ab", True, None), (b"", True, None), (b"cd", False, None)]),
    ("longer than announced", [(b"abcde", False, "longer than Content-Length")]),
    ("shorter than announced", [(b"ab", False, "shorter than Content-Length")]),
    ("a piece too many", [(b"abcd", True, None), (b"e", False, "longer than Content-Length")]),
]


@pytest.mark.parametrize(("case", "pieces"), BODIES, ids=[b[0] for b in BODIES])
async def test_a_body_of_an_announced_length_is_written_and_refused_as_uvicorn_does(
    case: str, pieces: list[tuple[bytes, bool, str | None]]
) -> None:
    theirs, their_bytes, ours, our_bytes = pair()
    head = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]}
    for cycle in (theirs, ours):
        await cycle.send(head)
        for piece, more, error in pieces:
            message = {"type": "http.response.body", "body": piece, "more_body": more}
            if error is None:
                await cycle.send(message)
            else:
                with pytest.raises(RuntimeError, match=error):
                    await cycle.send(message)
    assert our_bytes.chunks == their_bytes.chunks
    assert state(ours) == state(theirs)


async def test_a_message_after_the_response_is_refused_as_uvicorn_refuses_it() -> None:
    theirs, _, ours, _ = pair()
    head = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]}
    for cycle in (theirs, ours):
        await cycle.send(head)
        await cycle.send({"type": "http.response.body", "body": b""})
        with pytest.raises(RuntimeError, match="after response already completed"):
            await cycle.send({"type": "http.response.body", "body": b""})
        with pytest.raises(RuntimeError, match="after response already completed"):
            await cycle.send(head)


@pytest.mark.parametrize("name", [b"Set-Cookie", b"location", b"www-authenticate"])
async def test_a_cookie_a_redirect_or_a_challenge_is_never_kept(name: bytes) -> None:
    value = b"session=" + secrets.token_hex(16).encode()
    theirs, their_bytes, ours, our_bytes = pair()
    for cycle in (theirs, ours):
        await cycle.send({"type": "http.response.start", "status": 302, "headers": [(name, value)]})
    assert our_bytes.chunks == their_bytes.chunks
    assert value not in cycle_module._VALUES
