"""manage_oauth_client: an app's own OAuth clients (AppClientService): create, list, get,
rotate_secret, delete."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from appdeck.common.identity import app_audience
from appdeck.platform.oauth_clients import MAX_REDIRECTS, MAX_SCOPES, AppClient, ClientRow
from appdeck.tools.kit import AppId, Arguments, Call, Hints, Output, Reply, Tool, paginate

manage_oauth_client = Tool(
    "manage_oauth_client",
    title="Manage an app's OAuth clients",
    description="OAuth clients that belong to an app, so its machine clients and its users "
    "get access tokens from this server's authorization server. Machine clients: POST /token "
    "with grant_type=client_credentials and HTTP Basic client_id:client_secret. The app's "
    "users: grant_types [authorization_code, refresh_token] with redirect_uris; the app sends "
    "the browser to /authorize (PKCE S256), where an account of the app's tenant signs in and "
    "consents, then exchanges the code at /token. Tokens are for the app only: aud "
    "urn:appdeck:app:<app_id>, the app's own scopes; they open nothing of AppDeck's. The "
    "app checks them with /.well-known/jwks.json. create (name, scopes; the secret is shown "
    "once), list, get, rotate_secret (the old secret stops at once), delete (asks to "
    "confirm, or confirm: true). Admin or owner of the app.",
    scope="apps:read",
    hints=Hints(read_only=False, destructive=True),
)

ClientId = Annotated[str, Field(min_length=1, max_length=200, description="From create/list.")]
ScopeName = Annotated[str, Field(min_length=1, max_length=64)]


class Create(Arguments):
    """A new client of the app; its secret is in the result, only this once."""

    action: Literal["create"]
    app_id: AppId
    name: str = Field(min_length=1, max_length=100)
    scopes: list[ScopeName] = Field(
        min_length=1,
        max_length=MAX_SCOPES,
        description="The app's own scopes (e.g. orders:read), never AppDeck's.",
    )
    grant_types: (
        list[Literal["client_credentials", "authorization_code", "refresh_token"]] | None
    ) = Field(
        default=None,
        max_length=3,
        description="Default [client_credentials]. For the app's users signing in: "
        "[authorization_code] or [authorization_code, refresh_token], with redirect_uris.",
    )
    redirect_uris: list[Annotated[str, Field(max_length=2048)]] | None = Field(
        default=None,
        max_length=MAX_REDIRECTS,
        description="Where /authorize sends the code (authorization_code only): https, or "
        "http on a loopback host; matched exactly.",
    )


class ListClients(Arguments):
    """The app's clients (never their secrets). Paginated."""

    action: Literal["list"]
    app_id: AppId
    cursor: str | None = Field(default=None, description="next_cursor of the previous page")
    limit: int = Field(default=20, ge=1, le=100)


class GetClient(Arguments):
    action: Literal["get"]
    app_id: AppId
    client_id: ClientId


class Rotate(Arguments):
    """A new secret (shown once); the old one stops working at once."""

    action: Literal["rotate_secret"]
    app_id: AppId
    client_id: ClientId


class Delete(Arguments):
    """Delete the client: its secret stops working (tokens already issued live to expiry)."""

    action: Literal["delete"]
    app_id: AppId
    client_id: ClientId
    confirm: bool = Field(default=False, description="Confirm without being asked.")


class Client(Output):
    client_id: str
    name: str | None
    scopes: list[str]
    grant_types: list[str]
    redirect_uris: list[str]
    audience: str = Field(description="The aud of this client's access tokens.")
    created_at: float


class ClientResult(Output):
    app_id: int
    client: Client
    client_secret: str | None = Field(
        default=None, description="Only from create and rotate_secret: shown once."
    )


class Clients(Output):
    app_id: int
    clients: list[Client]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


class Deleted(Output):
    app_id: int
    client_id: str
    deleted: bool


def _client(row: ClientRow) -> Client:
    assert row.app_id is not None
    return Client(
        client_id=row.client_id,
        name=row.name,
        scopes=(row.scope or "").split(),
        grant_types=list(row.grant_types),
        redirect_uris=list(row.redirect_uris),
        audience=app_audience(row.app_id),
        created_at=row.created_at,
    )


def _with_secret(app_id: int, made: AppClient) -> ClientResult:
    return ClientResult(app_id=app_id, client=_client(made.client), client_secret=made.secret)


@manage_oauth_client.handles(Create, ClientResult, scope="apps:write")
async def _create(args: Create, call: Call) -> Reply:
    made = await call.platform.oauth_clients.create(
        call.principal,
        args.app_id,
        name=args.name,
        scopes=list(args.scopes),
        grant_types=list(args.grant_types) if args.grant_types else None,
        redirect_uris=list(args.redirect_uris) if args.redirect_uris else None,
    )
    return Reply(
        f"Client {made.client.client_id} of app {args.app_id} made; its secret is shown only "
        f"now. It gets tokens at POST /token ({', '.join(made.client.grant_types)}).",
        _with_secret(args.app_id, made),
    )


@manage_oauth_client.handles(ListClients, Clients)
async def _list(args: ListClients, call: Call) -> Reply:
    async def fetch(offset: int, limit: int) -> list[ClientRow]:
        return await call.platform.oauth_clients.list(
            call.principal, args.app_id, offset=offset, limit=limit
        )

    page = await paginate(fetch, args.cursor, args.limit)
    data = Clients(app_id=args.app_id, clients=[_client(c) for c in page.items])
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    return Reply(f"{len(page.items)} OAuth client(s) of app {args.app_id}", data)


@manage_oauth_client.handles(GetClient, ClientResult)
async def _get(args: GetClient, call: Call) -> Reply:
    row = await call.platform.oauth_clients.get(call.principal, args.app_id, args.client_id)
    return Reply(
        f"Client {row.client_id} ({row.name})",
        ClientResult(app_id=args.app_id, client=_client(row)),
    )


@manage_oauth_client.handles(Rotate, ClientResult, scope="apps:write")
async def _rotate(args: Rotate, call: Call) -> Reply:
    made = await call.platform.oauth_clients.rotate_secret(
        call.principal, args.app_id, args.client_id
    )
    return Reply(
        f"New secret for {args.client_id}, shown only now; the old one no longer works",
        _with_secret(args.app_id, made),
    )


@manage_oauth_client.handles(Delete, Deleted, scope="apps:write")
async def _delete(args: Delete, call: Call) -> Reply:
    async def delete(confirmed: bool) -> ClientRow:
        return await call.platform.oauth_clients.delete(
            call.principal, args.app_id, args.client_id, confirmed=confirmed
        )

    row = await call.confirming(delete, confirm=args.confirm)
    return Reply(
        f"Deleted client {row.client_id} of app {args.app_id}",
        Deleted(app_id=args.app_id, client_id=row.client_id, deleted=True),
    )


TOOLS = (manage_oauth_client,)
