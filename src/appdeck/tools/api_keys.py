"""manage_api_key: the keys that guard an app's HTTP API at the ingress (ApiKeyService):
create, list, get, revoke, rotate."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from appdeck.platform.apis.keys import MAX_DAYS, ApiKey, MadeKey
from appdeck.tools.kit import AppId, Arguments, Call, Hints, Output, Reply, Tool, paginate

manage_api_key = Tool(
    "manage_api_key",
    title="Manage an app's API keys",
    description="Keys for calling an app's HTTP API through the ingress. They are enforced "
    "once the app's spec says api_auth: required (set_app_spec): then the ingress answers 401 "
    "to a request without a valid key and 403 to a read-only key on a method other than "
    "GET/HEAD/OPTIONS; callers send the key as X-API-Key: <key> (or Authorization: Bearer "
    "<key>), and the app sees only X-AppDeck-Key-Id. create (name, scopes, expires_in_days; "
    "the key is in the result only this once), list (prefix, status, last use; never the "
    "key), get, revoke (the key stops at once; asks to confirm, or confirm: true), rotate (a "
    "new key with the same name, scopes and lifetime; the old one stops at once). Admin or "
    "owner of the app. test_api sends a short-lived key of its own: no key is needed for it.",
    scope="apis:read",
    hints=Hints(read_only=False, destructive=True),
)

KeyId = Annotated[
    str, Field(min_length=1, max_length=100, description="The key's id (key_…) from create/list.")
]
Scope = Literal["read", "write"]
ApiAuth = Literal["none", "required"]
API_AUTH = "Whether the ingress requires a key for this app now (set_app_spec api_auth)."


class Create(Arguments):
    """A new key for the app; the key itself is in the result only this once."""

    action: Literal["create"]
    app_id: AppId
    name: str = Field(min_length=1, max_length=100, description="What the key is for.")
    scopes: list[Scope] | None = Field(
        default=None,
        min_length=1,
        max_length=2,
        description="read: GET, HEAD, OPTIONS only; write: every method. Default: both.",
    )
    expires_in_days: int | None = Field(
        default=None, ge=1, le=MAX_DAYS, description="Default: the key never expires."
    )


class ListKeys(Arguments):
    """The app's keys, newest first, revoked and expired ones too (never their values)."""

    action: Literal["list"]
    app_id: AppId
    cursor: str | None = Field(
        default=None, max_length=200, description="next_cursor of the previous page"
    )
    limit: int = Field(default=20, ge=1, le=100)


class GetKey(Arguments):
    """One key: its status, scopes, expiry and last use (never its value)."""

    action: Literal["get"]
    app_id: AppId
    key_id: KeyId


class Revoke(Arguments):
    """Revoke the key: every request with it gets 401 from now on."""

    action: Literal["revoke"]
    app_id: AppId
    key_id: KeyId
    confirm: bool = Field(default=False, description="Confirm without being asked.")


class Rotate(Arguments):
    """A new key (shown once) with the old one's name, scopes, lifetime; the old one stops."""

    action: Literal["rotate"]
    app_id: AppId
    key_id: KeyId


class Key(Output):
    id: str
    name: str
    prefix: str = Field(description="The key's first characters, to recognise it.")
    scopes: list[str]
    status: Literal["active", "expired", "revoked"]
    created_at: float
    created_by: str
    expires_at: float | None
    last_used_at: float | None = Field(
        description="Through the ingress; written every 30 s or so, null if never used."
    )
    revoked_at: float | None
    rotated_from: str | None = Field(description="The key this one replaced (rotate).")


class KeyResult(Output):
    app_id: int
    key: Key
    api_key: str | None = Field(
        default=None,
        description="Only from create and rotate: the key, shown this once. Send it as "
        "X-API-Key: <key>.",
    )
    replaced: Key | None = Field(default=None, description="rotate: the key now revoked.")
    api_auth: ApiAuth = Field(description=API_AUTH)


class Keys(Output):
    app_id: int
    api_auth: ApiAuth = Field(description=API_AUTH)
    keys: list[Key]
    next_cursor: str | None = Field(default=None, description="Present when there is more.")


class Revoked(Output):
    app_id: int
    key: Key
    revoked: bool


def _key(key: ApiKey) -> Key:
    row = key.row
    return Key(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        scopes=list(row.scopes),
        status=key.status,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        revoked_at=row.revoked_at,
        rotated_from=row.rotated_from,
    )


def _auth(enforced: bool) -> ApiAuth:
    return "required" if enforced else "none"


def _made(app_id: int, made: MadeKey) -> KeyResult:
    result = KeyResult(
        app_id=app_id, key=_key(made.key), api_key=made.secret, api_auth=_auth(made.enforced)
    )
    if made.replaced is not None:
        result.replaced = _key(made.replaced)
    return result


def _not_enforced(made: MadeKey) -> str:
    if made.enforced:
        return ""
    return (
        " The app does not require keys yet: set_app_spec with api_auth: required makes the "
        "ingress check them."
    )


@manage_api_key.handles(Create, KeyResult, scope="apis:write")
async def _create(args: Create, call: Call) -> Reply:
    made = await call.platform.apis.keys.create(
        call.principal,
        args.app_id,
        name=args.name,
        scopes=list(args.scopes) if args.scopes is not None else None,
        expires_in_days=args.expires_in_days,
    )
    return Reply(
        f"API key {made.key.row.id} of app {args.app_id} made; the key (api_key) is shown only "
        f"now: send it as X-API-Key.{_not_enforced(made)}",
        _made(args.app_id, made),
    )


@manage_api_key.handles(ListKeys, Keys)
async def _list(args: ListKeys, call: Call) -> Reply:
    keys = call.platform.apis.keys

    async def fetch(offset: int, limit: int) -> list[ApiKey]:
        return await keys.list(call.principal, args.app_id, offset=offset, limit=limit)

    page = await paginate(fetch, args.cursor, args.limit)
    enforced = await keys.enforced(call.principal, args.app_id)
    data = Keys(
        app_id=args.app_id,
        api_auth=_auth(enforced),
        keys=[_key(k) for k in page.items],
    )
    if page.next_cursor:
        data.next_cursor = page.next_cursor
    active = sum(k.status == "active" for k in page.items)
    return Reply(
        f"{len(page.items)} API key(s) of app {args.app_id} ({active} active); the app "
        f"{'requires a key' if enforced else 'does not require keys (api_auth: none)'}",
        data,
    )


@manage_api_key.handles(GetKey, KeyResult)
async def _get(args: GetKey, call: Call) -> Reply:
    keys = call.platform.apis.keys
    key = await keys.get(call.principal, args.app_id, args.key_id)
    enforced = await keys.enforced(call.principal, args.app_id)
    return Reply(
        f"API key {key.row.id} of app {args.app_id}: {key.status}",
        KeyResult(app_id=args.app_id, key=_key(key), api_auth=_auth(enforced)),
    )


@manage_api_key.handles(Revoke, Revoked, scope="apis:write")
async def _revoke(args: Revoke, call: Call) -> Reply:
    async def revoke(confirmed: bool) -> ApiKey:
        return await call.platform.apis.keys.revoke(
            call.principal, args.app_id, args.key_id, confirmed=confirmed
        )

    key = await call.confirming(revoke, confirm=args.confirm)
    return Reply(
        f"Revoked API key {key.row.id} of app {args.app_id}: requests with it get 401",
        Revoked(app_id=args.app_id, key=_key(key), revoked=True),
    )


@manage_api_key.handles(Rotate, KeyResult, scope="apis:write")
async def _rotate(args: Rotate, call: Call) -> Reply:
    made = await call.platform.apis.keys.rotate(call.principal, args.app_id, args.key_id)
    return Reply(
        f"API key {made.key.row.id} replaces {args.key_id} of app {args.app_id}, which stopped "
        f"working; the new key (api_key) is shown only now.{_not_enforced(made)}",
        _made(args.app_id, made),
    )


TOOLS = (manage_api_key,)
