"""API keys of the apps in the database (``api_keys``). (Skeleton: issue 12.)"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine


class ApiKeyStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
