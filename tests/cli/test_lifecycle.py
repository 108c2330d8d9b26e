"""The operator's lifecycle commands, through the real command line (typer's CliRunner), on
SQLite and PostgreSQL: every one answers ``--json`` and refuses what it cannot do in one line
with exit code 2."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from appdeck.cli import cli
from appdeck.storage import Storage
from appdeck.storage.oauth import OAuthStore, RefreshTokenRow


def _run(data_dir: Path, database_url: str, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(
        cli,
        [*args, "--data-dir", str(data_dir)],
        input=stdin,
        env={"APPDECK_DATABASE_URL": database_url},
    )


def _json(data_dir: Path, database_url: str, *args: str, stdin: str | None = None) -> Any:
    result = _run(data_dir, database_url, *args, "--json", stdin=stdin)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def acme(tmp_path: Path, database_url: str) -> tuple[Path, str]:
    """A data dir with tenant acme and its users alice (admin) and bob."""
    _json(tmp_path, database_url, "tenant", "create", "acme")
    for name in ("alice", "bob"):
        _json(
            tmp_path,
            database_url,
            *("user", "create", "--tenant", "acme", "--name", name, "--password-stdin"),
            stdin="a long password\n",
        )
    return tmp_path, database_url


def test_users_are_listed_disabled_enabled_and_given_a_new_password(
    acme: tuple[Path, str],
) -> None:
    users = _json(*acme, "user", "list", "--tenant", "acme")
    assert [(u["name"], u["disabled"], u["has_password"]) for u in users] == [
        ("alice", False, True),
        ("bob", False, True),
    ]
    assert all("password_hash" not in u for u in users)
    assert _json(*acme, "user", "disable", "--tenant", "acme", "--name", "bob")["disabled"]
    assert [u["disabled"] for u in _json(*acme, "user", "list", "--tenant", "acme")] == [
        False,
        True,
    ]
    refused = _run(
        *acme, "token", "create", "--tenant", "acme", "--user", "bob", "--scope", "apps:read"
    )
    assert refused.exit_code == 2
    assert not _json(*acme, "user", "enable", "--tenant", "acme", "--name", "bob")["disabled"]
    changed = _json(
        *acme,
        *("user", "set-password", "--tenant", "acme", "--name", "bob", "--password-stdin"),
        stdin="another long password\n",
    )
    assert changed["name"] == "bob"
    short = _run(
        *acme,
        *("user", "set-password", "--tenant", "acme", "--name", "bob", "--password-stdin"),
        stdin="short\n",
    )
    assert short.exit_code == 2
    assert "at least 8" in short.stdout


def test_pats_expire_in_90_days_unless_told_and_are_listed_and_revoked(
    acme: tuple[Path, str],
) -> None:
    create = ("token", "create", "--tenant", "acme", "--user", "alice", "--scope", "apps:read")
    default = _json(*acme, *create)
    assert default["expires_at"] == pytest.approx(time.time() + 90 * 86400, abs=60)
    never = _json(*acme, *create, "--expires", "never", "--name", "ci")
    assert never["expires_at"] is None
    hours = _json(*acme, *create, "--expires", "12h")
    assert hours["expires_at"] == pytest.approx(time.time() + 12 * 3600, abs=60)
    assert _run(*acme, *create, "--expires", "soon").exit_code == 2

    listed = _json(*acme, "token", "list", "--tenant", "acme", "--user", "alice")
    assert {t["id"] for t in listed} == {default["id"], never["id"], hours["id"]}
    assert {t["kind"] for t in listed} == {"pat"}
    assert all("token_hash" not in t and default["token"] not in json.dumps(t) for t in listed)

    revoked = _json(*acme, "token", "revoke", default["id"])
    assert revoked == {"kind": "pat", "id": default["id"], "revoked": True, "already": False}
    assert _json(*acme, "token", "revoke", default["id"])["already"] is True
    states = {t["id"]: t["state"] for t in _json(*acme, "token", "list", "--tenant", "acme")}
    assert states[default["id"]] == "revoked"
    assert states[never["id"]] == "active"

    jwt = _json(*acme, *create, "--oauth")
    by_jti = _json(*acme, "token", "revoke", jwt["id"])
    assert by_jti["kind"] == "oauth"
    assert by_jti["revoked"] is True


async def _grant(database_url: str, user_id: str, client_id: str) -> str:
    """A refresh token and one access token of ``client_id`` for the user, as the token
    endpoint would store them; returns the access token's jti."""
    storage = await Storage.open(database_url)
    try:
        oauth = OAuthStore(storage.engine)
        now = time.time()
        row = RefreshTokenRow(
            token_hash="f" * 64,
            family_id="fam-1",
            client_id=client_id,
            tenant_id="acme",
            user_id=user_id,
            scope="apps:read",
            resource=None,
            created_at=now,
            expires_at=now + 86400,
        )
        await oauth.insert_refresh(row)
        await oauth.record_access_token(row, "jti-of-the-grant", now + 3600)
        return "jti-of-the-grant"
    finally:
        await storage.close()


def test_grants_are_listed_and_revoked_with_their_access_tokens(
    acme: tuple[Path, str],
) -> None:
    import asyncio

    alice = _json(*acme, "user", "list", "--tenant", "acme")[0]
    jti = asyncio.run(_grant(acme[1], alice["id"], "https://client.example/meta.json"))
    grants = _json(*acme, "grant", "list", "--tenant", "acme", "--user", "alice")
    assert [(g["client_id"], g["scope"]) for g in grants] == [
        ("https://client.example/meta.json", "apps:read")
    ]
    tokens = _json(*acme, "token", "list", "--tenant", "acme")
    assert [(t["kind"], t["id"]) for t in tokens] == [("oauth", jti)]

    revoked = _json(
        *acme,
        *("grant", "revoke", "--tenant", "acme", "--user", "alice"),
        *("--client", "https://client.example/meta.json"),
    )
    assert revoked["access_tokens_revoked"] == 1
    assert _json(*acme, "grant", "list", "--tenant", "acme") == []
    assert _json(*acme, "token", "list", "--tenant", "acme") == []


def test_clients_are_listed_and_deleted(acme: tuple[Path, str]) -> None:
    made = _json(
        *acme, "client", "create", "--tenant", "acme", "--name", "robot", "--scope", "apps:read"
    )
    listed = _json(*acme, "client", "list")
    assert [(c["client_id"], c["name"], c["kind"]) for c in listed] == [
        (made["client_id"], "robot", "static")
    ]
    assert all("secret_hash" not in c for c in listed)
    assert _json(*acme, "client", "delete", made["client_id"])["deleted"] is True
    assert _json(*acme, "client", "list") == []
    gone = _run(*acme, "client", "delete", made["client_id"])
    assert gone.exit_code == 2
    assert "no OAuth client" in gone.stdout


def test_tenants_are_listed_disabled_and_enabled(acme: tuple[Path, str]) -> None:
    assert [(t["id"], t["disabled"]) for t in _json(*acme, "tenant", "list")] == [("acme", False)]
    assert _json(*acme, "tenant", "disable", "acme")["disabled"] is True
    assert _json(*acme, "tenant", "list")[0]["disabled"] is True
    assert _json(*acme, "tenant", "enable", "acme")["disabled"] is False
    unknown = _run(*acme, "tenant", "disable", "nope")
    assert unknown.exit_code == 2
    assert "no tenant 'nope'" in unknown.stdout


def test_sessions_are_listed_and_an_unknown_one_is_refused(acme: tuple[Path, str]) -> None:
    assert _json(*acme, "session", "list") == []
    unknown = _run(*acme, "session", "drop", "no-such-session")
    assert unknown.exit_code == 2
    assert "no session" in unknown.stdout


def test_human_output_is_a_table(acme: tuple[Path, str]) -> None:
    result = _run(*acme, "user", "list", "--tenant", "acme")
    assert result.exit_code == 0, result.output
    assert "alice" in result.stdout
    assert "disabled" in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["user", "list", "--tenant", "acme"],
        ["user", "disable", "--tenant", "acme", "--name", "bob"],
        ["token", "list", "--tenant", "acme"],
        ["token", "revoke", "abc123abc123"],
        ["grant", "list", "--tenant", "acme"],
        ["client", "list"],
        ["session", "list"],
        ["tenant", "list"],
        ["tenant", "create", "acme"],
        ["audit", "tail"],
        ["keys", "rotate"],
    ],
)
def test_admin_commands_refuse_a_data_dir_that_is_not_there_and_create_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.delenv("APPDECK_DATABASE_URL", raising=False)
    missing = tmp_path / "elsewhere" / ".appdeck"
    result = CliRunner().invoke(cli, [*command, "--data-dir", str(missing)])
    assert result.exit_code == 2, result.output
    assert "no data directory" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not missing.exists()


def test_commands_other_than_tenant_create_refuse_a_data_dir_without_a_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("APPDECK_DATABASE_URL", raising=False)
    result = CliRunner().invoke(
        cli, ["user", "list", "--tenant", "acme", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "no database" in result.stderr
    assert not (tmp_path / "appdeck.db").exists()
    made = CliRunner().invoke(cli, ["tenant", "create", "acme", "--data-dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "appdeck.db").exists()


async def _open_sessions(database_url: str, owners: list[tuple[str, str]]) -> None:
    from appdeck.protocol.sessions import Session

    storage = await Storage.open(database_url)
    try:
        for n, (tenant, user) in enumerate(owners):
            now = time.time()
            session = Session(f"s{n}", tenant, user, "2025-11-25", created_at=now, last_active=now)
            await storage.sessions.insert(session)
    finally:
        await storage.close()


def test_disabling_a_user_or_a_tenant_ends_their_stored_sessions(acme: tuple[Path, str]) -> None:
    import asyncio

    ids = {u["name"]: u["id"] for u in _json(*acme, "user", "list", "--tenant", "acme")}
    asyncio.run(_open_sessions(acme[1], [("acme", ids["alice"]), ("acme", ids["bob"])]))
    _json(*acme, "user", "disable", "--tenant", "acme", "--name", "bob")
    assert [s["user"] for s in _json(*acme, "session", "list")] == [ids["alice"]]
    _json(*acme, "tenant", "disable", "acme")
    assert _json(*acme, "session", "list") == []
