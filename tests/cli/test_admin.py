"""The admin commands' audit rows take the server's road: queued on an AuditLog whose writer
puts a row the database refuses in the data dir's dead-letter file; the command still works."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from appdeck.cli import cli
from appdeck.cli.admin import DEAD_LETTER


def _run(data_dir: Path, *args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(cli, [*args, "--data-dir", str(data_dir)], input=stdin)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_token_create_writes_its_audit_row(tmp_path: Path) -> None:
    _run(tmp_path, "tenant", "create", "acme")
    _run(tmp_path, "user", "create", "--tenant", "acme", "--name", "ada")
    _run(tmp_path, "token", "create", "--tenant", "acme", "--user", "ada", "--scope", "apps:read")
    rows = [json.loads(line) for line in _run(tmp_path, "audit", "tail", "--json").splitlines()]
    assert [row["event"] for row in rows] == ["token_issued"]
    assert not (tmp_path / DEAD_LETTER).exists()


def test_an_audit_row_the_database_refuses_goes_to_the_dead_letter_file(tmp_path: Path) -> None:
    _run(tmp_path, "tenant", "create", "acme")
    _run(tmp_path, "user", "create", "--tenant", "acme", "--name", "ada")
    with sqlite3.connect(tmp_path / "appdeck.db") as db:  # the database answers, the row fails
        db.execute("DROP TABLE audit_log")
    out = _run(
        tmp_path, "token", "create", "--tenant", "acme", "--user", "ada", "--scope", "apps:read"
    )
    token = out.strip()
    assert token.startswith("adk_pat_")  # the command did its work
    (line,) = (tmp_path / DEAD_LETTER).read_text().splitlines()
    buried = json.loads(line)
    assert buried["row"]["event"] == "token_issued"
    assert "audit_log" in buried["error"]
    assert token not in line
