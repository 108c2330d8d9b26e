"""The PostgreSQL front a sandboxed app reaches its database through: served in a
loopback-only network namespace, it lets the app's own role on the apps database through,
and nothing else; inside, the role reaches its own schema only."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import struct
import sys
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from appdeck.platform.tables.databases import AppDatabases
from appdeck.runtime import netns
from appdeck.runtime.appdb import PostgresTarget
from appdeck.runtime.pgfront import (
    PostgresFront,
    Refused,
    check_startup,
    parse_startup,
    read_startup,
)

PGWIRE = Path(__file__).resolve().parents[2] / "fixtures" / "apps" / "notes" / "pgwire.py"
TARGET = PostgresTarget("127.0.0.1", 5432, "app_7", "apps")


def _pgwire() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("pgwire", PGWIRE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pgwire"] = module
    spec.loader.exec_module(module)
    return module


pgwire = _pgwire()


def _body(**params: str) -> bytes:
    return b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()) + b"\0"


def test_the_apps_own_role_on_the_apps_database_passes() -> None:
    params = parse_startup(_body(user="app_7", database="apps", application_name="x"))
    check_startup(params, TARGET)


@pytest.mark.parametrize(
    "params",
    [
        {"user": "app_8", "database": "apps"},
        {"user": "postgres", "database": "apps"},
        {"user": "app_7", "database": "test"},
        {"user": "app_7"},
        {"user": "app_7", "database": "apps", "options": "-c role=postgres"},
        {"user": "app_7", "database": "apps", "replication": "database"},
        {"user": "app_7", "database": "apps", "session_authorization": "postgres"},
        {"user": "app_7", "database": "apps", "_pq_.command": "x"},
        {"user": "app_7", "database": "apps", "USER": "postgres"},
    ],
)
def test_any_other_startup_is_refused(params: dict[str, str]) -> None:
    with pytest.raises(Refused):
        check_startup(parse_startup(_body(**params)), TARGET)


def test_malformed_startup_bodies_are_refused() -> None:
    for body in (b"user\0app_7\0database", b"user\0\0", b"\xff\0x\0\0", b"user\0a\0user\0b\0\0"):
        with pytest.raises(Refused):
            parse_startup(body)


@pytest.fixture
async def front() -> AsyncIterator[tuple[PostgresFront, int]]:
    space = netns.new_loopback_only()
    served = PostgresFront(max_connections=3, idle_timeout_s=30)
    try:
        yield served, space
    finally:
        await served.close()
        os.close(space)


async def _inside(space: int, work: Callable[[], Any]) -> Any:
    """Run ``work`` on a thread of its own moved into the network namespace ``space``."""

    def run() -> Any:
        netns.setns(space)
        try:
            return work()
        except Exception as exc:
            return exc

    return await asyncio.wait_for(asyncio.to_thread(run), timeout=30)


def _connect(
    url: str, sql: str = "SELECT current_user, current_schema()", **kw: Any
) -> Callable[[], Any]:
    def work() -> Any:
        conn = pgwire.Connection(url, **kw)
        try:
            return conn.query(sql)
        finally:
            conn.close()

    return work


async def _grants(app_databases: AppDatabases) -> tuple[str, PostgresTarget, PostgresTarget]:
    async with app_databases.transaction(1) as conn:
        await conn.exec_driver_sql("CREATE TABLE secrets (id int, body text)")
        await conn.exec_driver_sql("INSERT INTO secrets VALUES (1, 'app one only')")
    one = await app_databases.grant(1, sandboxed=True)
    two = await app_databases.grant(2, sandboxed=True)
    assert one.postgres is not None
    assert two.postgres is not None
    return two.env["DATABASE_URL"], one.postgres, two.postgres


async def test_through_the_front_an_app_reaches_its_own_schema_and_nothing_else(
    pg_app_databases: AppDatabases, front: tuple[PostgresFront, int]
) -> None:
    served, space = front
    url, one, two = await _grants(pg_app_databases)
    served.listen("release.0", space, two)
    assert url.startswith(f"postgresql://{two.user}:")
    assert "@127.0.0.1:5432/" in url

    own = await _inside(space, _connect(url))
    assert own == [(two.user, "app_2")]

    refused = {
        "another app's role": await _inside(space, _connect(url, user=one.user)),
        "the superuser": await _inside(space, _connect(url, user="postgres")),
        "the platform's database": await _inside(
            space, _connect(url, database=app_databases_platform(one))
        ),
        "options": await _inside(space, _connect(url, extra={"options": "-c role=postgres"})),
    }
    for what, outcome in refused.items():
        assert isinstance(outcome, pgwire.PgError), what
        assert outcome.fields["C"] == "28000", (what, outcome.fields)

    inside = {
        "another app's schema": "SELECT body FROM app_1.secrets",
        "another app's role": f'SET ROLE "{one.user}"',
        "the public schema": "CREATE TABLE public.x (id int)",
        "a superuser's file read": "SELECT pg_read_file('/etc/hostname')",
    }
    for what, sql in inside.items():
        outcome = await _inside(space, _connect(url, sql=sql))
        assert isinstance(outcome, pgwire.PgError), what
        assert outcome.fields["C"] == "42501", (what, outcome.fields)  # insufficient privilege


def app_databases_platform(target: PostgresTarget) -> str:
    """The platform's own database: the apps database's name without ``_apps``."""
    return target.database.removesuffix("_apps")


async def test_the_front_bounds_connections_and_message_sizes(
    pg_app_databases: AppDatabases, front: tuple[PostgresFront, int]
) -> None:
    served, space = front
    url, _, two = await _grants(pg_app_databases)
    served.max_message = 1024
    served.listen("release.0", space, two)

    def big_query() -> Any:
        conn = pgwire.Connection(url)
        try:
            return conn.query("SELECT '" + "x" * 4096 + "'")
        finally:
            conn.sock.close()

    assert isinstance(await _inside(space, big_query), ConnectionError | OSError)

    def too_large_startup() -> Any:
        import socket

        sock = socket.create_connection(("127.0.0.1", 5432), timeout=5)
        sock.sendall(struct.pack("!II", 1_000_000, 196608))
        data = sock.recv(4096)
        sock.close()
        return data

    answer = await _inside(space, too_large_startup)
    assert answer[:1] == b"E"
    assert b"too large" in answer

    def many() -> Any:
        conns = [pgwire.Connection(url) for _ in range(3)]
        try:
            return pgwire.Connection(url)
        finally:
            for conn in conns:
                conn.close()

    outcome = await _inside(space, many)
    assert isinstance(outcome, pgwire.PgError)
    assert "too many" in outcome.fields["M"]


class _Sink:
    """What the front writes back (an asyncio.StreamWriter stand-in)."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None


async def _read_startup(raw: bytes) -> tuple[Any, bytes]:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    sink = _Sink()
    try:
        return await read_startup(reader, sink), sink.data  # type: ignore[arg-type]
    except Refused as exc:
        return exc, sink.data


def _message(code: int, body: bytes = b"") -> bytes:
    return struct.pack("!II", len(body) + 8, code) + body


async def test_encryption_requests_are_answered_n_and_the_startup_follows() -> None:
    startup = _message(196608, _body(user="app_7", database="apps"))
    found, answered = await _read_startup(
        _message(80877103) + _message(80877104) + startup  # SSLRequest, GSSENCRequest
    )
    assert answered == b"NN"
    assert found.parameters == {"user": "app_7", "database": "apps"}
    assert found.raw == startup


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (_message(80877102, struct.pack("!II", 1, 2)), "cancel"),
        (_message(131072, _body(user="app_7")), "protocol 3"),  # protocol 2
        (struct.pack("!II", 1_000_000, 196608), "too large"),
        (_message(80877103) * 3 + _message(196608, _body(user="a")), "too many"),
    ],
)
async def test_cancel_requests_old_protocols_and_oversized_startups_are_refused(
    raw: bytes, reason: str
) -> None:
    found, _ = await _read_startup(raw)
    assert isinstance(found, Refused)
    assert reason in str(found)
