"""Hostile clients against a real ``appdeck serve`` process (issue 9, "Bounded HTTP").

Each case of the issue is driven over loopback through a raw socket and shown refused or
survived: oversized and numerous headers (431; 400 from HAProxy, the data plane), slow headers and stalled bodies (closed),
a large body without a token (401 before it is read), the per-IP connection cap, an overflowing
``Last-Event-ID`` (400, not a crash), an ``app_id`` of 2^63 that used to switch off the audit
log, and the server's memory under 50 hostile connections for 30 s (within +50 MB).

The server runs with short timeouts (``APPDECK_HEADER_TIMEOUT_SECONDS`` and friends) so the
module stays quick; every loop and wait here is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.appdeck_process import AppDeckProcess, reap_haproxy, start_appdeck

pytestmark = pytest.mark.e2e

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
PER_IP = 80
LIMITS = {
    "APPDECK_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
    "APPDECK_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
    "APPDECK_MAX_CONNECTIONS_PER_IP": str(PER_IP),
}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture
async def server(module_tmp: Path, request: pytest.FixtureRequest) -> AsyncIterator[AppDeckProcess]:
    name = request.node.name.replace("[", "_").replace("]", "")
    proc = await start_appdeck(
        module_tmp / name / "data", log_dir=module_tmp / name / "logs", env=LIMITS
    )
    try:
        yield proc
    finally:
        await proc.stop()
        reap_haproxy(module_tmp / name)  # issue 21: the data plane outlives the server


def _hostport(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


def _ingress_port(server: AppDeckProcess) -> int:
    printed = server.stdout_path.read_text()
    line = next(ln for ln in printed.splitlines() if "ingress router at" in ln)
    return int(line.rsplit(":", 1)[1].strip("/ \n"))


async def _open(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(5):
        return await asyncio.open_connection(host, port)


async def _answer(reader: asyncio.StreamReader, within: float) -> bytes:
    """What the server sends until it closes or ``within`` seconds pass."""
    data = b""
    with contextlib.suppress(ConnectionError, TimeoutError):
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                data += chunk
    return data


async def _answer_and_close(reader: asyncio.StreamReader, within: float) -> tuple[bytes, bool]:
    """What the server sends, and whether it closed the connection (end or reset) within
    ``within`` seconds (False: it was still open then)."""
    data = b""
    try:
        async with asyncio.timeout(within):
            while chunk := await reader.read(65536):
                data += chunk
    except ConnectionError:
        return data, True
    except TimeoutError:
        return data, False
    return data, True


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _ports(server: AppDeckProcess) -> list[tuple[str, int]]:
    host, port = _hostport(server.url)
    return [(host, port), (host, _ingress_port(server))]


# -- headers ------------------------------------------------------------------------------------


async def test_oversized_header_is_refused_and_closed_on_both_listeners(
    server: AppDeckProcess,
) -> None:
    """The control plane answers 431. The data plane (HAProxy 2.6) answers 400 to a head
    over its buffer and closes: a client still sending gets the reset, which can drop the 400
    before it is read (docs/data-plane-edge.md); either way the connection is closed."""
    (control_host, control), (ingress_host, ingress) = _ports(server)
    for host, port in ((control_host, control), (ingress_host, ingress)):
        reader, writer = await _open(host, port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(64):  # up to 4 MiB: the server must stop it long before
                writer.write(b"a" * 65536)
                await writer.drain()
        answer, closed = await _answer_and_close(reader, 5)
        writer.close()
        assert closed, port
        if port == control:
            assert answer.startswith(b"HTTP/1.1 431"), (port, answer[:80])
        else:
            assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), (port, answer[:80])


async def test_too_many_headers_is_refused(server: AppDeckProcess) -> None:
    """431 from the control plane; HAProxy (the data plane) answers 400 (its parser has no
    431), above the same ``APPDECK_MAX_HEADERS``."""
    (_, control), _ = _ports(server)
    for host, port in _ports(server):
        reader, writer = await _open(host, port)
        lines = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lines + b"\r\n")
        answer = await _answer(reader, 5)
        writer.close()
        status = b"431" if port == control else b"400"
        assert answer.startswith(b"HTTP/1.1 " + status), (port, answer[:80])


async def test_ordinary_requests_still_pass(server: AppDeckProcess) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        health = await client.get(server.origin + "/healthz", headers={"x-pad": "a" * 8000})
        assert health.status_code == 200
        init = await client.post(server.url, headers=_mcp_headers(server), json=_initialize())
        assert init.status_code == 200


# -- timeouts -----------------------------------------------------------------------------------


async def test_slow_headers_are_cut_off(server: AppDeckProcess) -> None:
    for host, port in _ports(server):
        reader, writer = await _open(host, port)
        started = time.monotonic()
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = b""
        with contextlib.suppress(ConnectionError):
            for _ in range(int(HEADER_TIMEOUT * 4) + 8):  # one header line every 0.5 s
                writer.write(b"X-Slow: 1\r\n")
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        answer = await reader.read(65536)
                if answer:
                    break
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), (port, answer[:80])
        assert time.monotonic() - started < HEADER_TIMEOUT + 4


async def test_silent_connection_is_closed(server: AppDeckProcess) -> None:
    host, port = _hostport(server.url)
    reader, writer = await _open(host, port)
    answer = await _answer(reader, HEADER_TIMEOUT + 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408")


async def test_stalled_body_is_closed(server: AppDeckProcess) -> None:
    host, port = _hostport(server.url)
    reader, writer = await _open(host, port)
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.token}\r\n"
        f"Accept: {ACCEPT}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {4 * 1024 * 1024}\r\n\r\n"
    ).encode()
    writer.write(head + b'{"jsonrpc":"2.0",')
    await writer.drain()
    started = time.monotonic()
    await _answer(reader, BODY_TIMEOUT + 5)  # then nothing more: the server must close
    writer.close()
    assert reader.at_eof()
    assert time.monotonic() - started < BODY_TIMEOUT + 4


async def test_large_body_without_token_is_refused_before_it_is_read(
    server: AppDeckProcess,
) -> None:
    host, port = _hostport(server.url)
    reader, writer = await _open(host, port)
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {ACCEPT}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {4 * 1024 * 1024}\r\n\r\n"
    ).encode()
    writer.write(head)
    await writer.drain()
    answer = await _answer(reader, 1.5)  # no body sent at all, and the 401 comes
    writer.close()
    assert answer.startswith(b"HTTP/1.1 401"), answer[:80]


async def test_per_ip_connection_cap(server: AppDeckProcess) -> None:
    host, port = _hostport(server.url)
    held = [await _open(host, port) for _ in range(PER_IP)]
    try:
        reader, writer = await _open(host, port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        assert not (await _answer(reader, 3)).startswith(b"HTTP/1.1 200")
        writer.close()
    finally:
        for _, w in held:
            w.close()
    await asyncio.sleep(0.3)  # the server counts them closed; a new one is served again
    async with httpx.AsyncClient(timeout=10) as client:
        assert (await client.get(server.origin + "/healthz")).status_code == 200


# -- values that reach storage ----------------------------------------------------------------


def _mcp_headers(server: AppDeckProcess, session: str | None = None) -> dict[str, str]:
    headers = {**server.auth_headers, "accept": ACCEPT, "content-type": "application/json"}
    if session:
        headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    return headers


def _initialize() -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "0"},
        },
    }


async def _session(client: httpx.AsyncClient, server: AppDeckProcess) -> str:
    init = await client.post(server.url, headers=_mcp_headers(server), json=_initialize())
    session = init.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await client.post(server.url, headers=_mcp_headers(server, session), json=note)
    return session


async def test_last_event_id_overflow_is_400(server: AppDeckProcess) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        session = await _session(client, server)
        headers = _mcp_headers(server, session) | {"last-event-id": "g." + "9" * 60}
        reply = await client.get(server.url, headers=headers)
        assert reply.status_code == 400
        assert "OverflowError" not in server.log_tail(200)


async def test_app_id_2_63_does_not_switch_off_the_audit_log(server: AppDeckProcess) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        session = await _session(client, server)
        for name, app_id in (("nope", 2**63), ("nope", -(2**63) - 1), ("x" * 5000, 1)):
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": name, "arguments": {"app_id": app_id}},
            }
            reply = await client.post(server.url, headers=_mcp_headers(server, session), json=call)
            assert reply.status_code == 200
        # a later, ordinary call is still audited
        marker = {
            "jsonrpc": "2.0",
            "id": "after-the-bad-ones",
            "method": "tools/call",
            "params": {"name": "nope-marker", "arguments": {}},
        }
        await client.post(server.url, headers=_mcp_headers(server, session), json=marker)
    rows: list[tuple[object, ...]] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the audit writer flushes every 0.25 s
        with contextlib.closing(sqlite3.connect(server.data_dir / "appdeck.db")) as db:
            rows = db.execute(
                "SELECT tool, app_id, request_id FROM audit_log WHERE event = 'tool_call'"
            ).fetchall()
        if any(r[2] == "after-the-bad-ones" for r in rows):
            break
        await asyncio.sleep(0.2)
    assert any(r[2] == "after-the-bad-ones" for r in rows), rows
    assert ("nope", None) in [(r[0], r[1]) for r in rows]  # 2^63 kept the row, not the value
    assert max(len(str(r[0])) for r in rows) <= 256
    assert "retry" not in server.log_tail(200).lower()
    dead = server.data_dir / "audit-dead-letter.jsonl"
    assert not dead.exists() or orjson.loads(dead.read_bytes().splitlines()[0])


# -- memory -------------------------------------------------------------------------------------


async def test_memory_under_50_hostile_connections_for_30_s(server: AppDeckProcess) -> None:
    """25 connections push endless headers (431, reconnect), 25 trickle them (408, reconnect),
    for 30 s, half on each listener; the server's RSS stays within +50 MB."""
    pid = server.process.pid
    baseline = _rss_kb(pid)
    peak = baseline
    stop = time.monotonic() + 30
    ports = _ports(server)

    async def flood(host: str, port: int) -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError, TimeoutError):
                _reader, writer = await _open(host, port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
                with contextlib.suppress(ConnectionError, TimeoutError):
                    async with asyncio.timeout(max(0.1, stop - time.monotonic())):
                        for _ in range(1024):  # 64 MiB at most, per connection
                            writer.write(b"a" * 65536)
                            await writer.drain()
                writer.close()
            await asyncio.sleep(0.05)

    async def trickle(host: str, port: int) -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError, TimeoutError):
                reader, writer = await _open(host, port)
                writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")
                with contextlib.suppress(ConnectionError):
                    while time.monotonic() < stop and not reader.at_eof():
                        writer.write(b"X-Slow: " + b"b" * 1000 + b"\r\n")
                        await writer.drain()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.2):
                                await reader.read(1024)
                writer.close()
            await asyncio.sleep(0.05)

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < stop:
            peak = max(peak, _rss_kb(pid))
            await asyncio.sleep(0.25)

    clients = [flood(*ports[i % 2]) for i in range(25)] + [
        trickle(*ports[i % 2]) for i in range(25)
    ]
    async with asyncio.timeout(60):
        await asyncio.gather(sample(), *clients)
    grew_mb = (peak - baseline) / 1024
    print(f"server RSS {baseline / 1024:.1f} MB -> peak {peak / 1024:.1f} MB (+{grew_mb:.1f} MB)")
    assert grew_mb < 50
    async with httpx.AsyncClient(timeout=10) as client:  # and it still serves
        assert (await client.get(server.origin + "/healthz")).status_code == 200
