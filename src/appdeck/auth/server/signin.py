"""The one check of a typed tenant, username and password: the OAuth sign-in page and the
console's sign-in both call it, so both share the throttles (a growing wait per client IP and
per account), the refusal of disabled users, and the activity log line."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal

from appdeck import activity
from appdeck.auth.hashing import verify_password
from appdeck.auth.server.context import ServerContext
from appdeck.storage.identity import UserRecord

Reason = Literal["throttled", "bad_credentials", "disabled", "other_tenant"]


@dataclass(frozen=True, slots=True)
class Refused:
    reason: Reason
    wait_s: int | None = None
    """``throttled``: seconds until the next attempt counts."""
    user: UserRecord | None = None
    """The account the attempt named, when it exists (audit only: never shown)."""


async def check_credentials(
    ctx: ServerContext,
    *,
    ip: str | None,
    tenant: str,
    username: str,
    password: str,
    client: str,
    method: str,
    only_tenant: str | None = None,
) -> UserRecord | Refused:
    """The user whose password was typed, or why not. ``only_tenant``: the only tenant whose
    users may sign in here (an app's own OAuth client). ``client`` names who asked (an OAuth
    client id, or ``console``) in the activity log."""
    account = f"{tenant}\x00{username}"
    wait = ctx.throttles.sign_in_wait(ip, account)
    if wait is not None:
        activity.sign_in(tenant=tenant, user=username, ok=False, client=client, reason="throttled")
        ctx.refuse(
            "sign_in_throttled",
            method=method,
            status=429,
            client_id=client,
            detail={"source": ip},
        )
        return Refused("throttled", wait_s=wait)
    user = await ctx.identities.find_user(tenant, username) if tenant and username else None
    hashed = user.password_hash if user is not None else None
    valid = await asyncio.to_thread(verify_password, hashed, password)
    refused = user is not None and (
        user.disabled or await ctx.identities.refused_access(user.tenant_id, user.id)
    )
    stranger = user is not None and only_tenant not in (None, user.tenant_id)
    if user is None or not valid or refused or stranger:
        ctx.throttles.sign_in_failed(ip, account)
        reason: Reason = (
            "disabled" if refused else "other_tenant" if stranger else "bad_credentials"
        )
        activity.sign_in(tenant=tenant, user=username, ok=False, client=client, reason=reason)
        return Refused(reason, user=user)
    ctx.throttles.sign_in_succeeded(account)
    activity.sign_in(tenant=tenant, user=username, ok=True, client=client)
    return user
