"""A bounded LRU of per-app engines: an engine is made on first use, kept while recently
used, and disposed of when more than ``max_engines`` are idle (never while in use)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine


@dataclass(slots=True, eq=False)
class _Held:
    engine: AsyncEngine
    users: int = 0


class EngineCache:
    def __init__(self, make: Callable[[int], Awaitable[AsyncEngine]], max_engines: int) -> None:
        self._make = make
        self.max_engines = max(1, max_engines)
        self._engines: OrderedDict[int, _Held] = OrderedDict()
        self._lock = asyncio.Lock()

    @property
    def apps(self) -> list[int]:
        """The apps with an engine, least recently used first."""
        return list(self._engines)

    @asynccontextmanager
    async def using(self, app_id: int) -> AsyncIterator[AsyncEngine]:
        async with self._lock:
            held = self._engines.get(app_id)
            if held is None:
                held = self._engines[app_id] = _Held(await self._make(app_id))
            self._engines.move_to_end(app_id)
            held.users += 1
        try:
            yield held.engine
        finally:
            held.users -= 1
            await self._trim()

    async def _trim(self) -> None:
        async with self._lock:
            while len(self._engines) > self.max_engines:
                idle = next((key for key, held in self._engines.items() if held.users == 0), None)
                if idle is None:
                    return
                await self._engines.pop(idle).engine.dispose()

    async def forget(self, app_id: int) -> None:
        """Dispose of the app's engine (its database is going)."""
        async with self._lock:
            held = self._engines.pop(app_id, None)
        if held is not None:
            await held.engine.dispose()

    async def close(self) -> None:
        async with self._lock:
            engines = [held.engine for held in self._engines.values()]
            self._engines.clear()
        for engine in engines:
            await engine.dispose()
