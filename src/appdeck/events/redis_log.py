"""The event log in Redis Streams, for several replicas serving one fleet of sessions.

Keys (all of one session in one hash slot, ``{<session>}``):

- ``<prefix>:ev:{<sid>}``: a hash, one field per stream of the session: its newest seq;
- ``<prefix>:ev:{<sid>}:x:<stream>``: a Redis stream, one entry per event, entry id
  ``<seq>-0`` and fields ``t`` (append time, ms on Redis's clock) and ``d`` (the payload);
- ``<prefix>:ev:{<sid>}:dead``: a tombstone once the session was dropped (readers close; an
  append is stored nowhere and comes back with seq 0, as nobody can read it any more).

One Lua script appends: HINCRBY the stream's seq (dense: 1, 2, 3, … whatever replica appends),
XADD the entry, XTRIM MINID the entries older than the retention (by time, never MAXLEN: a
reader that is behind loses nothing still within the retention), PEXPIRE the keys (an idle
stream's events vanish after the retention, its seq counter after :data:`COUNTER_TTL`) and
PUBLISH the doorbell with the payload (see ``events/bus.py``) on the session's broadcast
channel. Because the seq and the doorbell come
from the same script, doorbells leave in seq order.

Session ids and stream names reach these keys only after the transport checked them (a
session the caller owns; a stream name of at most 64 ``[A-Za-z0-9_-]``). Whatever is read
back is decoded defensively: a malformed entry is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # loaded by replica mode only (appdeck.common.outages)
    from redis.asyncio import Redis

from appdeck.events.bus import channel
from appdeck.events.ports import EventLog, StoredEvent

log = logging.getLogger("appdeck.events")

MAX_INLINE: Final = 64 * 1024
"""Payloads up to this size ride in the doorbell; larger ones are read from the log."""
COUNTER_TTL: Final = 7 * 24 * 3600.0
"""Seconds a session's seq counters outlive its last append. Far longer than the events: a
counter that vanished would restart at 1 and reuse event ids. Session end (idle sweep, DELETE)
drops them at once; this only bounds what a session that ends unseen leaves behind."""
MAX_READ: Final = 1000
"""At most this many entries per read, whatever ``limit`` the caller asks."""

_APPEND: Final = """
if redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local seq = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retention = tonumber(ARGV[3])
redis.call('XADD', KEYS[2], seq .. '-0', 't', now, 'd', ARGV[2])
local first = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)[1]
local cutoff = now - retention
if first and tonumber(first[2][2]) < cutoff then
  -- the oldest entry is past the retention: find the first seq appended since the cutoff
  local lo = tonumber(string.match(first[1], '^(%d+)'))
  local hi = seq
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local entry = redis.call('XRANGE', KEYS[2], mid .. '-0', mid .. '-0')[1]
    if entry and tonumber(entry[2][2]) >= cutoff then hi = mid else lo = mid + 1 end
  end
  redis.call('XTRIM', KEYS[2], 'MINID', lo .. '-0')
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], retention)
if string.len(ARGV[2]) <= tonumber(ARGV[5]) then
  redis.call('PUBLISH', ARGV[4], 'e' .. ARGV[1] .. '.' .. seq .. '\\n' .. ARGV[2])
else
  redis.call('PUBLISH', ARGV[4], 'n' .. ARGV[1] .. '.' .. seq)
end
return seq
"""

_REPLAY: Final = """
local entries = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', ARGV[2])
local out = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for j = 1, #fields - 1, 2 do
    if fields[j] == 'd' then
      local payload = fields[j + 1]
      out[#out + 1] = string.match(entry[1], '^(%d+)') .. ' ' .. #payload .. '\\n' .. payload
      break
    end
  end
end
return table.concat(out)
"""
"""A page of the stream as ONE string, ``<seq> <length>\n<payload>`` per entry: a reply of
one bulk string parses in a fraction of the time of 500 nested entries (redis-py's parser is
pure Python: it was 90 % of a replay's time)."""

_OPEN: Final = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSETNX', KEYS[1], ARGV[1], 0)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

_DROP: Final = """
local streams = redis.call('HKEYS', KEYS[1])
for _, name in ipairs(streams) do redis.call('DEL', ARGV[1] .. name) end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], 'c')
return #streams
"""


class RedisEventLog(EventLog):
    """:class:`~appdeck.events.ports.EventLog` in Redis Streams (see the module docstring).

    ``prefix`` is the cluster's key prefix; doorbells go to the channel the
    :class:`~appdeck.events.signals.RedisBroadcast` of the same prefix reads
    (``<prefix>:b:ev:<sid>``). ``retention_seconds`` bounds how long an event can be replayed.
    """

    dense = True

    def __init__(
        self,
        redis: Redis,
        prefix: str,
        *,
        retention_seconds: float,
        counter_ttl_seconds: float = COUNTER_TTL,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._retention_ms = max(1000, int(retention_seconds * 1000))
        self._counter_ttl_ms = max(self._retention_ms, int(counter_ttl_seconds * 1000))
        self._append = redis.register_script(_APPEND)
        self._open = redis.register_script(_OPEN)
        self._replay = redis.register_script(_REPLAY)
        self._drop = redis.register_script(_DROP)

    def _session_key(self, session_id: str) -> str:
        return f"{self._prefix}:ev:{{{session_id}}}"

    def _stream_key(self, session_id: str, stream: str) -> str:
        return f"{self._session_key(session_id)}:x:{stream}"

    def _doorbells(self, session_id: str) -> str:
        return f"{self._prefix}:b:{channel(session_id)}"

    def _append_call(self, session_id: str, stream: str, payload: bytes) -> tuple[Any, Any]:
        base = self._session_key(session_id)
        keys = [base, self._stream_key(session_id, stream), f"{base}:dead"]
        args = [
            stream,
            payload,
            self._retention_ms,
            self._doorbells(session_id),
            MAX_INLINE,
            self._counter_ttl_ms,
        ]
        return keys, args

    async def append(self, session_id: str, stream: str, payload: bytes) -> StoredEvent:
        keys, args = self._append_call(session_id, stream, payload)
        seq = int(await self._append(keys, args))
        return StoredEvent(session_id, stream, max(seq, 0), payload)

    async def append_many(self, items: Sequence[tuple[str, str, bytes]]) -> list[StoredEvent]:
        """Append every item in one round trip (a pipeline of the append script), in order."""
        if not items:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for sid, stream, payload in items:
                keys, args = self._append_call(sid, stream, payload)
                await self._append(keys, args, client=pipe)
            seqs = await pipe.execute()
        return [
            StoredEvent(sid, stream, max(int(seq), 0), payload)
            for (sid, stream, payload), seq in zip(items, seqs, strict=True)
        ]

    async def replay(
        self, session_id: str, stream: str, after_seq: int, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events of that stream with ``seq > after_seq``, oldest first (at most ``limit``,
        never more than :data:`MAX_READ`). Entries trimmed away are simply not there."""
        count = max(1, min(limit, MAX_READ))
        page = await self._replay(
            [self._stream_key(session_id, stream)], [f"{after_seq + 1}-0", count]
        )
        events: list[StoredEvent] = []
        for seq, payload in _frames(page if isinstance(page, bytes) else b""):
            if seq is None or payload is None:
                log.warning("malformed event log entry skipped", extra={"session_id": session_id})
            elif seq > after_seq:
                events.append(StoredEvent(session_id, stream, seq, payload))
        return events

    async def tail(self, session_id: str, stream: str) -> int | None:
        raw = await self._redis.hget(self._session_key(session_id), stream)
        if raw is None:
            return None
        try:
            return max(0, int(raw))
        except ValueError:
            return None

    async def open_stream(self, session_id: str, stream: str) -> None:
        base = self._session_key(session_id)
        await self._open([base, f"{base}:dead"], [stream, self._counter_ttl_ms])

    async def closed(self, session_id: str) -> bool:
        return bool(await self._redis.exists(f"{self._session_key(session_id)}:dead"))

    async def drop_session(self, session_id: str) -> None:
        base = self._session_key(session_id)
        await self._drop(
            [base, f"{base}:dead"], [f"{base}:x:", self._retention_ms, self._doorbells(session_id)]
        )

    async def trim(self, older_than: float) -> int:
        """Nothing to do: every append trims its stream by time and idle keys expire."""
        return 0


def _frames(page: bytes) -> Iterator[tuple[int | None, bytes | None]]:
    """``(seq, payload)`` of each ``<seq> <length>\\n<payload>`` frame of a replay page;
    ``(None, None)`` for a malformed frame or payload (the rest of a broken page is dropped)."""
    at, end = 0, len(page)
    while at < end:
        newline = page.find(b"\n", at, at + 40)
        head = page[at:newline].split(b" ") if newline >= 0 else []
        if len(head) != 2 or not all(p.isdigit() and len(p) <= 18 for p in head):
            yield None, None
            return
        start = newline + 1
        stop = start + int(head[1])
        payload = page[start:stop]
        at = stop
        if stop > end:
            yield None, None
            return
        if b"\n" in payload or b"\r" in payload:  # would break the SSE framing
            yield None, None
            continue
        yield int(head[0]), payload
