"""One composition root for a whole test module (issue 26 §3), for the modules whose tests
leave nothing behind that the platform's own clean-up and a row reset do not take away.

Starting :class:`Services` per test costs more than most tool tests' own calls (the tools'
schemas, the host probes, the data plane, on PostgreSQL the apps database's pool). A module
that opts in (``world`` overridden by ``shared_world``, its tests on the module's event loop)
starts it once per dialect. Before each test the root is brought back to what a fresh start
gives, and what cannot be brought back is refused rather than carried into the next test:

- every app the last test made is deleted through the platform (its delete hooks stop its
  processes, drop its database, remove its repositories, release its domains), then every
  row is deleted and every sequence restarted: app ids start at 1 again, as on a new database;
- the schema must be the one the root started on (a test that migrated it is refused);
- the tenants and users are made again (users get new random ids, so no cache keyed by a user
  carries a role over), and the source root (with whatever the last test wrote beside it) is made afresh;
- each test gets a new ASGI app (its own guard, rate limiter and failure throttle) and client.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa

from appdeck.app import Services
from appdeck.auth.admin import IdentityAdmin
from appdeck.common.identity import Principal
from appdeck.settings import Settings
from appdeck.storage import schema

TENANTS = ("acme", "globex")
USERS: Sequence[tuple[str, str, str]] = (
    ("acme", "alice", "admin"),
    ("acme", "bob", "member"),
    ("acme", "carol", "member"),
    ("globex", "eve", "admin"),
)


def world_settings(database_url: str, data: Path, tree: Path) -> Settings:
    """The tools' platform, its data in ``data``, its source root ``tree/src``: both eras on
    one server (the tools serve each alike)."""
    return Settings.model_validate(
        {
            "data_dir": data,
            "database_url": database_url,
            "source_roots": [tree / "src"],
            "max_apps_per_tenant": 5,
            "rate_limit_per_second": 0,
            "stateless_era": True,
        }
    )


def write_source(tree: Path) -> Path:
    """The source root ``tree/src`` holding one app, ``hello``, as a fresh test finds it."""
    source = tree / "src" / "hello"
    source.mkdir(parents=True)
    (source / "app.py").write_text("print('hi')\n")
    return source


async def seed(admin: IdentityAdmin) -> None:
    for tenant in TENANTS:
        await admin.create_tenant(tenant)
    for tenant, user, role in USERS:
        await admin.create_user(tenant, user, None, role=role)


@dataclass
class Root:
    """A started :class:`Services` shared by one module's tests on one dialect."""

    services: Services
    base: Path
    """Its data dir is ``base/data``; ``base/tree`` stands for a test's ``tmp_path`` (its
    source root is ``base/tree/src``), made again for every test."""
    tables: frozenset[str]
    """The platform's tables when it started (``alembic_version`` included)."""

    @classmethod
    async def start(cls, database_url: str, base: Path) -> Root:
        write_source(base / "tree")
        services = await Services.start(world_settings(database_url, base / "data", base / "tree"))
        return cls(services, base, frozenset(await _tables(services)))

    async def fresh(self) -> tuple[IdentityAdmin, Path, httpx.AsyncClient]:
        """The root as a fresh start leaves it, the tenants and users made, and a new client."""
        await self.clean()
        admin = IdentityAdmin(self.services.identities, self.services.token_issuer)
        await seed(admin)
        shutil.rmtree(self.base / "tree")  # what the last test wrote beside its source too
        source = write_source(self.base / "tree")
        transport = httpx.ASGITransport(app=self.services.asgi())
        client = httpx.AsyncClient(transport=transport, base_url=self.services.base_url)
        return admin, source, client

    async def clean(self) -> None:
        """Every app deleted through the platform, then every row and sequence reset."""
        services = self.services
        assert services.platform is not None
        engine = services.storage.engine
        async with engine.connect() as conn:
            apps = (await conn.execute(sa.select(schema.apps.c.id, schema.apps.c.tenant_id))).all()
            admins = dict(
                (
                    await conn.execute(
                        sa.select(schema.users.c.tenant_id, schema.users.c.id).where(
                            schema.users.c.role == "admin"
                        )
                    )
                ).all()
            )
        for app_id, tenant in apps:
            assert tenant in admins, f"app {app_id}: tenant {tenant} has no admin to delete it"
            admin = Principal(tenant, admins[tenant], kind="oauth")
            await services.platform.apps.delete(admin, app_id, confirmed=True)
        await services.audit.flush()  # no audit row of the last test lands after the reset
        tables = await _tables(services)
        assert tables == self.tables, (
            f"a test changed the platform's schema: {tables ^ self.tables}"
        )
        await _delete_rows(services, tables)


async def _tables(services: Services) -> set[str]:
    async with services.storage.engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))


async def _delete_rows(services: Services, tables: set[str]) -> None:
    """Every table's rows deleted (children first) and the ids restarted, in one transaction."""
    known = [t.name for t in reversed(schema.metadata.sorted_tables) if t.name in tables]
    rest = sorted(tables - set(known) - {"alembic_version"})
    async with services.storage.engine.begin() as conn:
        for name in known + rest:
            await conn.execute(sa.text(f'DELETE FROM "{name}"'))
        if conn.dialect.name == "postgresql":
            sequences = await conn.execute(
                sa.text("SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'")
            )
            for (sequence,) in sequences.all():
                await conn.execute(sa.text(f'ALTER SEQUENCE "{sequence}" RESTART'))
        elif (
            "sqlite_sequence"
            in (
                await conn.execute(sa.text("SELECT name FROM sqlite_master WHERE type = 'table'"))
            ).scalars()
        ):
            await conn.execute(sa.text("DELETE FROM sqlite_sequence"))
