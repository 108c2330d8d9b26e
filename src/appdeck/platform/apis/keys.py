"""ApiKeyService: manage_api_key's rules, and what the ingress's key check (the
:class:`~appdeck.ingress.keys.KeyGate`) is told.

The rules:

- Every action needs the ``api.keys`` role on the app (admin or owner); another tenant's app,
  or one the caller has no role on, is not found.
- A key is ``adk_key_`` + 43 URL-safe characters (256 random bits), shown once (create and
  rotate) and stored as its SHA-256; its first 12 characters (``prefix``) are shown in lists.
  Ids are ``key_`` + 12 URL-safe characters.
- A name of 1-100 printable characters; scopes ``read`` (GET, HEAD, OPTIONS) and/or ``write``
  (every method), both by default; an expiry of 1-3,650 days, or none.
- At most :data:`MAX_ACTIVE` active keys per app (neither revoked nor expired).
- Revoking asks first (``ConfirmationRequired``) and stops the key at once in the gate;
  revoking a revoked key does nothing. Rotating makes a new key with the same name, scopes and
  lifetime (``rotated_from`` names the old one) and revokes the old one, in one transaction.

The gate follows the apps: ``api_auth`` of the app's *current* spec (a ``spec.updated``
change, or a new app) takes effect at once, a rename moves the route (the same hook that moves
the ingress route), a deleted app is forgotten. At start the gate is loaded from the database
and opened; every :data:`RESYNC_S` seconds the last-use times gathered by the gate are written
and the gate is loaded again (what another replica changed reaches this one within that
time). Writes and loads hold one lock, so a load can never bring back a key revoked meanwhile.

For test_api: :meth:`ApiKeyService.test_credential` gives a key valid for
:data:`TEST_KEY_SECONDS` seconds, for one app's route, with both scopes; it lives only in the
gate (never stored, never listed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from appdeck.common.errors import (
    ConfirmationRequired,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from appdeck.common.identity import Principal
from appdeck.common.tokens import new_secret, token_hash
from appdeck.ingress.keys import GateKey, KeyGate
from appdeck.model import hostnames
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.storage.api_keys import ApiKeyRow, ApiKeyStore, KeyStatus
from appdeck.storage.apps import AppRecord

__all__ = [
    "MAX_ACTIVE",
    "SCOPES",
    "ApiKey",
    "ApiKeyRow",
    "ApiKeyService",
    "KeyStatus",
    "MadeKey",
]

log = logging.getLogger("appdeck.apis.keys")

KEY_PREFIX: Final = "adk_key_"
PREFIX_CHARS: Final = 12
"""How much of a key lists show (``adk_key_`` and four random characters)."""
SCOPES: Final = ("read", "write")
MAX_ACTIVE: Final = 50
MAX_DAYS: Final = 3650
MAX_NAME: Final = 100
TEST_KEY_SECONDS: Final = 120.0
TEST_KEY_ID: Final = "test_api"
"""What the app sees in ``X-AppDeck-Key-Id`` for a test_api call's key."""
RESYNC_S: Final = 30.0
_DAY: Final = 86_400.0


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key as its app's admins see it (never its value)."""

    row: ApiKeyRow
    status: KeyStatus


@dataclass(frozen=True, slots=True)
class MadeKey:
    """A key just made (create, rotate): ``secret`` is its value, shown only now."""

    key: ApiKey
    secret: str
    enforced: bool
    """Whether the app requires a key now (``api_auth: required``)."""
    replaced: ApiKey | None = None
    """rotate: the key it replaced (revoked now)."""


def _route(app: AppRecord) -> str:
    return hostnames.route_label(app.name, app.tenant_id)


def _requires(app: AppRecord) -> bool:
    return app.spec.get("api_auth") == "required"


def _gate_key(row: ApiKeyRow) -> GateKey:
    return GateKey(row.app_id, row.id, "write" in row.scopes, row.expires_at)


class ApiKeyService:
    def __init__(
        self,
        apps: AppService,
        store: ApiKeyStore,
        gate: KeyGate,
        feed: ChangeFeed,
        *,
        clock: Callable[[], float] = time.time,
        resync_s: float = RESYNC_S,
        published: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._published = published
        """Awaited after a key is made or revoked: returns once the data plane checks keys so
        (HAProxy's maps read back), so a key reported made works and a revoked one stops."""
        self._apps = apps
        self._store = store
        self._gate = gate
        self._feed = feed
        self._clock = clock
        self._resync_s = resync_s
        self._lock = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._renames = 0
        feed.subscribe(self._follow)
        apps.on_rename(self._renamed)

    # -- start, stop and the gate -----------------------------------------------------------

    async def start(self) -> None:
        """At server start: load every app's live keys and api_auth into the gate (which
        opens it), then keep it in step."""
        await self.resync()
        if self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._run(), name="appdeck-api-keys")

    async def close(self) -> None:
        """At shutdown: write what is only in memory (last use times)."""
        task, self._task = self._task, None
        if task is not None:
            self._stop.set()
            try:
                async with asyncio.timeout(30):
                    await task
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            await self.flush()
        except Exception:  # shutting down with the database away: those times are lost
            log.exception("writing API keys' last use at shutdown failed")

    async def resync(self) -> None:
        """Load the gate from the database: the apps that require a key, their live keys."""
        async with self._lock:
            for _ in range(5):
                renames = self._renames
                routes = {
                    app.app_id: hostnames.route_label(app.name, app.tenant_id)
                    for app in await self._store.requiring_apps()
                }
                keys = await self._store.active(self._clock())
                if renames == self._renames:  # else the names read may be stale: again
                    break
            self._gate.replace(routes, [(k.key_hash, _gate_key(k)) for k in keys])

    async def flush(self) -> None:
        """Write the last-use times the gate gathered since the last flush."""
        used = self._gate.take_used()
        try:
            await self._store.touch(used)
        except Exception:
            self._gate.put_back(used)  # the next flush tries again
            raise

    async def _run(self) -> None:
        # stops between writes (never cancelled mid-transaction, see app.py)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._resync_s):
                    await self._stop.wait()
            if self._stop.is_set():
                return
            try:
                await self.flush()
                await self.resync()
            except Exception:  # the database away for a moment: again next time
                log.exception("writing API keys' last use or reloading them failed")

    async def _follow(self, change: Change) -> None:
        if change.kind in ("app.created", "app.updated", "spec.updated"):
            async with self._lock:
                app = await self._apps.store.get(change.app_id)
                if app is None:
                    self._gate.forget_app(change.app_id)
                else:
                    self._gate.set_app(app.id, _route(app), _requires(app))
        elif change.kind == "app.deleted":
            async with self._lock:
                self._gate.forget_app(change.app_id)

    def _renamed(self, old: AppRecord, new: AppRecord) -> None:
        # in the same step as the ingress route's move: no request sees one without the other.
        # A rename does not wait for the lock (the hook cannot await), so a reload counts them.
        self._renames += 1
        self._gate.move(_route(old), _route(new))

    async def _in_effect(self) -> None:
        if self._published is not None:
            await self._published()

    # -- for test_api ---------------------------------------------------------------------

    async def requires_key(self, app_id: int) -> bool:
        """Whether the ingress asks for a key on the app's route (its spec's ``api_auth``)."""
        return self._gate.requires(app_id)

    async def test_credential(self, principal: Principal, app_id: int) -> str | None:
        """None when the app requires no key; else a fresh key for that app's route only,
        read and write, valid :data:`TEST_KEY_SECONDS` seconds, held only in memory. Needs
        the ``api.test`` role (as test_api)."""
        await self._apps.load(principal, app_id, "api.test")
        if not self._gate.requires(app_id):
            return None
        secret = new_secret(KEY_PREFIX, 32)
        expires = self._clock() + TEST_KEY_SECONDS
        key = GateKey(app_id, TEST_KEY_ID, write=True, expires_at=expires, tracked=False)
        self._gate.add(token_hash(secret), key)
        await self._in_effect()
        return secret

    # -- manage_api_key ---------------------------------------------------------------------

    async def create(
        self,
        principal: Principal,
        app_id: int,
        *,
        name: str,
        scopes: Sequence[str] | None = None,
        expires_in_days: int | None = None,
    ) -> MadeKey:
        view = await self._apps.load(principal, app_id, "api.keys")
        _check_name(name)
        wanted = _check_scopes(scopes)
        days = _check_days(expires_in_days)
        now = self._clock()
        row, secret = self._new(
            app_id,
            name=name,
            scopes=wanted,
            expires_at=None if days is None else now + days * _DAY,
            created_by=principal.user,
            now=now,
        )
        async with self._lock:
            await self._store.insert(row, max_active=MAX_ACTIVE, now=now)
            self._gate.add(row.key_hash, _gate_key(row))
        await self._in_effect()
        return MadeKey(self._view(row), secret, _requires(view.app))

    async def list(
        self, principal: Principal, app_id: int, *, offset: int, limit: int
    ) -> list[ApiKey]:
        await self._apps.load(principal, app_id, "api.keys")
        rows = await self._store.for_app(app_id, offset=offset, limit=limit)
        return [self._view(row) for row in rows]

    async def get(self, principal: Principal, app_id: int, key_id: str) -> ApiKey:
        await self._apps.load(principal, app_id, "api.keys")
        return self._view(await self._own(app_id, key_id))

    async def enforced(self, principal: Principal, app_id: int) -> bool:
        """Whether the app's current spec requires a key (``api_auth: required``)."""
        return _requires((await self._apps.load(principal, app_id, "api.keys")).app)

    async def revoke(
        self, principal: Principal, app_id: int, key_id: str, *, confirmed: bool
    ) -> ApiKey:
        await self._apps.load(principal, app_id, "api.keys")
        row = await self._own(app_id, key_id)
        if row.revoked_at is not None:
            return self._view(row)  # nothing to do, nothing to confirm
        if not confirmed:
            raise ConfirmationRequired(
                f"revoking API key {row.id} stops it working at once",
                question=f"Revoke API key {row.name!r} ({row.id}, {row.prefix}…) of app "
                f"{app_id}? Whatever calls the app's API with it gets 401 from now on.",
                what="the revocation",
                hint="call again with confirm: true to go ahead",
            )
        async with self._lock:
            await self._store.revoke(row.id, at=self._clock())
            self._gate.remove(row.id)
        await self._in_effect()
        return self._view(await self._own(app_id, row.id))

    async def rotate(self, principal: Principal, app_id: int, key_id: str) -> MadeKey:
        view = await self._apps.load(principal, app_id, "api.keys")
        old = await self._own(app_id, key_id)
        if old.revoked_at is not None:
            raise FailedPrecondition(
                f"API key {old.id} is revoked: it cannot be rotated",
                hint="create a new key instead",
            )
        now = self._clock()
        lifetime = None if old.expires_at is None else old.expires_at - old.created_at
        row, secret = self._new(
            app_id,
            name=old.name,
            scopes=old.scopes,
            expires_at=None if lifetime is None else now + lifetime,
            created_by=principal.user,
            now=now,
            rotated_from=old.id,
        )
        async with self._lock:
            replaced = await self._store.rotate(old.id, row, max_active=MAX_ACTIVE, now=now)
            if replaced is None:
                raise FailedPrecondition(
                    f"API key {old.id} was revoked meanwhile", hint="create a new key instead"
                )
            self._gate.remove(old.id)
            self._gate.add(row.key_hash, _gate_key(row))
        await self._in_effect()
        return MadeKey(self._view(row), secret, _requires(view.app), self._view(replaced))

    # -- inside ---------------------------------------------------------------------------

    @staticmethod
    def _new(
        app_id: int,
        *,
        name: str,
        scopes: tuple[str, ...],
        expires_at: float | None,
        created_by: str,
        now: float,
        rotated_from: str | None = None,
    ) -> tuple[ApiKeyRow, str]:
        secret = new_secret(KEY_PREFIX, 32)
        row = ApiKeyRow(
            id="key_" + secrets.token_urlsafe(9),  # 12 characters
            app_id=app_id,
            name=name,
            prefix=secret[:PREFIX_CHARS],
            key_hash=token_hash(secret),
            scopes=scopes,
            created_by=created_by,
            created_at=now,
            expires_at=expires_at,
            rotated_from=rotated_from,
        )
        return row, secret

    def _view(self, row: ApiKeyRow) -> ApiKey:
        return ApiKey(row, row.status(self._clock()))

    async def _own(self, app_id: int, key_id: str) -> ApiKeyRow:
        row = await self._store.get(key_id) if len(key_id) <= 100 else None
        if row is None or row.app_id != app_id:  # another app's: not found alike
            raise NotFound(
                f"app {app_id} has no API key {key_id[:80]!r}",
                hint="manage_api_key list shows them",
            )
        return row


def _check_name(name: str) -> None:
    if not 1 <= len(name) <= MAX_NAME or not name.isprintable() or not name.strip():
        raise InvalidArgument(
            f"name must be 1 to {MAX_NAME} printable characters, not only spaces", field="name"
        )


def _check_scopes(scopes: Sequence[str] | None) -> tuple[str, ...]:
    if scopes is None:
        return SCOPES
    if not scopes or len(scopes) > 10:
        raise InvalidArgument("give read, write or both as scopes", field="scopes")
    for scope in scopes:
        if scope not in SCOPES:
            raise InvalidArgument(
                f"unknown scope {scope[:40]!r}",
                hint="read (GET, HEAD, OPTIONS) and/or write (every method)",
                field="scopes",
            )
    return tuple(s for s in SCOPES if s in scopes)


def _check_days(days: int | None) -> int | None:
    if days is not None and (type(days) is not int or not 1 <= days <= MAX_DAYS):
        raise InvalidArgument(
            f"expires_in_days must be a whole number from 1 to {MAX_DAYS}",
            field="expires_in_days",
        )
    return days
