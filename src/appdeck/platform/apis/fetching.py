"""Reading what discover_apis finds: what a live answer is (the ingress's own "no live release"
page, the body's declared kind) and a top-level file of a repository's checkout, read without
following a link and within the size cap."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Final

from appdeck.common.errors import InvalidArgument
from appdeck.platform.apis import documents
from appdeck.platform.apis.client import AppResponse

INGRESS_MISSES: Final = ("no_such_app", "not_deployed", "no_live_release", "stopped")
"""The codes of the ingress's own pages when no release of the app answers."""


def ingress_miss(response: AppResponse) -> bool:
    """The ingress's own answer: the app has no live release (or none ever)."""
    if response.status not in (404, 503) or response.truncated:
        return False
    try:
        body = json.loads(response.body)
    except ValueError:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("code") in INGRESS_MISSES


def declared_kind(response: AppResponse) -> str | None:
    """What the response says its body is: html, json, yaml or None (unsaid)."""
    media = (response.header("content-type") or "").split(";")[0].strip().lower()
    if "html" in media:
        return "html"
    if "json" in media:
        return "json"
    if "yaml" in media or "yml" in media:
        return "yaml"
    return None


def read_top_file(root: Path, name: str) -> tuple[bytes | None, str]:
    """A regular file at the top of ``root``, never through a link, at most the size cap."""
    try:
        directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None, "the checkout is missing"
    try:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=directory)
    except FileNotFoundError:
        return None, "absent"
    except OSError as exc:
        return None, "a link: not read" if exc.errno == errno.ELOOP else "unreadable"
    finally:
        os.close(directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if info.st_size > documents.MAX_BYTES:
            raise InvalidArgument(
                f"{name} in the repository is larger than "
                f"{documents.MAX_BYTES // (1024 * 1024)} MiB"
            )
        with os.fdopen(fd, "rb", closefd=False) as file:
            raw = file.read(documents.MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > documents.MAX_BYTES:
        raise InvalidArgument(f"{name} in the repository is larger than the size cap")
    return raw, "found"
