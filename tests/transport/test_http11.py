"""The coalescing transport under uvicorn's protocol: one system call per JSON response."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import uvicorn
from uvicorn.server import ServerState

from appdeck.transport.http11 import CoalescingTransport, HttpLimits, bounded_protocol
from tests.support.wait import until


class FakeTransport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", data))

    def writelines(self, chunks: list[bytes]) -> None:
        self.calls.append(("writelines", list(chunks)))

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.calls.append(("close", None))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", None))
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str, default: Any = None) -> str:
        return f"info:{name}"

    def pause_reading(self) -> None:
        self.calls.append(("pause_reading", None))

    def resume_reading(self) -> None:
        self.calls.append(("resume_reading", None))

    def is_reading(self) -> bool:
        return True


async def test_what_one_loop_step_writes_goes_out_in_one_call() -> None:
    fake = FakeTransport()
    transport = CoalescingTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    transport.write(b"")
    transport.write(b'{"result": {}}')
    assert fake.calls == []
    assert transport.get_write_buffer_size() == 7 + 19 + 14
    await asyncio.sleep(0)
    assert fake.calls == [("writelines", [b"HTTP/1.1 200 OK\r\n\r\n", b'{"result": {}}'])]
    transport.write(b"next")
    await asyncio.sleep(0)
    assert fake.calls[-1] == ("writelines", [b"next"])


async def test_close_sends_what_was_written_first_and_abort_drops_it() -> None:
    loop = asyncio.get_running_loop()
    fake = FakeTransport()
    transport = CoalescingTransport(fake, loop)  # type: ignore[arg-type]
    transport.write(b"last words")
    transport.close()
    assert fake.calls == [("writelines", [b"last words"]), ("close", None)]
    await asyncio.sleep(0)  # the scheduled flush finds nothing left, and a closed transport
    assert len(fake.calls) == 2
    other = FakeTransport()
    aborted = CoalescingTransport(other, loop)  # type: ignore[arg-type]
    aborted.write(b"lost")
    aborted.abort()
    await asyncio.sleep(0)
    assert other.calls == [("abort", None)]


async def test_everything_else_is_the_real_transport() -> None:
    fake = FakeTransport()
    transport = CoalescingTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    assert transport.get_extra_info("socket") == "info:socket"
    assert transport.is_closing() is False
    transport.pause_reading()
    transport.resume_reading()
    assert fake.calls == [("pause_reading", None), ("resume_reading", None)]
    assert transport.is_reading() is True  # the rarer ones: through __getattr__


async def test_json_and_sse_answers_work_through_the_real_server(live: httpx.AsyncClient) -> None:
    headers = {
        "accept": "application/json, text/event-stream",
        "authorization": "Bearer alice-token",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
    }
    r = await live.post("/mcp", json=init, headers=headers)
    assert r.status_code == 200
    headers["mcp-session-id"] = r.headers["mcp-session-id"]
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "chatty", "_meta": {"progressToken": "p"}},
    }
    r = await live.post("/mcp", json=call, headers=headers)
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.count("notifications/progress") == 3
    assert "chatty done" in r.text
    for i in range(3, 23):  # keep-alive: one connection, many responses
        echo = {
            "jsonrpc": "2.0",
            "id": i,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": str(i)}},
        }
        r = await live.post("/mcp", json=echo, headers=headers)
        assert r.json()["result"]["content"][0]["text"] == str(i)


class MemoryTransport(FakeTransport):
    """A socket's transport for the whole protocol: what it writes, whether it was closed."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(name)

    def set_protocol(self, protocol: Any) -> None:
        return None


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"hi"})


async def test_an_idle_keep_alive_connection_is_closed_by_the_sweep_not_a_timer_per_response() -> (
    None
):
    config = uvicorn.Config(
        _hello,
        http=bounded_protocol(HttpLimits()),
        lifespan="off",
        log_config=None,
        access_log=False,
        timeout_keep_alive=5,
    )
    config.load()
    protocol: Any = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}
    )
    fake = MemoryTransport()
    protocol.connection_made(fake)
    loop = asyncio.get_running_loop()
    for _ in range(2):  # the second request, on the same connection, is answered as well
        protocol.data_received(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await until(lambda: protocol._idle_since is not None, within=5)
        assert protocol.timeout_keep_alive_task is None  # no timer armed after the response
        assert fake.calls[-1][0] == "writelines"
        assert fake.calls[-1][1][-1] == b"hi"
    since = protocol._idle_since
    protocol._check(since + 4.9)
    assert not fake.closing  # not idle long enough yet
    protocol.data_received(b"GET / HTTP/1.1\r\n")  # a new request's first bytes: not idle
    assert protocol._idle_since is None
    protocol._check(loop.time() + 6)  # the request's headers are not late yet either
    assert not fake.closing
    protocol.data_received(b"host: x\r\n\r\n")
    await until(lambda: protocol._idle_since is not None, within=5)
    protocol._check(protocol._idle_since + 5.1)
    assert fake.closing
    protocol.connection_lost(None)
