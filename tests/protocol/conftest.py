from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from appdeck.common.errors import NotFound
from appdeck.common.identity import ANONYMOUS, Principal
from appdeck.protocol.call import Call
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import (
    PromptArgument,
    PromptDef,
    Registry,
    ResourceDef,
    ResourceTemplateDef,
    ToolDef,
)
from appdeck.protocol.server import McpServer
from appdeck.protocol.sessions import Session, SessionManager
from appdeck.protocol.tasks import TaskManager

from .doubles import MemorySessionStore, MemoryTaskStore, RecordingChannel, RecordingOutbox

ALICE = Principal(
    tenant="acme", user="alice", scopes=frozenset({"apps:read", "deploy:write"}), kind="oauth"
)
BOB = Principal(tenant="acme", user="bob", scopes=frozenset({"apps:read"}), kind="oauth")


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "structuredContent": {"text": value}}


async def echo(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return text(args["text"])


async def missing(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise NotFound("no app 42", hint="list_my_apps shows your apps")


async def crash(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    raise RuntimeError("secret library detail")


class Gate:
    """Lets a test hold a running tool until it says go (bounded by the test timeout)."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


async def slow(args: dict[str, Any], ctx: ToolContext, gate: Gate) -> dict[str, Any]:
    await ctx.progress(1, 2, "halfway")
    await ctx.log("info", "working")
    gate.entered.set()
    async with asyncio.timeout(5):
        await gate.release.wait()
    await ctx.progress(2, 2, "done")
    return text("slow done")


async def ask(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    answer = await ctx.elicit(
        "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}}
    )
    return text(f"hello {answer.get('content', {}).get('name')}")


class Harness:
    def __init__(self, resource_metadata_url: str | None = None) -> None:
        self.sessions_store = MemorySessionStore()
        self.tasks_store = MemoryTaskStore()
        self.outbox = RecordingOutbox()
        self.registry = Registry()
        self.gate = Gate()
        self.ids = itertools.count(1)
        reg = self.registry
        schema = {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }
        reg.add_tool(ToolDef("echo", "Echo text", schema, echo, task_support="optional"))
        reg.add_tool(ToolDef("missing", "Always not_found", {"type": "object"}, missing))
        reg.add_tool(ToolDef("crash", "Always crashes", {"type": "object"}, crash))
        reg.add_tool(
            ToolDef("deploy", "Needs deploy:write", {"type": "object"}, echo, scope="deploy:write")
        )
        reg.add_tool(
            ToolDef(
                "slow",
                "Waits for the gate",
                {"type": "object"},
                lambda a, c: slow(a, c, self.gate),
                task_support="optional",
            )
        )
        reg.add_tool(
            ToolDef("only_task", "Task only", {"type": "object"}, echo, task_support="required")
        )
        reg.add_tool(
            ToolDef("ask", "Elicits a name", {"type": "object"}, ask, task_support="optional")
        )

        async def read_static(
            uri: str, v: dict[str, str], ctx: ToolContext
        ) -> list[dict[str, Any]]:
            return [{"uri": uri, "mimeType": "text/plain", "text": "static"}]

        async def read_item(uri: str, v: dict[str, str], ctx: ToolContext) -> list[dict[str, Any]]:
            if v["id"] == "0":
                raise NotFound("no item 0")
            return [{"uri": uri, "mimeType": "application/json", "text": f'{{"id": {v["id"]}}}'}]

        reg.add_resource(
            ResourceDef("test://static", "static", read_static, mime_type="text/plain")
        )
        reg.add_template(ResourceTemplateDef("test://items/{id}", "item", read_item))

        async def render(args: dict[str, str], ctx: ToolContext) -> dict[str, Any]:
            return {
                "messages": [
                    {"role": "user", "content": {"type": "text", "text": f"hi {args['who']}"}}
                ]
            }

        reg.add_prompt(PromptDef("greet", render, arguments=[PromptArgument("who", required=True)]))

        async def complete_who(value: str, known: dict[str, str]) -> list[str]:
            return [n for n in ("alice", "albert", "bob") if n.startswith(value)]

        reg.add_completer("ref/prompt", "greet", "who", complete_who)
        self.sessions = SessionManager(self.sessions_store, idle_timeout=60, max_sessions=3)
        self.tasks = TaskManager(self.tasks_store, self.outbox, instance_id="test")
        self.server = McpServer(
            registry=reg,
            sessions=self.sessions,
            tasks=self.tasks,
            outbox=self.outbox,
            client_request_timeout=5,
            resource_metadata_url=resource_metadata_url,
        )

    async def init(
        self, principal: Principal = ALICE, caps: dict[str, Any] | None = None
    ) -> Session:
        call = Call(principal, None)
        reply = await self.request(
            "initialize", {"protocolVersion": "2025-11-25", "capabilities": caps or {}}, call=call
        )
        assert "result" in reply, reply
        assert call.session is not None
        return call.session

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: Session | None = None,
        principal: Principal | None = ALICE,
        call: Call | None = None,
        channel: RecordingChannel | None = None,
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            msg["params"] = params
        call = call or Call(principal, session, channel)
        reply, _status, _headers = await self.server.handle_request(msg, call)
        assert reply is not None
        return reply


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    h = Harness()
    yield h
    await h.tasks.shutdown()


__all__ = ["ALICE", "ANONYMOUS", "BOB", "Harness"]
