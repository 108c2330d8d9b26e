"""Discovered OpenAPI documents in the database (``api_documents``). (Skeleton: issue 12.)"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine


class ApiDocumentStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
