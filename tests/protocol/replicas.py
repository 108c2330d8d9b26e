"""Two (or more) protocol cores sharing one session store and one broadcast: replicas of one
deployment, in one process. The store and the broadcast are whatever the test passes (memory
doubles and LocalBroadcast, or PostgreSQL and RedisBroadcast)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from appdeck.common.identity import Principal
from appdeck.protocol.call import Call
from appdeck.protocol.context import ToolContext
from appdeck.protocol.ports import Broadcast, SessionStore
from appdeck.protocol.registry import Registry, ResourceDef, ToolDef
from appdeck.protocol.server import McpServer
from appdeck.protocol.sessions import Session, SessionManager
from appdeck.protocol.tasks import TaskManager

from .doubles import MemoryTaskStore, RecordingChannel, RecordingOutbox


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "structuredContent": {"text": value}}


class Replica:
    """One replica's protocol core, with an ``ask`` tool (elicits a name), a ``hold`` tool
    (runs until released or cancelled) and a ``stubborn`` one (takes the first cancel for
    its own and goes on)."""

    def __init__(
        self,
        instance_id: str,
        store: SessionStore,
        broadcast: Broadcast,
        *,
        recheck_seconds: float | None = None,
    ) -> None:
        self.instance_id = instance_id
        self.outbox = RecordingOutbox()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.swallowed = asyncio.Event()
        self.dropped: list[str] = []
        registry = Registry()

        async def ask(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            answer = await ctx.elicit("Your name?", {"type": "object", "properties": {}})
            return text(f"hello {answer.get('content', {}).get('name')}")

        async def hold(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            self.entered.set()
            try:
                async with asyncio.timeout(30):
                    await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return text("released")

        async def stubborn(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            task = asyncio.current_task()
            assert task is not None
            self.entered.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                task.uncancel()  # takes the cancel for its own, as a timeout of its own would
            self.swallowed.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return text("released")

        async def read(uri: str, v: dict[str, str], ctx: ToolContext) -> list[dict[str, Any]]:
            return [{"uri": uri, "mimeType": "text/plain", "text": "x"}]

        registry.add_tool(ToolDef("ask", "Elicits a name", {"type": "object"}, ask))
        registry.add_tool(ToolDef("hold", "Runs until released", {"type": "object"}, hold))
        registry.add_tool(ToolDef("stubborn", "Eats one cancel", {"type": "object"}, stubborn))
        for uri in ("test://a", "test://a/b", "test://c"):
            registry.add_resource(ResourceDef(uri, uri, read, mime_type="text/plain"))
        self.sessions = SessionManager(
            store,
            broadcast=broadcast,
            instance_id=instance_id,
            recheck_seconds=recheck_seconds,
        )
        self.tasks = TaskManager(MemoryTaskStore(), self.outbox, instance_id=instance_id)
        self.server = McpServer(
            registry=registry,
            sessions=self.sessions,
            tasks=self.tasks,
            outbox=self.outbox,
            client_request_timeout=10,
            broadcast=broadcast,
            instance_id=instance_id,
        )

        async def on_drop(session: Session) -> None:
            self.dropped.append(session.id)

        self.sessions.on_drop(on_drop)
        self._ids = 0

    async def init(self, principal: Principal, caps: dict[str, Any] | None = None) -> Session:
        call = Call(principal, None)
        reply = await self.request(
            "initialize", {"protocolVersion": "2025-11-25", "capabilities": caps or {}}, call
        )
        assert "result" in reply, reply
        assert call.session is not None
        return call.session

    async def call(self, principal: Principal, session_id: str) -> Call:
        """The call a POST with this session header opens on this replica."""
        return Call(principal, await self.server.session_for(session_id, principal))

    async def request(
        self, method: str, params: dict[str, Any], call: Call, request_id: Any = None
    ) -> dict[str, Any]:
        self._ids += 1
        message = {
            "jsonrpc": "2.0",
            "id": request_id or f"c{self._ids}",
            "method": method,
            "params": params,
        }
        reply, _status, _headers = await self.server.handle_request(message, call)
        return reply or {}

    async def close(self) -> None:
        await self.server.close()
        await self.tasks.shutdown()


async def until(check: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait (bounded: 30 s by default, a loaded machine's margin) until ``check()`` holds."""
    async with asyncio.timeout(seconds):
        while not check():  # noqa: ASYNC110 - a bounded poll of another replica's state
            await asyncio.sleep(0.01)


def elicitations(channel: RecordingChannel) -> list[dict[str, Any]]:
    return [m for m in channel.messages if m.get("method") == "elicitation/create"]
