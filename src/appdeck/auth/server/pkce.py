"""PKCE (RFC 7636) with the S256 method only: ``BASE64URL(SHA256(verifier)) == challenge``."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Final

from appdeck.auth.hashing import same

VERIFIER: Final = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
"""Checked with ``fullmatch``: ``^…$`` with ``match`` would take a verifier ending in ``\n``."""


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def well_formed(verifier: str) -> bool:
    return bool(VERIFIER.fullmatch(verifier))


def verify(verifier: str, challenge: str) -> bool:
    return well_formed(verifier) and same(s256(verifier), challenge)
