"""env_vars: list, get, set, unset, import (.env text). Values are masked unless revealed."""

from __future__ import annotations

from typing import Any

from appdeck.common.errors import InvalidArgument
from appdeck.platform.services import Platform
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import ToolDef
from appdeck.tools.shapes import APP_ID, hints, obj, ok

JsonObject = dict[str, Any]


def tools(platform: Platform) -> list[ToolDef]:
    env = platform.env

    async def env_vars(args: JsonObject, ctx: ToolContext) -> JsonObject:
        action, app_id = args["action"], args["app_id"]
        who = ctx.principal
        if action == "list":
            items = await env.list_vars(who, app_id)
            return ok(f"{len(items)} env var(s)", {"app_id": app_id, "vars": items})
        if action == "get":
            item = await env.get(who, app_id, _name(args), reveal=bool(args.get("reveal")))
            return ok(f"{item['name']} = {item['value']}", {"app_id": app_id, **item})
        if action == "set":
            values = dict(args.get("values") or {})
            if "name" in args:
                if "value" not in args:
                    raise InvalidArgument("set needs value (or values: {NAME: value})")
                values[args["name"]] = args["value"]
            if not values:
                raise InvalidArgument("set needs name + value, or values")
            names = await env.set_vars(who, app_id, values, secret=bool(args.get("secret")))
            data = {"app_id": app_id, "set": names, "needs_restart": True}
            return ok(f"Set {', '.join(names)}; restart or redeploy the app to apply", data)
        if action == "unset":
            names = list(args.get("names") or []) + ([args["name"]] if "name" in args else [])
            if not names:
                raise InvalidArgument("unset needs name or names")
            removed = await env.unset(who, app_id, names)
            return ok(f"Removed {removed} env var(s)", {"app_id": app_id, "removed": removed})
        text = args.get("dotenv")
        if not isinstance(text, str):
            raise InvalidArgument("import needs dotenv: the text of a .env file")
        names = await env.import_dotenv(who, app_id, text, secret=bool(args.get("secret")))
        data = {"app_id": app_id, "set": names, "needs_restart": True}
        return ok(f"Imported {len(names)} env var(s)", data)

    return [
        ToolDef(
            "env_vars",
            "An app's environment variables. action: list (names only), get (a value; secrets "
            "masked unless reveal: true — admins only), set (name + value, or values; secret: "
            "true to mask it), unset (name or names), import (dotenv: .env text). Values are "
            "encrypted at rest; a change takes effect at the next restart or deploy.",
            obj(
                {
                    "app_id": APP_ID,
                    "action": {"enum": ["list", "get", "set", "unset", "import"]},
                    "name": {"type": "string", "maxLength": 128},
                    "value": {"type": "string", "maxLength": 32768},
                    "values": {
                        "type": "object",
                        "maxProperties": 200,
                        "additionalProperties": {"type": "string", "maxLength": 32768},
                    },
                    "names": {"type": "array", "items": {"type": "string"}, "maxItems": 200},
                    "secret": {"type": "boolean"},
                    "reveal": {"type": "boolean"},
                    "dotenv": {"type": "string", "maxLength": 65536},
                },
                ["app_id", "action"],
            ),
            env_vars,
            title="Environment variables",
            output_schema={"type": "object", "properties": {"app_id": {"type": "integer"}}},
            annotations=hints(read_only=False),
            scope="apps:read",
            action_scopes={
                "get": "apps:write",
                "set": "apps:write",
                "unset": "apps:write",
                "import": "apps:write",
            },
        ),
    ]


def _name(args: JsonObject) -> str:
    name = args.get("name")
    if not isinstance(name, str):
        raise InvalidArgument("this action needs name")
    return name
