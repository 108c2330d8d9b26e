"""The method table on its own: no MCP, no session, a plain string as the context."""

from __future__ import annotations

from typing import Any

import pytest

from appdeck.protocol.errors import MethodNotFound
from appdeck.protocol.rpc.dispatcher import Dispatcher, DuplicateMethod

JsonObject = dict[str, Any]


async def _echo(message: JsonObject, ctx: str) -> JsonObject:
    return {"method": message["method"], "ctx": ctx}


async def _other(message: JsonObject, ctx: str) -> JsonObject:
    return {"other": True}


async def test_a_registered_method_is_found_and_its_handler_gets_the_message_and_context() -> None:
    rpc: Dispatcher[str] = Dispatcher()
    rpc.register("echo", _echo)
    handler = rpc.lookup("echo")
    assert await handler({"jsonrpc": "2.0", "id": 1, "method": "echo"}, "who") == {
        "method": "echo",
        "ctx": "who",
    }
    assert "echo" in rpc
    assert list(rpc) == ["echo"]
    assert len(rpc) == 1


def test_registering_a_name_twice_is_refused_and_the_first_handler_stays() -> None:
    rpc: Dispatcher[str] = Dispatcher()
    rpc.register("echo", _echo)
    with pytest.raises(DuplicateMethod, match="echo"):
        rpc.register("echo", _other)
    assert rpc.lookup("echo") is _echo


def test_an_unknown_method_is_method_not_found_naming_it() -> None:
    rpc: Dispatcher[str] = Dispatcher()
    rpc.register("echo", _echo)
    with pytest.raises(MethodNotFound, match="Method not found: nope") as raised:
        rpc.lookup("nope")
    assert raised.value.code == -32601
    assert "nope" not in rpc


def test_an_empty_table_knows_no_method() -> None:
    rpc: Dispatcher[str] = Dispatcher()
    assert len(rpc) == 0
    with pytest.raises(MethodNotFound):
        rpc.lookup("ping")


def test_an_unknown_methods_name_is_echoed_cut_short() -> None:
    with pytest.raises(MethodNotFound) as raised:
        Dispatcher[object]().lookup("x" * 10_000)
    assert raised.value.message == "Method not found: " + "x" * 100
