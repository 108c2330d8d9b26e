"""The API documents table on SQLite and PostgreSQL: versions numbered per app under its lock,
a stale writer stores nothing, only the newest versions kept, the catalogue of a tenant's
latest versions (members only, filters, pages), and an app's documents going with it."""

from __future__ import annotations

import asyncio

from appdeck.storage import Storage
from appdeck.storage.api_documents import ApiDocumentStore, NewVersion
from appdeck.storage.apps import AppStore


def version(title: str = "Shop", digest: str = "d1", **changes: object) -> NewVersion:
    return NewVersion(
        source="live:/openapi.json",
        title=title,
        api_version="1.0",
        openapi_version="3.1.0",
        operations=2,
        digest=digest,
        changes={"added": ["GET /"], **changes},
        discovered_by="alice",
        discovered_at=1000.0,
        document='{"openapi":"3.1.0"}',
    )


async def _app(storage: Storage, name: str, tenant: str = "acme", owner: str = "alice") -> int:
    return (await AppStore(storage.engine).create(tenant, name, None, {}, owner)).id


async def test_versions_are_numbered_per_app_and_read_back(storage: Storage) -> None:
    store = ApiDocumentStore(storage.engine)
    shop, blog = await _app(storage, "shop"), await _app(storage, "blog")
    assert await store.latest(shop) is None
    first = await store.add(shop, version(digest="a"), after=0, keep=50)
    assert first is not None
    assert (first.app_id, first.version) == (shop, 1)
    second = await store.add(shop, version(digest="b"), after=1, keep=50)
    assert second is not None
    assert second.version == 2
    other = await store.add(blog, version(digest="c"), after=0, keep=50)
    assert other is not None
    assert other.version == 1
    latest = await store.latest(shop)
    assert latest == second
    got = await store.get(shop, 1)
    assert got == first
    assert got.changes == {"added": ["GET /"]}
    assert got.document == '{"openapi":"3.1.0"}'
    assert await store.get(shop, 3) is None
    assert await store.get(shop, 0) is None
    assert await store.get(shop, 2**40) is None  # past the column: not an error
    assert await store.versions(shop) == [1, 2]


async def test_a_writer_that_compared_with_a_stale_version_stores_nothing(
    storage: Storage,
) -> None:
    store = ApiDocumentStore(storage.engine)
    shop = await _app(storage, "shop")
    assert await store.add(shop, version(digest="a"), after=0, keep=50) is not None
    assert await store.add(shop, version(digest="b"), after=0, keep=50) is None
    assert await store.versions(shop) == [1]


async def test_concurrent_writers_of_the_same_version_store_it_once(storage: Storage) -> None:
    store = ApiDocumentStore(storage.engine)
    shop = await _app(storage, "shop")
    made = await asyncio.gather(
        *(store.add(shop, version(digest=str(n)), after=0, keep=50) for n in range(5))
    )
    assert sum(row is not None for row in made) == 1
    assert await store.versions(shop) == [1]


async def test_only_the_newest_versions_are_kept(storage: Storage) -> None:
    store = ApiDocumentStore(storage.engine)
    shop = await _app(storage, "shop")
    for n in range(5):
        assert await store.add(shop, version(digest=str(n)), after=n, keep=3) is not None
    assert await store.versions(shop) == [3, 4, 5]
    latest = await store.latest(shop)
    assert latest is not None
    assert latest.digest == "4"
    assert await store.add(shop, version(digest="5"), after=5, keep=3) is not None
    assert await store.versions(shop) == [4, 5, 6]


async def test_the_listing_shows_each_apps_latest_version_to_its_members(
    storage: Storage,
) -> None:
    store = ApiDocumentStore(storage.engine)
    apps = AppStore(storage.engine)
    shop, blog = await _app(storage, "shop"), await _app(storage, "blog")
    bare = await _app(storage, "bare")  # nothing discovered: not listed
    theirs = await _app(storage, "theirs", tenant="globex", owner="eve")
    await store.add(shop, version("Shop API", "a"), after=0, keep=50)
    await store.add(shop, version("Shop API v2", "b"), after=1, keep=50)
    await store.add(blog, version("Blog 100%_done", "c"), after=0, keep=50)
    await store.add(theirs, version("Shop API", "d"), after=0, keep=50)
    await apps.set_member(blog, "bob", "viewer", "alice")

    every = await store.listing("acme", member=None, offset=0, limit=10)
    assert [(r.app_id, r.app_name, r.version, r.title) for r in every] == [
        (shop, "shop", 2, "Shop API v2"),
        (blog, "blog", 1, "Blog 100%_done"),
    ]
    assert bare not in [r.app_id for r in every]
    assert [r.app_id for r in await store.listing("acme", member="bob", offset=0, limit=10)] == [
        blog
    ]
    assert await store.listing("acme", member="carol", offset=0, limit=10) == []
    assert [r.app_id for r in await store.listing("globex", member=None, offset=0, limit=10)] == [
        theirs
    ]
    only = await store.listing("acme", member=None, app_id=blog, offset=0, limit=10)
    assert [r.app_id for r in only] == [blog]
    assert await store.listing("acme", member=None, app_id=theirs, offset=0, limit=10) == []

    async def titled(text: str) -> list[int]:
        rows = await store.listing("acme", member=None, title_contains=text, offset=0, limit=10)
        return [r.app_id for r in rows]

    assert await titled("shop") == [shop]  # case does not matter
    assert await titled("%_") == [blog]  # % and _ are literal
    assert await titled("_x") == []
    page = await store.listing("acme", member=None, offset=1, limit=1)
    assert [r.app_id for r in page] == [blog]


async def test_an_apps_documents_go_with_it(storage: Storage) -> None:
    store = ApiDocumentStore(storage.engine)
    shop = await _app(storage, "shop")
    await store.add(shop, version(), after=0, keep=50)
    await AppStore(storage.engine).delete(shop)
    assert await store.versions(shop) == []
