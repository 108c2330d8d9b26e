"""What the table tools say when they refuse (issue 20, items 11-14): the reason first and
never more than a short excerpt of the input; the row a failed conversion stops at; a list
right after a type change; a dry run of a type change over a default."""

from __future__ import annotations

from .conftest import World
from .test_tables_hostile import _app, _notes

EXCERPT = 120
"""How much of a refused input an error may repeat, at most (characters)."""


async def test_a_batch_too_long_and_a_huge_column_name_get_the_reason_first(
    world: World,
) -> None:
    alice, app_id, at = await _notes(world)
    rows = [{"title": f"row {i} " + "x" * 50} for i in range(1001)]
    long_name = "c" * 5000
    refusals = [
        await alice.error("records", action="insert", **at, rows=rows),
        await alice.error(
            "manage_table",
            action="create",
            app_id=app_id,
            table="t",
            columns=[{"name": long_name, "type": "text"}],
        ),
        await alice.error("records", action="insert", **at, rows=[{long_name: 1}]),
        await alice.error("manage_table", action="describe", app_id=app_id, table=long_name),
    ]
    for error in refusals:
        message = error["message"]
        assert error["code"] in ("invalid_argument", "quota_exceeded"), error
        assert len(message) < 300, message
        assert "x" * EXCERPT not in message and "c" * EXCERPT not in message, message
        reason = message.lower()
        assert any(
            word in reason[:100]
            for word in ("1001", "1,001", "at most", "too long", "longer than", "no column")
        ), message
    first = refusals[0]["message"]
    assert "1000" in first or "1,000" in first, first
