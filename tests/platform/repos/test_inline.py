"""Inline files, pure: paths, decoding, caps, the author line and the fast-import stream."""

from __future__ import annotations

import pytest

from appdeck.common.errors import InvalidArgument
from appdeck.platform.repos.inline import (
    Author,
    Change,
    InlineFile,
    InlineLimits,
    changes_stream,
    checked,
    header,
    normal_path,
)

LIMITS = InlineLimits(max_files=3, max_bytes=10)


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../b", "a/./b", "./a", "a//b", "a/", "a\\b", "a\x00b",
     "a\nb", "a\rb", "\x7f", ".git", ".git/config", "x/.Git/hooks/post-update", "a\u2028b",
     "x" * 1025],
)  # fmt: skip
def test_a_path_that_is_not_relative_and_normal_is_refused(path: str) -> None:
    with pytest.raises(InvalidArgument):
        normal_path(path, 0)


@pytest.mark.parametrize("path", ["app.py", "static/ü/index.html", 'we"ird name', ".gitignore"])
def test_normal_relative_paths_are_taken_as_they_are(path: str) -> None:
    assert normal_path(path, 0) == path


def test_contents_are_decoded_strictly_and_capped_naming_the_limit() -> None:
    ok = checked([InlineFile("a", "AAE=", "base64"), InlineFile("b", "é"), InlineFile("c", None)],
                 LIMITS)  # fmt: skip
    assert ok == [Change("a", b"\x00\x01"), Change("b", "é".encode()), Change("c", None)]
    for content in ("AAE", "AA E=", "AAE=\n", "%%%%", "AAE=AAE="):
        with pytest.raises(InvalidArgument, match="base64"):
            checked([InlineFile("a", content, "base64")], LIMITS)
    with pytest.raises(InvalidArgument, match="lone surrogate"):
        checked([InlineFile("a", "\ud800")], LIMITS)
    with pytest.raises(InvalidArgument, match="at most 3 per call"):
        checked([InlineFile(f"f{i}", "") for i in range(4)], LIMITS)
    with pytest.raises(InvalidArgument, match="over 10 bytes"):
        checked([InlineFile("a", "123456"), InlineFile("b", "123456")], LIMITS)
    with pytest.raises(InvalidArgument, match="twice"):
        checked([InlineFile("A", ""), InlineFile("a", "")], LIMITS)
    with pytest.raises(InvalidArgument, match="empty"):
        checked([], LIMITS)


def test_the_stream_holds_regular_files_quoted_and_an_author_that_cannot_break_it() -> None:
    line = Author("eve <x>\nfrom deadbeef", "e@x\n").line(1.0)
    assert line == "appdeck <-> 1 +0000"
    start = header("main", Author("u1", "u1@acme"), "msg", when=5.0)
    assert start.startswith(b"commit refs/heads/main\nauthor u1 <u1@acme> 5 +0000\n")
    body = changes_stream([Change('a "q"', b"x\ny"), Change("gone", None)])
    assert body == b'M 100644 inline "a \\"q\\""\ndata 3\nx\ny\nD "gone"\ndone\n'
