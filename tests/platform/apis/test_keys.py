"""ApiKeyService on a real database: who may manage an app's keys, the key shown once and
stored hashed, revoke and rotate reaching the ingress's gate at once, expiry, the limit, the
gate following the app's spec (api_auth), renames and deletion, and test_api's short-lived
credential."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from appdeck.common.errors import (
    ConfirmationRequired,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
)
from appdeck.common.tokens import token_hash
from appdeck.ingress import Counters, RouteTable
from appdeck.ingress.keys import KeyGate, Refusal
from appdeck.model import hostnames
from appdeck.platform.apis.keys import MAX_ACTIVE, TEST_KEY_SECONDS, ApiKeyService
from appdeck.platform.deploy.ingress_router import IngressRouter
from appdeck.storage import Storage
from appdeck.storage.api_keys import ApiKeyRow, ApiKeyStore
from tests.platform.on_fakes import OnFakes, platform_on_fakes

DAY = 86_400.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Keys:
    on: OnFakes
    service: ApiKeyService
    gate: KeyGate
    clock: Clock
    store: ApiKeyStore

    async def app(self, name: str = "shop", *, required: bool = True) -> int:
        spec = {"api_auth": "required"} if required else {}
        return (await self.on.platform.apps.register(self.on.alice, name, spec)).app.id

    def call(self, name: str, key: str | None, method: str = "GET") -> bytes | Refusal:
        """What the ingress decides for ``method`` on app ``name`` of acme with ``key``."""
        headers = [] if key is None else [(b"x-api-key", key.encode())]
        return self.gate.check(hostnames.route_label(name, "acme"), method, headers)


@pytest.fixture
async def keys(storage: Storage, tmp_path: Path) -> AsyncIterator[Keys]:
    on = await platform_on_fakes(storage, tmp_path)
    clock = Clock()
    gate, store = KeyGate(clock), ApiKeyStore(storage.engine)
    service = ApiKeyService(on.platform.apps, store, gate, on.platform.feed, clock=clock)
    await service.start()
    yield Keys(on, service, gate, clock, store)
    await service.close()


def admitted(decision: bytes | Refusal) -> str:
    assert isinstance(decision, bytes), decision
    return decision.decode()


def refused(decision: bytes | Refusal) -> int:
    assert isinstance(decision, Refusal), decision
    return decision.status


# --- what test_api relies on ---------------------------------------------------------------


async def test_requires_key_follows_the_apps_current_spec_at_once(keys: Keys) -> None:
    on, service = keys.on, keys.service
    open_app = await keys.app("open", required=False)
    closed_app = await keys.app("closed")
    assert await service.requires_key(open_app) is False
    assert await service.requires_key(closed_app) is True
    await on.platform.apps.set_spec(on.alice, open_app, {"api_auth": "required"})
    await on.platform.apps.set_spec(on.alice, closed_app, {"api_auth": "none"})
    assert await service.requires_key(open_app) is True
    assert await service.requires_key(closed_app) is False
    assert hostnames.route_label("open", "acme") in keys.gate.required
    assert hostnames.route_label("closed", "acme") not in keys.gate.required
    await on.platform.apps.set_spec(on.alice, open_app, {"api_auth": "none"}, dry_run=True)
    assert await service.requires_key(open_app) is True  # a dry run changes nothing


async def test_the_test_credential_opens_only_its_apps_route_for_two_minutes(keys: Keys) -> None:
    on, service = keys.on, keys.service
    shop, other = await keys.app("shop"), await keys.app("other")
    credential = await service.test_credential(on.alice, shop)
    assert credential is not None
    assert credential.startswith("adk_key_")
    assert admitted(keys.call("shop", credential)) == "test_api"
    assert admitted(keys.call("shop", credential, "DELETE")) == "test_api"  # read and write
    assert refused(keys.call("other", credential)) == 401  # another app's route
    assert await service.test_credential(on.alice, other) != credential  # a fresh one each time
    assert await service.list(on.alice, shop, offset=0, limit=10) == []  # never stored
    keys.clock.now += TEST_KEY_SECONDS
    assert refused(keys.call("shop", credential)) == 401
    assert keys.gate.take_used() == {}  # no last use of a key with no row


async def test_no_credential_for_an_app_that_requires_no_key(keys: Keys) -> None:
    app_id = await keys.app("open", required=False)
    assert await keys.service.test_credential(keys.on.alice, app_id) is None


async def test_the_test_credential_needs_the_test_role(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    with pytest.raises(NotFound):
        await service.test_credential(on.eve, app_id)
    await on.platform.apps.grant(on.alice, app_id, "bob", "viewer")
    with pytest.raises(PermissionDenied):
        await service.test_credential(on.bob, app_id)
    await on.platform.apps.grant(on.alice, app_id, "bob", "developer")
    assert await service.test_credential(on.bob, app_id) is not None


# --- manage_api_key ------------------------------------------------------------------------


async def test_a_key_is_shown_once_stored_hashed_and_opens_the_app(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    made = await service.create(on.alice, app_id, name="billing")
    row = made.key.row
    assert made.secret.startswith("adk_key_")
    assert len(made.secret) == len("adk_key_") + 43
    assert row.key_hash == token_hash(made.secret)
    assert row.prefix == made.secret[:12]
    assert row.id.startswith("key_")
    assert len(row.id) == 16
    assert (row.scopes, row.expires_at, row.created_by) == (("read", "write"), None, on.alice.user)
    assert (made.key.status, made.enforced) == ("active", True)
    assert admitted(keys.call("shop", made.secret, "POST")) == row.id
    assert refused(keys.call("shop", None)) == 401
    assert refused(keys.call("shop", made.secret[:-1] + "x")) == 401
    [listed] = await service.list(on.alice, app_id, offset=0, limit=10)
    assert listed.row == row
    assert (await service.get(on.alice, app_id, row.id)).row == row


async def test_a_read_key_reads_and_is_refused_403_on_other_methods(keys: Keys) -> None:
    app_id = await keys.app()
    made = await keys.service.create(keys.on.alice, app_id, name="reader", scopes=["read"])
    assert made.key.row.scopes == ("read",)
    for method in ("GET", "HEAD", "OPTIONS"):
        assert admitted(keys.call("shop", made.secret, method)) == made.key.row.id
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert refused(keys.call("shop", made.secret, method)) == 403
    writer = await keys.service.create(keys.on.alice, app_id, name="w", scopes=["write"])
    assert admitted(keys.call("shop", writer.secret, "DELETE")) == writer.key.row.id


async def test_a_revoked_key_stops_at_once_after_confirming(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    made = await service.create(on.alice, app_id, name="k")
    key_id = made.key.row.id
    with pytest.raises(ConfirmationRequired):
        await service.revoke(on.alice, app_id, key_id, confirmed=False)
    assert admitted(keys.call("shop", made.secret)) == key_id
    revoked = await service.revoke(on.alice, app_id, key_id, confirmed=True)
    assert revoked.status == "revoked"
    assert revoked.row.revoked_at == keys.clock.now
    assert refused(keys.call("shop", made.secret)) == 401
    again = await service.revoke(on.alice, app_id, key_id, confirmed=False)  # nothing to ask
    assert again.row.revoked_at == revoked.row.revoked_at
    await service.resync()  # a reload brings nothing back
    assert refused(keys.call("shop", made.secret)) == 401


async def test_a_rotated_keys_old_value_stops_and_the_new_one_works(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    old = await service.create(on.alice, app_id, name="ci", scopes=["read"], expires_in_days=10)
    keys.clock.now += DAY
    new = await service.rotate(on.alice, app_id, old.key.row.id)
    assert new.secret != old.secret
    assert new.key.row.rotated_from == old.key.row.id
    assert (new.key.row.name, new.key.row.scopes) == ("ci", ("read",))
    assert new.key.row.expires_at == keys.clock.now + 10 * DAY  # the same lifetime
    assert new.replaced is not None
    assert new.replaced.status == "revoked"
    assert refused(keys.call("shop", old.secret)) == 401
    assert admitted(keys.call("shop", new.secret)) == new.key.row.id
    with pytest.raises(FailedPrecondition):
        await service.rotate(on.alice, app_id, old.key.row.id)


async def test_an_expired_key_gets_401_and_lists_as_expired(keys: Keys) -> None:
    app_id = await keys.app()
    made = await keys.service.create(keys.on.alice, app_id, name="short", expires_in_days=1)
    assert made.key.row.expires_at == keys.clock.now + DAY
    keys.clock.now += DAY
    decision = keys.call("shop", made.secret)
    assert isinstance(decision, Refusal)
    assert (decision.status, decision.code) == (401, "api_key_expired")
    [listed] = await keys.service.list(keys.on.alice, app_id, offset=0, limit=10)
    assert listed.status == "expired"


async def test_a_key_opens_only_its_own_app(keys: Keys) -> None:
    shop, other = await keys.app("shop"), await keys.app("other")
    made = await keys.service.create(keys.on.alice, shop, name="k")
    assert refused(keys.call("other", made.secret)) == 401
    with pytest.raises(NotFound):  # and is not found through another app
        await keys.service.get(keys.on.alice, other, made.key.row.id)
    with pytest.raises(NotFound):
        await keys.service.revoke(keys.on.alice, other, made.key.row.id, confirmed=True)
    with pytest.raises(NotFound):
        await keys.service.get(keys.on.alice, shop, "k" * 10_000)


async def test_only_the_apps_admins_manage_its_keys(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    made = await service.create(on.alice, app_id, name="k")
    with pytest.raises(NotFound):  # another tenant: the app does not exist for eve
        await service.list(on.eve, app_id, offset=0, limit=10)
    with pytest.raises(NotFound):  # no role at all: the same
        await service.create(on.bob, app_id, name="k")
    await on.platform.apps.grant(on.alice, app_id, "bob", "developer")
    with pytest.raises(PermissionDenied):
        await service.list(on.bob, app_id, offset=0, limit=10)
    with pytest.raises(PermissionDenied):
        await service.revoke(on.bob, app_id, made.key.row.id, confirmed=True)
    with pytest.raises(PermissionDenied):
        await service.rotate(on.bob, app_id, made.key.row.id)
    await on.platform.apps.grant(on.alice, app_id, "bob", "admin")
    assert len(await service.list(on.bob, app_id, offset=0, limit=10)) == 1


async def test_an_app_has_at_most_fifty_active_keys(keys: Keys) -> None:
    on, service = keys.on, keys.service
    app_id = await keys.app()
    made = [await service.create(on.alice, app_id, name=f"k{n}") for n in range(MAX_ACTIVE)]
    with pytest.raises(QuotaExceeded):
        await service.create(on.alice, app_id, name="one more")
    await service.rotate(on.alice, app_id, made[0].key.row.id)  # rotating is not one more
    await service.revoke(on.alice, app_id, made[1].key.row.id, confirmed=True)
    await service.create(on.alice, app_id, name="now there is room")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": ""}, "1 to 100 printable"),
        ({"name": "   "}, "1 to 100 printable"),
        ({"name": "x" * 101}, "1 to 100 printable"),
        ({"name": "bad\nname"}, "1 to 100 printable"),
        ({"name": "nul\0"}, "1 to 100 printable"),
        ({"name": "\ud800"}, "1 to 100 printable"),
        ({"scopes": []}, "read, write or both"),
        ({"scopes": ["admin"]}, "unknown scope"),
        ({"scopes": ["read"] * 11}, "read, write or both"),
        ({"expires_in_days": 0}, "1 to 3650"),
        ({"expires_in_days": 3651}, "1 to 3650"),
        ({"expires_in_days": -5}, "1 to 3650"),
    ],
)
async def test_absurd_values_are_refused_and_nothing_is_made(
    keys: Keys, fields: dict[str, object], message: str
) -> None:
    app_id = await keys.app()
    args: dict[str, object] = {"name": "k"} | fields
    with pytest.raises(InvalidArgument, match=message):
        await keys.service.create(keys.on.alice, app_id, **args)  # type: ignore[arg-type]
    assert await keys.service.list(keys.on.alice, app_id, offset=0, limit=10) == []


# --- the gate follows the apps, and survives a restart -------------------------------------


async def test_a_renamed_app_requires_its_key_under_the_new_name_only(keys: Keys) -> None:
    on = keys.on
    app_id = await keys.app("shop")
    made = await keys.service.create(on.alice, app_id, name="k")
    await on.platform.apps.update(on.alice, app_id, name="store")
    assert hostnames.route_label("shop", "acme") not in keys.gate.required
    assert refused(keys.call("store", None)) == 401
    assert admitted(keys.call("store", made.secret)) == made.key.row.id
    assert await keys.service.requires_key(app_id) is True


async def test_a_deleted_app_is_forgotten_with_its_keys(keys: Keys) -> None:
    on = keys.on
    app_id = await keys.app("shop")
    await keys.service.create(on.alice, app_id, name="k")
    assert keys.gate.key_count() == 1
    await on.platform.apps.delete(on.alice, app_id, confirmed=True)
    assert await keys.service.requires_key(app_id) is False
    assert hostnames.route_label("shop", "acme") not in keys.gate.required
    assert keys.gate.key_count() == 0
    assert await keys.store.active(keys.clock.now) == []  # the rows went with the app


async def test_a_rename_during_a_reload_is_not_undone_by_it(keys: Keys) -> None:
    on = keys.on
    app_id = await keys.app("shop")
    made = await keys.service.create(on.alice, app_id, name="k")

    renaming: list[asyncio.Task[object]] = []

    class RenamingStore(ApiKeyStore):
        """Renames the app while the reload is between its reads (once)."""

        async def active(self, now: float) -> list[ApiKeyRow]:
            if not renaming:
                rename = on.platform.apps.update(on.alice, app_id, name="store")
                renaming.append(asyncio.create_task(rename))
                # until the rename's hooks have run (its change waits for the reload's lock)
                await asyncio.wait_for(renamed.wait(), 10)
            return await super().active(now)

    reloading = ApiKeyService(
        on.platform.apps, RenamingStore(keys.store._engine), keys.gate, on.platform.feed
    )
    renamed = asyncio.Event()
    on.platform.apps.on_rename(lambda old, new: renamed.set())
    await reloading.resync()
    # right after the reload, before the rename's change reaches anyone else
    assert hostnames.route_label("shop", "acme") not in keys.gate.required
    assert refused(keys.call("store", None)) == 401
    assert admitted(keys.call("store", made.secret)) == made.key.row.id
    async with asyncio.timeout(10):
        await renaming[0]


def test_the_ingress_router_keeps_an_empty_gate_it_is_given() -> None:
    gate = KeyGate()
    assert IngressRouter(RouteTable(), Counters(), gate).keys is gate


async def test_a_restarted_server_loads_the_keys_and_closes_the_gate_until_then(
    keys: Keys,
) -> None:
    on = keys.on
    app_id = await keys.app("shop")
    await keys.app("open", required=False)
    made = await keys.service.create(on.alice, app_id, name="k")
    assert admitted(keys.call("shop", made.secret)) == made.key.row.id
    await keys.service.close()  # writes the last use
    [row] = await keys.store.active(keys.clock.now)
    assert row.last_used_at == keys.clock.now

    gate = KeyGate(keys.clock)
    restarted = ApiKeyService(
        on.platform.apps, keys.store, gate, on.platform.feed, clock=keys.clock
    )
    open_route = hostnames.route_label("open", "acme")
    assert open_route in gate.required  # closed: every route waits for the keys
    assert gate.check(open_route, "GET", []) == Refusal(
        503, "starting", "the ingress is still loading the apps' API keys"
    )
    await restarted.start()
    try:
        assert open_route not in gate.required
        key = [(b"authorization", b"Bearer " + made.secret.encode())]
        assert gate.check(hostnames.route_label("shop", "acme"), "GET", key) == (
            made.key.row.id.encode()
        )
    finally:
        await restarted.close()


async def test_every_key_change_waits_for_the_data_plane_before_reporting_done(
    storage: Storage, tmp_path: Path
) -> None:
    on = await platform_on_fakes(storage, tmp_path)
    gate = KeyGate()
    seen: list[int] = []  # the gate's key count each time the data plane is awaited

    async def published() -> None:  # HAProxy's mirror: returns once its maps read back
        seen.append(gate.key_count())

    service = ApiKeyService(
        on.platform.apps, ApiKeyStore(storage.engine), gate, on.platform.feed, published=published
    )
    await service.start()
    try:
        app_id = (await on.platform.apps.register(on.alice, "shop", {"api_auth": "required"})).app
        made = await service.create(on.alice, app_id.id, name="k")
        assert seen == [1]  # awaited with the new key already in the gate
        assert await service.test_credential(on.alice, app_id.id) is not None
        assert seen == [1, 2]
        rotated = await service.rotate(on.alice, app_id.id, made.key.row.id)
        assert seen == [1, 2, 2]
        await service.revoke(on.alice, app_id.id, rotated.key.row.id, confirmed=True)
        assert seen == [1, 2, 2, 1]
    finally:
        await service.close()
