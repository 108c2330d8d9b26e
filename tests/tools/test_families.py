"""Tools are found by scanning the package (``appdeck.tools.register_all``): every module with
``TOOLS`` is registered, and a tool that declares no scope stops the start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import Field

import appdeck.tools
from appdeck.protocol.instructions import INSTRUCTIONS
from appdeck.protocol.registry import Registry
from appdeck.tools import check, families, register_all
from appdeck.tools.kit import READS, Arguments, Call, Output, Reply, Tool


def test_every_module_with_tools_is_registered_without_a_hand_kept_list() -> None:
    package = Path(appdeck.tools.__file__).parent
    declaring = sorted(
        p.stem for p in package.glob("*.py") if re.search(r"^TOOLS = ", p.read_text(), re.M)
    )
    found = dict(families())
    assert sorted(found) == declaring
    registry = Registry()
    register_all(registry, None)  # type: ignore[arg-type]  # the schemas need no platform
    assert sorted(registry.tools) == sorted(t.name for ts in found.values() for t in ts)
    assert len(registry.tools) == 26  # the interface's 26 tools, never a 27th


def test_every_registered_tool_declares_a_scope() -> None:
    registry = Registry()
    register_all(registry, None)  # type: ignore[arg-type]
    assert all(t.scope for t in registry.tools.values())


class _Args(Arguments):
    name: str = Field(description="A name.")


class _Out(Output):
    name: str


def _tool(scope: str, action_scope: str | None = None) -> Tool:
    tool = Tool("probe", title="Probe", description="A probe.", scope=scope, hints=READS)

    @tool.handles(_Args, _Out, scope=action_scope)
    async def probe(args: _Args, call: Call) -> Reply:
        return Reply("ok", _Out(name=args.name))

    return tool


def test_a_tool_without_a_scope_is_refused_naming_it_and_its_family() -> None:
    with pytest.raises(ValueError, match=r"tool probe \(tools.fam\) declares no scope"):
        check("fam", _tool(" "))


def test_an_action_with_an_empty_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="declares an empty scope"):
        check("fam", _tool("apps:read", action_scope=""))


def test_a_tool_without_a_handler_is_refused() -> None:
    bare = Tool("bare", title="Bare", description="None.", scope="apps:read", hints=READS)
    with pytest.raises(ValueError, match="has no handler"):
        check("fam", bare)


def test_something_in_tools_that_is_not_a_tool_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tools.fam.TOOLS holds 'x', not a Tool"):
        check("fam", "x")


def test_a_declared_tool_passes_the_check_unchanged() -> None:
    tool = _tool("apps:read", action_scope="apps:write")
    assert check("fam", tool) is tool
    assert tool.action_scopes() == {None: "apps:write"}


def test_every_tool_the_instructions_name_exists() -> None:
    registry = Registry()
    register_all(registry, None)  # type: ignore[arg-type]
    named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", INSTRUCTIONS))
    assert named, "the instructions name tools"
    assert named <= set(registry.tools)
