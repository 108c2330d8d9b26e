"""Per-token rate limits: a token bucket per bearer token.

:class:`RateLimiter` keeps the buckets in this process's memory (bounded): the embedded
default. With several replicas behind one URL each would grant the whole rate (N replicas,
N times the limit), so :class:`RedisRateLimiter` keeps them in Redis instead: one Lua script reads,
refills, takes and writes a bucket atomically on Redis's own clock (one clock for every
replica). Both answer :meth:`take`: None when allowed, else the milliseconds to wait.

A round trip per check cost a replica 2.4x the CPU per call of one process (issue 26: redis-py's
asyncio client, not Redis), so a replica **leases** tokens: the script takes up to ``C`` tokens
at once and the replica spends them locally, without a round trip, for at most
``lease_seconds``; what is left then is given back to the bucket with the next lease (same round
trip). The lease adapts to the token's rate seen by this replica (``rate x lease_seconds``
worth, at least 1), so a token used a few times a second still takes one token per round trip
and is limited exactly; only a busy token is leased in bulk. ``C`` (:attr:`RedisRateLimiter.
lease_cap`) is ``min(max_lease, rate x lease_seconds)``, at least 1: 5 with the defaults
(50/s, 0.1 s).

**The bound, for R replicas.** Count every token in one pool: the bucket's plus the ones held
in leases. A grant spends one from the pool, the bucket refills at ``rate`` up to ``burst``, a
give-back moves tokens from a lease to the bucket (capped at ``burst``, the rest lost) and a
lease dropped (evicted, Redis failing mid-round-trip) loses them. So over any window of ``W``
seconds the grants across all replicas are at most the pool at its start plus the refill:

    granted <= rate x W + burst + R x C

(each replica holds at most one lease of at most ``C`` tokens per key). ``C = 1``
(``lease_seconds = 0``, or a rate under 20/s with 0.1 s) holds nothing between checks: one round
trip per check as before leases, and exactly ``rate x W + burst``. A client gains nothing more
by spreading its calls over replicas: ``R x C`` is the most ever held, whoever holds it. The
other way, a client may be refused while up to
``(R - 1) x C`` tokens sit in other replicas' leases (given back when that replica next sees the
token, after its lease expired; lost if it never does, which the bucket's refill makes good
within ``C / rate`` seconds). With the defaults and three replicas: at most 15 tokens over
``50 x W + 200``, at most 10 refused early.

When Redis fails, ``fallback`` (this process's own buckets) answers: per-replica limits, R times
the rate, as before leases. Tokens already leased are spent first (they were granted by Redis).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from appdeck.common.outages import redis_errors

if TYPE_CHECKING:  # loaded by replica mode only (appdeck.common.outages)
    from redis.asyncio import Redis

log = logging.getLogger("appdeck.auth")

MAX_BUCKETS: Final = 50_000
WARN_EVERY: Final = 10.0
"""Seconds between two warnings that Redis is unreachable (the fallback is logged, not each
request)."""
PAUSE_AFTER_FAILURE: Final = 1.0
"""Seconds the fallback answers alone after Redis failed, so an outage costs one request a
timeout per second instead of every request."""
LEASE_SECONDS: Final = 0.1
"""How long a replica may spend leased tokens before giving back what is left: short, so the
tokens one replica holds are the last ~0.1 s of its traffic for that token."""
MAX_LEASE: Final = 64
"""Most tokens one lease takes: past ~64 the round trip is a small part of the calls it
covers (1/64 of a round trip per call), and each replica may hold this many over the limit."""
_DOWN: Final = -1
""":meth:`RedisRateLimiter._renew`'s answer when Redis failed (else 0: leased, >0: wait ms)."""


class TokenBuckets(Protocol):
    async def take(self, key: str) -> int | None:
        """Take one token for ``key``: None when allowed, else milliseconds to wait."""
        ...


class RateLimiter:
    """``rate`` tokens per second, up to ``burst``; ``rate == 0`` means no limit."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = float(burst)
        self._clock = clock
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    async def take(self, key: str) -> int | None:
        return self.check(key)

    def check(self, key: str) -> int | None:
        """Take one token for ``key``: None when allowed, else milliseconds to wait."""
        if self.rate <= 0:
            return None
        now = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = [self.burst, now]
            if len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
        tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return None
        bucket[0] = tokens
        return max(1, int((1.0 - tokens) / self.rate * 1000))


# KEYS[1] the bucket (hash: t = tokens, ms = when they were counted, Redis time in ms)
# ARGV[1] rate (tokens/s), ARGV[2] burst, ARGV[3] the key's time to live (ms),
# ARGV[4] tokens wanted (the lease, >= 1), ARGV[5] tokens given back (a previous lease's unspent)
# Returns the tokens granted (1..wanted), else minus the milliseconds until one is there.
_LEASE: Final = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[4])
local back = tonumber(ARGV[5])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local saved = redis.call('HMGET', KEYS[1], 't', 'ms')
local tokens = tonumber(saved[1])
local since = tonumber(saved[2])
if tokens == nil or since == nil or tokens ~= tokens then
  tokens = burst
  since = now
end
local elapsed = now - since
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate / 1000 + back)
local answer
if tokens >= 1 then
  answer = math.min(want, math.floor(tokens))
  tokens = tokens - answer
else
  answer = -math.max(1, math.floor((1 - tokens) / rate * 1000))
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ms', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return answer
"""


class _Lease:
    """Tokens one replica took from the shared bucket for one key, and how fast it spent the
    previous ones (the next lease's size)."""

    __slots__ = ("expires", "spent", "started", "tokens")

    def __init__(self, tokens: int, now: float, seconds: float) -> None:
        self.tokens = tokens
        self.started = now
        self.expires = now + seconds
        self.spent = 0


class RedisRateLimiter:
    """The bucket of a key lives in Redis under ``<prefix>:rl:<sha256(key)>`` (so a hostile
    key cannot grow Redis's key names), and expires once it would be full again (a full
    bucket and no bucket are the same). Each replica leases tokens from it (see the module's
    docstring for the bound); ``lease_seconds = 0`` takes one token per round trip. When Redis
    fails, ``fallback`` (this process's own buckets) answers, so an outage degrades to
    per-replica limits instead of refusing or stalling every request."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        rate: float,
        burst: int,
        *,
        fallback: RateLimiter | None = None,
        lease_seconds: float = LEASE_SECONDS,
        max_lease: int = MAX_LEASE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self.lease_seconds = max(0.0, lease_seconds)
        self.lease_cap = max(1, min(max_lease, self.burst, int(rate * self.lease_seconds)))
        """The most tokens one lease takes (``C`` in the bound)."""
        self._redis = redis
        self._prefix = f"{prefix}:rl:"
        self._script = redis.register_script(_LEASE)
        self._fallback = fallback or RateLimiter(rate, burst)
        self._clock = clock
        full_ms = math.ceil(self.burst / rate * 1000) if rate > 0 else 0
        self._ttl_ms = str(full_ms + 1000)
        self._args = (repr(float(rate)), str(self.burst), self._ttl_ms)
        self._leases: OrderedDict[str, _Lease] = OrderedDict()
        self._renewing: dict[str, asyncio.Task[int]] = {}
        self._warned = -math.inf
        self._down_until = 0.0

    def bucket_key(self, key: str) -> str:
        return self._prefix + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def held(self, key: str) -> int:
        """Tokens of ``key`` this replica holds (leased, unspent, not yet given back)."""
        lease = self._leases.get(key)
        return lease.tokens if lease is not None else 0

    async def take(self, key: str) -> int | None:
        if self.rate <= 0:
            return None
        if self.lease_cap == 1:  # no lease: a round trip per call, none waits for another's
            return await self._take_one(key)
        while True:
            lease = self._leases.get(key)
            if lease is not None and lease.tokens > 0 and self._clock() < lease.expires:
                lease.tokens -= 1
                lease.spent += 1
                return None
            if self._down_until and self._clock() < self._down_until:
                return self._fallback.check(key)
            renewing = self._renewing.get(key)
            if renewing is None:  # one round trip per key at a time; the others wait for it
                renewing = self._renewing[key] = asyncio.ensure_future(self._renew(key))
            answer = await asyncio.shield(renewing)
            if answer == _DOWN:
                return self._fallback.check(key)
            if answer > 0:
                return min(answer, 3_600_000)
            lease = self._leases.get(key)
            if lease is not None and lease.tokens > 0:  # just leased: spend one, expired or not
                lease.tokens -= 1
                lease.spent += 1
                return None
            # the callers that waited with us spent them all: lease again

    async def _take_one(self, key: str) -> int | None:
        if self._down_until and self._clock() < self._down_until:
            return self._fallback.check(key)
        try:
            answer = await self._script(keys=[self.bucket_key(key)], args=[*self._args, "1", "0"])
        except redis_errors(OSError, TimeoutError) as exc:
            self._failed(exc)
            return self._fallback.check(key)
        self._down_until = 0.0
        if not isinstance(answer, int) or answer >= 0:  # 1, or an answer we cannot read
            return None
        return min(-answer, 3_600_000)

    def _failed(self, exc: Exception) -> None:
        """Let the fallback answer alone for a while, and say so now and then."""
        failed = self._clock()
        self._down_until = failed + PAUSE_AFTER_FAILURE
        if failed - self._warned >= WARN_EVERY:
            self._warned = failed
            log.warning("rate limit: Redis unreachable (%s); limiting per replica", exc)

    def _size(self, lease: _Lease | None, now: float) -> int:
        """``rate x lease_seconds`` worth of the rate this replica saw for the key, 1..C."""
        if lease is None or self.lease_cap == 1:
            return 1
        seen = lease.spent / max(now - lease.started, 1e-6)
        return max(1, min(self.lease_cap, math.ceil(seen * self.lease_seconds)))

    async def _renew(self, key: str) -> int:
        """Give back what is left of the key's lease and take a new one, in one round trip:
        0 when leased, else the milliseconds to wait, or :data:`_DOWN`."""
        try:
            now = self._clock()
            lease = self._leases.get(key)
            back = 0
            if lease is not None:
                back, lease.tokens = lease.tokens, 0  # if the answer is lost, so are they
            want = self._size(lease, now)
            try:
                answer = await self._script(
                    keys=[self.bucket_key(key)], args=[*self._args, str(want), str(back)]
                )
            except redis_errors(OSError, TimeoutError) as exc:
                self._failed(exc)
                return _DOWN
            self._down_until = 0.0
            if not isinstance(answer, int) or answer == 0:  # an answer we cannot read: allow
                answer = 1
            if answer < 0:
                self._leases.pop(key, None)
                return -answer
            self._leases[key] = _Lease(answer, now, self.lease_seconds)
            self._leases.move_to_end(key)
            if len(self._leases) > MAX_BUCKETS:
                self._leases.popitem(last=False)  # its tokens are lost: refused early, not late
            return 0
        finally:
            self._renewing.pop(key, None)
