"""Protocol versions this server speaks, and the negotiation rule of the lifecycle.

Two eras (docs/mcp-2026-07-28.md): the handshake era (``initialize``, sessions; 2025-03-26 to
2025-11-25) and the stateless era of 2026-07-28, where every request carries its version and
the client's capabilities in ``_meta`` and nothing is kept between requests."""

from __future__ import annotations

from typing import Final

LATEST: Final = "2025-11-25"
LEGACY: Final = "2025-03-26"
SUPPORTED: Final = frozenset({LATEST, "2025-06-18", LEGACY})
"""Versions accepted in initialize and in the ``MCP-Protocol-Version`` header."""

MODERN: Final = "2026-07-28"
MODERN_SUPPORTED: Final = frozenset({MODERN})
"""Versions of the stateless era (per-request ``_meta``, ``server/discover``)."""
ALL: Final = (MODERN, LATEST, "2025-06-18", LEGACY)
"""Every version this server speaks, newest first: ``server/discover``'s ``supportedVersions``
and the ``-32022`` error's ``data.supported`` (a dual-era client falls back to the handshake
when it lists one of the handshake versions)."""

DEFAULT_HEADER_VERSION: Final = LEGACY
"""What a request without ``MCP-Protocol-Version`` is assumed to speak (spec: 2025-03-26)."""


def negotiate(requested: object) -> str:
    """Echo a supported requested version, else answer the latest we speak."""
    if isinstance(requested, str) and requested in SUPPORTED:
        return requested
    return LATEST


def allows_batches(version: str) -> bool:
    """JSON-RPC batches exist only in 2025-03-26."""
    return version == LEGACY


def has_priming_event(version: str) -> bool:
    """SSE priming events (and ``retry:``) are sent to 2025-11-25 clients only."""
    return version >= LATEST
