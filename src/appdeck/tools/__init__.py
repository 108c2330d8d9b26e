"""MCP tools: thin adapters over the platform services, declared with :mod:`appdeck.tools.kit`
(typed arguments and results next to each handler; the schemas are generated from them).
docs/tools-cookbook.md shows how to add a family."""

from __future__ import annotations

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry


def register_all(registry: Registry, platform: Platform) -> None:
    from appdeck.tools import (
        api_keys,
        apis,
        apps,
        ci,
        deploy,
        env_vars,
        imports,
        logs,
        manage_app,
        oauth_clients,
        preflight,
        records,
        repos,
        tables,
        test_api,
        whats_next,
    )

    families = (
        apps,
        manage_app,
        env_vars,
        deploy,
        preflight,
        logs,
        tables,
        records,
        repos,
        imports,
        ci,
        oauth_clients,
        whats_next,
        apis,
        test_api,
        api_keys,
    )
    for tool in (tool for family in families for tool in family.TOOLS):
        registry.add_tool(tool.definition(platform))
