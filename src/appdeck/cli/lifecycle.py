"""The operator's lifecycle commands: list, disable and enable tenants and users, reset a
password, list and revoke tokens and grants, delete clients, list and drop sessions. Each
takes ``--data-dir`` and ``--json``; the rules are :class:`appdeck.auth.admin.IdentityAdmin`'s."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from rich.table import Table

from appdeck.cli.admin import (
    AsJson,
    DataDir,
    _admin,
    _emit,
    _run,
    client,
    console,
    tenant,
    token,
    user,
)

grant = typer.Typer(help="OAuth grants: what users consented to clients.", no_args_is_help=True)
session = typer.Typer(help="MCP sessions.", no_args_is_help=True)
TenantOpt = Annotated[str, typer.Option("--tenant", help="The tenant.")]
UserOpt = Annotated[str, typer.Option("--name", help="The user name.")]


def _when(value: Any) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(float(value), UTC).strftime("%Y-%m-%d %H:%M:%S")


def _list(as_json: bool, rows: list[dict[str, Any]], columns: dict[str, str]) -> None:
    """Rows as JSON (one array) or as a table of ``columns`` (key: heading)."""
    if as_json:
        typer.echo(json.dumps(rows, default=str))
        return
    table = Table(*columns.values())
    for row in rows:
        cells = []
        for key in columns:
            value = row.get(key)
            if key.endswith("_at") or key == "last_active":
                cells.append(_when(value))
            elif isinstance(value, list | tuple):
                cells.append(" ".join(str(v) for v in value))
            else:
                cells.append("-" if value is None else str(value))
        table.add_row(*cells)
    console.print(table)


def _user_data(record: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(record).items() if k != "password_hash"} | {
        "has_password": record.password_hash is not None
    }


@tenant.command("list")
def tenant_list(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """List the tenants."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return [asdict(t) for t in await admin.list_tenants()]

    _list(
        as_json,
        _run(go),
        {"id": "id", "name": "name", "disabled": "disabled", "created_at": "created"},
    )


def _tenant_state(tenant_id: str, disabled: bool, data_dir: Path | None, as_json: bool) -> None:
    async def go() -> Any:
        async with _admin(data_dir) as admin:
            return await admin.set_tenant_disabled(tenant_id, disabled)

    record = _run(go)
    _emit(as_json, asdict(record), f"{'disabled' if disabled else 'enabled'} tenant {record.id}")


@tenant.command("disable")
def tenant_disable(
    tenant_id: Annotated[str, typer.Argument(help="The tenant.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Disable a tenant: every token of its users is refused and nobody of it signs in."""
    _tenant_state(tenant_id, True, data_dir, as_json)


@tenant.command("enable")
def tenant_enable(
    tenant_id: Annotated[str, typer.Argument(help="The tenant.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Enable a disabled tenant again."""
    _tenant_state(tenant_id, False, data_dir, as_json)


@user.command("list")
def user_list(tenant_id: TenantOpt, data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """List a tenant's users."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return [_user_data(u) for u in await admin.list_users(tenant_id)]

    _list(
        as_json,
        _run(go),
        {
            "name": "name",
            "id": "id",
            "role": "role",
            "disabled": "disabled",
            "created_at": "created",
        },
    )


def _user_state(
    tenant_id: str, name: str, disabled: bool, data_dir: Path | None, as_json: bool
) -> None:
    async def go() -> Any:
        async with _admin(data_dir) as admin:
            return await admin.set_user_disabled(tenant_id, name, disabled)

    record = _run(go)
    state = "disabled" if disabled else "enabled"
    _emit(as_json, _user_data(record), f"{state} user {record.name} in {tenant_id}")


@user.command("disable")
def user_disable(
    tenant_id: TenantOpt, name: UserOpt, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """Disable a user: every token of theirs is refused and they cannot sign in."""
    _user_state(tenant_id, name, True, data_dir, as_json)


@user.command("enable")
def user_enable(
    tenant_id: TenantOpt, name: UserOpt, data_dir: DataDir = None, as_json: AsJson = False
) -> None:
    """Enable a disabled user again."""
    _user_state(tenant_id, name, False, data_dir, as_json)


@user.command("set-password")
def user_set_password(
    tenant_id: TenantOpt,
    name: UserOpt,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the new password from stdin.")
    ] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Set (or reset) a user's sign-in password."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)

    async def go() -> Any:
        async with _admin(data_dir) as admin:
            return await admin.set_password(tenant_id, name, password)

    record = _run(go)
    _emit(as_json, _user_data(record), f"set the password of {record.name} in {tenant_id}")


@token.command("list")
def token_list(
    tenant_id: TenantOpt,
    user_name: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """List PATs and the live OAuth access tokens (by jti) of a tenant or one of its users."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return cast(list[dict[str, Any]], await admin.list_tokens(tenant_id, user_name))

    _list(
        as_json,
        _run(go),
        {
            "id": "id",
            "kind": "kind",
            "user_id": "user",
            "name": "name",
            "scopes": "scopes",
            "state": "state",
            "expires_at": "expires",
            "last_used_at": "last used",
        },
    )


@token.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="A PAT's id, or an access token's jti.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Revoke a PAT (by id) or an OAuth access token (by jti)."""

    async def go() -> dict[str, Any]:
        async with _admin(data_dir) as admin:
            return cast(dict[str, Any], await admin.revoke_token(token_id))

    data = _run(go)
    already = " (it already was)" if data.get("already") else ""
    _emit(as_json, data, f"revoked {data['kind']} {data['id']}{already}")


@grant.command("list")
def grant_list(
    tenant_id: TenantOpt,
    user_name: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """List the OAuth grants in use (user, client, scope) of a tenant."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return cast(list[dict[str, Any]], await admin.list_grants(tenant_id, user_name))

    _list(
        as_json,
        _run(go),
        {
            "user_id": "user",
            "client_id": "client",
            "scope": "scope",
            "created_at": "since",
            "expires_at": "expires",
        },
    )


@grant.command("revoke")
def grant_revoke(
    tenant_id: TenantOpt,
    client_id: Annotated[str, typer.Option("--client", help="The OAuth client id.")],
    user_name: Annotated[
        str | None, typer.Option("--user", help="Only this user's grant (default: all).")
    ] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Revoke a client's grant: its refresh tokens and the access tokens issued from them."""

    async def go() -> dict[str, Any]:
        async with _admin(data_dir) as admin:
            return cast(dict[str, Any], await admin.revoke_grant(tenant_id, user_name, client_id))

    data = _run(go)
    _emit(
        as_json,
        data,
        f"revoked the grant of {client_id} ({data['access_tokens_revoked']} access tokens)",
    )


@client.command("list")
def client_list(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """List the OAuth clients (registered, metadata-document and machine clients)."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return cast(list[dict[str, Any]], await admin.list_clients())

    _list(
        as_json,
        _run(go),
        {
            "client_id": "client id",
            "name": "name",
            "kind": "kind",
            "tenant_id": "tenant",
            "scope": "scope",
            "created_at": "created",
        },
    )


@client.command("delete")
def client_delete(
    client_id: Annotated[str, typer.Argument(help="The OAuth client id.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Delete an OAuth client and revoke every grant and token it holds."""

    async def go() -> dict[str, Any]:
        async with _admin(data_dir) as admin:
            return cast(dict[str, Any], await admin.delete_client(client_id))

    data = _run(go)
    _emit(as_json, data, f"deleted client {client_id}")


@session.command("list")
def session_list(
    tenant_id: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's.")] = None,
    user_name: Annotated[
        str | None, typer.Option("--user", help="Only this user's (with --tenant).")
    ] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """List MCP sessions, most recently active first."""

    async def go() -> list[dict[str, Any]]:
        async with _admin(data_dir) as admin:
            return cast(list[dict[str, Any]], await admin.list_sessions(tenant_id, user_name))

    rows = _run(go)
    for row in rows:
        info = row.get("client_info") or {}
        row["client"] = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    _list(
        as_json,
        rows,
        {
            "id": "id",
            "tenant": "tenant",
            "user": "user",
            "client": "client",
            "created_at": "created",
            "last_active": "last active",
        },
    )


@session.command("drop")
def session_drop(
    session_id: Annotated[str, typer.Argument(help="The session id.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Drop a session: its client must initialize again."""

    async def go() -> dict[str, Any]:
        async with _admin(data_dir) as admin:
            return cast(dict[str, Any], await admin.drop_session(session_id))

    data = _run(go)
    _emit(as_json, data, f"dropped session {session_id}")
