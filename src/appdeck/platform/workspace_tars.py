"""Serving a release's prepared workspace to the pod that runs it (issue 25 §2, "Builds").

A Kubernetes pod's init container fetches ``/internal/releases/<release_id>/workspace.tar``
with a bearer token of that release's own (the release's ``source`` Secret). The token is an
HMAC of the release id under the server's key (:meth:`Sealer.mac
<appdeck.platform.crypto.Sealer.mac>`, keyed by ``APPDECK_SECRET_KEY`` or the data dir's key):
every replica sharing the key computes the same one, nothing is stored, and it opens exactly
one release: a token for another release (another tenant's, say) never matches. It is
checked in constant time, *before* anything is looked up, so a refusal tells nothing of which
releases exist; the release's workspace is looked for only then.

A token cannot be revoked one by one (it lives as long as the key): what it opens is one
release's built workspace, which the app's own pods run anyway, and that release's deletion
ends it (nothing left to serve). Rotating the key ends them all.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from appdeck.common.errors import AppDeckError, NotFound, Unavailable
from appdeck.runtime.export import WorkspaceTar

RELEASE_ID: Final = re.compile(r"[0-9]{1,19}-[0-9]{1,19}")
"""``<app_id>-<number>`` (:attr:`Release.release_id <appdeck.model.release.Release>`)."""
MAX_TOKEN: Final = 512
DEFAULT_MAX_MB: Final = 256
"""The largest tar served (``ClusterLimits.max_source_mb``'s default: what the pod takes)."""
MAX_OPEN: Final = 8
"""Tars made at once by this server (each is a sandboxed process): a pod in a crash loop, or
many pods of a scale-up, wait their turn (503 with ``Retry-After``; the init container retries)
instead of starting a process each."""
_PURPOSE: Final = "workspace.tar\0"


class Unauthenticated(AppDeckError):
    """No token, or not this release's: the same answer whatever the release."""

    code = "unauthenticated"


class WorkspaceSource(Protocol):
    """The runtime's side: a built release's workspace as a tar (the local driver's
    ``workspace_tar``), None when it has none."""

    def __call__(self, release_id: str, max_bytes: int) -> Awaitable[WorkspaceTar | None]: ...


class WorkspaceTars:
    """Tokens for, and the tars of, releases' prepared workspaces."""

    def __init__(
        self,
        mac: Callable[[str], str],
        source: WorkspaceSource,
        *,
        max_mb: int = DEFAULT_MAX_MB,
        max_open: int = MAX_OPEN,
    ) -> None:
        if max_mb <= 0 or max_open <= 0:
            raise ValueError("max_mb and max_open must be positive")
        self._mac = mac
        self._source = source
        self.max_bytes = max_mb * 1024 * 1024
        self.max_open = max_open
        self.open_now = 0
        """Tars being made or sent now."""

    def token(self, release_id: str) -> str:
        """The bearer token that opens ``release_id``'s workspace (for its source Secret)."""
        if not RELEASE_ID.fullmatch(release_id):
            raise ValueError(f"{release_id!r} is not a release id")
        return self._mac(_PURPOSE + release_id)

    def authentic(self, release_id: str, presented: str | None) -> bool:
        """``presented`` is ``release_id``'s token (compared in constant time)."""
        if presented is None or not 0 < len(presented) <= MAX_TOKEN or not presented.isascii():
            return False
        if not RELEASE_ID.fullmatch(release_id):
            expected = self._mac(_PURPOSE)  # the same work as for a real id, never equal
            hmac.compare_digest(expected.encode(), presented.encode())
            return False
        return hmac.compare_digest(self.token(release_id).encode(), presented.encode())

    async def open(self, release_id: str, presented: str | None) -> WorkspaceTar:
        """The tar of ``release_id``'s workspace for the holder of its token.

        :class:`Unauthenticated` without it (nothing looked up); :class:`NotFound` when the
        release has no built workspace here; ``QuotaExceeded`` over the limit, before a
        byte. The caller must ``aclose()`` what it gets."""
        if not self.authentic(release_id, presented):
            raise Unauthenticated("no workspace for this token")
        if self.open_now >= self.max_open:
            raise Unavailable("too many workspace downloads at once: retry in a moment")
        self.open_now += 1
        try:
            tar = await self._source(release_id, self.max_bytes)
        except BaseException:
            self.open_now -= 1
            raise
        if tar is None:
            self.open_now -= 1
            raise NotFound(f"release {release_id} has no built workspace on this server")
        tar.on_close = self._closed
        return tar

    def _closed(self) -> None:
        self.open_now -= 1
