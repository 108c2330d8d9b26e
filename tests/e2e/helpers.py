"""Drivers for the end-to-end tests: the official ``mcp`` client and raw HTTP on /mcp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client

from tests.support.appdeck_process import AppDeckProcess
from tests.support.mcp import Event, headers, parse_sse, request

HELLO = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "hello"
"""The small app the e2e tests deploy."""


def hello_source(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the hello app under ``tmp_path/src`` and the env that makes that directory
    the server's source root: (the app's directory, the env)."""
    root = tmp_path / "src"
    shutil.copytree(HELLO, root / "hello")
    return root / "hello", {"APPDECK_SOURCE_ROOTS": json.dumps([str(root)])}


PROTOCOL = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})

N = TypeVar("N")


# -- the official client ----------------------------------------------------------------------


class Inbox:
    """A ``message_handler`` that keeps what the client hands it: server notifications (from
    any stream) and transport exceptions."""

    def __init__(self) -> None:
        self.notifications: list[types.ServerNotification] = []
        self.errors: list[Exception] = []

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self.errors.append(message)
        else:
            self.notifications.append(message)

    def of(self, kind: type[N]) -> list[N]:
        return [n for n in self.notifications if isinstance(n, kind)]


@contextlib.asynccontextmanager
async def official_client(
    server: AppDeckProcess, inbox: Inbox | None = None, sent: list[httpx2.Request] | None = None
) -> AsyncIterator[Client]:
    """``mcp.Client`` over Streamable HTTP to ``server`` (with its token, if it has one),
    2025-11-25 handshake (``mode="legacy"``). Every HTTP request the client makes is appended
    to ``sent`` when given."""

    async def record(req: httpx2.Request) -> None:
        if sent is not None:
            sent.append(req)

    http = httpx2.AsyncClient(
        headers=server.auth_headers,
        timeout=httpx2.Timeout(10, read=60),
        event_hooks={"request": [record]},
    )
    async with http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode="legacy", message_handler=inbox) as client:
            yield client


async def call_tool_as_task(
    client: Client, name: str, arguments: dict[str, Any], ttl: int = 60_000
) -> types.CreateTaskResult:
    """A task-augmented tools/call. The SDK validates every tools/call result as a
    CallToolResult, so this goes through the session's dispatcher (private in mcp 2.3.0)."""
    raw = await client.session._dispatcher.send_raw_request(
        "tools/call",
        {"name": name, "arguments": arguments, "task": {"ttl": ttl}},
        {"headers": {"mcp-protocol-version": client.protocol_version}, "timeout": 10},
    )
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    return await client.session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
        types.GetTaskResult,
        request_read_timeout_seconds=10,
    )


async def task_result(
    client: Client, task_id: str, read_timeout: float = 10
) -> types.CallToolResult:
    return await client.session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
        types.CallToolResult,
        request_read_timeout_seconds=read_timeout,
    )


async def list_tasks(client: Client) -> types.ListTasksResult:
    return await client.session.send_request(
        types.ListTasksRequest(), types.ListTasksResult, request_read_timeout_seconds=10
    )


def through_ingress(app_url: str) -> dict[str, Any]:
    """GET arguments for the app at ``app_url`` (``http://<app>--<tenant>.localhost:<port>/``),
    sent to the ingress on 127.0.0.1 with the app's hostname as ``Host``."""
    parts = urlsplit(app_url)
    return {"url": f"http://127.0.0.1:{parts.port}/", "headers": {"host": parts.netloc}}


# -- raw HTTP ---------------------------------------------------------------------------------


def raw_http(server: AppDeckProcess) -> httpx.AsyncClient:
    """An httpx client for ``server``'s origin; sends its token (if any) on every request."""
    # a bound only (each test has its own overall one): 10 s ran out at load 14 (issue 20)
    return httpx.AsyncClient(base_url=server.origin, headers=server.auth_headers, timeout=60)


def sse_headers(session_id: str, last_event_id: str | None = None) -> dict[str, str]:
    """Headers of a GET on /mcp for ``session_id`` (optionally resuming after an event)."""
    out = headers(session_id)
    out["accept"] = "text/event-stream"
    out.pop("content-type")
    if last_event_id is not None:
        out["last-event-id"] = last_event_id
    return out


async def rpc(http: httpx.AsyncClient, session_id: str, method: str, params: Any, id: int) -> Any:
    """POST one request and return its JSON-RPC response object (JSON or single-event SSE)."""
    r = await http.post("/mcp", json=request(method, params, id), headers=headers(session_id))
    assert r.status_code == 200, (r.status_code, r.text)
    if r.headers["content-type"].startswith("text/event-stream"):
        replies = [e.json() for e in parse_sse(r.text) if e.data and "id" in e.json()]
        assert len(replies) == 1, r.text
        return replies[0]
    return r.json()


@contextlib.asynccontextmanager
async def open_get(
    http: httpx.AsyncClient, request_headers: dict[str, str], conflict_grace: float = 3.0
) -> AsyncIterator[httpx.Response]:
    """A GET on /mcp, kept open inside the block.

    The server learns that an earlier GET of the same session went away asynchronously (it
    watches for ``http.disconnect``), so a reconnect sent right after a disconnect may still
    get 409 for a moment: retried for at most ``conflict_grace`` seconds. Any other status is
    handed to the caller as is.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + conflict_grace
    while True:
        async with http.stream("GET", "/mcp", headers=request_headers) as response:
            if response.status_code != 409 or loop.time() >= deadline:
                yield response
                return
            await response.aread()
        await asyncio.sleep(0.05)


async def read_events(
    response: httpx.Response,
    *,
    within: float,
    until: Callable[[list[Event]], bool] | None = None,
    settle: float = 0.0,
) -> list[Event]:
    """Events (keepalive comments excluded) from an open SSE response.

    Reads until ``until(events)`` holds, then ``settle`` seconds more (to catch a duplicate
    or a stray event), and never longer than ``within`` seconds in all. Without ``until`` it
    simply reads for ``within`` seconds. A response is read by one call only.
    """
    loop = asyncio.get_running_loop()
    events: list[Event] = []
    buffer = ""
    done = False

    def reached(scope: asyncio.Timeout) -> bool:
        """True when reading should stop now."""
        nonlocal done
        if done or until is None or not until(events):
            return False
        done = True
        if settle <= 0:
            return True
        when = scope.when()
        scope.reschedule(loop.time() + settle if when is None else min(when, loop.time() + settle))
        return False

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within) as scope:
            if reached(scope):
                return events
            async for chunk in response.aiter_text():
                buffer += chunk.replace("\r\n", "\n")
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    events.extend(parse_sse(block + "\n\n"))
                if reached(scope):
                    return events
    return events
