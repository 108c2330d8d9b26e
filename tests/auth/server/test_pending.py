"""Consent between replicas: the page one authorization server shows is answered on another.

Two servers on one database, each with its own engine (its own pool, as two processes would
have), stand for two replicas behind one URL; a browser (one cookie jar) talks to both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette

from appdeck.auth.audit import AuditLog
from appdeck.auth.keys import SigningKeys
from appdeck.auth.server import AuthorizationServer
from appdeck.auth.server.pending import MAX_ATTEMPTS
from appdeck.auth.tokens import TokenIssuer
from appdeck.settings import Settings
from appdeck.storage import Storage, create_engine
from appdeck.storage.audit import AuditStore
from appdeck.storage.consents import ConsentStore
from appdeck.storage.identity import IdentityStore
from appdeck.storage.oauth import OAuthStore
from appdeck.storage.schema import consent_requests, oauth_clients
from tests.support.passwords import password_hash

from .conftest import ISSUER, PASSWORD, RESOURCE, Clock
from .helpers import (
    authorize_url,
    parse_consent,
    pkce_pair,
    post_form,
    query_of,
    redeem,
    register,
)


@dataclass
class Replica:
    server: AuthorizationServer
    http: httpx.AsyncClient
    engine: AsyncEngine


@dataclass
class Pair:
    a: Replica
    b: Replica
    clock: Clock
    engine: AsyncEngine


@pytest.fixture
async def pair(storage: Storage, database_url: str, tmp_path: Path) -> AsyncIterator[Pair]:
    identities = IdentityStore(storage.engine)
    await identities.create_tenant("acme", "Acme Corp")
    await identities.create_user("acme", "ada", password_hash(PASSWORD), "admin")
    keys = SigningKeys.load_or_create(tmp_path)  # one key for both (shared keys: test_keys)
    settings = Settings.model_validate({"data_dir": tmp_path})
    clock = Clock()
    jar = CookieJar()  # one browser
    replicas, audits = [], []
    for _ in range(2):
        engine = create_engine(database_url)
        audit = AuditLog(AuditStore.opener(database_url))
        audits.append(audit)

        async def revoke_jti(jti: str, expires_at: float) -> None:
            return None

        server = AuthorizationServer(
            ISSUER,
            RESOURCE,
            TokenIssuer(keys, ISSUER, RESOURCE, settings.access_token_ttl_seconds),
            keys,
            IdentityStore(engine),
            OAuthStore(engine),
            revoke_jti,
            audit,
            settings,
            clock=clock,
            consents=ConsentStore(engine),
        )
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=Starlette(routes=server.routes())),
            base_url=ISSUER,
        )
        http.cookies.jar = jar
        replicas.append(Replica(server, http, engine))
    try:
        yield Pair(replicas[0], replicas[1], clock, storage.engine)
    finally:
        for replica in replicas:
            await replica.http.aclose()
            await replica.engine.dispose()
        for audit in audits:
            await audit.close()


async def _page(replica: Replica, client_id: str) -> tuple[str, httpx.Response]:
    verifier, challenge = pkce_pair()
    page = await replica.http.get(authorize_url(client_id, challenge))
    assert page.status_code == 200, page.text
    return verifier, page


async def test_consent_shown_on_a_is_posted_on_b_and_the_code_redeemed_on_a(pair: Pair) -> None:
    client = await register(pair.a.http)
    verifier, page = await _page(pair.a, client["client_id"])
    answer = await post_form(pair.b.http, parse_consent(page.text))
    assert answer.status_code == 303, answer.text
    code = query_of(answer.headers["location"])["code"]
    token = await redeem(pair.a.http, client["client_id"], code, verifier)
    assert token.status_code == 200, token.text
    assert "access_token" in token.json()


async def test_one_form_posted_on_both_replicas_at_once_gets_one_code(pair: Pair) -> None:
    client = await register(pair.a.http)
    _, page = await _page(pair.a, client["client_id"])
    form = parse_consent(page.text)
    async with asyncio.timeout(30):
        answers = await asyncio.gather(post_form(pair.a.http, form), post_form(pair.b.http, form))
    assert sorted(r.status_code for r in answers) == [303, 400]
    refused = next(r for r in answers if r.status_code == 400)
    assert "already answered" in refused.text


async def test_wrong_passwords_on_either_replica_count_toward_one_limit(pair: Pair) -> None:
    client = await register(pair.a.http)
    _, page = await _page(pair.a, client["client_id"])
    form = parse_consent(page.text)
    statuses = []
    for attempt in range(MAX_ATTEMPTS):
        replica = (pair.a, pair.b)[attempt % 2]
        statuses.append((await post_form(replica.http, form, password="wrong")).status_code)
    assert statuses == [200] * (MAX_ATTEMPTS - 1) + [429]
    again = await post_form(pair.b.http, form)  # the right password, too late
    assert again.status_code == 400
    assert await ConsentStore(pair.engine).count() == 0


async def test_a_deny_on_b_ends_the_request_shown_on_a(pair: Pair) -> None:
    client = await register(pair.a.http)
    _, page = await _page(pair.a, client["client_id"])
    form = parse_consent(page.text)
    denied = await post_form(pair.b.http, form, decision="deny")
    assert denied.status_code == 303
    assert query_of(denied.headers["location"])["error"] == "access_denied"
    assert (await post_form(pair.a.http, form)).status_code == 400


async def test_a_request_whose_row_does_not_read_back_is_dropped(pair: Pair) -> None:
    client = await register(pair.a.http)
    _, page = await _page(pair.a, client["client_id"])
    form = parse_consent(page.text)
    async with pair.engine.begin() as conn:
        await conn.execute(sa.update(consent_requests).values(body={"v": 1, "csrf": 7}))
    answer = await post_form(pair.b.http, form)
    assert answer.status_code == 400
    assert "expired" in answer.text
    assert await ConsentStore(pair.engine).count() == 0


async def test_expired_requests_are_purged_by_the_cleanup_of_any_replica(pair: Pair) -> None:
    client = await register(pair.a.http)
    for _ in range(3):
        await _page(pair.a, client["client_id"])
    pair.clock.offset += 601
    removed = await pair.b.server.cleanup()
    assert removed["consent_requests"] == 3
    assert await ConsentStore(pair.engine).count() == 0


async def test_a_request_whose_client_was_deleted_meanwhile_is_dropped(pair: Pair) -> None:
    client = await register(pair.a.http)
    _, page = await _page(pair.a, client["client_id"])
    async with pair.engine.begin() as conn:
        await conn.execute(
            sa.delete(oauth_clients).where(oauth_clients.c.client_id == client["client_id"])
        )
    answer = await post_form(pair.b.http, parse_consent(page.text))
    assert answer.status_code == 400
    assert await ConsentStore(pair.engine).count() == 0
