"""Copying an app's source into a release workspace, safely.

The source is untrusted: it is whatever a repository or an upload contained. The copy
- keeps regular files (mode bits, minus set-id bits), directories and symlinks that stay
  inside the source; a symlink is re-created relative, so it points into the copy;
- refuses (InvalidArgument) a symlink that resolves outside the source (``../../etc``, an
  absolute path elsewhere) and any special file (FIFO, socket, device);
- refuses (QuotaExceeded) more than ``max_files`` entries or ``max_bytes`` bytes;
- skips VCS metadata, caches and installed dependencies (:data:`IGNORED_NAMES`): the build
  re-creates dependencies for this machine;
- opens every file with ``O_NOFOLLOW`` and checks what it opened, so a file swapped for a
  symlink during the copy is refused instead of followed.

Which source paths a caller may name at all is the platform's decision, not this module's.

Sandboxed, the copy runs *inside* the app's sandbox, as the app's uid, with the source
mounted read-only at ``/source`` and the new workspace at ``/app`` (:func:`main`, run by
``python3 -I -S -c <this file>``): it reads only what that uid may read, and a link that
escapes resolves inside the sandbox, where nothing of the host's is to be found. So this
module must stay stdlib-only apart from the two error classes, which it defines itself when
the platform is not importable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

try:
    from appdeck.common.errors import InvalidArgument, QuotaExceeded
except ImportError:  # run inside a sandbox, stdlib only

    class InvalidArgument(Exception):  # type: ignore[no-redef]
        def __init__(self, message: str, *, hint: str | None = None) -> None:
            super().__init__(message)
            self.message = message
            self.hint = hint

    class QuotaExceeded(InvalidArgument):  # type: ignore[no-redef]
        pass


IGNORED_NAMES: Final = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)


@dataclass(frozen=True, slots=True)
class CopyLimits:
    max_bytes: int = 200 * 1024 * 1024
    max_files: int = 20_000


@dataclass(frozen=True, slots=True)
class CopyStats:
    files: int
    bytes: int
    symlinks: int
    venv: bool = False
    """The sandboxed copy also made the workspace's bare venv (see :func:`main`)."""


class _Counter:
    def __init__(self, limits: CopyLimits) -> None:
        self.limits = limits
        self.files = 0
        self.bytes = 0
        self.symlinks = 0

    def entry(self) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise QuotaExceeded(
                f"the source has more than {self.limits.max_files} files",
                hint="remove generated files and dependencies from the source",
            )

    def check_room(self, count: int) -> None:
        if self.bytes + count > self.limits.max_bytes:
            self._too_large()

    def add_bytes(self, count: int) -> None:
        self.bytes += count
        if self.bytes > self.limits.max_bytes:
            self._too_large()

    def _too_large(self) -> NoReturn:
        raise QuotaExceeded(
            f"the source is larger than {_size(self.limits.max_bytes)}",
            hint="remove large generated files and dependencies from the source",
        )


def copy_source(
    source: Path,
    dest: Path,
    *,
    limits: CopyLimits | None = None,
    exclude: Path | None = None,
) -> CopyStats:
    """Copy the directory ``source`` to ``dest`` (which must not exist yet).

    ``exclude``: a directory never copied, even when it is inside the source (the runtime
    directory itself, when a developer points the source at a project that contains it).
    On error, ``dest`` is left for the caller to delete.
    """
    try:
        root = source.resolve(strict=True)
    except (OSError, RuntimeError):
        raise InvalidArgument(
            f"source path {str(source)!r} does not exist or cannot be read"
        ) from None
    if not root.is_dir():
        raise InvalidArgument(f"source path {str(source)!r} is not a directory")
    skip = exclude.resolve() if exclude is not None else None
    counter = _Counter(limits or CopyLimits())
    dest.mkdir(parents=True, mode=0o755, exist_ok=True)
    if any(dest.iterdir()):
        raise InvalidArgument(f"the copy's destination {str(dest)!r} is not empty")

    def walk_error(error: OSError) -> None:
        raise InvalidArgument(f"cannot read the source: {error.strerror} ({error.filename})")

    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error, followlinks=False):
        here = Path(dirpath)
        out = dest / here.relative_to(root)
        keep = []
        for name in sorted(dirnames):
            path = here / name
            if name in IGNORED_NAMES or (skip is not None and path == skip):
                continue
            counter.entry()
            info = _lstat(path, root)
            if stat.S_ISLNK(info.st_mode):
                _copy_symlink(path, out / name, root)
                counter.symlinks += 1
                continue
            (out / name).mkdir(mode=0o755)
            keep.append(name)
        dirnames[:] = keep  # os.walk descends only into these
        for name in sorted(filenames):
            if name in IGNORED_NAMES:
                continue
            path = here / name
            counter.entry()
            info = _lstat(path, root)
            if stat.S_ISLNK(info.st_mode):
                _copy_symlink(path, out / name, root)
                counter.symlinks += 1
            elif stat.S_ISREG(info.st_mode):
                _copy_file(path, out / name, root, counter)
            else:
                raise InvalidArgument(
                    f"{_rel(path, root)!r} in the source is a special file (FIFO, socket or "
                    "device); only regular files, directories and symlinks are copied"
                )
    return CopyStats(files=counter.files, bytes=counter.bytes, symlinks=counter.symlinks)


def _size(count: int) -> str:
    return f"{count / (1024 * 1024):g} MiB" if count >= 1024 * 1024 else f"{count} bytes"


def _rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def _lstat(path: Path, root: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot read {_rel(path, root)!r} in the source: {exc.strerror}"
        ) from None


def _copy_symlink(path: Path, target_path: Path, root: Path) -> None:
    """Re-create an in-source symlink relative to its directory, so it points into the copy."""
    link = os.readlink(path)
    resolved = Path(os.path.realpath(path))
    if not resolved.is_relative_to(root):
        raise InvalidArgument(
            f"symlink {_rel(path, root)!r} in the source points outside the source ({link!r})",
            hint="replace it with the file it points to, or a link inside the source",
        )
    os.symlink(os.path.relpath(resolved, path.parent), target_path)


def _copy_file(path: Path, target_path: Path, root: Path, counter: _Counter) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise InvalidArgument(
            f"cannot read {_rel(path, root)!r} in the source: {exc.strerror}"
        ) from None
    with contextlib.ExitStack() as stack:
        src = stack.enter_context(os.fdopen(fd, "rb"))
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise InvalidArgument(f"{_rel(path, root)!r} in the source changed while copied")
        counter.check_room(info.st_size)  # refuse a huge file before copying any of it
        mode = (info.st_mode & 0o777) | 0o600
        out_fd = os.open(
            target_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode
        )
        dst = stack.enter_context(os.fdopen(out_fd, "wb"))
        while chunk := src.read(1024 * 1024):
            counter.add_bytes(len(chunk))  # a file growing while copied stays bounded too
            dst.write(chunk)
        os.fchmod(dst.fileno(), mode)


def open_dir_nofollow(path: Path) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (absolute), opened one component
    at a time without following any symlink: a link anywhere on the way (one swapped in after
    the path was checked, say) is refused (InvalidArgument), never followed."""
    if not path.is_absolute():
        raise InvalidArgument(f"source path {str(path)!r} is not absolute")
    flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in path.parts[1:]:
            if part in ("", ".", ".."):
                raise InvalidArgument(f"source path {str(path)!r} is not a plain path")
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                raise InvalidArgument(
                    f"source path {str(path)!r} cannot be opened without following a link "
                    f"({exc.strerror}: {part!r})",
                    hint="name the directory itself, not a link to it",
                ) from None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_tree(path: Path) -> None:
    """Delete a directory tree if it exists (symlinks are removed, never followed)."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path)


def make_bare_venv(dest: Path, venv: Path) -> bool:
    """``python3 -m venv --without-pip <venv>``, done in this process, when the copy in
    ``dest`` has no ``requirements.txt`` (with one, the build makes a venv with pip itself):
    whether it made one. Run by the sandboxed copy, as the app's uid, which saves the build a
    sandbox of its own for this one step."""
    if os.path.lexists(dest / "requirements.txt"):
        return False
    import venv as venv_module

    venv_module.EnvBuilder(symlinks=True, with_pip=False).create(str(venv))
    return True


def main(argv: list[str]) -> int:
    """``<source> <dest> <max_bytes> <max_files> [<venv>]``: copy (then, given ``venv``, see
    :func:`make_bare_venv`), and print the outcome as one JSON object on stdout
    (``{"files", "bytes", "symlinks", "venv"}`` or ``{"error", "message", "hint"}``)."""
    import json

    source, dest, max_bytes, max_files, *venv = argv
    try:
        stats = copy_source(
            Path(source),
            Path(dest),
            limits=CopyLimits(max_bytes=int(max_bytes), max_files=int(max_files)),
        )
    except InvalidArgument as exc:
        kind = "quota" if isinstance(exc, QuotaExceeded) else "invalid"
        print(json.dumps({"error": kind, "message": exc.message, "hint": exc.hint}))
        return 1
    made = bool(venv) and make_bare_venv(Path(dest), Path(venv[0]))
    outcome = {"files": stats.files, "bytes": stats.bytes, "symlinks": stats.symlinks}
    print(json.dumps({**outcome, "venv": made}))
    return 0
