"""KeyGate: the API keys the ingress checks for apps whose spec says ``api_auth: required``.
(Skeleton: filled in by the API-keys work of issue 12.)"""

from __future__ import annotations


class KeyGate:
    """In memory, per process: which routes require a key, and the live keys' hashes."""

    def __init__(self) -> None:
        self.required: set[str] = set()
