"""What every console page shares: the services it reads and the signed-in viewer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from appdeck.auth.audit import AuditEvent, AuditLog
from appdeck.auth.server.signin import Refused
from appdeck.common.identity import Principal
from appdeck.console.live import LiveChanges
from appdeck.console.sessions import ConsoleSessions
from appdeck.platform.services import Platform
from appdeck.storage.audit import AuditStore
from appdeck.storage.identity import IdentityStore, PersonalTokenRecord, UserRecord
from appdeck.storage.oauth import OAuthStore


class CheckCredentials(Protocol):
    async def __call__(
        self, *, ip: str | None, tenant: str, username: str, password: str
    ) -> UserRecord | Refused: ...


class McpSession(Protocol):
    """What the account page shows of one MCP session (the protocol's ``Session``)."""

    @property
    def id(self) -> str: ...
    @property
    def protocol_version(self) -> str: ...
    @property
    def client_info(self) -> dict[str, Any]: ...
    @property
    def created_at(self) -> float: ...
    @property
    def last_active(self) -> float: ...


class OwnedMcpSessions(Protocol):
    async def __call__(self, tenant: str, user: str) -> Sequence[McpSession]: ...


class EndMcpSession(Protocol):
    async def __call__(self, tenant: str, user: str, session_id: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class AccountPorts:
    """What the account pages reach of auth and the protocol, as bound methods of the server's
    own objects (so a revocation here is the one ``/revoke``, ``appdeck token revoke`` and
    ``DELETE /mcp`` make, other replicas told the same way)."""

    oauth: OAuthStore
    mcp_sessions: OwnedMcpSessions
    """The protocol's session manager: every live MCP session of a user, on any replica."""
    end_mcp_session: EndMcpSession
    """End one as ``DELETE /mcp`` does (its streams close here; other replicas hear it)."""
    revoke_jti: Callable[[str, float], Awaitable[None]]
    """The resource server's: refuse an access token here at once, in the store, elsewhere."""
    forget_pat: Callable[[PersonalTokenRecord], None]
    """The resource server's: drop a revoked PAT from this process's cache, tell the others."""


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
    account: AccountPorts

    def record(
        self,
        event: str,
        outcome: str,
        method: str,
        *,
        by: Principal | None = None,
        **fields: Any,
    ) -> None:
        """One audit row of the console's (``client_id="console"``), by ``by`` when known;
        ``fields``: the other :class:`AuditEvent` fields (never a secret)."""
        self.audit.record(
            AuditEvent(
                event=event,
                outcome=outcome,
                tenant_id=fields.pop("tenant_id", by.tenant if by is not None else None),
                user_id=fields.pop("user_id", by.user if by is not None else None),
                client_id="console",
                method=method[:200],
                **fields,
            )
        )
