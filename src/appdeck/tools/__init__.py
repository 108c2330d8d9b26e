"""MCP tools: thin adapters over the platform services (validate, call, shape the result)."""

from __future__ import annotations

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry


def register_all(registry: Registry, platform: Platform) -> None:
    from appdeck.tools import apps, deploy, env_vars

    for tool in (*apps.tools(platform), *env_vars.tools(platform), *deploy.tools(platform)):
        registry.add_tool(tool)
