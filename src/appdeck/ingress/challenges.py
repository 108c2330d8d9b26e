"""ACME HTTP-01 answers the data plane serves (RFC 8555 §8.3).

The control plane's ACME client (``platform/tls``) puts ``token → key authorization`` here
while an order is pending; the data plane answers ``GET /.well-known/acme-challenge/<token>``
on plain HTTP, for any host it serves, with the key authorization as ``text/plain``, and 404
for an unknown token. Nothing else on that path reaches an app.
"""

from __future__ import annotations

import re
from typing import Final

from appdeck.ingress.watched import Watched

PATH_PREFIX: Final = "/.well-known/acme-challenge/"
TOKEN: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""A token is base64url without padding (RFC 8555 §8.3); 128 characters is far beyond any CA's."""
KEY_AUTHORIZATION: Final = re.compile(r"[A-Za-z0-9_-]{1,128}\.[A-Za-z0-9_-]{1,128}")


class Challenges(Watched[str]):
    """HTTP-01 token → key authorization."""

    def put(self, token: str, key_authorization: str) -> None:
        if not TOKEN.fullmatch(token):
            raise ValueError("invalid ACME token")
        if not KEY_AUTHORIZATION.fullmatch(key_authorization):
            raise ValueError("invalid ACME key authorization")
        self._put(token, key_authorization)

    def drop(self, token: str) -> None:
        self._drop(token)

    def answer(self, path: str) -> str | None:
        """The body for a request path, or None when it is not a known challenge."""
        if not path.startswith(PATH_PREFIX):
            return None
        token = path[len(PATH_PREFIX) :]
        return self.get(token) if TOKEN.fullmatch(token) else None
