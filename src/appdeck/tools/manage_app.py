"""manage_app: one app's details, changes, deletion and members (AppService)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from appdeck.platform.access import ROLES
from appdeck.tools.kit import AppId, Arguments, Call, Hints, Output, Reply, Tool
from appdeck.tools.results import AppDetail, AppHealth, Member

Role = Literal["owner", "admin", "developer", "viewer"]
assert set(ROLES) == {"owner", "admin", "developer", "viewer"}  # the platform's list

manage_app = Tool(
    "manage_app",
    title="Manage an app",
    description="Read or change one app you know the app_id of (list_my_apps finds it). Each "
    "action needs its own arguments (see action). delete stops the app and removes its data: "
    "it asks you to confirm, or pass confirm: true. Returns the app (get, update), its "
    "members (members), or what changed.",
    scope="apps:read",
    hints=Hints(read_only=False, destructive=True),
)

UserName = Annotated[str, Field(max_length=128, description="A user name of your tenant.")]


class GetApp(Arguments):
    """Details, complete spec, members and health (instances, exits, traffic)."""

    action: Literal["get"]
    app_id: AppId


class AppWithMembers(AppDetail):
    members: list[Member]
    health: AppHealth


@manage_app.handles(GetApp, AppWithMembers)
async def _get(args: GetApp, call: Call) -> Reply:
    apps = call.platform.apps
    view = await apps.get(call.principal, args.app_id)
    members = await apps.members(call.principal, args.app_id)
    health = await call.platform.health.status(call.principal, args.app_id)
    data = AppWithMembers.model_validate(
        {**view.detail(), "members": members, "health": health.public()}
    )
    summary = f"App {view.app.name} (id {args.app_id}): {health.state}"
    if health.live is not None:
        summary += f", {health.up}/{health.desired} instance(s) up"
    return Reply(summary, data)


class UpdateApp(Arguments):
    """Rename the app (its URL changes with it) or change its description."""

    action: Literal["update"]
    app_id: AppId
    name: str | None = Field(default=None, description="The new app name.")
    description: str | None = Field(default=None, max_length=2000, description="A new one.")


@manage_app.handles(UpdateApp, AppDetail, scope="apps:write")
async def _update(args: UpdateApp, call: Call) -> Reply:
    view = await call.platform.apps.update(
        call.principal, args.app_id, name=args.name, description=args.description
    )
    return Reply(f"Updated app {view.app.name}", AppDetail.model_validate(view.detail()))


class DeleteApp(Arguments):
    """Stop the app and remove it with its data (admin or owner); confirmed first."""

    action: Literal["delete"]
    app_id: AppId
    confirm: bool = Field(default=False, description="Confirm without being asked.")


class Deleted(Output):
    app_id: int
    deleted: bool


@manage_app.handles(DeleteApp, Deleted, scope="apps:write")
async def _delete(args: DeleteApp, call: Call) -> Reply:
    async def delete(confirmed: bool) -> str:
        app = await call.platform.apps.delete(call.principal, args.app_id, confirmed=confirmed)
        return app.name

    name = await call.confirming(delete, confirm=args.confirm)
    return Reply(
        f"Deleted app {name} (id {args.app_id})", Deleted(app_id=args.app_id, deleted=True)
    )


class ListMembers(Arguments):
    """Who has which role on the app."""

    action: Literal["members"]
    app_id: AppId


class Members(Output):
    app_id: int
    members: list[Member]


@manage_app.handles(ListMembers, Members)
async def _members(args: ListMembers, call: Call) -> Reply:
    members = await call.platform.apps.members(call.principal, args.app_id)
    data = Members.model_validate({"app_id": args.app_id, "members": members})
    return Reply(f"{len(members)} member(s)", data)


class Grant(Arguments):
    """Give a user of your tenant a role on the app (admin or owner)."""

    action: Literal["grant"]
    app_id: AppId
    user: UserName
    role: Role


class Granted(Output):
    app_id: int
    user: str
    role: str


@manage_app.handles(Grant, Granted, scope="apps:write")
async def _grant(args: Grant, call: Call) -> Reply:
    await call.platform.apps.grant(call.principal, args.app_id, args.user, args.role)
    data = Granted(app_id=args.app_id, user=args.user, role=args.role)
    return Reply(f"Granted {args.role} on app {args.app_id} to {args.user}", data)


class Revoke(Arguments):
    """Remove a user's role on the app (an app keeps at least one owner)."""

    action: Literal["revoke"]
    app_id: AppId
    user: UserName


class Revoked(Output):
    app_id: int
    user: str
    removed: bool


@manage_app.handles(Revoke, Revoked, scope="apps:write")
async def _revoke(args: Revoke, call: Call) -> Reply:
    removed = await call.platform.apps.revoke(call.principal, args.app_id, args.user)
    data = Revoked(app_id=args.app_id, user=args.user, removed=removed)
    return Reply(f"{'Removed' if removed else 'No membership of'} {args.user}", data)


TOOLS = (manage_app,)
