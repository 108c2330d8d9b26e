"""test_api (issue 12). (Skeleton.)"""

from __future__ import annotations

from appdeck.tools.kit import Tool

TOOLS: tuple[Tool, ...] = ()
