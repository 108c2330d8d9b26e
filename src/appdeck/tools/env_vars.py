"""env_vars: an app's environment variables (EnvService). Values are masked unless revealed."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from appdeck.common.errors import InvalidArgument
from appdeck.tools.kit import AppId, Arguments, Call, Hints, Output, Reply, Tool

env_vars = Tool(
    "env_vars",
    title="Environment variables",
    description="Read and change an app's environment variables (each action needs its own "
    "arguments, see action). Values are encrypted at rest and secrets are masked unless an "
    "admin passes reveal: true. A change takes effect at the next restart_app or deploy_app; "
    "preflight_check with required_env checks none is missing.",
    scope="apps:read",
    hints=Hints(read_only=False),
)

VarName = Annotated[str, Field(max_length=128, description="A name: letters, digits and _.")]
Value = Annotated[str, Field(max_length=32768)]
SECRET = Field(default=False, description="Mask the value in every output.")


class ListVars(Arguments):
    """The names (never the values)."""

    action: Literal["list"]
    app_id: AppId


class VarInfo(Output):
    name: str
    secret: bool
    updated_at: float


class VarList(Output):
    app_id: int
    vars: list[VarInfo]


@env_vars.handles(ListVars, VarList)
async def _list(args: ListVars, call: Call) -> Reply:
    items = await call.platform.env.list_vars(call.principal, args.app_id)
    data = VarList.model_validate({"app_id": args.app_id, "vars": items})
    return Reply(f"{len(items)} env var(s)", data)


class GetVar(Arguments):
    """One value; a secret is masked unless reveal: true (admins and owners)."""

    action: Literal["get"]
    app_id: AppId
    name: VarName
    reveal: bool = False


class Var(Output):
    app_id: int
    name: str
    secret: bool
    value: str
    revealed: bool


@env_vars.handles(GetVar, Var, scope="apps:write")
async def _get(args: GetVar, call: Call) -> Reply:
    item = await call.platform.env.get(call.principal, args.app_id, args.name, reveal=args.reveal)
    return Reply(
        f"{item['name']} = {item['value']}", Var.model_validate({"app_id": args.app_id, **item})
    )


class SetVars(Arguments):
    """name + value, or values ({NAME: value}); secret: true masks them."""

    action: Literal["set"]
    app_id: AppId
    name: VarName | None = None
    value: Value | None = None
    values: dict[str, Value] | None = Field(default=None, max_length=200)
    secret: bool = SECRET


class VarsSet(Output):
    app_id: int
    set: list[str]
    needs_restart: bool


@env_vars.handles(SetVars, VarsSet, scope="apps:write")
async def _set(args: SetVars, call: Call) -> Reply:
    values = dict(args.values or {})
    if args.name is not None:
        if args.value is None:
            raise InvalidArgument("set needs value (or values: {NAME: value})", field="value")
        values[args.name] = args.value
    if not values:
        raise InvalidArgument("set needs name + value, or values", field="name")
    names = await call.platform.env.set_vars(
        call.principal, args.app_id, values, secret=args.secret
    )
    data = VarsSet(app_id=args.app_id, set=names, needs_restart=True)
    return Reply(f"Set {', '.join(names)}; restart or redeploy the app to apply", data)


class UnsetVars(Arguments):
    """Remove name, or names."""

    action: Literal["unset"]
    app_id: AppId
    name: VarName | None = None
    names: list[str] | None = Field(default=None, max_length=200)


class VarsRemoved(Output):
    app_id: int
    removed: int


@env_vars.handles(UnsetVars, VarsRemoved, scope="apps:write")
async def _unset(args: UnsetVars, call: Call) -> Reply:
    names = list(args.names or []) + ([args.name] if args.name is not None else [])
    if not names:
        raise InvalidArgument("unset needs name or names", field="name")
    removed = await call.platform.env.unset(call.principal, args.app_id, names)
    return Reply(f"Removed {removed} env var(s)", VarsRemoved(app_id=args.app_id, removed=removed))


class ImportVars(Arguments):
    """Set every KEY=value line of a .env text."""

    action: Literal["import"]
    app_id: AppId
    dotenv: str = Field(max_length=65536, description="The text of a .env file.")
    secret: bool = SECRET


@env_vars.handles(ImportVars, VarsSet, scope="apps:write")
async def _import(args: ImportVars, call: Call) -> Reply:
    names = await call.platform.env.import_dotenv(
        call.principal, args.app_id, args.dotenv, secret=args.secret
    )
    data = VarsSet(app_id=args.app_id, set=names, needs_restart=True)
    return Reply(f"Imported {len(names)} env var(s)", data)


TOOLS = (env_vars,)
