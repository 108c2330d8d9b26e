"""What every console page shares: the services it reads and the signed-in viewer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from appdeck.auth.audit import AuditLog
from appdeck.auth.server.signin import Refused
from appdeck.common.identity import Principal
from appdeck.console.live import LiveChanges
from appdeck.console.sessions import ConsoleSessions
from appdeck.platform.services import Platform
from appdeck.storage.audit import AuditStore
from appdeck.storage.identity import IdentityStore, UserRecord


class CheckCredentials(Protocol):
    async def __call__(
        self, *, ip: str | None, tenant: str, username: str, password: str
    ) -> UserRecord | Refused: ...


@dataclass(frozen=True, slots=True)
class Viewer:
    """The signed-in user of one request."""

    session_id: str
    csrf: str
    principal: Principal
    username: str
    tenant_role: str
    """``admin`` or ``member`` (DESIGN.md §3): a tenant admin owns every app."""

    @property
    def admin(self) -> bool:
        return self.tenant_role == "admin"


@dataclass(slots=True)
class Console:
    platform: Platform
    identities: IdentityStore
    sessions: ConsoleSessions
    live: LiveChanges
    audit: AuditLog
    audit_store: AuditStore
    check_credentials: CheckCredentials
    secure: bool
    """Cookies get ``Secure`` (the control plane is served over TLS)."""
    mcp_url: str
