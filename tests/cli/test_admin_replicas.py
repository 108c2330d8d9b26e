"""In replica mode (``APPDECK_REDIS_URL``) the admin commands use the keys the replicas sign
with, the database's, sealed with ``APPDECK_SECRET_KEY`` (issue 20, item 4): the CLI's tokens
verify on every replica (``tests/e2e/test_replicas_processes.py``), its rotation reaches them."""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from typer.testing import CliRunner

from appdeck.cli import cli
from tests.support.redis import REDIS_URL


def _run(data_dir: Path, env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--data-dir", str(data_dir)], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


async def _kids(url: str) -> list[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(sa.text("SELECT kid FROM signing_keys"))
            return sorted(str(row.kid) for row in rows)
    finally:
        await engine.dispose()


def test_keys_rotate_and_oauth_tokens_use_the_databases_keys_in_replica_mode(
    tmp_path: Path, postgres_test_database: str, redis_prefix: str
) -> None:
    env = {
        "APPDECK_DATABASE_URL": postgres_test_database,
        "APPDECK_REDIS_URL": REDIS_URL,
        "APPDECK_REDIS_PREFIX": redis_prefix,
        "APPDECK_SECRET_KEY": secrets.token_urlsafe(32),
    }
    _run(tmp_path, env, "tenant", "create", "acme")
    _run(tmp_path, env, "user", "create", "--tenant", "acme", "--name", "ada")
    args = ["token", "create", "--oauth", "--tenant", "acme", "--user", "ada"]
    made = json.loads(_run(tmp_path, env, *args, "--scope", "apps:read", "--json"))
    header = json.loads(_b64(made["token"].split(".")[0]))
    first = asyncio.run(_kids(postgres_test_database))
    assert first == [header["kid"]]  # signed with the database's key (made on first use)

    rotated = json.loads(_run(tmp_path, env, "keys", "rotate", "--json"))["kid"]
    kids = asyncio.run(_kids(postgres_test_database))
    assert sorted([*first, rotated]) == kids
    again = json.loads(_run(tmp_path, env, *args, "--scope", "apps:read", "--json"))
    assert json.loads(_b64(again["token"].split(".")[0]))["kid"] == rotated
    assert not (tmp_path / "keys" / "signing-jwks.json").exists()  # the data dir's: unused


def _b64(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
