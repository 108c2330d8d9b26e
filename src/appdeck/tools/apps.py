"""register_app, list_my_apps, get_app_url, manage_app, set_app_spec."""

from __future__ import annotations

from typing import Any

from appdeck.common.errors import FailedPrecondition
from appdeck.platform.services import Platform
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.tools.shapes import APP_ID, decode_cursor, encode_cursor, hints, obj, ok

JsonObject = dict[str, Any]

APP_OUT: JsonObject = {
    "type": "object",
    "properties": {
        "app_id": {"type": "integer"},
        "name": {"type": "string"},
        "url": {"type": "string"},
        "your_role": {"type": "string"},
        "needs_restart": {"type": "boolean"},
    },
    "required": ["app_id", "name", "url"],
}


def tools(platform: Platform) -> list[ToolDef]:
    apps = platform.apps

    async def register_app(args: JsonObject, ctx: ToolContext) -> JsonObject:
        view = await apps.register(
            ctx.principal, args["name"], args.get("spec"), args.get("description")
        )
        return ok(
            f"Registered app {view.app.name} (id {view.app.id}); it will be served at {view.url} "
            "once deployed. Next: set_app_spec, env_vars, preflight_check, deploy_app.",
            view.detail(),
        )

    async def list_my_apps(args: JsonObject, ctx: ToolContext) -> JsonObject:
        offset = decode_cursor(args.get("cursor"))
        limit = int(args.get("limit", 50))
        views = await apps.list_apps(
            ctx.principal, offset=offset, limit=limit + 1, name_contains=args.get("name_contains")
        )
        page = [v.summary() for v in views[:limit]]
        data: JsonObject = {"apps": page}
        if len(views) > limit:
            data["next_cursor"] = encode_cursor(offset + limit)
        names = ", ".join(a["name"] for a in page) or "none"
        return ok(f"{len(page)} app(s): {names}", data)

    async def get_app_url(args: JsonObject, ctx: ToolContext) -> JsonObject:
        view = await apps.get(ctx.principal, args["app_id"])
        data = {"app_id": view.app.id, "name": view.app.name, "url": view.url}
        return ok(f"{view.app.name} is served at {view.url}", data)

    async def manage_app(args: JsonObject, ctx: ToolContext) -> JsonObject:
        action = args["action"]
        app_id = args["app_id"]
        if action == "get":
            view = await apps.get(ctx.principal, app_id)
            data = view.detail()
            data["members"] = await apps.members(ctx.principal, app_id)
            return ok(f"App {view.app.name} (id {app_id})", data)
        if action == "update":
            view = await apps.update(
                ctx.principal, app_id, name=args.get("name"), description=args.get("description")
            )
            return ok(f"Updated app {view.app.name}", view.detail())
        if action == "delete":
            confirmed = bool(args.get("confirm")) or await _confirm_delete(ctx, app_id)
            app = await apps.delete(ctx.principal, app_id, confirmed=confirmed)
            return ok(f"Deleted app {app.name} (id {app.id})", {"app_id": app.id, "deleted": True})
        if action == "members":
            members = await apps.members(ctx.principal, app_id)
            return ok(f"{len(members)} member(s)", {"app_id": app_id, "members": members})
        if action == "grant":
            await apps.grant(ctx.principal, app_id, args["user"], args["role"])
            data = {"app_id": app_id, "user": args["user"], "role": args["role"]}
            return ok(f"Granted {args['role']} on app {app_id} to {args['user']}", data)
        removed = await apps.revoke(ctx.principal, app_id, args["user"])
        data = {"app_id": app_id, "user": args["user"], "removed": removed}
        return ok(f"{'Removed' if removed else 'No membership of'} {args['user']}", data)

    async def _confirm_delete(ctx: ToolContext, app_id: int) -> bool:
        session = ctx.session
        if session is None or not session.supports("elicitation"):
            return False
        view = await apps.load(ctx.principal, app_id, "app.delete")
        answer = await ctx.elicit(
            f"Delete app {view.app.name} (id {app_id})? "
            "Its processes stop and its data is removed.",
            {
                "type": "object",
                "properties": {
                    "confirm": {
                        "type": "boolean",
                        "title": f"Yes, delete {view.app.name}",
                        "default": False,
                    }
                },
                "required": ["confirm"],
            },
        )
        content = answer.get("content") or {}
        if answer.get("action") != "accept" or content.get("confirm") is not True:
            raise FailedPrecondition("the deletion was not confirmed", hint="nothing was deleted")
        return True

    async def set_app_spec(args: JsonObject, ctx: ToolContext) -> JsonObject:
        dry_run = bool(args.get("dry_run", False))
        view, changes = await apps.set_spec(
            ctx.principal,
            args["app_id"],
            args["spec"],
            replace=args.get("mode") == "replace",
            dry_run=dry_run,
        )
        data = {
            "app_id": view.app.id,
            "spec": view.app.spec,
            "spec_version": view.app.spec_version,
            "diff": changes,
            "changed": bool(changes),
            "dry_run": dry_run,
        }
        verb = "Would change" if dry_run else "Changed"
        summary = (
            f"{verb} {len(changes)} field(s) of {view.app.name}'s spec" if changes else "No change"
        )
        return ok(summary, data)

    return [
        ToolDef(
            "register_app",
            "Register a new app: a name unique in your tenant (it is served at "
            "<name>--<tenant>.localhost) and optionally its "
            "spec (runtime, source_path, build and run commands, health check, instances, "
            "default strategy, canary settings). You become its owner.",
            obj(
                {
                    "name": {"type": "string", "pattern": "^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$"},
                    "spec": {"type": "object", "description": "optional spec (see set_app_spec)"},
                    "description": {"type": "string", "maxLength": 2000},
                },
                ["name"],
            ),
            register_app,
            title="Register an app",
            output_schema=APP_OUT,
            annotations=hints(read_only=False),
            scope="apps:write",
        ),
        ToolDef(
            "list_my_apps",
            "List the apps you can use, with your role on each and their URLs. Paginated.",
            obj(
                {
                    "cursor": {"type": "string", "description": "next_cursor of the previous page"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50},
                    "name_contains": {"type": "string", "maxLength": 64},
                }
            ),
            list_my_apps,
            title="List my apps",
            output_schema={
                "type": "object",
                "properties": {"apps": {"type": "array"}, "next_cursor": {"type": "string"}},
                "required": ["apps"],
            },
            annotations=hints(read_only=True, idempotent=True),
            scope="apps:read",
        ),
        ToolDef(
            "get_app_url",
            "The URL the app is served at by the ingress router "
            "(http://<name>--<tenant>.localhost:<port>/).",
            obj({"app_id": APP_ID}, ["app_id"]),
            get_app_url,
            title="Get an app's URL",
            output_schema={
                "type": "object",
                "properties": {
                    "app_id": {"type": "integer"},
                    "name": {"type": "string"},
                    "url": {"type": "string"},
                },
                "required": ["app_id", "url"],
            },
            annotations=hints(read_only=True, idempotent=True),
            scope="apps:read",
        ),
        ToolDef(
            "manage_app",
            "Read or change one app. action: get (details, spec, members), update (name, "
            "description), delete (stops it and removes its data; asks you to confirm, or pass "
            "confirm: true), members (list), grant (user + role: owner, admin, developer, "
            "viewer), revoke (user).",
            obj(
                {
                    "app_id": APP_ID,
                    "action": {"enum": ["get", "update", "delete", "members", "grant", "revoke"]},
                    "name": {"type": "string", "description": "update: the new app name"},
                    "description": {"type": "string", "maxLength": 2000},
                    "user": {
                        "type": "string",
                        "description": "grant/revoke: a user name of your tenant",
                    },
                    "role": {"enum": ["owner", "admin", "developer", "viewer"]},
                    "confirm": {
                        "type": "boolean",
                        "description": "delete: confirm without being asked",
                    },
                },
                ["app_id", "action"],
            ),
            manage_app,
            title="Manage an app",
            output_schema={"type": "object", "properties": {"app_id": {"type": "integer"}}},
            annotations=hints(read_only=False, destructive=True),
            scope="apps:read",
            action_scopes={
                "update": "apps:write",
                "delete": "apps:write",
                "grant": "apps:write",
                "revoke": "apps:write",
            },
        ),
        ToolDef(
            "set_app_spec",
            "Change an app's spec. mode merge (default) applies a JSON merge patch (null resets "
            "a field), replace sets the whole spec. Returns the diff; dry_run: true only shows it.",
            obj(
                {
                    "app_id": APP_ID,
                    "spec": {"type": "object", "description": "the patch or the new spec"},
                    "mode": {"enum": ["merge", "replace"], "default": "merge"},
                    "dry_run": {"type": "boolean", "default": False},
                },
                ["app_id", "spec"],
            ),
            set_app_spec,
            title="Set an app's spec",
            output_schema={
                "type": "object",
                "properties": {
                    "app_id": {"type": "integer"},
                    "spec": {"type": "object"},
                    "diff": {"type": "array"},
                    "changed": {"type": "boolean"},
                    "dry_run": {"type": "boolean"},
                },
                "required": ["app_id", "spec", "diff", "changed"],
            },
            annotations=hints(read_only=False, idempotent=True),
            scope="apps:write",
        ),
    ]
