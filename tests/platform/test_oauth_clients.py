"""An app's own OAuth clients on the platform: who may manage them, every bound on what a
caller sends, the secret shown once and stored hashed, rotation, deletion asking first."""

from __future__ import annotations

from pathlib import Path

import pytest

from appdeck.common.errors import (
    ConfirmationRequired,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from appdeck.common.tokens import token_hash
from appdeck.storage import Storage
from tests.platform.on_fakes import OnFakes, platform_on_fakes


@pytest.fixture
async def on(storage: Storage, tmp_path: Path) -> OnFakes:
    return await platform_on_fakes(storage, tmp_path)


async def _app(on: OnFakes, name: str = "shop") -> int:
    return (await on.platform.apps.register(on.alice, name)).app.id


async def test_create_shows_the_secret_once_and_stores_only_its_hash(on: OnFakes) -> None:
    app_id = await _app(on)
    clients = on.platform.oauth_clients
    made = await clients.create(on.alice, app_id, name="billing", scopes=["orders:read"])
    assert made.secret is not None
    assert made.secret.startswith("adk_cs_")
    assert made.client.secret_hash == token_hash(made.secret)
    assert (made.client.kind, made.client.app_id, made.client.tenant_id) == ("app", app_id, "acme")
    got = await clients.get(on.alice, app_id, made.client.client_id)
    assert got.secret_hash == made.client.secret_hash
    [listed] = await clients.list(on.alice, app_id, offset=0, limit=10)
    assert listed.client_id == made.client.client_id
    rotated = await clients.rotate_secret(on.alice, app_id, made.client.client_id)
    assert rotated.secret not in (None, made.secret)
    again = await clients.get(on.alice, app_id, made.client.client_id)
    assert again.secret_hash == token_hash(str(rotated.secret))
    with pytest.raises(ConfirmationRequired):
        await clients.delete(on.alice, app_id, made.client.client_id, confirmed=False)
    await clients.delete(on.alice, app_id, made.client.client_id, confirmed=True)
    with pytest.raises(NotFound):
        await clients.get(on.alice, app_id, made.client.client_id)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": ""}, "1 to 100 printable"),
        ({"name": "x" * 101}, "1 to 100 printable"),
        ({"name": "bad\nname"}, "1 to 100 printable"),
        ({"scopes": []}, "1 to 20 scopes"),
        ({"scopes": [f"s{n}" for n in range(21)]}, "1 to 20 scopes"),
        ({"scopes": ["apps:write"]}, "AppDeck's"),
        ({"scopes": ["deploy:read"]}, "AppDeck's"),
        ({"scopes": ["Orders"]}, "must match"),
        ({"scopes": ["a b"]}, "must match"),
        ({"scopes": ["x\0"]}, "must match"),
        ({"scopes": ["x" * 65]}, "must match"),
        ({"grant_types": ["authorization_code"]}, "needs at least one redirect URI"),
        ({"grant_types": ["refresh_token"]}, "goes with authorization_code"),
        ({"grant_types": ["client_credentials", "refresh_token"]}, "goes with authorization_code"),
        ({"redirect_uris": ["https://example.com/cb"]}, "are for the authorization_code grant"),
        ({"grant_types": ["password"]}, "not offered"),
        ({"redirect_uris": ["http://example.com/cb"]}, "must be https"),
        ({"redirect_uris": ["javascript:alert(1)"]}, "must be https"),
        ({"redirect_uris": ["https://example.com/cb#x"]}, "no fragment"),
        ({"redirect_uris": ["https://u:p@example.com/cb"]}, "no credentials"),
        ({"redirect_uris": ["https://example.com/\r\nx"]}, "control characters"),
        ({"redirect_uris": ["https://e.com/" + "a" * 3000]}, "too long"),
        ({"redirect_uris": [f"https://e.com/{n}" for n in range(11)]}, "at most 10"),
    ],
)
async def test_absurd_values_are_refused_and_nothing_is_made(
    on: OnFakes, fields: dict[str, object], message: str
) -> None:
    app_id = await _app(on)
    args: dict[str, object] = {"name": "c", "scopes": ["orders:read"]} | fields
    with pytest.raises(InvalidArgument, match=message):
        await on.platform.oauth_clients.create(on.alice, app_id, **args)  # type: ignore[arg-type]
    assert await on.platform.oauth_clients.list(on.alice, app_id, offset=0, limit=10) == []


async def test_a_sign_in_client_has_loopback_http_or_https_redirects(on: OnFakes) -> None:
    app_id = await _app(on)
    made = await on.platform.oauth_clients.create(
        on.alice,
        app_id,
        name="dev",
        scopes=["orders:read"],
        grant_types=["authorization_code", "refresh_token"],
        redirect_uris=["http://127.0.0.1:8765/cb", "https://shop.example/cb"],
    )
    assert made.client.redirect_uris == ("http://127.0.0.1:8765/cb", "https://shop.example/cb")
    assert made.client.grant_types == ("authorization_code", "refresh_token")
    assert made.client.metadata["app_name"] == "shop"


async def test_only_the_apps_admins_see_or_touch_its_clients(on: OnFakes) -> None:
    app_id = await _app(on)
    clients = on.platform.oauth_clients
    made = await clients.create(on.alice, app_id, name="c", scopes=["orders:read"])
    with pytest.raises(NotFound):  # another tenant: the app does not exist for eve
        await clients.list(on.eve, app_id, offset=0, limit=10)
    await on.platform.apps.grant(on.alice, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await clients.list(on.bob, app_id, offset=0, limit=10)
    with pytest.raises(PermissionDenied):
        await clients.rotate_secret(on.bob, app_id, made.client.client_id)
    other = await _app(on, "other")
    with pytest.raises(NotFound):  # the client of another app is not found through this one
        await clients.get(on.alice, other, made.client.client_id)
    with pytest.raises(NotFound):
        await clients.get(on.alice, app_id, "x" * 10_000)


async def test_an_app_has_at_most_twenty_clients(on: OnFakes) -> None:
    app_id = await _app(on)
    for n in range(20):
        await on.platform.oauth_clients.create(on.alice, app_id, name=f"c{n}", scopes=["a"])
    with pytest.raises(QuotaExceeded):
        await on.platform.oauth_clients.create(on.alice, app_id, name="one more", scopes=["a"])
