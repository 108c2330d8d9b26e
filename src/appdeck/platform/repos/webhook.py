"""GitHub's push webhook, pure: the ``X-Hub-Signature-256`` check and the push payload.

The signature is ``sha256=`` + the hex HMAC-SHA256 of the raw body under the app's webhook
secret (GitHub: "Validating webhook deliveries"), compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Final

from appdeck.platform.repos.git import SHA

MAX_BODY: Final = 1 << 20
"""Bytes of a webhook body read (a push payload is a few KB; GitHub caps them at 25 MB)."""
_ZERO: Final = "0" * 40


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signed(secret: str, body: bytes, header: str | None) -> bool:
    expected = signature(secret, body)
    return hmac.compare_digest(expected.encode(), (header or "").strip().encode("utf-8", "replace"))


@dataclass(frozen=True, slots=True)
class Push:
    branch: str | None
    """The pushed branch (``None``: a tag or another ref)."""
    commit: str | None
    """The new head (``None``: the branch was deleted)."""
    message: str


def parse_push(body: bytes) -> Push | None:
    """The push in a payload, or ``None`` when the body is not a push payload."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("ref"), str):
        return None
    ref: str = data["ref"]
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    after = data.get("after")
    commit = after if isinstance(after, str) and SHA.fullmatch(after) else None
    if data.get("deleted") is True or after == _ZERO:
        commit = None
    head = data.get("head_commit")
    message = head.get("message") if isinstance(head, dict) else None
    return Push(branch, commit, message[:2000] if isinstance(message, str) else "")
