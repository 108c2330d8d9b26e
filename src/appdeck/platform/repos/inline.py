"""Inline files (``import_and_deploy`` / ``deploy_app`` ``files``), pure: checked, decoded and
turned into a ``git fast-import`` stream that commits them on top of a branch.

Every file is client input: its path must be relative and normal (no ``..``, no ``.``, no
empty component, no absolute path, no backslash, no NUL or control character, no ``.git``
component in any case spelling, at most :data:`MAX_PATH` characters, unique); its content is
always a regular file (mode 100644: never a link, never executable), decoded strictly (utf-8,
or base64 with its alphabet and padding checked); ``content: null`` deletes the path. A count
cap and a total size cap (:class:`InlineLimits`) are checked with an error naming the limit.

The stream (``git fast-import --date-format=raw``) is the only thing that reaches git: the
bytes travel on git's stdin inside the app's sandbox (:mod:`.hosted`), no file of the
tenant's is written by the platform and nothing is read back but the new commit's sha.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from appdeck.common.errors import InvalidArgument

MAX_PATH: Final = 1024
"""Characters of one file's path."""
MAX_MESSAGE: Final = 2000
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_NAME: Final = re.compile(r"[^<>\x00-\x1f\x7f]{1,100}")
Encoding = Literal["utf-8", "base64"]


@dataclass(frozen=True, slots=True)
class InlineLimits:
    max_files: int = 1000
    """Files (and deletions) in one call."""
    max_bytes: int = 3 << 20
    """Decoded bytes of all the files of one call (the MCP request itself is capped too)."""


@dataclass(frozen=True, slots=True)
class InlineFile:
    """One file as the caller sent it (``content`` ``None``: delete the path)."""

    path: str
    content: str | None
    encoding: Encoding = "utf-8"


@dataclass(frozen=True, slots=True)
class Change:
    """One checked file: its normal path, and its bytes (``None``: delete it)."""

    path: str
    data: bytes | None


def checked(files: Sequence[InlineFile], limits: InlineLimits) -> list[Change]:
    """The files, checked and decoded, in their order; :class:`InvalidArgument` naming the
    first file (by index) or the limit that refuses them."""
    if not files:
        raise InvalidArgument("files is empty: give at least one file", field="files")
    if len(files) > limits.max_files:
        raise InvalidArgument(
            f"{len(files)} files given: at most {limits.max_files} per call",
            hint="commit the rest in a later call (files not listed keep their content)",
            field="files",
        )
    seen: set[str] = set()
    total = 0
    changes = []
    for index, file in enumerate(files):
        path = normal_path(file.path, index)
        if path.casefold() in seen:
            raise InvalidArgument(f"files[{index}].path {path!r} is given twice", field="files")
        seen.add(path.casefold())
        data = None if file.content is None else decoded(file, index)
        total += len(data or b"")
        if total > limits.max_bytes:
            raise InvalidArgument(
                f"the files' total size is over {limits.max_bytes} bytes (the limit per call)",
                hint="commit large files with git push to the app's hosted repository",
                field="files",
            )
        changes.append(Change(path, data))
    return changes


def normal_path(raw: object, index: int) -> str:
    """``raw`` as a relative, normal path, or :class:`InvalidArgument` saying why not."""
    where = f"files[{index}].path"
    if not isinstance(raw, str) or not raw:
        raise InvalidArgument(f"{where} must be a non-empty string", field="files")
    if len(raw) > MAX_PATH:
        raise InvalidArgument(f"{where} is longer than {MAX_PATH} characters", field="files")
    if _CONTROL.search(raw):
        raise InvalidArgument(f"{where} holds a control character (NUL, newline...)")
    if "\\" in raw:
        raise InvalidArgument(f"{where} holds a backslash: separate folders with /")
    if raw.startswith("/"):
        raise InvalidArgument(f"{where} is absolute: paths are relative to the app's root")
    parts = raw.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidArgument(
                f"{where} {raw[:200]!r} is not a normal relative path (empty, '.' or '..' part)",
                field="files",
            )
        if part.casefold() == ".git":
            raise InvalidArgument(f"{where} has a .git component: refused", field="files")
    if not raw.isprintable():
        raise InvalidArgument(f"{where} holds an unprintable character", field="files")
    return raw


def decoded(file: InlineFile, index: int) -> bytes:
    """The file's bytes: strict utf-8 (no lone surrogates), or strict base64."""
    assert file.content is not None
    if file.encoding == "base64":
        try:
            return base64.b64decode(file.content.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise InvalidArgument(
                f"files[{index}].content is not valid base64 (standard alphabet, padded)",
                field="files",
            ) from None
    if file.encoding != "utf-8":
        raise InvalidArgument(f"files[{index}].encoding must be utf-8 or base64")
    try:
        return file.content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"files[{index}].content is not valid unicode (a lone surrogate)", field="files"
        ) from None


@dataclass(frozen=True, slots=True)
class Author:
    """Who a commit is by: the calling principal (``name <email>``)."""

    name: str
    email: str

    def line(self, when: float) -> str:
        name = self.name if _NAME.fullmatch(self.name) else "appdeck"
        email = self.email if _NAME.fullmatch(self.email) and " " not in self.email else "-"
        return f"{name} <{email}> {int(when)} +0000"


def header(branch: str, author: Author, message: str, *, when: float | None = None) -> bytes:
    """The start of the fast-import commit on ``refs/heads/<branch>`` (its ``from`` line,
    the parent, is added in the sandbox, where the branch's head is read)."""
    moment = time.time() if when is None else when
    text = message.strip()[:MAX_MESSAGE] or "Deploy inline files"
    body = text.encode("utf-8", "replace")
    who = author.line(moment).encode()
    out = [f"commit refs/heads/{branch}\n".encode(), b"author " + who + b"\n"]
    out += [b"committer " + who + b"\n", b"data %d\n" % len(body), body, b"\n"]
    return b"".join(out)


def changes_stream(changes: Sequence[Change]) -> bytes:
    """The rest of the commit: each change as ``M`` (a regular file, mode 100644, inline
    data) or ``D``, then ``done``. Paths are quoted C-style, fast-import's own rule."""
    out = []
    for change in changes:
        quoted = _quoted(change.path)
        if change.data is None:
            out.append(b"D " + quoted + b"\n")
        else:
            out.append(b"M 100644 inline " + quoted + b"\n")
            out += [b"data %d\n" % len(change.data), change.data, b"\n"]
    out.append(b"done\n")
    return b"".join(out)


def _quoted(path: str) -> bytes:
    """A path in fast-import's C-style quotes (``"`` and ``\\`` escaped; no control
    characters reach here)."""
    escaped = path.replace("\\", "\\\\").replace('"', '\\"')
    return b'"' + escaped.encode("utf-8") + b'"'
