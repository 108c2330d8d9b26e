"""Discovered OpenAPI documents in the database (``api_documents``): per app, versions 1, 2, ...
of its canonical document, with what changed since the version before.

A new version is numbered and written under the app's lock, and only when the latest version
is still the one the caller compared with (:meth:`ApiDocumentStore.add` answers None
otherwise: someone else stored one meanwhile, compare again). The oldest versions past
``keep`` go in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from appdeck.storage.engine import serialized, writing
from appdeck.storage.schema import api_documents, app_members, apps

MAX_VERSION: Final = 2**31 - 1
"""The version column is 32-bit."""

_SUMMARY_COLUMNS: Final = [c for c in api_documents.c if c.name != "document"]


@dataclass(frozen=True, slots=True)
class ApiDocumentRow:
    app_id: int
    version: int
    source: str
    title: str
    api_version: str
    openapi_version: str
    operations: int
    digest: str
    changes: dict[str, Any]
    discovered_by: str
    discovered_at: float
    document: str
    """Canonical JSON."""


@dataclass(frozen=True, slots=True)
class ApiListing:
    """The latest version of one app's document, without the document."""

    app_id: int
    app_name: str
    version: int
    source: str
    title: str
    api_version: str
    openapi_version: str
    operations: int
    digest: str
    discovered_at: float


@dataclass(frozen=True, slots=True)
class NewVersion:
    source: str
    title: str
    api_version: str
    openapi_version: str
    operations: int
    digest: str
    changes: dict[str, Any]
    discovered_by: str
    discovered_at: float
    document: str


def _row(row: Any) -> ApiDocumentRow:
    return ApiDocumentRow(
        app_id=int(row.app_id),
        version=int(row.version),
        source=row.source,
        title=row.title,
        api_version=row.api_version,
        openapi_version=row.openapi_version,
        operations=int(row.operations),
        digest=row.digest,
        changes=dict(row.changes or {}),
        discovered_by=row.discovered_by,
        discovered_at=float(row.discovered_at),
        document=row.document,
    )


class ApiDocumentStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def latest(self, app_id: int) -> ApiDocumentRow | None:
        query = (
            sa.select(api_documents)
            .where(api_documents.c.app_id == app_id)
            .order_by(api_documents.c.version.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def get(self, app_id: int, version: int) -> ApiDocumentRow | None:
        if not 0 < version <= MAX_VERSION:
            return None
        query = sa.select(api_documents).where(
            api_documents.c.app_id == app_id, api_documents.c.version == version
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _row(row)

    async def add(
        self, app_id: int, new: NewVersion, *, after: int, keep: int
    ) -> ApiDocumentRow | None:
        """Store ``new`` as the version after ``after`` (0: the app has none yet), keeping the
        newest ``keep``; None when the app's latest version is no longer ``after``."""
        async with writing(self._engine) as conn:
            await serialized(conn, f"api-documents-{app_id}")
            top = await conn.execute(
                sa.select(sa.func.max(api_documents.c.version)).where(
                    api_documents.c.app_id == app_id
                )
            )
            if int(top.scalar() or 0) != after:
                return None
            version = after + 1
            await conn.execute(
                sa.insert(api_documents).values(
                    app_id=app_id,
                    version=version,
                    source=new.source,
                    title=new.title,
                    api_version=new.api_version,
                    openapi_version=new.openapi_version,
                    operations=new.operations,
                    digest=new.digest,
                    document=new.document,
                    changes=new.changes,
                    discovered_by=new.discovered_by,
                    discovered_at=new.discovered_at,
                )
            )
            await conn.execute(
                sa.delete(api_documents).where(
                    api_documents.c.app_id == app_id, api_documents.c.version <= version - keep
                )
            )
        return ApiDocumentRow(app_id=app_id, version=version, **_fields(new))

    async def versions(self, app_id: int) -> list[int]:
        """The app's stored versions, oldest first."""
        query = (
            sa.select(api_documents.c.version)
            .where(api_documents.c.app_id == app_id)
            .order_by(api_documents.c.version)
        )
        async with self._engine.connect() as conn:
            return [int(v) for v in (await conn.execute(query)).scalars()]

    async def listing(
        self,
        tenant_id: str,
        *,
        member: str | None,
        app_id: int | None = None,
        title_contains: str | None = None,
        offset: int,
        limit: int,
    ) -> list[ApiListing]:
        """The latest version of each app of ``tenant_id`` that has one (only the apps
        ``member`` has a role on, unless None), by app id."""
        newest = (
            sa.select(api_documents.c.app_id, sa.func.max(api_documents.c.version).label("version"))
            .group_by(api_documents.c.app_id)
            .subquery()
        )
        query = (
            sa.select(*_SUMMARY_COLUMNS, apps.c.name.label("app_name"))
            .join(
                newest,
                sa.and_(
                    newest.c.app_id == api_documents.c.app_id,
                    newest.c.version == api_documents.c.version,
                ),
            )
            .join(apps, apps.c.id == api_documents.c.app_id)
            .where(apps.c.tenant_id == tenant_id)
        )
        if member is not None:
            query = query.join(
                app_members,
                sa.and_(app_members.c.app_id == apps.c.id, app_members.c.user_id == member),
            )
        if app_id is not None:
            query = query.where(api_documents.c.app_id == app_id)
        if title_contains:
            query = query.where(
                sa.func.lower(api_documents.c.title).contains(
                    title_contains.lower(), autoescape=True
                )
            )
        query = query.order_by(api_documents.c.app_id).offset(offset).limit(limit)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            ApiListing(
                app_id=int(r.app_id),
                app_name=r.app_name,
                version=int(r.version),
                source=r.source,
                title=r.title,
                api_version=r.api_version,
                openapi_version=r.openapi_version,
                operations=int(r.operations),
                digest=r.digest,
                discovered_at=float(r.discovered_at),
            )
            for r in rows
        ]


def _fields(new: NewVersion) -> dict[str, Any]:
    return {
        "source": new.source,
        "title": new.title,
        "api_version": new.api_version,
        "openapi_version": new.openapi_version,
        "operations": new.operations,
        "digest": new.digest,
        "changes": new.changes,
        "discovered_by": new.discovered_by,
        "discovered_at": new.discovered_at,
        "document": new.document,
    }
