"""Who is calling: the principal a verified token (or the anonymous default) stands for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PrincipalKind = Literal["anonymous", "oauth", "pat", "console"]


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of a request.

    ``tenant`` and ``user`` own sessions and tasks; ``scopes`` decide which tools are listed and
    callable; ``kind`` says how the caller proved itself (resources/* accept OAuth only;
    ``console``: a browser signed in to the console, acting through the platform only).
    ``token_id`` names the verified token (an access token's ``jti``, a PAT's id): what rate
    limits and per-token session caps count by.
    """

    tenant: str
    user: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    kind: PrincipalKind = "anonymous"
    client_id: str | None = None
    token_id: str | None = None

    @property
    def owner(self) -> tuple[str, str]:
        """The (tenant, user) pair that owns sessions and tasks."""
        return (self.tenant, self.user)

    def has_scope(self, scope: str | None) -> bool:
        """True when the principal holds ``scope`` (``None`` means no scope is needed)."""
        return scope is None or self.kind == "anonymous" or scope in self.scopes


ANONYMOUS = Principal(tenant="local", user="anonymous")
"""The principal used while no authenticator is configured (development, tests)."""


def app_audience(app_id: int) -> str:
    """The ``aud`` of access tokens an app's own OAuth clients get (RFC 8707 resource): never
    AppDeck's /mcp resource, so such a token opens nothing of AppDeck's."""
    return f"urn:appdeck:app:{app_id}"
