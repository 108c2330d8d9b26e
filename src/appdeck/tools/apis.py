"""discover_apis, list_apis, get_api_schema (issue 12). (Skeleton.)"""

from __future__ import annotations

from appdeck.tools.kit import Tool

TOOLS: tuple[Tool, ...] = ()
