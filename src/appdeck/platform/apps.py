"""Apps: register, list, read, change, delete; members; specs. Every call names its caller,
and every check of tenant and role happens here (never in the tool adapters)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from appdeck.common.errors import (
    ConfirmationRequired,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from appdeck.common.identity import Principal
from appdeck.model import hostnames, specs
from appdeck.platform import access, quotas
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.sources import SourceRoots
from appdeck.storage.apps import AppRecord, AppStore
from appdeck.storage.identity import IdentityStore, UserRecord

APP_NAME: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")
ROLE_TTL: Final = 30.0

DeleteHook = Callable[[AppRecord], Awaitable[None]]


class SpecDomains(Protocol):
    """The spec's ``domains`` (``platform/domains``): checked and normalized, guarded against
    hostnames another app holds for good, then claimed once the spec is saved."""

    def check(self, names: list[str]) -> list[str]: ...
    async def guard(self, app_id: int | None, names: list[str]) -> None: ...
    async def claim(self, app: AppRecord) -> None: ...


RenameHook = Callable[[AppRecord, AppRecord], None]


@dataclass(frozen=True, slots=True)
class AppView:
    """An app as its caller may see it."""

    app: AppRecord
    role: str
    url: str

    def summary(self) -> dict[str, Any]:
        a = self.app
        return {
            "app_id": a.id,
            "name": a.name,
            "description": a.description,
            "url": self.url,
            "your_role": self.role,
            "runtime": a.spec.get("runtime"),
            "needs_restart": a.needs_restart,
            "stopped": a.stopped,
            "updated_at": a.updated_at,
        }

    def detail(self) -> dict[str, Any]:
        a = self.app
        return {
            **self.summary(),
            "spec": a.spec,
            "spec_version": a.spec_version,
            "created_by": a.created_by,
            "created_at": a.created_at,
        }


class AppService:
    def __init__(
        self,
        store: AppStore,
        identities: IdentityStore,
        feed: ChangeFeed,
        *,
        sources: SourceRoots,
        max_apps: int,
        url_of: Callable[[str, str], str],
        limits: quotas.Limits = quotas.Limits(),  # noqa: B008 - frozen
        clock: Callable[[], float] = time.monotonic,
        domains: SpecDomains | None = None,
        renames: bool = True,
    ) -> None:
        self.store = store
        self._identities = identities
        self._feed = feed
        self.sources = sources
        self._max_apps = max_apps
        self.limits = limits
        self._url_of = url_of
        self._clock = clock
        self._domains = domains
        self._renames = renames
        self._roles: dict[tuple[str, str], tuple[str | None, float]] = {}
        self._delete_hooks: list[DeleteHook] = []
        self._rename_hooks: list[RenameHook] = []

    def on_rename(self, hook: RenameHook) -> None:
        """Call ``hook(old, new)`` with the app before and after its name changed (its ingress
        route moves: only its own, the route key carries the tenant)."""
        self._rename_hooks.append(hook)

    def on_delete(self, hook: DeleteHook) -> None:
        """Run ``hook`` before an app's rows go (the runtime stops its processes)."""
        self._delete_hooks.append(hook)

    # -- who may do what ------------------------------------------------------------------

    async def tenant_role(self, principal: Principal) -> str | None:
        key = principal.owner
        cached = self._roles.get(key)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        user = await self._identities.get_user(principal.user)
        role = user.role if user is not None and user.tenant_id == principal.tenant else None
        self._roles[key] = (role, self._clock() + ROLE_TTL)
        return role

    async def role_on(self, principal: Principal, app: AppRecord) -> str | None:
        if app.tenant_id != principal.tenant:  # another tenant's: its members are not read
            return None
        return await self._role(
            principal, app, await self.store.member_role(app.id, principal.user)
        )

    async def _role(self, principal: Principal, app: AppRecord, member: str | None) -> str | None:
        """The caller's role on ``app`` given its membership ``member``: none on another
        tenant's app (the one place this rule is written)."""
        if app.tenant_id != principal.tenant:
            return None
        return access.effective_role(await self.tenant_role(principal), member)

    async def load(self, principal: Principal, app_id: int, action: str) -> AppView:
        """The app, if the caller may do ``action`` on it; another tenant's app is not found.
        One read: the app with the caller's membership (:meth:`role_on`'s rule)."""
        found = await self.store.get_with_role(app_id, principal.user)
        app, member = found if found is not None else (None, None)
        role = await self._role(principal, app, member) if app is not None else None
        access.require(action, role, app_ref=str(app_id))
        assert app is not None
        assert role is not None
        return AppView(app, role, self._url(app))

    def _url(self, app: AppRecord) -> str:
        return self._url_of(app.name, app.tenant_id)

    # -- apps -----------------------------------------------------------------------------

    async def register(
        self,
        principal: Principal,
        name: str,
        spec: dict[str, Any] | None = None,
        description: str | None = None,
    ) -> AppView:
        _check_name(name, principal.tenant)
        _check_description(description)
        complete = self._validate(spec or {})
        self._check_source(principal.tenant, complete.get("source_path"))
        await self._guard_domains(None, complete)
        app = await self.store.create(
            principal.tenant,
            name,
            description,
            complete,
            principal.user,
            max_apps=self._max_apps,  # checked in the insert's transaction, as the quotas
            check=quotas.guard(self.limits, None, complete),
        )
        if self._domains is not None and complete.get("domains"):
            await self._domains.claim(app)
        await self._feed.emit(Change("app.created", app.tenant_id, app.id))
        return AppView(app, "owner", self._url(app))

    async def list_apps(
        self, principal: Principal, *, offset: int, limit: int, name_contains: str | None = None
    ) -> list[AppView]:
        admin = await self.tenant_role(principal) == "admin"
        rows = await self.store.for_tenant(
            principal.tenant,
            member=None if admin else principal.user,
            offset=offset,
            limit=limit,
            name_contains=name_contains,
        )
        return [
            AppView(app, "owner" if admin else (role or "viewer"), self._url(app))
            for app, role in rows
        ]

    async def get(self, principal: Principal, app_id: int) -> AppView:
        return await self.load(principal, app_id, "app.read")

    async def update(
        self,
        principal: Principal,
        app_id: int,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> AppView:
        view = await self.load(principal, app_id, "app.update")
        values: dict[str, Any] = {}
        if name is not None and name != view.app.name:
            if not self._renames:
                raise FailedPrecondition(
                    "an app keeps its name with APPDECK_RUNTIME=kubernetes (its cluster objects "
                    "are named after it)",
                    hint="register a new app under the new name and deploy it there",
                )
            _check_name(name, view.app.tenant_id)
            values["name"] = name
        if description is not None:
            _check_description(description)
            values["description"] = description[:2000]
        if not values:
            return view
        app = await self.store.update(app_id, **values)
        if app.name != view.app.name:
            for hook in self._rename_hooks:
                hook(view.app, app)
        await self._feed.emit(Change("app.updated", app.tenant_id, app.id))
        return AppView(app, view.role, self._url(app))

    async def delete(self, principal: Principal, app_id: int, *, confirmed: bool) -> AppRecord:
        view = await self.load(principal, app_id, "app.delete")
        if not confirmed:
            raise ConfirmationRequired(
                f"deleting app {view.app.name} stops it and removes its data",
                question=f"Delete app {view.app.name} (id {app_id})? "
                "Its processes stop and its data is removed.",
                what="the deletion",
                hint="call again with confirm: true to go ahead",
            )
        for hook in self._delete_hooks:
            await hook(view.app)
        await self.store.delete(app_id)
        await self._feed.emit(Change("app.deleted", view.app.tenant_id, app_id))
        return view.app

    # -- specs ----------------------------------------------------------------------------

    async def set_spec(
        self,
        principal: Principal,
        app_id: int,
        patch: dict[str, Any],
        *,
        replace: bool = False,
        dry_run: bool = False,
    ) -> tuple[AppView, list[dict[str, Any]]]:
        view = await self.load(principal, app_id, "spec.write")
        before = specs.complete(view.app.spec, disk_mb=self.limits.default_disk_mb)
        defaults = specs.with_disk_default(self.limits.default_disk_mb)
        complete = self._validate(patch if replace else specs.merge(before, patch, defaults))
        self._check_source(view.app.tenant_id, complete.get("source_path"))
        changes = specs.diff(before, complete)
        _check_ci_secrets(view.role, before, complete, app_id)
        check = quotas.guard(self.limits, app_id, complete)
        if dry_run or not changes:
            if dry_run and changes:
                check(await self.store.held(view.app.tenant_id))
            shown = AppRecord(**{**_fields(view.app), "spec": complete}) if dry_run else view.app
            return AppView(shown, view.role, view.url), changes
        await self._guard_domains(app_id, complete)
        app = await self.store.update_spec(view.app, complete, check)  # one transaction
        if self._domains is not None:
            await self._domains.claim(app)
        await self._feed.emit(Change("spec.updated", app.tenant_id, app.id))
        return AppView(app, view.role, view.url), changes

    async def check_release(
        self, app: AppRecord, spec: dict[str, Any], *, replacing: dict[str, Any] | None = None
    ) -> None:
        """A release coming back (a rollback) holds its frozen ``spec`` again: within the
        ceilings and the tenant's quotas, as the tenant holds them now (read, not locked: a
        rollback writes no spec). ``replacing``: the frozen spec of the app's live release,
        which the one coming back replaces. The app holds at least that now, so a ``spec``
        that asks for no more of anything grows nothing the tenant holds: the quotas pass
        whatever its other apps hold (:func:`quotas.check_quota` checks growth only), and
        what they hold is not read."""
        disk = self.limits.default_disk_mb
        complete = specs.complete(spec, disk_mb=disk)
        quotas.check_ceilings(complete, self.limits)
        if replacing is not None and not quotas.grows(
            quotas.usage(complete, disk_default=disk), quotas.usage(replacing, disk_default=disk)
        ):
            return
        quotas.guard(self.limits, app.id, complete)(await self.store.held(app.tenant_id))

    def _validate(self, spec: Any) -> dict[str, Any]:
        """The complete spec, within the operator's ceilings, its domains normalized."""
        complete = specs.validate(spec, disk_mb=self.limits.default_disk_mb)
        quotas.check_ceilings(complete, self.limits)
        if self._domains is not None:
            complete["domains"] = self._domains.check(complete["domains"])
        return complete

    async def _guard_domains(self, app_id: int | None, spec: dict[str, Any]) -> None:
        if self._domains is not None and spec.get("domains"):
            await self._domains.guard(app_id, spec["domains"])

    def _check_source(self, tenant: str, path: object) -> None:
        """A spec's source must be in the tenant's own roots (the rule: platform/sources.py)."""
        if path is not None:
            self.sources.check(tenant, path)

    # -- members --------------------------------------------------------------------------

    async def members(self, principal: Principal, app_id: int) -> list[dict[str, Any]]:
        await self.load(principal, app_id, "members.list")
        out = []
        for m in await self.store.members(app_id):
            user = await self._identities.get_user(m.user_id)
            out.append(
                {
                    "user": user.name if user else m.user_id,
                    "role": m.role,
                    "granted_at": m.granted_at,
                }
            )
        return out

    async def grant(self, principal: Principal, app_id: int, user_name: str, role: str) -> None:
        view = await self.load(principal, app_id, "members.manage")
        if role not in access.ROLES:
            raise InvalidArgument(
                f"unknown role {role!r}", hint="owner, admin, developer or viewer", field="role"
            )
        if not access.can_grant(view.role, role):
            raise PermissionDenied(f"your role ({view.role}) cannot grant {role}")
        user = await self._member(principal, user_name)
        current = await self.store.member_role(app_id, user.id)
        if current == role:
            return
        self._check_manage(view.role, current, principal, user.id, "change")
        await self.store.set_member(app_id, user.id, role, principal.user)  # keeps an owner
        await self._feed.emit(Change("app.updated", view.app.tenant_id, app_id))

    async def revoke(self, principal: Principal, app_id: int, user_name: str) -> bool:
        view = await self.load(principal, app_id, "members.manage")
        user = await self._member(principal, user_name)
        current = await self.store.member_role(app_id, user.id)
        if current is None:
            return False
        self._check_manage(view.role, current, principal, user.id, "remove")
        removed = await self.store.remove_member(app_id, user.id)  # keeps an owner
        if removed:
            tenant = view.app.tenant_id
            if await self.role_on(_as(principal, user.id), view.app) is None:
                # no read access left: the user's subscriptions to the app go (first, so
                # the update below no longer reaches them)
                await self._feed.emit(Change("member.revoked", tenant, app_id, user=user.id))
            await self._feed.emit(Change("app.updated", tenant, app_id))
        return removed

    async def _member(self, principal: Principal, user_name: str) -> UserRecord:
        user = await self._identities.find_user(principal.tenant, user_name)
        if user is None:
            raise NotFound(f"no user {user_name!r} in your tenant", field="user")
        return user

    @staticmethod
    def _check_manage(
        role: str, current: str | None, principal: Principal, user_id: str, verb: str
    ) -> None:
        """Nobody changes or removes a role at or above their own (leaving is allowed)."""
        if user_id == principal.user and verb == "remove":
            return
        if not access.can_manage(role, current):
            raise PermissionDenied(
                f"your role ({role}) cannot {verb} a member whose role is {current}",
                hint="only a member with a higher role (or an owner) can",
            )


def _check_ci_secrets(
    role: str, before: dict[str, Any], after: dict[str, Any], app_id: int
) -> None:
    """Turning ``ci.secrets`` on hands the app's secrets to whoever writes its CI test or
    build command: only an admin or owner of the app may."""
    if after["ci"]["secrets"] and not before["ci"]["secrets"]:
        access.require("ci.secrets", role, app_ref=str(app_id))


def _as(principal: Principal, user_id: str) -> Principal:
    """The same tenant, seen as another user (to ask what role that user has left)."""
    return Principal(principal.tenant, user_id, kind=principal.kind)


def _check_description(description: str | None) -> None:
    """No NUL and no lone surrogate: PostgreSQL text holds neither (it was an internal error)."""
    if description is None:
        return
    if "\x00" in description:
        raise InvalidArgument("description: may not contain NUL (U+0000)", field="description")
    try:
        description.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            "description: not valid Unicode (a lone surrogate)", field="description"
        ) from None


def _check_name(name: object, tenant: str) -> None:
    if not isinstance(name, str) or not APP_NAME.fullmatch(name):
        raise InvalidArgument(
            f"invalid app name {name!r}"[:200],
            hint="lower-case letters, digits and dashes, 1-40 characters, "
            f"starting and ending with a letter or digit (it becomes {hostnames.PATTERN})",
        )
    unroutable = hostnames.unroutable_reason(name, tenant)
    if unroutable is not None:
        limit = min(40, hostnames.max_app_name_length(tenant))
        raise InvalidArgument(
            unroutable,
            hint=f"choose a name of at most {limit} characters"
            if hostnames.routable_tenant(tenant)
            else "ask an operator for a tenant whose id has no '--'",
        )


def _fields(app: AppRecord) -> dict[str, Any]:
    return {f: getattr(app, f) for f in AppRecord.__dataclass_fields__}
