"""What the records tests share: a RecordService over the real AppService and one database per
app, and tables made with the schema helper's DDL (platform/tables/ddl.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appdeck.platform.tables import ddl
from appdeck.platform.tables.catalog import Column, Index
from appdeck.platform.tables.databases import AppDatabases, apps_database_url, open_databases
from appdeck.platform.tables.records_service import RecordService
from appdeck.storage import Storage, default_sqlite_url
from tests.platform.on_fakes import OnFakes, platform_on_fakes
from tests.platform.tables.conftest import _drop_app_schemas

NOTES = (
    Column("title", "text", nullable=False),
    Column("body", "text"),
    Column("n", "integer"),
    Column("score", "real"),
    Column("done", "boolean", default=False),
    Column("at", "timestamp"),
    Column("meta", "json"),
    Column("ref", "uuid", unique=True),
)


@dataclass
class Kit:
    on: OnFakes
    dbs: AppDatabases
    records: RecordService
    app_id: int
    other_app: int
    """A second app of the same tenant, with a table of its own."""

    @property
    def dialect(self) -> Any:
        return self.dbs.dialect

    async def table(
        self,
        name: str,
        columns: tuple[Column, ...] = NOTES,
        *,
        fulltext: tuple[str, ...] = (),
        indexes: tuple[Index, ...] = (),
        app_id: int | None = None,
    ) -> None:
        statements = [ddl.create_table(self.dialect, name, columns)]
        statements += [ddl.create_index(name, ix) for ix in indexes]
        if fulltext:
            statements += ddl.fulltext_create(self.dialect, name, fulltext)
        async with self.dbs.transaction(app_id or self.app_id) as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)

    async def dump(self, name: str, app_id: int | None = None) -> list[tuple[Any, ...]]:
        """Every row of a table, raw, ordered by id."""
        async with self.dbs.transaction(app_id or self.app_id) as conn:
            found = await conn.exec_driver_sql(f'SELECT * FROM "{name}" ORDER BY "id"')
            return [tuple(r) for r in found.all()]


@pytest.fixture
async def kit(
    storage: Storage, database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Kit]:
    """The platform on the test's database, and the apps' databases beside it (as the
    ``app_databases`` fixture makes them, on the same dialect)."""
    on = await platform_on_fakes(storage, tmp_path)
    data_dir = tmp_path / "appdata"
    pg = None
    if database_url.startswith("sqlite"):
        dbs = await open_databases(default_sqlite_url(data_dir), data_dir)
    else:
        pg, prefix = request.getfixturevalue("postgres_apps_cluster")
        dbs = await open_databases(pg, data_dir, role_prefix=prefix)
    app_id = (await on.platform.apps.register(on.alice, "shop")).app.id
    other = (await on.platform.apps.register(on.alice, "blog")).app.id
    try:
        yield Kit(on, dbs, RecordService(on.platform.apps, dbs), app_id, other)
    finally:
        await dbs.close()
        if pg is not None:
            await _drop_app_schemas(apps_database_url(pg))
