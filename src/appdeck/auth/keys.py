"""The embedded authorization server's signing keys: EC P-256 (ES256), kept in the data dir.

``<data_dir>/keys/signing-jwks.json`` holds the private keys (mode 0600), newest first. The
newest signs; every key in the file verifies, so a rotation does not invalidate tokens already
issued. ``appdeck keys rotate`` adds a key and keeps the previous ones (up to ``KEEP``).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Final, cast

from joserfc.jwk import ECKey, KeySet, KeySetSerialization

ALGORITHM: Final = "ES256"
KEEP: Final = 3
FILE_NAME: Final = "signing-jwks.json"


def _new_key() -> ECKey:
    kid = f"{int(time.time())}-{secrets.token_hex(4)}"
    return ECKey.generate_key(
        "P-256", parameters={"kid": kid, "use": "sig", "alg": ALGORITHM}, private=True
    )


class SigningKeys:
    def __init__(self, keys: list[ECKey], path: Path) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        self._keys = keys
        self._path = path
        self.private_set = KeySet(list(keys))
        self.public_set = KeySet.import_key_set(cast(KeySetSerialization, self.public_jwks()))

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
        self._keys = [_new_key(), *self._keys][:KEEP]
        self.private_set = KeySet(list(self._keys))
        self.public_set = KeySet.import_key_set(cast(KeySetSerialization, self.public_jwks()))
        self._save()
        return self.kid

    def _save(self) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self._path.parent, 0o700)
        tmp = self._path.with_suffix(".tmp")
        body = json.dumps({"keys": [k.as_dict(private=True) for k in self._keys]}, indent=1)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(body)
        os.replace(tmp, self._path)
