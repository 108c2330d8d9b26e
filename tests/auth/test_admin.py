import json
import subprocess
from pathlib import Path

import pytest

from appdeck.auth.admin import IdentityAdmin
from appdeck.common.errors import Conflict, InvalidArgument, NotFound
from appdeck.storage import Storage
from appdeck.storage.identity import IdentityStore
from tests.support.appdeck_process import run_appdeck


async def test_tenants_users_and_pats(storage: Storage) -> None:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    await admin.create_tenant("acme")
    with pytest.raises(Conflict):
        await admin.create_tenant("acme")
    with pytest.raises(InvalidArgument):
        await admin.create_tenant("Not A Slug")
    for unroutable in ("two--parts", "trailing-", "x" * 61):  # see model/hostnames.py
        with pytest.raises(InvalidArgument):
            await admin.create_tenant(unroutable)
    await admin.create_user("acme", "alice", "long enough pw", role="admin")
    with pytest.raises(InvalidArgument):
        await admin.create_user("acme", "bob", "short")
    with pytest.raises(InvalidArgument):
        await admin.create_user("acme", "bob", None, role="owner")
    with pytest.raises(NotFound):
        await admin.create_user("nope", "bob", None)
    token, record = await admin.create_pat(
        "acme", "alice", "apps:read deploy:write", expires_in=3600
    )
    assert token.startswith("adk_pat_")
    stored = await IdentityStore(storage.engine).pat_by_hash(record.token_hash)
    assert stored is not None
    assert token not in json.dumps(stored.__dict__ if hasattr(stored, "__dict__") else str(stored))
    assert stored.scopes == ("apps:read", "deploy:write")
    with pytest.raises(InvalidArgument):
        await admin.create_pat("acme", "alice", "")


def _appdeck(
    *args: str, data_dir: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``appdeck ARGS --data-dir DATA_DIR``, a fork of the worker's zygote (the CLI's own tests
    exec the command)."""
    return run_appdeck(*args, "--data-dir", str(data_dir), env={}, input=stdin)


def test_the_cli_creates_tenants_users_and_tokens(tmp_path: Path) -> None:
    assert _appdeck("tenant", "create", "acme", "--json", data_dir=tmp_path).returncode == 0
    made = _appdeck(
        "user",
        "create",
        "--tenant",
        "acme",
        "--name",
        "alice",
        "--role",
        "admin",
        "--password-stdin",
        "--json",
        data_dir=tmp_path,
        stdin="a long password\n",
    )
    assert made.returncode == 0, made.stderr
    assert "password" not in made.stdout
    pat = _appdeck(
        "token",
        "create",
        "--tenant",
        "acme",
        "--user",
        "alice",
        "--scope",
        "apps:read",
        "--json",
        data_dir=tmp_path,
    )
    assert json.loads(pat.stdout)["token"].startswith("adk_pat_")
    jwt = _appdeck(
        "token",
        "create",
        "--tenant",
        "acme",
        "--user",
        "alice",
        "--scope",
        "apps:read",
        "--oauth",
        data_dir=tmp_path,
    )
    assert jwt.stdout.count(".") == 2
    bad = _appdeck(
        "token",
        "create",
        "--tenant",
        "acme",
        "--user",
        "nobody",
        "--scope",
        "apps:read",
        data_dir=tmp_path,
    )
    assert bad.returncode == 2
    assert "no user" in bad.stdout
    tail = _appdeck("audit", "tail", "--json", data_dir=tmp_path)
    rows = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [r["event"] for r in rows] == ["token_issued", "token_issued"]
    assert json.loads(pat.stdout)["token"] not in tail.stdout


def test_the_cli_creates_machine_clients(tmp_path: Path) -> None:
    assert _appdeck("tenant", "create", "acme", data_dir=tmp_path).returncode == 0
    made = _appdeck(
        "client",
        "create",
        "--tenant",
        "acme",
        "--name",
        "robot",
        "--scope",
        "apps:read",
        "--json",
        data_dir=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert body["client_id"].startswith("adk_mc_")
    assert body["client_secret"].startswith("adk_cs_")
    refused = _appdeck(
        "client",
        "create",
        "--tenant",
        "nope",
        "--name",
        "robot",
        "--scope",
        "apps:read",
        data_dir=tmp_path,
    )
    assert refused.returncode == 2


async def test_ids_and_names_with_a_trailing_newline_are_refused(storage: Storage) -> None:
    admin = IdentityAdmin(IdentityStore(storage.engine))
    with pytest.raises(InvalidArgument):
        await admin.create_tenant("acme\n")
    await admin.create_tenant("acme")
    with pytest.raises(InvalidArgument):
        await admin.create_user("acme", "alice\n", None)
