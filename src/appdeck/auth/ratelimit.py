"""Per-token rate limits: a token bucket per bearer token.

:class:`RateLimiter` keeps the buckets in this process's memory (bounded): the embedded
default. With several replicas behind one URL each would grant the whole rate (N replicas,
N times the limit), so :class:`RedisRateLimiter` keeps them in Redis instead: one Lua script reads,
refills, takes and writes a bucket atomically on Redis's own clock (one clock for every
replica), in one round trip per check (``EVALSHA``). Both answer :meth:`take`: None when
allowed, else the milliseconds to wait.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger("appdeck.auth")

MAX_BUCKETS: Final = 50_000
WARN_EVERY: Final = 10.0
"""Seconds between two warnings that Redis is unreachable (the fallback is logged, not each
request)."""
PAUSE_AFTER_FAILURE: Final = 1.0
"""Seconds the fallback answers alone after Redis failed, so an outage costs one request a
timeout per second instead of every request."""


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
# ARGV[1] rate (tokens/s), ARGV[2] burst, ARGV[3] the key's time to live (ms)
# Returns 0 when a token was taken, else the milliseconds until one is there.
_TAKE: Final = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
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
tokens = math.min(burst, tokens + elapsed * rate / 1000)
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.max(1, math.floor((1 - tokens) / rate * 1000))
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'ms', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return wait
"""


class RedisRateLimiter:
    """The bucket of a key lives in Redis under ``<prefix>:rl:<sha256(key)>`` (so a hostile
    key cannot grow Redis's key names), and expires once it would be full again (a full
    bucket and no bucket are the same). When Redis fails, ``fallback`` (this process's own
    buckets) answers, so an outage degrades to per-replica limits instead of refusing or
    stalling every request."""

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        rate: float,
        burst: int,
        *,
        fallback: RateLimiter | None = None,
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._redis = redis
        self._prefix = f"{prefix}:rl:"
        self._script = redis.register_script(_TAKE)
        self._fallback = fallback or RateLimiter(rate, burst)
        full_ms = math.ceil(self.burst / rate * 1000) if rate > 0 else 0
        self._ttl_ms = str(full_ms + 1000)
        self._args = (repr(float(rate)), str(self.burst), self._ttl_ms)
        self._warned = 0.0
        self._down_until = 0.0

    def bucket_key(self, key: str) -> str:
        return self._prefix + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    async def take(self, key: str) -> int | None:
        if self.rate <= 0:
            return None
        if self._down_until and time.monotonic() < self._down_until:
            return self._fallback.check(key)
        try:
            answer = await self._script(keys=[self.bucket_key(key)], args=list(self._args))
        except (RedisError, OSError, TimeoutError) as exc:
            now = time.monotonic()
            self._down_until = now + PAUSE_AFTER_FAILURE
            if now - self._warned >= WARN_EVERY:
                self._warned = now
                log.warning("rate limit: Redis unreachable (%s); limiting per replica", exc)
            return self._fallback.check(key)
        self._down_until = 0.0
        if not isinstance(answer, int) or answer <= 0:  # 0, or an answer we cannot read
            return None
        return min(answer, 3_600_000)
