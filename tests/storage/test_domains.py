"""Custom domain claims on SQLite and PostgreSQL: one holder per hostname whatever races for
it, releases, proofs, the takeover rule, and what the data plane is given."""

from __future__ import annotations

import asyncio

from appdeck.storage import Storage
from appdeck.storage.apps import AppStore
from appdeck.storage.domains import PENDING, VERIFIED, DomainStore


async def _app(storage: Storage, tenant: str, name: str) -> int:
    return (await AppStore(storage.engine).create(tenant, name, None, {}, "alice")).id


async def test_a_hostname_has_one_holder_whoever_races_for_it(storage: Storage) -> None:
    store = DomainStore(storage.engine)
    apps = [await _app(storage, t, "shop") for t in ("acme", "globex", "initech")]
    held = await asyncio.gather(*(store.claim(a, ["shop.example.com"]) for a in apps))
    holders = {h["shop.example.com"].app_id for h in held}
    assert len(holders) == 1  # every claimant is told the same single holder
    (holder,) = holders
    assert holder in apps
    again = await store.claim(holder, ["shop.example.com", "www.example.com"])
    assert again["shop.example.com"].state == PENDING
    assert again["www.example.com"].app_id == holder


async def test_release_keeps_only_what_the_spec_still_lists(storage: Storage) -> None:
    store = DomainStore(storage.engine)
    shop = await _app(storage, "acme", "shop")
    await store.claim(shop, ["a.example.com", "b.example.com", "c.example.com"])
    assert await store.release(shop, keep=["b.example.com"]) == ["a.example.com", "c.example.com"]
    assert [d.host for d in await store.of_app(shop)] == ["b.example.com"]
    assert await store.release(shop) == ["b.example.com"]
    assert await store.of_app(shop) == []


async def test_holds_any_tells_whether_an_app_holds_a_claim_pending_or_verified(
    storage: Storage,
) -> None:
    store = DomainStore(storage.engine)
    shop, other = await _app(storage, "acme", "shop"), await _app(storage, "acme", "other")
    assert not await store.holds_any(shop)
    await store.claim(shop, ["shop.example.com"])
    assert await store.holds_any(shop)
    assert not await store.holds_any(other)
    assert await store.verify("shop.example.com", shop, "acme")
    assert await store.holds_any(shop)
    await store.release(shop)
    assert not await store.holds_any(shop)


async def test_only_verified_hostnames_are_served_with_their_app(storage: Storage) -> None:
    store = DomainStore(storage.engine)
    shop = await _app(storage, "acme", "shop")
    await store.claim(shop, ["shop.example.com", "later.example.com"])
    assert await store.served() == []
    assert await store.verify("shop.example.com", shop, "acme")
    assert not await store.verify("shop.example.com", shop + 1000, "acme")  # not its holder
    served = await store.served()
    assert [(s.host, s.app_name, s.tenant_id) for s in served] == [
        ("shop.example.com", "shop", "acme")
    ]
    record = (await store.get_many(["shop.example.com"]))["shop.example.com"]
    assert (record.state, record.method) == (VERIFIED, "acme")


async def test_a_txt_proof_takes_over_a_pending_or_acme_hold_but_not_a_txt_one(
    storage: Storage,
) -> None:
    store = DomainStore(storage.engine)
    squatter = await _app(storage, "acme", "shop")
    owner = await _app(storage, "globex", "shop")
    await store.claim(squatter, ["shop.example.com", "pending.example.com"])
    await store.verify("shop.example.com", squatter, "acme")
    assert await store.take_over("shop.example.com", owner)  # ACME only: gives way
    assert await store.take_over("pending.example.com", owner)  # pending: gives way
    held = await store.get_many(["shop.example.com", "pending.example.com"])
    assert {h.app_id for h in held.values()} == {owner}
    assert {h.method for h in held.values()} == {"txt"}
    assert not await store.take_over("shop.example.com", squatter)  # a TXT hold is final
    assert (await store.get_many(["shop.example.com"]))["shop.example.com"].app_id == owner
    await store.verify("shop.example.com", owner, "acme")  # a later ACME proof keeps "txt"
    assert (await store.get_many(["shop.example.com"]))["shop.example.com"].method == "txt"


async def test_lookups_that_proved_nothing_are_noted_bounded_and_rechecked_in_turn(
    storage: Storage,
) -> None:
    store = DomainStore(storage.engine)
    shop = await _app(storage, "acme", "shop")
    await store.claim(shop, ["a.example.com", "b.example.com"])
    assert [d.host for d in await store.due(checked_before=1e12, limit=10)] == [
        "a.example.com",
        "b.example.com",
    ]
    await store.checked("a.example.com", shop, "x" * 10_000)
    note = (await store.get_many(["a.example.com"]))["a.example.com"].last_error
    assert note is not None
    assert len(note) == 300
    assert [d.host for d in await store.due(checked_before=0.0, limit=10)] == ["b.example.com"]
    assert len(await store.due(checked_before=1e12, limit=1)) == 1


async def test_an_app_deleted_takes_its_claims_with_it(storage: Storage) -> None:
    store = DomainStore(storage.engine)
    apps = AppStore(storage.engine)
    shop = await _app(storage, "acme", "shop")
    await store.claim(shop, ["shop.example.com"])
    await apps.delete(shop)
    assert await store.get_many(["shop.example.com"]) == {}
