"""A tool's schemas are generated once per process (``appdeck.tools.kit``, issue 26 §3): what
every later start publishes is byte for byte what a fresh generation gives, no caller can
change what the next one gets, and a tool that gains an action gets that action's schemas."""

from __future__ import annotations

import json
from typing import Any, Literal

from appdeck.tools import families, kit
from appdeck.tools.kit import READS, Arguments, Call, Output, Reply, Tool


def _every_tool() -> list[Tool]:
    return [tool for _, tools in families() for tool in tools]


def _published(tool: Tool) -> str:
    """Every schema of ``tool`` as the bytes a client would get (key order kept)."""
    published, validated = tool.input_schemas()
    return json.dumps([published, validated, tool.output_schema()])


def _generated_afresh(tool: Tool) -> str:
    kit._input_schemas.cache_clear()
    kit._output_schema.cache_clear()
    return _published(tool)


def test_every_tools_remembered_schemas_are_byte_identical_to_a_fresh_generation() -> None:
    tools = _every_tool()
    remembered = {tool.name: (_published(tool), _published(tool)) for tool in tools}
    for tool in tools:
        fresh = _generated_afresh(tool)
        assert remembered[tool.name] == (fresh, fresh), tool.name


def test_a_caller_changing_its_schemas_does_not_change_what_the_next_caller_gets() -> None:
    for tool in _every_tool():
        before = _published(tool)
        published, validated = tool.input_schemas()
        output = tool.output_schema()
        for schema in (published, validated, output):
            if schema is not None:
                _scribble(schema)
        assert _published(tool) == before, tool.name


def _scribble(node: Any) -> None:
    """Change ``node`` and everything inside it."""
    if isinstance(node, dict):
        for value in node.values():
            _scribble(value)
        node["changed"] = True
    elif isinstance(node, list):
        for item in node:
            _scribble(item)
        node.append("changed")


class _Look(Arguments):
    """Look at something."""

    action: Literal["look"]
    what: str


class _Touch(Arguments):
    """Touch something."""

    action: Literal["touch"]
    what: str
    how_hard: int


class _Done(Output):
    ok: bool


async def _reply(args: Any, call: Call) -> Reply:
    return Reply("done", _Done(ok=True))


def test_a_tool_that_gains_an_action_publishes_the_schemas_of_its_actions_since() -> None:
    tool = Tool("poke", title="Poke", description="Poke.", scope="apps:read", hints=READS)
    tool.handles(_Look, _Done)(_reply)
    published, validated = tool.input_schemas()
    assert published["properties"]["action"]["enum"] == ["look"]
    assert validated is not None
    assert len(validated["oneOf"]) == 1
    tool.handles(_Touch, _Done)(_reply)
    published, validated = tool.input_schemas()
    assert published["properties"]["action"]["enum"] == ["look", "touch"]
    assert "how_hard" in published["properties"]
    assert validated is not None
    assert len(validated["oneOf"]) == 2
    assert _published(tool) == _generated_afresh(tool)
