"""Revocations between replicas: three authenticators on one database and one Redis.

Each "replica" has its own Redis connection, broadcast and :class:`BearerAuthenticator`, and a
trust window of an hour, so only the broadcast (or the reload after a lost connection) can
explain a refusal seen on another replica within a second.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis.asyncio import Redis

from appdeck.auth import AuthError
from appdeck.auth.admin import IdentityAdmin
from appdeck.auth.bearer import REVOKED_CHANNEL, BearerAuthenticator, LocalJwtVerifier
from appdeck.auth.keys import ALGORITHM, SigningKeys
from appdeck.auth.tokens import TokenIssuer, TokenVerifier
from appdeck.common.identity import Principal
from appdeck.events.signals import LocalBroadcast, RedisBroadcast
from appdeck.storage import Storage
from appdeck.storage.identity import IdentityStore
from tests.support.passwords import user_with_password
from tests.support.redis import connect

ISSUER = "http://127.0.0.1:8080"
AUDIENCE = f"{ISSUER}/mcp"
HOUR = 3600.0


@dataclass
class Replica:
    name: str
    bearer: BearerAuthenticator
    broadcast: RedisBroadcast
    redis: Redis


@dataclass
class Cluster:
    replicas: list[Replica]
    admin: IdentityAdmin  # revokes and disables through replica A
    identities: IdentityStore
    issuer: TokenIssuer

    def token(self, user: str = "alice") -> str:
        token, _ = self.issuer.issue(tenant="acme", user=user, scope="apps:read", client_id=None)
        return token


async def _refused(authenticate: Callable[[], Awaitable[Principal]]) -> bool:
    try:
        await authenticate()
    except AuthError:
        return True
    return False


async def _refused_within(seconds: float, replica: Replica, token: str) -> None:
    """Wait (bounded) until ``replica`` refuses ``token``."""
    async with asyncio.timeout(seconds):
        for _ in range(100_000):  # polled: the refusal has no event to wait on
            if await _refused(lambda: replica.bearer.authenticate(f"Bearer {token}")):
                return
            await asyncio.sleep(0.01)


@pytest.fixture
async def cluster(storage: Storage, redis_prefix: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    identities = IdentityStore(storage.engine)
    keys = SigningKeys.load_or_create(tmp_path)
    issuer = TokenIssuer(keys, ISSUER, AUDIENCE, 3600)
    replicas = []
    for name in "ABC":
        redis = connect(client_name=f"{redis_prefix}-{name}")
        broadcast = RedisBroadcast(redis, redis_prefix)
        await broadcast.start()
        bearer = BearerAuthenticator(
            verifier=LocalJwtVerifier(
                TokenVerifier(keys.public_set, ISSUER, AUDIENCE, [ALGORITHM]).verify
            ),
            identities=identities,
            resource_metadata_url=f"{ISSUER}/.well-known/oauth-protected-resource",
            trust_seconds=HOUR,
            broadcast=broadcast,
        )
        await bearer.start()
        replicas.append(Replica(name, bearer, broadcast, redis))
    admin = IdentityAdmin(identities, issuer, listener=replicas[0].bearer)
    await admin.create_tenant("acme")
    await user_with_password(identities, "acme", "alice", "correct horse battery", "admin")
    await user_with_password(identities, "acme", "bob", "another password!")
    try:
        yield Cluster(replicas, admin, identities, issuer)
    finally:
        for replica in replicas:
            await replica.bearer.close()
            await replica.broadcast.close()
            await replica.redis.aclose()


async def test_a_token_revoked_on_a_is_refused_on_b_and_c_within_a_second(
    cluster: Cluster,
) -> None:
    a, b, c = cluster.replicas
    token = cluster.token()
    for replica in (a, b, c):  # each has it cached: the hot path must notice too
        assert (await replica.bearer.authenticate(f"Bearer {token}")).user == "alice"
    jti = (await a.bearer.authenticate(f"Bearer {token}")).token_id
    assert jti is not None
    await cluster.admin.revoke_token(jti)
    assert await _refused(lambda: a.bearer.authenticate(f"Bearer {token}"))
    await _refused_within(1.0, b, token)
    await _refused_within(1.0, c, token)
    other = cluster.token()
    assert (await b.bearer.authenticate(f"Bearer {other}")).user == "alice"


async def test_a_revocation_whose_message_was_lost_is_read_after_the_reconnect(
    cluster: Cluster, redis_prefix: str
) -> None:
    a, b, _ = cluster.replicas
    token = cluster.token()
    principal = await b.bearer.authenticate(f"Bearer {token}")
    back = asyncio.Event()
    b.broadcast.on_reconnect(back.set)
    killed = 0
    for client in await a.redis.client_list(_type="pubsub"):  # B's subscriber only
        if client.get("name") == f"{redis_prefix}-B":
            killed += await a.redis.client_kill_filter(_id=client["id"])
    assert killed == 1
    # revoked while B is away: only the store has it (as if the message were lost)
    assert principal.token_id is not None
    await cluster.identities.revoke_jti(principal.token_id, HOUR * 1e6)
    async with asyncio.timeout(10):
        await back.wait()
    assert await _refused(lambda: b.bearer.authenticate(f"Bearer {token}"))


async def test_a_revocation_whose_message_was_lost_is_read_after_the_trust_window(
    storage: Storage, tmp_path: Path
) -> None:
    now = [1_000.0]
    identities = IdentityStore(storage.engine)
    keys = SigningKeys.load_or_create(tmp_path)
    issuer = TokenIssuer(keys, ISSUER, AUDIENCE, 3600)
    bearer = BearerAuthenticator(
        verifier=LocalJwtVerifier(
            TokenVerifier(keys.public_set, ISSUER, AUDIENCE, [ALGORITHM]).verify
        ),
        identities=identities,
        resource_metadata_url="x",
        clock=lambda: now[0],
        trust_seconds=10,
        broadcast=LocalBroadcast(),
    )
    await bearer.start()
    token, claims = issuer.issue(tenant="acme", user="alice", scope="apps:read", client_id=None)
    await bearer.authenticate(f"Bearer {token}")
    await identities.revoke_jti(claims.jti, HOUR * 1e6)  # another replica; no message
    assert (await bearer.authenticate(f"Bearer {token}")).user == "alice"  # still trusted
    now[0] += 11
    assert await _refused(lambda: bearer.authenticate(f"Bearer {token}"))
    await bearer.close()


async def test_a_pat_revoked_on_a_is_refused_on_b_within_a_second(cluster: Cluster) -> None:
    _, b, _ = cluster.replicas
    token, record = await cluster.admin.create_pat("acme", "alice", "apps:read")
    assert (await b.bearer.authenticate(f"Bearer {token}")).kind == "pat"
    await cluster.admin.revoke_token(record.id)
    await _refused_within(1.0, b, token)


async def test_a_user_disabled_on_a_is_refused_on_c_within_a_second(cluster: Cluster) -> None:
    _, _, c = cluster.replicas
    bob = await cluster.identities.find_user("acme", "bob")
    assert bob is not None
    token = cluster.token(bob.id)
    assert (await c.bearer.authenticate(f"Bearer {token}")).user == bob.id
    await cluster.admin.set_user_disabled("acme", "bob", True)
    await _refused_within(1.0, c, token)


async def test_malformed_revocation_messages_are_dropped_and_the_reader_goes_on(
    cluster: Cluster, redis_prefix: str
) -> None:
    a, b, _ = cluster.replicas
    token = cluster.token()
    principal = await b.bearer.authenticate(f"Bearer {token}")
    for junk in [
        b"\xff\xfe",
        b"[]",
        b"null",
        b'{"jti": 5}',
        b'{"tenant": "acme", "user": 7}',
        json.dumps({"jti": "x" * 10_000}).encode(),
        b"{" * 5000,
        b'{"kind": "unknown"}',
    ]:
        await a.broadcast.publish(REVOKED_CHANNEL, junk)
    assert (await b.bearer.authenticate(f"Bearer {token}")).user == "alice"
    assert principal.token_id is not None
    await a.bearer.revoke_jti(principal.token_id, HOUR * 1e6)
    await _refused_within(1.0, b, token)


async def test_without_a_broadcast_a_revocation_applies_here_at_once(
    storage: Storage, tmp_path: Path
) -> None:
    keys = SigningKeys.load_or_create(tmp_path)
    issuer = TokenIssuer(keys, ISSUER, AUDIENCE, 3600)
    bearer = BearerAuthenticator(
        verifier=LocalJwtVerifier(
            TokenVerifier(keys.public_set, ISSUER, AUDIENCE, [ALGORITHM]).verify
        ),
        identities=IdentityStore(storage.engine),
        resource_metadata_url="x",
    )
    await bearer.start()
    token, claims = issuer.issue(tenant="acme", user="alice", scope="apps:read", client_id=None)
    await bearer.authenticate(f"Bearer {token}")
    await bearer.revoke_jti(claims.jti, HOUR * 1e6)
    assert await _refused(lambda: bearer.authenticate(f"Bearer {token}"))
    bearer.forget_principal("acme")  # no broadcast: nothing to publish, nothing raised
    await bearer.close()
