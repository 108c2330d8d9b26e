"""Authentication: turns the ``Authorization`` header into a :class:`Principal`.

The transport depends only on :class:`Authenticator`. Until a verifier is configured, the
server runs with :class:`AllowAnonymous` (development and the protocol tests).
"""

from __future__ import annotations

from typing import Protocol

from appdeck.common.identity import ANONYMOUS, Principal


class AuthError(Exception):
    """The request is not authenticated: HTTP 401 with a ``WWW-Authenticate`` challenge."""

    def __init__(self, message: str, *, error: str = "invalid_token", scope: str | None = None):
        super().__init__(message)
        self.message = message
        self.error = error
        self.scope = scope


class Authenticator(Protocol):
    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal behind an ``Authorization`` header value; raises :class:`AuthError`."""
        ...

    def challenge(self, error: AuthError | None = None) -> str:
        """The ``WWW-Authenticate`` value for a 401."""
        ...


class AllowAnonymous:
    """Every caller is the anonymous principal (no authorization server configured)."""

    async def authenticate(self, authorization: str | None) -> Principal:
        return ANONYMOUS

    def challenge(self, error: AuthError | None = None) -> str:
        return "Bearer"
