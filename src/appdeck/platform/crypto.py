"""Encryption at rest for env var values: Fernet (AES-128-CBC + HMAC) from ``cryptography``.

The key is ``APPDECK_SECRET_KEY`` (any string; hashed into a Fernet key) or, when unset, a key
generated into ``<data dir>/keys/secret.key`` (0600) on first use.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from appdeck.common.errors import Internal


class Sealer:
    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        self._mac_key = hashlib.sha256(b"appdeck-mac\0" + key).digest()

    @classmethod
    def from_settings(cls, secret_key: str | None, data_dir: Path) -> Sealer:
        if secret_key:
            return cls(base64.urlsafe_b64encode(hashlib.sha256(secret_key.encode()).digest()))
        path = data_dir / "keys" / "secret.key"
        if path.exists():
            return cls(path.read_bytes().strip())
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Fernet.generate_key()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key)
        return cls(key)

    def seal(self, value: str) -> str:
        return self._fernet.encrypt(value.encode()).decode()

    def mac(self, message: str) -> str:
        """A stable keyed digest of ``message`` (hex): the same on every replica sharing the
        key, unguessable without it (custom-domain proof tokens: ``platform/domains``)."""
        return hmac.new(self._mac_key, message.encode(), hashlib.sha256).hexdigest()

    def open(self, sealed: str) -> str:
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            raise Internal(
                "an env var could not be decrypted",
                hint="was APPDECK_SECRET_KEY or the data dir's keys/secret.key changed?",
            ) from None
