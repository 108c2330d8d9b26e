"""MCP tools: thin adapters over the platform services, declared with :mod:`appdeck.tools.kit`
(typed arguments and results next to each handler; the schemas are generated from them).
docs/tools-cookbook.md shows how to add a family.

A family is a module of this package with a ``TOOLS`` tuple: :func:`register_all` finds them by
scanning the package (no hand-kept list), in module-name order, and refuses to start when a
tool does not declare the scope it needs (once for the tool, optionally once more per action).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry
from appdeck.tools.kit import Tool


def families() -> Iterator[tuple[str, tuple[Tool, ...]]]:
    """Every module of this package that exposes ``TOOLS``, with its tools, by module name."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        tools = getattr(module, "TOOLS", None)
        if tools is not None:
            yield info.name, tuple(tools)


def check(family: str, tool: object) -> Tool:
    """``tool`` as a :class:`Tool` that declares its scope, its actions' too; ValueError
    naming the family and the tool otherwise."""
    if not isinstance(tool, Tool):
        raise ValueError(f"tools.{family}.TOOLS holds {tool!r}, not a Tool")
    if not isinstance(tool.scope, str) or not tool.scope.strip():
        raise ValueError(f"tool {tool.name} (tools.{family}) declares no scope")
    actions = tool.action_scopes()
    if not actions:
        raise ValueError(f"tool {tool.name} (tools.{family}) has no handler")
    for action, scope in actions.items():
        if scope is not None and not scope.strip():
            raise ValueError(f"tool {tool.name} action {action} declares an empty scope")
    return tool


def register_all(registry: Registry, platform: Platform) -> None:
    """Every built-in tool, bound to ``platform``. Their schemas come from their code alone
    (not from settings or the platform): ``tests/tools/test_schemas.py`` checks each against
    the meta-schema, so the registry does not check them again at every start."""
    for family, tools in families():
        for tool in tools:
            registry.add_tool(check(family, tool).definition(platform), schemas_checked=True)
