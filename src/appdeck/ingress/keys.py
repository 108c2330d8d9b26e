"""KeyGate: the API keys the ingress checks for apps whose spec says ``api_auth: required``.

In memory, per process. The API-key service (:mod:`appdeck.platform.apis.keys`) loads it from
the database at start and updates it after each write; the proxy only reads it. Two maps:

- ``required``: route key → app id, for the routes that require a key. The proxy asks
  ``route in gate.required`` for every request (one dict lookup); only for those routes does
  it call :meth:`KeyGate.check`, which hashes the key presented (SHA-256) and looks the hash
  up: no database access per request.
- the live keys: SHA-256 digest → (app id, key id, may write, expiry). A key opens only the
  route of its own app; a read-only key only ``GET``, ``HEAD`` and ``OPTIONS``.

A key is sent as ``X-API-Key: <key>`` or ``Authorization: Bearer adk_key_…``. Several headers
carrying different keys are refused (the app must never see a key other than the one
checked). Every value is the client's: hostile. It is stripped, its length bounded before it
is hashed, and compared only through its hash.

Until :meth:`KeyGate.loaded` is called the gate is **closed**: every route counts as requiring
a key and every request is answered 503 ``starting`` (after a restart, apps may be routed
before the keys are read, and an app that requires a key must never be served without one).

Last use: a successful check writes ``key id → now`` into a dict that the service takes and
writes to the database every 30 s and at shutdown (no write per request). Every method runs to
completion without awaiting, so on the event loop each is atomic.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "KEY_HEADERS",
    "KEY_PREFIX",
    "MAX_EPHEMERAL",
    "GateKey",
    "GateState",
    "KeyGate",
    "Refusal",
    "bearer_key",
]

KEY_PREFIX: Final = b"adk_key_"
"""How every API key begins (``adk_key_`` + 43 URL-safe characters)."""
MAX_KEY_BYTES: Final = 128
"""A presented value longer than this is no key of ours: refused without being hashed."""
MAX_EPHEMERAL: Final = 1000
"""Short-lived keys (test_api's) held at once; past it the oldest are dropped."""
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
"""What a read-only key may send."""
KEY_HEADERS: Final = frozenset({b"x-api-key", b"authorization"})
"""The headers that may carry a key (Authorization only as ``Bearer adk_key_…``)."""


class Refusal(NamedTuple):
    """Why a request was refused: the status (401, 403, or 503 while the gate is closed),
    the error page's code, and its message."""

    status: int
    code: str
    message: str


MISSING: Final = Refusal(
    401,
    "api_key_required",
    "this app requires an API key: send X-API-Key: <key> or Authorization: Bearer <key>",
)
AMBIGUOUS: Final = Refusal(
    401, "invalid_api_key", "the request carries more than one API key: send exactly one"
)
INVALID: Final = Refusal(
    401, "invalid_api_key", "the API key is not valid for this app (unknown or revoked)"
)
EXPIRED: Final = Refusal(401, "api_key_expired", "the API key has expired")
READ_ONLY: Final = Refusal(
    403, "insufficient_scope", "this API key may only read: GET, HEAD and OPTIONS"
)
CLOSED: Final = Refusal(503, "starting", "the ingress is still loading the apps' API keys")


@dataclass(frozen=True, slots=True)
class GateKey:
    """A key the gate accepts."""

    app_id: int
    key_id: str
    write: bool
    """May send every method (the ``write`` scope); else only :data:`SAFE_METHODS`."""
    expires_at: float | None
    tracked: bool = True
    """Its last use is recorded (False for short-lived test keys, which have no row)."""


@dataclass(frozen=True, slots=True)
class GateState:
    """A copy of a :class:`KeyGate`: loaded or not, required routes, keys by SHA-256 hex."""

    loaded: bool
    required: dict[str, int]
    keys: dict[str, GateKey]


class _Everything(dict[str, int]):
    """``required`` of a gate not loaded yet: every route is in it."""

    def __contains__(self, route: object) -> bool:
        return True


def bearer_key(value: bytes) -> bytes | None:
    """The API key an ``Authorization`` value carries (``Bearer adk_key_…``), or None."""
    scheme, _, token = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    token = token.strip()
    return token if token.startswith(KEY_PREFIX) else None


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | Refusal | None:
    """The one key the request carries, None when it carries none, :data:`AMBIGUOUS` when
    two headers carry different ones."""
    found: bytes | None = None
    for name, value in headers:
        if name not in KEY_HEADERS:  # a set: the name's hash is cached from the head's copy
            continue
        if name == b"x-api-key":
            candidate: bytes | None = value.strip()
        else:
            candidate = bearer_key(value)
            if candidate is None:
                continue  # the app's own credentials: not ours to judge
        if found is not None and candidate != found:
            return AMBIGUOUS
        found = candidate
    return found or None


class KeyGate:
    """In memory, per process: which routes require a key, and the live keys' hashes."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._required: dict[str, int] = {}
        self.required: dict[str, int] = _Everything()
        """Route key → app id of the routes that require a key (the proxy's test). Before
        :meth:`loaded`: every route (the gate is closed)."""
        self._routes: dict[int, str] = {}
        """App id → its route key, for the apps that require a key."""
        self._keys: dict[bytes, GateKey] = {}
        self._digests: dict[str, bytes] = {}
        """Key id → digest, for the tracked keys."""
        self._ephemeral: dict[bytes, GateKey] = {}
        """Short-lived keys, oldest first (they are also in ``_keys``)."""
        self._used: dict[str, float] = {}
        self._listeners: list[Callable[[], None]] = []

    # --- the proxy -----------------------------------------------------------------------

    def check(
        self, route: str, method: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> bytes | Refusal:
        """The id of the key that admits this request to ``route`` (as bytes, for the
        ``X-AppDeck-Key-Id`` header), or why it is refused."""
        if self.required is not self._required:
            return CLOSED
        app_id = self._required.get(route)
        if app_id is None:  # the proxy asks only for required routes
            return INVALID
        key = presented_key(headers)
        if key is None:
            return MISSING
        if isinstance(key, Refusal):
            return key
        if len(key) > MAX_KEY_BYTES or not key.startswith(KEY_PREFIX):
            return INVALID
        entry = self._keys.get(hashlib.sha256(key).digest())
        if entry is None or entry.app_id != app_id:
            return INVALID
        now = self._clock()
        if entry.expires_at is not None and entry.expires_at <= now:
            return EXPIRED
        if not entry.write and method not in SAFE_METHODS:
            return READ_ONLY
        if entry.tracked:
            self._used[entry.key_id] = now
        return entry.key_id.encode()

    # --- what the service tells it ---------------------------------------------------------

    @property
    def is_loaded(self) -> bool:
        return self.required is self._required

    def loaded(self) -> None:
        """Open the gate: from now on only the routes set as required need a key."""
        self.required = self._required
        self._changed()

    def requires(self, app_id: int) -> bool:
        """Whether the app's route requires a key."""
        return app_id in self._routes

    def set_app(self, app_id: int, route: str, required: bool) -> None:
        """The app's route key and whether it requires a key (its spec changed, or it is new)."""
        before = self._routes.pop(app_id, None)
        if before is not None and self._required.get(before) == app_id:
            del self._required[before]
        if required:
            self._routes[app_id] = route
            self._required[route] = app_id
        self._changed()

    def move(self, old: str, new: str) -> None:
        """The route key ``old`` is now ``new`` (the app was renamed)."""
        app_id = self._required.pop(old, None)
        if app_id is not None:
            self._required[new] = app_id
            self._routes[app_id] = new
        self._changed()

    def forget_app(self, app_id: int) -> None:
        """The app is gone: its route and every key of it."""
        route = self._routes.pop(app_id, None)
        if route is not None and self._required.get(route) == app_id:
            del self._required[route]
        for digest in [d for d, k in self._keys.items() if k.app_id == app_id]:
            self._drop(digest)
        self._changed()

    def add(self, key_hash: str, key: GateKey) -> None:
        """Accept the key whose SHA-256 (hex, as stored) is ``key_hash``."""
        digest = bytes.fromhex(key_hash)
        if key.tracked:
            self._digests[key.key_id] = digest
        else:
            self._ephemeral[digest] = key
            self._sweep()
        self._keys[digest] = key
        self._changed()

    def remove(self, key_id: str) -> None:
        """Stop accepting the key (it was revoked)."""
        digest = self._digests.get(key_id)
        if digest is not None:
            self._drop(digest)
        self._changed()

    def replace(self, routes: dict[int, str], keys: Iterable[tuple[str, GateKey]]) -> None:
        """Everything at once, as the database has it (at start, and the periodic resync):
        ``routes`` app id → route key of the apps that require a key; ``keys`` the active
        keys (hash, key). Short-lived keys are kept. Opens the gate."""
        self._routes = dict(routes)
        self._required.clear()
        for app_id, route in routes.items():
            self._required[route] = app_id
        self._keys = dict(self._ephemeral)
        self._digests = {}
        for key_hash, key in keys:
            self.add(key_hash, key)
        self.loaded()

    def take_used(self) -> dict[str, float]:
        """Key id → when it was last used, since the last call (the service writes them)."""
        used, self._used = self._used, {}
        return used

    def put_back(self, used: dict[str, float]) -> None:
        """Last uses :meth:`take_used` gave that could not be written: kept for next time."""
        for key_id, at in used.items():
            if self._used.get(key_id, 0.0) < at:
                self._used[key_id] = at

    def key_count(self) -> int:
        """How many keys it accepts now (short-lived ones included). (No ``__len__``: an
        empty gate must not be falsy, ``keys or KeyGate()`` would replace it.)"""
        return len(self._keys)

    # --- a data plane that copies the gate (the HAProxy driver) --------------------------

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change (synchronously: it must only take note)."""
        self._listeners.append(listener)

    def snapshot(self) -> GateState:
        """Everything the gate holds now, for a data plane to copy."""
        keys = {digest.hex(): key for digest, key in self._keys.items()}
        return GateState(self.is_loaded, dict(self._required), keys)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    # --- inside --------------------------------------------------------------------------

    def _drop(self, digest: bytes) -> None:
        key = self._keys.pop(digest, None)
        if key is not None:
            self._ephemeral.pop(digest, None)
            if self._digests.get(key.key_id) == digest:
                del self._digests[key.key_id]

    def _sweep(self) -> None:
        """Drop expired short-lived keys, and the oldest past :data:`MAX_EPHEMERAL`."""
        now = self._clock()
        for digest in [
            d
            for d, k in self._ephemeral.items()
            if k.expires_at is not None and k.expires_at <= now
        ]:
            self._drop(digest)
        while len(self._ephemeral) > MAX_EPHEMERAL:
            self._drop(next(iter(self._ephemeral)))
