"""A sandboxed app and the table tools on the same rows, through a real server (SQLite and
PostgreSQL platforms): the app reads what ``records`` wrote and ``records`` reads what the
app wrote, through ``DATABASE_URL``; a hostile app cannot open that database, nor the
platform's; deleting the app drops its database."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import _dsn
from tests.e2e.conftest import Launcher
from tests.e2e.helpers import raw_http, rpc
from tests.support.appdeck_process import AppDeckProcess, run_appdeck
from tests.support.mcp import initialize

NOTES = Path(__file__).resolve().parents[1] / "fixtures" / "apps" / "notes"


class Client:
    """MCP tool calls on one session, and HTTP to the deployed apps through the ingress."""

    def __init__(self, http: httpx.AsyncClient, sid: str) -> None:
        self.http, self.sid, self.next_id = http, sid, 10
        self.urls: dict[int, str] = {}

    async def tool(self, tool: str, **args: Any) -> Any:
        self.next_id += 1
        reply = await rpc(
            self.http, self.sid, "tools/call", {"name": tool, "arguments": args}, id=self.next_id
        )
        result = reply["result"]
        assert not result.get("isError"), result
        return result["structuredContent"]

    async def register(self, name: str, source: Path) -> int:
        spec = {
            "source_path": str(source),
            "run_command": "python3 app.py",
            "health_check": {"path": "/healthz", "timeout_s": 5},
        }
        return int((await self.tool("register_app", name=name, spec=spec))["app_id"])

    async def live(self, app_id: int) -> None:
        deployed = await self.tool("deploy_app", app_id=app_id)
        assert deployed["state"] == "live", deployed
        self.urls[app_id] = (await self.tool("get_app_url", app_id=app_id))["url"]

    async def app(self, app_id: int, method: str, path: str, body: Any = None) -> Any:
        parts = urlsplit(self.urls[app_id])
        async with httpx.AsyncClient(timeout=20) as client:
            answer = await client.request(
                method,
                f"http://127.0.0.1:{parts.port}{path}",
                headers={"host": parts.netloc},
                content=None if body is None else json.dumps(body),
            )
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def probe(self, app_id: int, **request: Any) -> dict[str, Any]:
        found: dict[str, Any] = await self.app(app_id, "POST", "/probe", request)
        return found


def _env(root: Path, pg_url: str | None) -> dict[str, str]:
    env = {"APPDECK_SOURCE_ROOTS": str(root), "APPDECK_SANDBOX": "on"}
    if pg_url is not None:
        env["APPDECK_DATABASE_URL"] = pg_url
    return env


def _stranger_token(server: AppDeckProcess, env: dict[str, str]) -> str:
    """A token of an admin of another tenant, ``other`` (made with the CLI)."""

    def cli(*args: str) -> str:
        done = run_appdeck(*args, "--data-dir", str(server.data_dir), env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("tenant", "create", "other")
    cli("user", "create", "--tenant", "other", "--name", "eve", "--role", "admin")
    scopes = "apps:read apps:write deploy:read deploy:write tables:read tables:write"
    made = cli("token", "create", "--tenant", "other", "--user", "eve", "--scope", scopes, "--json")
    return str(json.loads(made)["token"])


@pytest.fixture(params=["sqlite", "postgresql"])
def platform_dialect(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    if request.param == "sqlite":
        return "sqlite", None
    return "postgresql", str(request.getfixturevalue("postgres_module_database"))


@pytest.mark.e2e
async def test_a_sandboxed_app_and_the_table_tools_share_rows_and_nobody_else_reaches_them(
    launch_appdeck: Launcher, tmp_path: Path, platform_dialect: tuple[str, str | None]
) -> None:
    dialect, pg_url = platform_dialect
    source = tmp_path / "src" / "notes"
    shutil.copytree(NOTES, source)
    env = _env(source.parent, pg_url)
    server = await launch_appdeck(env=env)
    token = await asyncio.to_thread(_stranger_token, server, env)
    async with (
        asyncio.timeout(240),
        raw_http(server) as http,
        httpx.AsyncClient(
            base_url=server.origin, headers={"authorization": f"Bearer {token}"}, timeout=10
        ) as other_http,
    ):
        client = Client(http, await initialize(http))
        stranger_client = Client(other_http, await initialize(other_http))
        owner = await client.register("notes", source)
        thief = await client.register("thief", source)  # same tenant
        stranger = await stranger_client.register("stranger", source)  # another tenant
        await client.tool(
            "manage_table",
            action="create",
            app_id=owner,
            table="notes",
            columns=[{"name": "body", "type": "text"}],
        )
        await client.tool(
            "records", action="insert", app_id=owner, table="notes", rows=[{"body": "platform"}]
        )
        await client.live(owner)
        await client.live(thief)
        await stranger_client.live(stranger)

        # the app reads the row the platform wrote, and writes one the platform reads
        assert (await client.app(owner, "GET", "/notes"))["rows"] == [[1, "platform"]]
        assert (await client.app(owner, "POST", "/notes", {"body": "app"}))["id"] == 2
        listed = await client.tool("records", action="list", app_id=owner, table="notes")
        assert [row["body"] for row in listed["rows"]] == ["platform", "app"]
        await client.live(owner)  # a redeploy: a new release, the same database
        assert (await client.app(owner, "GET", "/notes"))["rows"] == [[1, "platform"], [2, "app"]]

        seen = await client.app(owner, "GET", "/env")
        install = json.loads((server.data_dir / "install.json").read_text())
        assert seen["uid"] == install["uid_base"] + owner  # its install's range
        for hostile, its_client in ((thief, client), (stranger, stranger_client)):
            if dialect == "sqlite":
                assert seen["database_url"] == "sqlite:////data/app.db"
                await _sqlite_thief_is_refused(its_client, hostile, server, owner)
            else:
                await _postgres_thief_is_refused(its_client, hostile, seen["database_url"], pg_url)

        await client.tool("manage_app", app_id=owner, action="delete", confirm=True)
        await _database_is_gone(server, owner, dialect, seen["database_url"], pg_url)
        await client.tool("manage_app", app_id=thief, action="delete", confirm=True)
        await stranger_client.tool("manage_app", app_id=stranger, action="delete", confirm=True)


async def _sqlite_thief_is_refused(
    client: Client, thief: int, server: AppDeckProcess, owner: int
) -> None:
    owner_file = server.data_dir / "appdb" / str(owner) / "app.db"
    platform_file = server.data_dir / "appdeck.db"
    for path in (owner_file, platform_file, Path(f"/proc/1/root{owner_file}")):
        found = await client.probe(thief, kind="sqlite", path=str(path))
        assert found["ok"] is False, (path, found)
    for directory in (server.data_dir, owner_file.parent):
        found = await client.probe(thief, kind="listdir", path=str(directory))
        assert found["ok"] is False, (directory, found)
    own = await client.probe(thief, kind="listdir", path="/data")
    assert own["ok"] is True  # its own directory: empty but for its own database
    assert set(own["result"]) <= {"app.db", "app.db-wal", "app.db-shm", "app.db-journal"}


async def _postgres_thief_is_refused(
    client: Client, thief: int, owner_url: str, pg_url: str | None
) -> None:
    owner_role = urlsplit(owner_url).username
    platform_db = make_url(str(pg_url)).database
    refused_at_the_front: list[dict[str, Any]] = [
        {"user": owner_role},
        {"user": "postgres"},
        {"database": platform_db},
        {"extra": {"options": "-c role=postgres"}},
    ]
    for request in refused_at_the_front:
        found = await client.probe(thief, kind="pg", sql="SELECT 1", **request)
        assert found["ok"] is False, (request, found)
        assert "28000" in found["error"], (request, found)
    schema = f"app_{str(owner_role).rpartition('_')[2]}"  # role <prefix><id>, schema app_<id>
    refused_inside = [
        f"SELECT body FROM {schema}.notes",
        f'SET ROLE "{owner_role}"',
        "SELECT count(*) FROM apps",  # the platform's table: another database entirely
    ]
    for sql in refused_inside:
        found = await client.probe(thief, kind="pg", sql=sql)
        assert found["ok"] is False, (sql, found)
    own = await client.probe(thief, kind="pg", sql="SELECT current_schema()")
    assert own["ok"] is True, own


async def _database_is_gone(
    server: AppDeckProcess, owner: int, dialect: str, owner_url: str, pg_url: str | None
) -> None:
    if dialect == "sqlite":
        assert not (server.data_dir / "appdb" / str(owner)).exists()
        return
    apps_db = urlsplit(owner_url).path.lstrip("/")
    conn = await asyncpg.connect(
        _dsn(make_url(str(pg_url)).set(database=apps_db).render_as_string(hide_password=False)),
        timeout=5,
    )
    try:
        role = urlsplit(owner_url).username
        assert await conn.fetchval("SELECT count(*) FROM pg_roles WHERE rolname = $1", role) == 0
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1", f"app_{owner}"
            )
            == 0
        )
    finally:
        await conn.close()
