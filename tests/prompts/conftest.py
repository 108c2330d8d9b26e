"""Prompts through /mcp on a real platform (the tools' ``world``, on one composition root per
module and dialect: tests/tools/root.py), and a check that every tool call a prompt writes
names a listed tool with arguments its schema accepts."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from tests.support.prompt_calls import calls
from tests.tools.conftest import (
    SHARED_ROOT,
    Caller,
    World,
    _close_app_databases,
    _root,
    shared_world,
)

__all__ = ["SHARED_ROOT", "World", "_close_app_databases", "_root", "shared_world"]

world = shared_world  # one composition root per dialect for each module (each says SHARED_ROOT)


async def with_shop(world: World, user: str = "bob") -> tuple[Caller, str]:
    """``user`` of tenant acme and the id (as a prompt argument) of the app shop they made."""
    caller = await world.caller(user)
    return caller, str((await caller.ok("register_app", name="shop"))["app_id"])


async def prompt(caller: Caller, prompt_name: str, /, **arguments: str) -> str:
    reply = await caller.rpc("prompts/get", {"name": prompt_name, "arguments": arguments})
    assert "result" in reply, reply
    [message] = reply["result"]["messages"]
    assert message["role"] == "user"
    return str(message["content"]["text"])


async def refused(caller: Caller, prompt_name: str, /, **arguments: str) -> dict[str, Any]:
    """The JSON-RPC error of a prompts/get the server must refuse."""
    reply = await caller.rpc("prompts/get", {"name": prompt_name, "arguments": arguments})
    assert "error" in reply, reply
    assert reply["error"]["code"] == -32602, reply
    return dict(reply["error"])


async def real_calls(caller: Caller, text: str) -> list[str]:
    """The tools ``text`` calls, after checking each is listed and accepts its arguments."""
    listed = (await caller.rpc("tools/list"))["result"]["tools"]
    tools = {t["name"]: t["inputSchema"] for t in listed}
    made = calls(text)
    for name, arguments in made:
        assert name in tools, (name, sorted(tools))
        schema = tools[name]
        assert set(arguments) <= set(schema["properties"]), (name, arguments)
        Draft202012Validator(schema).validate(arguments)
    return [name for name, _ in made]
