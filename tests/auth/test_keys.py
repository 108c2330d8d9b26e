"""Signing keys: in the data dir (one process), or in the database shared by every replica."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from appdeck.auth.bearer import LocalJwtVerifier, header_kid
from appdeck.auth.keys import ALGORITHM, KEEP, SigningKeys
from appdeck.auth.tokens import InvalidToken, TokenIssuer, TokenVerifier
from appdeck.common.errors import Internal
from appdeck.platform.crypto import Sealer
from appdeck.storage import Storage, create_engine
from appdeck.storage.schema import signing_keys
from appdeck.storage.signing_keys import SealedKey, SigningKeyStore

ISSUER = "http://127.0.0.1:8080"
AUDIENCE = f"{ISSUER}/mcp"
SECRET = "one secret for every replica"


def _sealer(secret: str = SECRET) -> Sealer:
    return Sealer.from_settings(secret, Path("/nonexistent"))  # a secret: no file is read


def _verifier(keys: SigningKeys) -> LocalJwtVerifier:
    verify = TokenVerifier(keys.public_set, ISSUER, AUDIENCE, [ALGORITHM]).verify
    return LocalJwtVerifier(verify, keys.refresh_for)


def _token(keys: SigningKeys) -> str:
    token, _ = TokenIssuer(keys, ISSUER, AUDIENCE, 600).issue(
        tenant="acme", user="alice", scope="apps:read", client_id=None
    )
    return token


class CountingStore(SigningKeyStore):
    reads = 0

    async def newest(self, limit: int = 20) -> list[SealedKey]:
        self.reads += 1
        return await super().newest(limit)


async def test_replicas_starting_together_agree_on_one_first_key(
    storage: Storage, database_url: str
) -> None:
    engines = [create_engine(database_url) for _ in range(3)]
    try:
        async with asyncio.timeout(30):
            replicas = await asyncio.gather(
                *(SigningKeys.shared(SigningKeyStore(e), _sealer()) for e in engines)
            )
    finally:
        for engine in engines:
            await engine.dispose()
    assert len({keys.kid for keys in replicas}) == 1
    async with storage.engine.connect() as conn:
        rows = (await conn.execute(sa.select(signing_keys))).all()
    assert len(rows) == 1
    assert '"d"' not in rows[0].sealed_jwk  # sealed: the private key is not readable


async def test_a_token_signed_by_one_replica_verifies_on_another(storage: Storage) -> None:
    a = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    b = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    claims = await _verifier(b).verify(_token(a))
    assert claims["sub"] == "alice"
    assert b.public_jwks() == a.public_jwks()


async def test_a_rotation_on_one_replica_is_picked_up_by_the_others(storage: Storage) -> None:
    a = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    b = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    before = _token(a)
    verifier = _verifier(b)  # built once: it must see the new key in its key set
    new_kid = await a.rotate_shared()
    assert a.kid == new_kid
    assert not b.knows(new_kid)
    b._refreshed = 0.0  # the last read was just now; a second has passed in this story
    assert (await verifier.verify(_token(a)))["sub"] == "alice"  # unknown kid: read again
    assert b.kid == new_kid
    assert (await verifier.verify(before))["sub"] == "alice"  # the old key still verifies
    assert [k["kid"] for k in b.public_jwks()["keys"]] == [k.kid for k in a._keys]


async def test_only_the_newest_keys_are_kept(storage: Storage) -> None:
    a = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    for _ in range(KEEP + 2):
        await a.rotate_shared()
    async with storage.engine.connect() as conn:
        count = (await conn.execute(sa.select(sa.func.count()).select_from(signing_keys))).scalar()
    assert count == KEEP
    assert len(a.public_jwks()["keys"]) == KEEP


async def test_made_up_key_ids_read_the_database_at_most_once_a_second(
    storage: Storage, tmp_path: Path
) -> None:
    store = CountingStore(storage.engine)
    a = await SigningKeys.shared(store, _sealer())
    store.reads = 0
    a._refreshed = 0.0  # the last read was long ago
    forged = _token(SigningKeys.load_or_create(tmp_path))  # a key no replica has
    verifier = _verifier(a)
    for _ in range(50):
        with pytest.raises(InvalidToken):
            await verifier.verify(forged)
    assert store.reads == 1


async def test_a_replica_with_another_secret_key_cannot_start(storage: Storage) -> None:
    await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    with pytest.raises(Internal, match="no signing key"):
        await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer("not the same"))


async def test_rows_that_are_not_sealed_private_keys_of_their_kid_are_skipped(
    storage: Storage,
) -> None:
    store = SigningKeyStore(storage.engine)
    good = await SigningKeys.shared(store, _sealer())
    sealer = _sealer()
    public = good.public_jwks()["keys"][0]
    bad = [
        SealedKey("junk", "not sealed at all", 2e9),
        SealedKey("notjson", sealer.seal("{"), 2e9 + 1),
        SealedKey("public", sealer.seal(json.dumps({**public, "kid": "public"})), 2e9 + 2),
        SealedKey("other-kid", sealer.seal(json.dumps({**public, "d": "AAAA"})), 2e9 + 3),
        SealedKey("huge", "x" * 100_000, 2e9 + 4),
    ]
    async with storage.engine.begin() as conn:
        await conn.execute(
            sa.insert(signing_keys),
            [{"kid": k.kid, "sealed_jwk": k.sealed_jwk, "created_at": k.created_at} for k in bad],
        )
    again = await SigningKeys.shared(SigningKeyStore(storage.engine), _sealer())
    assert again.kid == good.kid  # every newer row was refused
    assert (await _verifier(again).verify(_token(good)))["sub"] == "alice"


async def test_the_data_dirs_keys_can_be_the_first_shared_keys(
    storage: Storage, tmp_path: Path
) -> None:
    local = SigningKeys.load_or_create(tmp_path)
    local.rotate()
    issued_before = _token(local)
    shared = await SigningKeys.shared(
        SigningKeyStore(storage.engine), _sealer(), first=list(local._keys)
    )
    assert shared.kid == local.kid
    assert (await _verifier(shared).verify(issued_before))["sub"] == "alice"


async def test_in_the_data_dir_a_rotation_reaches_verifiers_built_before_it(
    tmp_path: Path,
) -> None:
    keys = SigningKeys.load_or_create(tmp_path)
    verifier = _verifier(keys)
    kid = keys.rotate()
    assert (await verifier.verify(_token(keys)))["sub"] == "alice"
    assert SigningKeys.load_or_create(tmp_path).kid == kid  # saved
    with pytest.raises(ValueError, match="not shared"):
        await keys.rotate_shared()


async def test_a_malformed_token_header_is_refused_without_reading_the_keys(
    storage: Storage,
) -> None:
    store = CountingStore(storage.engine)
    keys = await SigningKeys.shared(store, _sealer())
    keys._refreshed = 0.0
    store.reads = 0
    verifier = _verifier(keys)
    for junk in ["", "...", "!!!.x.y", "W10.x.y", "bnVsbA.x.y", "e30.x.y", "a" * 50_000 + ".x.y"]:
        assert header_kid(junk) is None
        with pytest.raises(InvalidToken):
            await verifier.verify(junk)
    assert store.reads == 0
