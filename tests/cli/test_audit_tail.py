"""``appdeck audit tail`` shows an aggregated refusal row with its count."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from appdeck.cli import cli


def _run(data_dir: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--data-dir", str(data_dir)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_count_row_shows_how_many_more_refusals_it_stands_for(tmp_path: Path) -> None:
    _run(tmp_path, "tenant", "create", "acme")  # makes the database
    detail = {"reason": "bad token", "source": "10.1.2.3", "count": 4999, "first_ts": 1.0}
    with sqlite3.connect(tmp_path / "appdeck.db") as db:
        db.execute(
            "INSERT INTO audit_log (ts, event, method, outcome, status, detail) "
            "VALUES (?, 'refused', 'POST', 'denied', 401, ?)",
            (1_800_000_000.0, json.dumps(detail)),
        )
    printed = _run(tmp_path, "audit", "tail")
    # the table's width is the console's (made once per process): cells may wrap, words stay
    assert "+4999" in printed
    assert "denied" in printed
    [row] = [json.loads(line) for line in _run(tmp_path, "audit", "tail", "--json").splitlines()]
    assert row["detail"]["count"] == 4999
