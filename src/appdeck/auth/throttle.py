"""Failure throttles: after a few failures a key (an IP, an account) waits, longer each time.

:class:`FailureThrottle` counts failures per key (a client IP, ``tenant/username``...). The
first ``free`` failures within ``window`` seconds cost nothing; every one after that blocks the
key for ``base_seconds``, doubled per further failure, up to ``max_seconds``. A key with no
failure for ``window`` seconds starts afresh. Memory is bounded: at most ``max_keys`` keys are
kept, the least recently failed forgotten first. The clock is injectable (tests).

Used for 401s at ``/mcp`` per IP (:class:`~appdeck.transport.guard.Guard`), sign-in attempts
per IP and per account (``auth.server.authorize``), and, as a plain rate, ``/register`` per IP.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from appdeck.auth.ratelimit import RateLimiter

MAX_KEYS: Final = 50_000


@dataclass(slots=True)
class _Record:
    failures: int
    last: float
    blocked_until: float


class FailureThrottle:
    def __init__(
        self,
        *,
        free: int,
        window: float,
        base_seconds: float = 1.0,
        max_seconds: float = 300.0,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free = free
        self.window = window
        self.base = base_seconds
        self.max = max_seconds
        self._max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[str, _Record] = OrderedDict()

    def blocked(self, key: str) -> int | None:
        """Whole seconds ``key`` must still wait (at least 1), or None when it may try."""
        record = self._keys.get(key)
        if record is None:
            return None
        left = record.blocked_until - self._clock()
        return math.ceil(left) if left > 0 else None

    def failed(self, key: str) -> int | None:
        """Count a failure of ``key``; the whole seconds it is now blocked for, or None."""
        now = self._clock()
        record = self._keys.get(key)
        if record is None or now - record.last > self.window:
            record = _Record(0, now, 0.0)
            self._keys[key] = record
            if len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        self._keys.move_to_end(key)
        record.failures += 1
        record.last = now
        over = record.failures - self.free
        if over <= 0:
            return None
        pause = min(self.max, self.base * float(2 ** min(over - 1, 32)))
        record.blocked_until = max(record.blocked_until, now + pause)
        return math.ceil(pause)

    def forget(self, key: str) -> None:
        """``key`` succeeded: its failures no longer count."""
        self._keys.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys)


SIGN_IN_WINDOW: Final = 900.0
SIGN_IN_MAX_WAIT: Final = 900.0
MCP_WINDOW: Final = 60.0


@dataclass(frozen=True, slots=True)
class AuthThrottles:
    """The authorization server's limits: sign-in failures per IP and per account (tenant +
    username), and dynamic client registrations per IP."""

    sign_in_ip: FailureThrottle
    sign_in_account: FailureThrottle
    register: RateLimiter

    @classmethod
    def build(
        cls,
        *,
        sign_in_per_ip: int = 20,
        sign_in_per_account: int = 5,
        register_per_hour: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> AuthThrottles:
        def sign_in(free: int) -> FailureThrottle:
            return FailureThrottle(
                free=free, window=SIGN_IN_WINDOW, max_seconds=SIGN_IN_MAX_WAIT, clock=clock
            )

        return cls(
            sign_in_ip=sign_in(sign_in_per_ip),
            sign_in_account=sign_in(sign_in_per_account),
            register=RateLimiter(register_per_hour / 3600.0, register_per_hour, clock=clock),
        )

    def sign_in_wait(self, ip: str | None, account: str) -> int | None:
        """Whole seconds a sign-in from ``ip`` for ``account`` must wait, or None."""
        waits = [self.sign_in_account.blocked(account)]
        if ip is not None:
            waits.append(self.sign_in_ip.blocked(ip))
        return max((w for w in waits if w is not None), default=None)

    def sign_in_failed(self, ip: str | None, account: str) -> None:
        self.sign_in_account.failed(account)
        if ip is not None:
            self.sign_in_ip.failed(ip)

    def sign_in_succeeded(self, account: str) -> None:
        """The account's owner got in: their earlier typos stop counting. The IP's count
        stays (one good account must not wash an address's guesses at others clean)."""
        self.sign_in_account.forget(account)
