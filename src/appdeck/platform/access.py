"""Per-app roles and what each action needs (DESIGN.md §3).

    owner > admin > developer > viewer

Whoever registers an app owns it; a tenant admin is an owner of every app in the tenant.
Deploying needs developer; deleting an app, dropping a table, revealing secrets, OAuth clients,
API keys, membership changes and giving CI runs and builds the app's secrets (``ci.secrets``)
need admin. Whoever may run code with an app's env can read the secrets in it: a developer
deploys (the app's own code gets every secret), so masking in outputs is a courtesy, not a
boundary. A caller with no role on an app does not learn
that it exists: :class:`NotFound`, exactly as for another tenant's app.

Platform services call :func:`require` before they act; tool adapters never check roles.
"""

from __future__ import annotations

from typing import Final

from appdeck.common.errors import NotFound, PermissionDenied

ROLES: Final = ("viewer", "developer", "admin", "owner")
RANK: Final = {role: rank for rank, role in enumerate(ROLES)}

NEEDS: Final[dict[str, str]] = {
    "app.read": "viewer",
    "app.update": "developer",
    "app.delete": "admin",
    "spec.read": "viewer",
    "spec.write": "developer",
    "env.list": "viewer",
    "env.write": "developer",
    "env.reveal": "admin",
    "members.list": "viewer",
    "members.manage": "admin",
    "deploy.read": "viewer",
    "deploy.write": "developer",
    "table.read": "viewer",
    "table.write": "developer",
    "table.drop": "admin",
    "api.read": "viewer",
    "api.test": "developer",
    "api.keys": "admin",
    "oauth_clients": "admin",
    "repo.connect": "developer",
    "ci.manage": "developer",
    "ci.secrets": "admin",
}


def effective_role(tenant_role: str | None, member_role: str | None) -> str | None:
    """The caller's role on one app: tenant admins own every app of their tenant."""
    if tenant_role == "admin":
        return "owner"
    return member_role if member_role in RANK else None


def allows(role: str | None, action: str) -> bool:
    needed = NEEDS[action]
    return role is not None and RANK[role] >= RANK[needed]


def require(action: str, role: str | None, *, app_ref: str) -> None:
    """Raise unless ``role`` may do ``action`` on the app named by ``app_ref``."""
    if action not in NEEDS:
        raise KeyError(f"unknown action {action!r}")
    if role is None:
        raise NotFound(f"no app {app_ref}", hint="list_my_apps shows the apps you can use")
    if not allows(role, action):
        raise PermissionDenied(
            f"your role on app {app_ref} is {role}; {action} needs {NEEDS[action]} or higher",
            hint="ask an owner or admin of the app to grant you a higher role",
        )


def can_manage(manager: str | None, member: str | None) -> bool:
    """Whether ``manager`` may change or remove a member whose role is ``member``: nobody
    touches a role at or above their own, except owners, who manage owners too."""
    if manager is None:
        return False
    if member is None or manager == "owner":
        return True
    return member in RANK and RANK[member] < RANK[manager]


def can_grant(granter: str | None, role: str) -> bool:
    """Admins grant up to admin; only owners make owners."""
    if granter is None or role not in RANK:
        return False
    if role == "owner":
        return granter == "owner"
    return RANK[granter] >= RANK["admin"]
