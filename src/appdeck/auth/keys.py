"""The embedded authorization server's signing keys: EC P-256 (ES256).

One process (the default): ``<data_dir>/keys/signing-jwks.json`` holds the private keys (mode
0600), newest first. The newest signs; every key in the file verifies, so a rotation does not
invalidate tokens already issued. ``appdeck keys rotate`` adds a key and keeps the previous
ones (up to ``KEEP``).

Several replicas (issue 13): the keys are rows of ``signing_keys`` instead
(:meth:`SigningKeys.shared`), each private JWK sealed with ``APPDECK_SECRET_KEY`` (the same on
every replica), so a token one replica signs verifies on all. The first replica creates the
first key, the others read it. A token naming a key id this replica does not know makes it
read the keys again (at most once a second: :meth:`SigningKeys.refresh_for`), and so does
:meth:`SigningKeys.refresh` (the periodic sweep): a rotation made elsewhere is picked up.
The key sets are updated in place, so verifiers built on :attr:`SigningKeys.public_set` see it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any, Final, cast

from joserfc.errors import JoseError
from joserfc.jwk import ECKey, KeySet, KeySetSerialization

from appdeck.common.errors import Internal
from appdeck.platform.crypto import Sealer
from appdeck.storage.signing_keys import SealedKey, SigningKeyStore

log = logging.getLogger("appdeck.auth")

ALGORITHM: Final = "ES256"
KEEP: Final = 3
FILE_NAME: Final = "signing-jwks.json"
REFRESH_EVERY: Final = 1.0
"""Seconds between two reads of the shared keys prompted by unknown key ids (a client sending
made-up kids must not turn each request into a database read)."""
MAX_SEALED: Final = 16_384


def _new_key() -> ECKey:
    kid = f"{int(time.time())}-{secrets.token_hex(4)}"
    return ECKey.generate_key(
        "P-256", parameters={"kid": kid, "use": "sig", "alg": ALGORITHM}, private=True
    )


def _public(keys: list[ECKey]) -> list[Any]:
    return KeySet.import_key_set(
        cast(KeySetSerialization, {"keys": [k.as_dict(private=False) for k in keys]})
    ).keys


def _opened(row: SealedKey, sealer: Sealer) -> ECKey:
    """A stored key, checked: an ES256 private key whose kid is the row's (else ValueError)."""
    if len(row.sealed_jwk) > MAX_SEALED:
        raise ValueError("sealed key too long")
    try:
        jwk = json.loads(sealer.open(row.sealed_jwk))
    except Internal:
        raise ValueError("cannot be decrypted with this APPDECK_SECRET_KEY") from None
    if not isinstance(jwk, dict) or jwk.get("kid") != row.kid or jwk.get("crv") != "P-256":
        raise ValueError("not a P-256 key of this kid")
    if not isinstance(jwk.get("d"), str):
        raise ValueError("not a private key")
    try:
        return ECKey.import_key(jwk)
    except (JoseError, ValueError, TypeError) as exc:
        raise ValueError(f"not a key ({exc})") from None


class SigningKeys:
    def __init__(
        self,
        keys: list[ECKey],
        path: Path | None,
        *,
        store: SigningKeyStore | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        self._keys = keys
        self._path = path
        self._store = store
        self._sealer = sealer
        self._refreshed = time.monotonic()
        self.private_set = KeySet(list(keys))
        self.public_set = KeySet(_public(keys))

    @classmethod
    async def shared(
        cls, store: SigningKeyStore, sealer: Sealer, *, first: list[ECKey] | None = None
    ) -> SigningKeys:
        """The keys in the database; on an empty table, ``first`` (say, the data dir's keys,
        so tokens they signed keep working) or a new key, unless another replica's keys got
        there first (then theirs)."""
        if not await store.newest(1):
            made = first or [_new_key()]
            now = time.time()
            rows = [
                SealedKey(str(k.kid), sealer.seal(json.dumps(k.as_dict(private=True))), now - i)
                for i, k in enumerate(made[:KEEP])
            ]
            if await store.create_first(rows):
                log.info("signing keys created in the database (%s)", rows[0].kid)
        keys = await cls._read(store, sealer)
        if not keys:
            raise Internal(
                "no signing key in the database could be read",
                hint="every replica needs the same APPDECK_SECRET_KEY",
            )
        return cls(keys, None, store=store, sealer=sealer)

    @staticmethod
    async def _read(store: SigningKeyStore, sealer: Sealer) -> list[ECKey]:
        keys: list[ECKey] = []
        for row in await store.newest():
            try:
                keys.append(_opened(row, sealer))
            except ValueError as exc:
                log.warning("signing key %r in the database skipped: %s", row.kid[:64], exc)
            if len(keys) == KEEP:
                break
        return keys

    @property
    def is_shared(self) -> bool:
        return self._store is not None

    def knows(self, kid: str) -> bool:
        return any(k.kid == kid for k in self._keys)

    async def refresh(self) -> bool:
        """Read the shared keys again (a rotation elsewhere); True when they changed."""
        if self._store is None or self._sealer is None:
            return False
        self._refreshed = time.monotonic()
        keys = await self._read(self._store, self._sealer)
        if not keys or [k.kid for k in keys] == [k.kid for k in self._keys]:
            return False
        self._replace(keys)
        log.info("signing keys read again: %s signs", self.kid)
        return True

    async def refresh_for(self, kid: str) -> bool:
        """A refused token names ``kid``: read the keys again when it is unknown here (at most
        once per ``REFRESH_EVERY``). True when it was unknown and is known now (verify the token
        again); False otherwise (a known kid: the token was refused for another reason)."""
        if self.knows(kid) or self._store is None:
            return False
        if time.monotonic() - self._refreshed < REFRESH_EVERY:
            return False
        await self.refresh()
        return self.knows(kid)

    async def rotate_shared(self) -> str:
        """Make a new signing key in the database (the others keep verifying, up to
        ``KEEP``); every replica signs with it once it has read it. Returns its kid."""
        if self._store is None or self._sealer is None:
            raise ValueError("these signing keys are not shared")
        key = _new_key()
        sealed = self._sealer.seal(json.dumps(key.as_dict(private=True)))
        await self._store.add(SealedKey(str(key.kid), sealed, time.time()), keep=KEEP)
        await self.refresh()
        return str(key.kid)

    def _replace(self, keys: list[ECKey]) -> None:
        """New keys, in the same KeySet objects (verifiers hold them)."""
        self._keys = keys
        self.private_set.keys[:] = list(keys)
        self.public_set.keys[:] = _public(keys)

    @classmethod
    def load_or_create(cls, data_dir: Path) -> SigningKeys:
        path = data_dir / "keys" / FILE_NAME
        if path.exists():
            raw = json.loads(path.read_text())
            keys = [ECKey.import_key(k) for k in raw["keys"]]
            return cls(keys, path)
        created = cls([_new_key()], path)
        created._save()
        return created

    @property
    def current(self) -> ECKey:
        return self._keys[0]

    @property
    def kid(self) -> str:
        return str(self.current.kid)

    def public_jwks(self) -> dict[str, Any]:
        return {"keys": [k.as_dict(private=False) for k in self._keys]}

    def rotate(self) -> str:
        """Make a new signing key; keep the previous ones for verification. Returns its kid."""
        if self._store is not None:
            raise ValueError("shared signing keys rotate in the database: rotate_shared()")
        self._replace([_new_key(), *self._keys][:KEEP])
        self._save()
        return self.kid

    def _save(self) -> None:
        if self._path is None:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self._path.parent, 0o700)
        tmp = self._path.with_suffix(".tmp")
        body = json.dumps({"keys": [k.as_dict(private=True) for k in self._keys]}, indent=1)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, self._path)
