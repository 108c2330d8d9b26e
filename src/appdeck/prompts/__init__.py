"""MCP prompts: argument-driven workflows for agents, filled from the platform's state."""

from __future__ import annotations

from appdeck.platform.services import Platform
from appdeck.protocol.registry import Registry


def register_all(registry: Registry, platform: Platform) -> None:
    from appdeck.prompts import ci, data, deploy, ship

    for family in (deploy, ship, ci, data):
        family.register(registry, platform)
