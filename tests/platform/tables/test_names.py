from __future__ import annotations

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.tables import names

BAD = [
    "",
    "A",
    "1abc",
    "a b",
    'a"b',
    "a;drop table x",
    "a--",
    "a'b",
    "é",
    "a\x00",
    "a\nb",
    "x" * 49,
    "x" * 10_000,
    "a__b",
    "sqlite_master",
    "pg_class",
    "_appdeck_x",
    str(2**63),
]


@pytest.mark.parametrize("value", BAD)
def test_a_bad_identifier_is_refused_naming_the_field(value: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        names.check(value, field="columns/0/name")
    assert raised.value.details["field"] == "columns/0/name"
    assert len(raised.value.message) < 300


@pytest.mark.parametrize("value", ["a", "_x", "snake_case_9", "x" * 48, "select", "id"])
def test_a_good_identifier_is_accepted(value: str) -> None:
    assert names.check(value, field="table") == value


def test_a_non_string_identifier_is_refused() -> None:
    with pytest.raises(InvalidArgument):
        names.check(12, field="table")


def test_id_cannot_be_declared_or_changed_as_a_column() -> None:
    with pytest.raises(InvalidArgument, match="primary key"):
        names.check_column("id")


def test_quote_always_quotes_and_doubles_quotes() -> None:
    assert names.quote("select") == '"select"'
    assert names.quote('a"b') == '"a""b"'


def test_our_own_object_names_are_never_valid_app_names() -> None:
    for ours in (names.fts_table("t"), names.fts_gin("t"), *names.fts_triggers("t")):
        assert not names.is_valid(ours)
    assert not names.is_valid(names.FTS_COLUMN)


def test_an_index_without_a_name_gets_one_unless_too_long() -> None:
    assert names.default_index("t", ("a", "b")) == "t_a_b_idx"
    with pytest.raises(InvalidArgument):
        names.default_index("t" * 40, ("abcdef", "ghijkl"))
