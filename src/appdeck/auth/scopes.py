"""The OAuth scopes of AppDeck (DESIGN.md §3) and how scope strings are read."""

from __future__ import annotations

from typing import Final

from appdeck.common.errors import InvalidArgument

SCOPES: Final[dict[str, str]] = {
    "apps:read": "See your apps, their specs, env var names, CI config and guidance",
    "apps:write": "Register, change and delete apps; set specs and env vars",
    "deploy:read": "See deployments and read their logs",
    "deploy:write": "Deploy, roll back and restart apps",
    "repos:read": "Fetch and clone your apps' hosted git repositories",
    "repos:write": "Connect git repositories, import apps from them and push to your apps",
    "tables:read": "List, describe, read and search your apps' tables",
    "tables:write": "Create, alter, write and drop your apps' tables",
    "apis:read": "See your apps' API catalog and run GET tests",
    "apis:write": "Manage API keys, discover APIs and run non-GET tests",
}
ALL: Final = frozenset(SCOPES)
READ_ONLY: Final = frozenset(s for s in SCOPES if s.endswith(":read"))


def parse(value: str | None, *, allow_unknown: bool = False) -> frozenset[str]:
    """Split a space-separated scope string. Unknown scopes are an error unless allowed
    (tokens from an external IdP may carry scopes of other resources: they are ignored)."""
    names = frozenset((value or "").split())
    unknown = names - ALL
    if unknown and not allow_unknown:
        raise InvalidArgument(
            f"unknown scope(s): {' '.join(sorted(unknown))}",
            hint=f"known scopes: {' '.join(sorted(ALL))}",
        )
    return names & ALL


def render(scopes: frozenset[str] | set[str]) -> str:
    return " ".join(sorted(scopes))
