"""Admin commands: tenants, users, tokens, the audit log, signing keys.

Each opens the data directory's database itself (SQLite in WAL mode, or PostgreSQL), so they
work while ``appdeck serve`` runs. Every command has ``--json`` for scripts.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from appdeck.common.errors import AppDeckError

if TYPE_CHECKING:
    from appdeck.auth.keys import SigningKeys

T = TypeVar("T")
DataDir = Annotated[
    Path | None, typer.Option("--data-dir", envvar="APPDECK_DATA_DIR", help="Data directory.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
DEAD_LETTER = "audit-dead-letter.jsonl"
"""Audit rows the database refused, one JSON line each, in the data dir (the server's too)."""

tenant = typer.Typer(help="Tenants.", no_args_is_help=True)
user = typer.Typer(help="Users of a tenant.", no_args_is_help=True)
token = typer.Typer(help="Personal access tokens and OAuth access tokens.", no_args_is_help=True)
audit = typer.Typer(help="The audit log.", no_args_is_help=True)
keys = typer.Typer(help="The embedded authorization server's signing keys.", no_args_is_help=True)
console = Console()


def _settings(data_dir: Path | None) -> Any:
    from appdeck.cli.config import settings_or_exit

    return settings_or_exit(**({"data_dir": data_dir} if data_dir is not None else {}))


async def _signing_keys(settings: Any, storage: Any) -> SigningKeys:
    """The keys the server signs with, so that what the CLI signs verifies there: in replica
    mode (``APPDECK_REDIS_URL`` set) the database's, sealed with ``APPDECK_SECRET_KEY``
    (``SigningKeys.shared``); else the data directory's."""
    from appdeck.auth.keys import SigningKeys
    from appdeck.platform.crypto import Sealer
    from appdeck.storage.signing_keys import SigningKeyStore

    if settings.redis_url:
        sealer = Sealer.from_settings(settings.secret_key, settings.data_dir)
        return await SigningKeys.shared(SigningKeyStore(storage.engine), sealer)
    return SigningKeys.load_or_create(settings.data_dir)


@asynccontextmanager
async def _admin(data_dir: Path | None, *, may_create: bool = False) -> AsyncIterator[Any]:
    from appdeck.auth.admin import IdentityAdmin, QueuedAudit
    from appdeck.auth.tokens import TokenIssuer
    from appdeck.storage import Storage
    from appdeck.storage.identity import IdentityStore
    from appdeck.storage.oauth import OAuthStore
    from appdeck.storage.sessions import SqlSessionStore

    settings = _settings(data_dir)
    storage = await Storage.open(_database(settings, may_create=may_create))
    audit_log = _audit_log(settings)
    try:
        issuer = None
        oauth = None
        if not settings.external_idp:
            base = _server_base_url(settings)
            signing = await _signing_keys(settings, storage)
            issuer = TokenIssuer(signing, base, f"{base}/mcp", settings.access_token_ttl_seconds)
            oauth = OAuthStore(storage.engine)
        yield IdentityAdmin(
            IdentityStore(storage.engine),
            issuer,
            QueuedAudit(audit_log),
            oauth=oauth,
            sessions=SqlSessionStore(storage.engine),
        )
    finally:
        if audit_log.pending:  # what the command recorded (a bounded wait); else no writer
            await audit_log.close()
        await storage.close()


def _audit_log(settings: Any) -> Any:
    """The audit log a command writes to, as the server's does: its own writer, and rows the
    database refuses in the data dir's dead-letter file instead of an error after the fact."""
    from appdeck.auth.audit import AuditLog
    from appdeck.storage.audit import AuditStore

    return AuditLog(
        AuditStore.opener(settings.database()), dead_letter=settings.data_dir / DEAD_LETTER
    )


def _database(settings: Any, *, may_create: bool = False) -> str:
    from appdeck.cli.config import database_or_exit

    return database_or_exit(settings, may_create=may_create)


def _server_base_url(settings: Any) -> str:
    """The running server's base URL (tokens name it as issuer), else the configured one."""
    marker = settings.data_dir / "server.json"
    try:
        return str(json.loads(marker.read_text())["base_url"])
    except (OSError, ValueError, KeyError):
        return str(settings.base_url())


def _run(fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(fn())  # type: ignore[arg-type]
    except AppDeckError as exc:
        console.print(f"[red]error:[/red] {exc.message}" + (f" ({exc.hint})" if exc.hint else ""))
        raise typer.Exit(2) from None


def _emit(as_json: bool, data: dict[str, Any], human: str) -> None:
    if as_json:
        typer.echo(json.dumps(data, default=str))
    else:
        console.print(human, highlight=False)


@tenant.command("create")
def tenant_create(
    tenant_id: Annotated[str, typer.Argument(help="A slug: lower-case letters, digits, dashes.")],
    name: Annotated[str | None, typer.Option(help="Display name.")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Create a tenant."""

    async def go() -> Any:
        async with _admin(data_dir, may_create=True) as admin:
            return await admin.create_tenant(tenant_id, name)

    record = _run(go)
    _emit(as_json, asdict(record), f"created tenant [bold]{record.id}[/bold]")


@user.command("create")
def user_create(
    tenant_id: Annotated[str, typer.Option("--tenant", help="The tenant.")],
    name: Annotated[str, typer.Option("--name", help="The user name.")],
    role: Annotated[str, typer.Option(help="Tenant role: admin or member.")] = "member",
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the login password from stdin.")
    ] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Create a user (with a password for the login page when --password-stdin)."""
    password = sys.stdin.readline().rstrip("\n") if password_stdin else None

    async def go() -> Any:
        async with _admin(data_dir) as admin:
            return await admin.create_user(tenant_id, name, password, role)

    record = _run(go)
    data = {k: v for k, v in asdict(record).items() if k != "password_hash"}
    _emit(as_json, data, f"created user [bold]{record.name}[/bold] ({record.role}) in {tenant_id}")


@token.command("create")
def token_create(
    tenant_id: Annotated[str, typer.Option("--tenant", help="The tenant.")],
    user_name: Annotated[str, typer.Option("--user", help="The user name.")],
    scope: Annotated[
        str, typer.Option(help='Space-separated scopes, e.g. "apps:read deploy:write".')
    ],
    expires_in: Annotated[
        int | None, typer.Option(help="Lifetime in seconds (same as --expires <n>s).")
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            help='Lifetime: "90d", "12h", "30m", "3600s" or "never" (a PAT: default 90d).',
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="A label for a personal access token.")] = "cli",
    oauth: Annotated[
        bool, typer.Option("--oauth", help="A short-lived OAuth access token (JWT) instead.")
    ] = False,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Print a new token: a personal access token (adk_pat_…), or with --oauth a JWT."""
    from appdeck.auth.admin import DEFAULT_PAT_TTL, NEVER

    lifetime = _lifetime(expires) if expires is not None else expires_in
    if oauth and lifetime == NEVER:
        _fail("an OAuth access token always expires")

    async def go() -> dict[str, Any]:
        async with _admin(data_dir) as admin:
            if oauth:
                jwt, claims = await admin.mint_access_token(
                    tenant_id, user_name, scope, expires_in=lifetime or 3600
                )
                return {
                    "token": jwt,
                    "kind": "oauth",
                    "id": claims.jti,
                    "expires_at": claims.expires_at,
                }
            pat, record = await admin.create_pat(
                tenant_id,
                user_name,
                scope,
                expires_in=DEFAULT_PAT_TTL if lifetime is None else lifetime,
                name=name,
            )
            return {"token": pat, "kind": "pat", "id": record.id, "expires_at": record.expires_at}

    data = _run(go)
    if as_json:
        typer.echo(json.dumps(data))
    else:
        typer.echo(data["token"])


@audit.command("tail")
def audit_tail(
    lines: Annotated[int, typer.Option("-n", "--lines", help="How many rows.")] = 50,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new rows.")] = False,
    tenant_id: Annotated[str | None, typer.Option("--tenant", help="Only this tenant.")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Print the newest audit rows (and follow them with -f)."""
    from appdeck.storage import Storage
    from appdeck.storage.audit import AuditStore

    async def go() -> None:
        settings = _settings(data_dir)
        storage = await Storage.open(_database(settings))
        try:
            store = AuditStore(storage.engine)
            rows = await store.tail(lines, tenant_id=tenant_id)
            _print_rows(rows, as_json)
            last = rows[-1]["id"] if rows else 0
            while follow:
                await asyncio.sleep(1.0)
                rows = await store.tail(500, after_id=last, tenant_id=tenant_id)
                if rows:
                    _print_rows(rows, as_json)
                    last = rows[-1]["id"]
        finally:
            await storage.close()

    with suppress(KeyboardInterrupt):
        _run(go)


def _times(row: dict[str, Any]) -> str:
    """`` +N`` for a row that counts N more refusals of its minute (auth.refusals)."""
    count = (row.get("detail") or {}).get("count")
    return f" +{count}" if isinstance(count, int) and count > 0 else ""


def _print_rows(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for row in rows:
            typer.echo(json.dumps(row, default=str))
        return
    table = Table(
        "time", "tenant", "user", "event", "tool/method", "action", "app", "outcome", "ms"
    )
    for r in rows:
        when = datetime.fromtimestamp(r["ts"], UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            when,
            r["tenant_id"] or "-",
            r["user_id"] or "-",
            r["event"],
            r["tool"] or r["method"] or "-",
            r["action"] or "-",
            str(r["app_id"] or "-"),
            f"{r['outcome']}" + (f" {r['status']}" if r["status"] else "") + _times(r),
            f"{r['duration_ms']:.1f}" if r["duration_ms"] is not None else "-",
        )
    console.print(table)


@keys.command("rotate")
def keys_rotate(data_dir: DataDir = None, as_json: AsJson = False) -> None:
    """Make a new signing key (the previous ones keep verifying). A single server: restart it
    after; replicas (``APPDECK_REDIS_URL``): the key goes to the database, where every replica
    reads it (within its next key sweep)."""
    from appdeck.storage import Storage

    async def go() -> str:
        settings = _settings(data_dir)
        storage = await Storage.open(_database(settings))
        try:
            signing = await _signing_keys(settings, storage)
            return str(await signing.rotate_shared() if signing.is_shared else signing.rotate())
        finally:
            await storage.close()

    kid = _run(go)
    _emit(as_json, {"kid": kid, "at": time.time()}, f"new signing key {kid}")


client = typer.Typer(
    help="OAuth clients of the embedded authorization server.", no_args_is_help=True
)


@client.command("create")
def client_create(
    tenant_id: Annotated[str, typer.Option("--tenant", help="The tenant the client acts in.")],
    name: Annotated[str, typer.Option("--name", help="A label for the client.")],
    scope: Annotated[str, typer.Option(help="Space-separated scopes it may obtain.")],
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Create a machine client (client_credentials grant); prints its id and secret once."""
    from appdeck.auth.server import AuthorizationServer
    from appdeck.auth.tokens import TokenIssuer
    from appdeck.storage import Storage
    from appdeck.storage.identity import IdentityStore
    from appdeck.storage.oauth import OAuthStore

    async def go() -> tuple[str, str]:
        settings = _settings(data_dir)
        if settings.external_idp:
            from appdeck.common.errors import FailedPrecondition

            raise FailedPrecondition("an external IdP is configured: create clients there")
        storage = await Storage.open(_database(settings))
        audit_log = _audit_log(settings)
        try:
            base = _server_base_url(settings)
            signing = await _signing_keys(settings, storage)
            issuer = TokenIssuer(signing, base, f"{base}/mcp", settings.access_token_ttl_seconds)
            identities = IdentityStore(storage.engine)

            async def no_revocation(jti: str, expires_at: float) -> None:
                return None

            server = AuthorizationServer(
                base,
                f"{base}/mcp",
                issuer,
                signing,
                identities,
                OAuthStore(storage.engine),
                no_revocation,
                audit_log,
                settings,
            )
            return await server.create_machine_client(tenant_id, name, scope.split())
        finally:
            await audit_log.close()
            await storage.close()

    client_id, secret = _run(go)
    _emit(
        as_json,
        {"client_id": client_id, "client_secret": secret},
        f"client_id: {client_id}\nclient_secret: {secret}\n(the secret is shown only now)",
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _fail(message: str) -> None:
    console.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(2)


def _lifetime(text: str) -> int:
    """``--expires``: "never" (0), or a count of seconds, minutes, hours or days."""
    from appdeck.auth.admin import NEVER

    text = text.strip().lower()
    if text == "never":
        return NEVER
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    if not number.isdigit():
        _fail(f'invalid --expires {text!r}: use e.g. "90d", "12h", "3600s" or "never"')
    return int(number) * _UNITS[unit]
