"""Cells and app text as pages show them: capped, every invisible character spelled out."""

from __future__ import annotations

from appdeck.console.shown import CELL_CHARS, cell, summary, visible


def test_a_long_text_shows_its_start_an_ellipsis_and_its_full_length() -> None:
    shown = cell("x" * 1_000_000)
    assert shown.text == "x" * CELL_CHARS + "…"
    assert shown.cut == 1_000_000


def test_control_and_bidi_characters_are_spelled_out_newlines_kept_only_in_logs() -> None:
    assert cell("a\x00b\x1b[0m\u202ec\n").text == "a\\x00b\\x1b[0m\\u202ec\\x0a"
    assert visible("one\ttwo\nthree\x7f", lines=True) == "one\ttwo\nthree\\x7f"


def test_values_of_every_type_have_a_kind_and_text() -> None:
    assert (cell(None).text, cell(None).kind) == ("NULL", "null")
    assert cell(True).text == "true"
    assert cell(3.5).kind == "number"
    assert cell({"k": ["<v>"]}).text == '{"k":["<v>"]}'
    blob = cell(b"\x00\xff" * 1000)
    assert blob.kind == "bytes"
    assert blob.text.startswith("2000 bytes: 00ff")
    assert blob.cut == 2000


def test_a_lone_surrogate_cannot_break_the_page() -> None:
    assert visible("a\ud800b").encode("utf-8") == b"a\\ud800b"


def test_unicode_is_kept_as_written() -> None:
    assert summary("日本語 e\u0301 🦄") == "日本語 e\u0301 🦄"
    assert summary(None) == ""
