"""The log levels of ``notifications/message`` (RFC 5424 severities), lowest first.

A handshake-era session sets its threshold with ``logging/setLevel``; a stateless request
names one in ``_meta`` (``io.modelcontextprotocol/logLevel``), or gets no log at all."""

from __future__ import annotations

from typing import Final

LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
LOG_RANK: Final = {name: rank for rank, name in enumerate(LOG_LEVELS)}


def passes(level: str, threshold: str) -> bool:
    """Whether a message at ``level`` is sent to a client whose threshold is ``threshold``."""
    return LOG_RANK.get(level, 0) >= LOG_RANK.get(threshold, 0)
