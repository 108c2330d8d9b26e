"""OAuthStore: clients, single-use codes, rotating refresh tokens and their families."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from appdeck.common.errors import Conflict
from appdeck.storage import create_engine, migrate
from appdeck.storage.oauth import (
    AuthCodeRow,
    ClientRow,
    CodeReplay,
    OAuthStore,
    RefreshTokenRow,
    family_for_code,
)

NOW = time.time()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[OAuthStore]:
    engine = create_engine(database_url)
    await migrate(engine)
    try:
        yield OAuthStore(engine)
    finally:
        await engine.dispose()


def client(client_id: str = "c1", **changes: object) -> ClientRow:
    row = ClientRow(
        client_id=client_id,
        kind="dcr",
        redirect_uris=("https://app.example/cb", "http://127.0.0.1/"),
        grant_types=("authorization_code", "refresh_token"),
        auth_method="none",
        name="Éditeur ✓",
        scope="apps:read",
        metadata={"client_uri": "https://app.example", "contacts": ["a@b.c"]},
        created_at=NOW,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def code(code_hash: str = "h1", **changes: object) -> AuthCodeRow:
    row = AuthCodeRow(
        code_hash=code_hash,
        client_id="c1",
        tenant_id="acme",
        user_id="u1",
        redirect_uri="https://app.example/cb",
        scope="apps:read deploy:read",
        resource="http://127.0.0.1:8080/mcp",
        code_challenge="x" * 43,
        expires_at=NOW + 300,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


def refresh(token_hash: str, family: str = "fam1", **changes: object) -> RefreshTokenRow:
    row = RefreshTokenRow(
        token_hash=token_hash,
        family_id=family,
        client_id="c1",
        tenant_id="acme",
        user_id="u1",
        scope="apps:read",
        resource="http://127.0.0.1:8080/mcp",
        created_at=NOW,
        expires_at=NOW + 3600,
    )
    return dataclasses.replace(row, **changes)  # type: ignore[arg-type]


async def test_a_client_reads_back_as_it_was_stored(store: OAuthStore) -> None:
    await store.insert_client(client(secret_hash="s" * 64, tenant_id="acme", expires_at=None))
    assert await store.get_client("c1") == client(secret_hash="s" * 64, tenant_id="acme")
    assert await store.get_client("nope") is None


async def test_a_client_id_is_registered_only_once(store: OAuthStore) -> None:
    await store.insert_client(client())
    with pytest.raises(Conflict):
        await store.insert_client(client())


async def test_a_metadata_document_client_is_inserted_then_refreshed(store: OAuthStore) -> None:
    url = "https://app.example/client.json"
    first = client(url, kind="cimd", name="First", expires_at=NOW + 300)
    await store.upsert_cimd_client(first)
    second = dataclasses.replace(first, name="Second", expires_at=NOW + 900)
    await store.upsert_cimd_client(second)
    assert await store.get_client(url) == second


async def test_a_metadata_document_never_replaces_a_registered_client(store: OAuthStore) -> None:
    await store.insert_client(client("https://app.example/client.json"))
    with pytest.raises(Conflict):
        await store.upsert_cimd_client(client("https://app.example/client.json", kind="cimd"))
    assert (await store.get_client("https://app.example/client.json")).kind == "dcr"  # type: ignore[union-attr]


async def test_a_code_is_consumed_once_and_a_second_use_is_reported_as_replay(
    store: OAuthStore,
) -> None:
    await store.insert_code(code())
    first = await store.consume_code("h1")
    assert first == code(used=True)  # the row as it now is: consumed
    second = await store.consume_code("h1")
    assert isinstance(second, CodeReplay)
    assert second.code.used is True
    assert second.code.client_id == "c1"
    assert await store.consume_code("unknown") is None


async def test_racing_consumers_of_one_code_have_exactly_one_winner(store: OAuthStore) -> None:
    await store.insert_code(code())
    async with asyncio.timeout(20):
        results = await asyncio.gather(*(store.consume_code("h1") for _ in range(8)))
    winners = [r for r in results if isinstance(r, AuthCodeRow)]
    assert len(winners) == 1
    assert all(isinstance(r, CodeReplay) for r in results if r is not winners[0])


async def test_a_refresh_token_is_marked_used_once(store: OAuthStore) -> None:
    await store.insert_refresh(refresh("r1"))
    assert await store.get_refresh("r1") == refresh("r1")
    assert await store.mark_refresh_used("r1", NOW + 1) is True
    assert await store.mark_refresh_used("r1", NOW + 2) is False
    assert (await store.get_refresh("r1")).used_at == NOW + 1  # type: ignore[union-attr]


async def test_racing_rotations_of_one_refresh_token_have_exactly_one_winner(
    store: OAuthStore,
) -> None:
    await store.insert_refresh(refresh("r1"))
    async with asyncio.timeout(20):
        results = await asyncio.gather(*(store.mark_refresh_used("r1", NOW) for _ in range(8)))
    assert results.count(True) == 1


async def test_a_revoked_refresh_token_cannot_be_marked_used(store: OAuthStore) -> None:
    await store.insert_refresh(refresh("r1"))
    assert await store.revoke_refresh("r1") is True
    assert await store.revoke_refresh("r1") is False
    assert await store.mark_refresh_used("r1", NOW) is False
    assert (await store.get_refresh("r1")).revoked is True  # type: ignore[union-attr]


async def test_revoking_a_family_revokes_all_its_tokens_and_names_its_live_access_tokens(
    store: OAuthStore,
) -> None:
    await store.insert_refresh(refresh("r1", used_at=NOW))
    await store.insert_refresh(refresh("r2"))
    await store.insert_refresh(refresh("other", family="fam2"))
    await store.record_access_token(refresh("", family="fam1"), "jti-live", NOW + 600)
    await store.record_access_token(refresh("", family="fam1"), "jti-expired", NOW - 5)
    await store.record_access_token(refresh("", family="fam2"), "jti-other", NOW + 600)

    assert await store.revoke_family("fam1", NOW) == [("jti-live", NOW + 600)]
    assert (await store.get_refresh("r1")).revoked is True  # type: ignore[union-attr]
    assert (await store.get_refresh("r2")).revoked is True  # type: ignore[union-attr]
    assert (await store.get_refresh("other")).revoked is False  # type: ignore[union-attr]
    assert await store.revoke_family("fam1", NOW) == []  # already revoked: nothing new


async def test_access_token_ledger_rows_can_never_be_redeemed(store: OAuthStore) -> None:
    await store.record_access_token(refresh("", family="fam1"), "jti-1", NOW + 600)
    assert await store.get_refresh("jti:jti-1") is None
    assert await store.mark_refresh_used("jti:jti-1", NOW) is False


async def test_the_family_of_a_code_is_stable_and_distinct() -> None:
    assert family_for_code("a") == family_for_code("a")
    assert family_for_code("a") != family_for_code("b")
    assert family_for_code("a").startswith("fam_")


async def test_cleanup_deletes_what_expired_and_keeps_the_rest(store: OAuthStore) -> None:
    await store.insert_code(code("fresh"))
    await store.insert_code(code("recent", expires_at=NOW - 60))  # kept: replay detection
    await store.insert_code(code("old", expires_at=NOW - 7200))
    await store.insert_refresh(refresh("live"))
    await store.insert_refresh(refresh("dead", expires_at=NOW - 1))
    await store.upsert_cimd_client(
        client("https://a.example/c.json", kind="cimd", expires_at=NOW - 1)
    )
    await store.upsert_cimd_client(
        client("https://b.example/c.json", kind="cimd", expires_at=NOW + 60)
    )
    await store.insert_client(client("dcr-client"))

    counts = await store.cleanup(NOW)

    assert counts == {
        "auth_codes": 1,
        "refresh_tokens": 1,
        "cimd_clients": 1,
        "unused_clients": 0,
    }
    assert await store.consume_code("old") is None
    assert isinstance(await store.consume_code("recent"), AuthCodeRow)
    assert await store.get_refresh("dead") is None
    assert await store.get_refresh("live") is not None
    assert await store.get_client("https://a.example/c.json") is None
    assert await store.get_client("https://b.example/c.json") is not None
    assert await store.get_client("dcr-client") is not None


async def test_a_registered_client_never_authorized_is_swept_after_the_grace_period(
    store: OAuthStore,
) -> None:
    await store.insert_client(client("used", created_at=NOW - 7 * 86400))
    await store.insert_client(client("unused-old", created_at=NOW - 2 * 86400))
    await store.insert_client(client("unused-new", created_at=NOW - 60))
    await store.insert_client(client("machine", kind="static", created_at=NOW - 7 * 86400))
    await store.insert_code(code("c", client_id="used"))  # an authorization: used from now on
    assert (await store.get_client("used")).used_at is not None  # type: ignore[union-attr]

    counts = await store.cleanup(NOW, unused_clients_before=NOW - 86400)

    assert counts["unused_clients"] == 1
    assert await store.get_client("unused-old") is None
    for kept in ("used", "unused-new", "machine"):
        assert await store.get_client(kept) is not None, kept


async def test_a_grant_is_the_union_of_its_live_families_scopes(store: OAuthStore) -> None:
    await store.insert_refresh(refresh("r1", "fam1", scope="deploy:read tables:read"))
    await store.insert_refresh(
        refresh("r2", "fam2", scope="apps:write", created_at=NOW + 5, expires_at=NOW + 7200)
    )
    await store.insert_refresh(refresh("r3", "fam3", scope="repos:write"))
    await store.revoke_refresh("r3")  # a revoked family grants nothing
    [grant] = await store.list_grants("acme", "u1", now=NOW + 1)
    assert grant.scope == "apps:write deploy:read tables:read"
    assert (grant.created_at, grant.expires_at) == (NOW, NOW + 7200)


async def test_a_grant_says_when_it_was_last_refreshed(store: OAuthStore) -> None:
    await store.insert_refresh(refresh("r1", "fam1", created_at=NOW))
    await store.insert_refresh(refresh("r2", "fam2", created_at=NOW + 30))
    [grant] = await store.list_grants("acme", "u1", now=NOW + 1)
    assert (grant.created_at, grant.refreshed_at) == (NOW, NOW + 30)


async def test_tenant_clients_are_that_tenants_only(store: OAuthStore) -> None:
    await store.insert_client(client("acme-1", tenant_id="acme", created_at=NOW))
    await store.insert_client(client("acme-2", tenant_id="acme", created_at=NOW + 1))
    await store.insert_client(client("globex-1", tenant_id="globex"))
    await store.insert_client(client("anyone"))  # a registered client of no tenant
    found = await store.tenant_clients("acme")
    assert [c.client_id for c in found] == ["acme-1", "acme-2"]
    assert [c.client_id for c in await store.tenant_clients("acme", limit=1)] == ["acme-1"]
