"""What a checked-out repository is, and the spec that runs it: a pure function over the
tree's top level, reading a few small files, never following a link, never running anything.

In order (the first that answers names the run command):

1. ``Procfile`` with a ``web:`` line → that command (runtime from the files below, else
   ``command``).
2. ``package.json`` → node: ``npm start`` when ``scripts.start`` is set, else ``node <main>``.
3. ``requirements.txt`` or ``pyproject.toml`` (or a lone ``app.py`` / ``main.py``) → python:
   ``python3 app.py`` or ``python3 main.py``, whichever exists.
4. ``index.html`` → static (served as files, no command).

The health check path is the one the app serves: ``/healthz``, else ``/health``, when one of
its top-level source files names it as a quoted literal (a route), else ``/`` (the default).

Nothing found: :class:`FailedPrecondition` naming what was looked for. Every read is bounded
(a file over its cap is refused, not truncated into a wrong answer), and a file that is a
link, a directory or not UTF-8 counts as absent or refused, with a reason.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import FailedPrecondition, InvalidArgument

MAX_PROCFILE: Final = 16 * 1024
MAX_PACKAGE_JSON: Final = 256 * 1024
MAX_COMMAND: Final = 1000
_SAFE_MAIN: Final = re.compile(r"(?!.*\.\.)[A-Za-z0-9_][A-Za-z0-9_./-]{0,199}")
_WEB: Final = re.compile(r"web:[ \t]*(\S.*)")


MAX_SOURCE: Final = 256 * 1024
MAX_SOURCES: Final = 20
SOURCE_SUFFIXES: Final = (".py", ".js", ".mjs", ".cjs", ".ts", ".rb", ".go", ".php")
HEALTH_PATHS: Final = ("/healthz", "/health")


@dataclass(frozen=True, slots=True)
class Detected:
    runtime: str
    run_command: str | None
    reasons: tuple[str, ...] = field(default=())
    health_path: str | None = None
    """The health route the app's sources name (``None``: the default, ``/``)."""

    def spec(self) -> dict[str, Any]:
        found: dict[str, Any] = {"runtime": self.runtime}
        if self.run_command is not None:
            found["run_command"] = self.run_command
        if self.health_path is not None:
            found["health_check"] = {"path": self.health_path}
        return found


def detect(root: Path) -> Detected:
    """The runtime, run command and health path of the tree at ``root`` (the module's rules)."""
    found = _run(root)
    if found.runtime == "static":
        return found
    health = health_path(root)
    if health is None:
        return found
    why = f"{health} named in the sources: the health check"
    return replace(found, health_path=health, reasons=(*found.reasons, why))


def health_path(root: Path) -> str | None:
    """``/healthz`` or ``/health`` when a top-level source file names it (quoted), else None."""
    names = sorted(n for n in _entries(root) if n.endswith(SOURCE_SUFFIXES))[:MAX_SOURCES]
    texts = []
    for name in names:
        try:
            texts.append(_read(root, name, MAX_SOURCE))
        except InvalidArgument:
            continue  # too large, not text, a link: not a source to read
    for path in HEALTH_PATHS:
        if any(f'"{path}"' in t or f"'{path}'" in t or f"`{path}`" in t for t in texts):
            return path
    return None


def _run(root: Path) -> Detected:
    names = _entries(root)
    python = bool({"requirements.txt", "pyproject.toml"} & names)
    node = "package.json" in names
    reasons: list[str] = []
    runtime = "node" if node else ("python" if python else "command")
    if "Procfile" in names:
        web = _procfile_web(_read(root, "Procfile", MAX_PROCFILE))
        if web is not None:
            reasons.append("Procfile web line")
            return Detected(runtime, web, tuple(reasons))
        reasons.append("Procfile without a web line: ignored")
    if node:
        command = _node_command(_read(root, "package.json", MAX_PACKAGE_JSON))
        if command is not None:
            return Detected("node", command, (*reasons, f"package.json: {command}"))
        reasons.append("package.json without scripts.start or main")
    for entry in ("app.py", "main.py"):
        if entry in names and (python or not node):
            why = "requirements.txt/pyproject.toml and " if python else ""
            return Detected("python", f"python3 {entry}", (*reasons, f"{why}{entry}"))
    if "index.html" in names:
        return Detected("static", None, (*reasons, "index.html: served as static files"))
    looked = "a Procfile web line, package.json, app.py or main.py, or index.html"
    raise FailedPrecondition(
        f"could not tell how to run this repository (looked for {looked})",
        hint="set_app_spec with runtime and run_command, then deploy_app",
    )


def _entries(root: Path) -> set[str]:
    """The names of the regular files at the top of ``root`` (links and the rest left out)."""
    found: set[str] = set()
    with os.scandir(root) as listing:
        for count, entry in enumerate(listing):
            if count >= 10_000:
                break
            if entry.is_file(follow_symlinks=False):
                found.add(entry.name)
    return found


def _read(root: Path, name: str, cap: int) -> str:
    """``root/name``, opened without following a link, at most ``cap`` bytes, as UTF-8."""
    try:
        fd = os.open(root / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise InvalidArgument(f"{name} could not be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidArgument(f"{name} is not a regular file")
        data = os.read(fd, cap + 1)
    finally:
        os.close(fd)
    if len(data) > cap:
        raise InvalidArgument(f"{name} is larger than {cap // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"{name} is not UTF-8 text") from None


def _procfile_web(text: str) -> str | None:
    for line in text.splitlines():
        match = _WEB.fullmatch(line.strip())
        if match is not None:
            return _command(match.group(1).strip(), "Procfile web line")
    return None


def _node_command(text: str) -> str | None:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidArgument("package.json is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidArgument("package.json is not a JSON object")
    scripts = data.get("scripts")
    if isinstance(scripts, dict) and isinstance(scripts.get("start"), str):
        _command(scripts["start"], "package.json scripts.start")
        return "npm start"
    main = data.get("main")
    if isinstance(main, str) and main:
        if not _SAFE_MAIN.fullmatch(main):
            raise InvalidArgument("package.json main is not a plain relative path")
        return f"node {main}"
    return None


def _command(command: str, what: str) -> str:
    if not command or len(command) > MAX_COMMAND:
        raise InvalidArgument(f"the {what} is empty or longer than {MAX_COMMAND} characters")
    if any(ord(c) < 32 and c != "\t" for c in command) or "\x7f" in command:
        raise InvalidArgument(f"the {what} contains control characters")
    return command
