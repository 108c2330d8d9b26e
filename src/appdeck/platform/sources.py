"""Where an app's source may be read from: the caller's own tenant roots, never the data dir.

This module owns the rule (DESIGN.md §5, "The trust boundary"); apps call it when a spec
names a ``source_path`` (register, spec change) and the deploy engine calls it again at every
deploy, because the folder may have been swapped for a link since.

Roots come from ``APPDECK_SOURCE_ROOTS``. A root may contain ``{tenant}``, which stands for
the caller's tenant id (``/srv/appdeck/sources/{tenant}``); a root without it is shared by every
tenant. Unset, the one root is ``<data dir's parent>/appdeck-sources/{tenant}``, and a tenant's
directory there is created the first time the tenant's sources are checked.

A configured root that is the data dir, lies inside it or contains it is dropped at start-up
with a warning: the data dir holds the signing keys, the env-var key, the database and the
runtime's workspaces, and no source may ever read it.

:meth:`SourceRoots.check` takes a ``source_path`` through these steps, in order:

1. a non-empty absolute path, without ``..``;
2. under one of the tenant's roots *as written*: decided without touching the filesystem, so a
   tenant cannot probe what exists elsewhere on the host;
3. it exists (every link resolved);
4. resolved, it is still under one of the tenant's resolved roots (no link out);
5. resolved, it is not the data dir, inside it, or a parent of it;
6. resolved, it is in no other tenant's root (a ``{tenant}`` root's siblings), nor a parent
   of them;
7. it is a directory.

Any failure is :class:`~appdeck.common.errors.InvalidArgument` with a hint naming the roots
this tenant has (never another tenant's).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from appdeck.common.errors import InvalidArgument

__all__ = ["DEFAULT_ROOT", "TENANT", "SourceRoots"]

log = logging.getLogger("appdeck.sources")

TENANT: Final = "{tenant}"
DEFAULT_ROOT: Final = f"appdeck-sources/{TENANT}"
"""The default root, relative to the data dir's parent."""

# a tenant id that is safe as one path component (never '.', '..' or containing '/')
_TENANT_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_SHOWN: Final = 200


@dataclass(frozen=True, slots=True)
class _Root:
    """One configured root: an absolute path, possibly with ``{tenant}`` in one component."""

    template: Path
    create: bool = False
    """Create the tenant's directory on first use (the default root only)."""

    @property
    def prefix(self) -> Path:
        """The part before the ``{tenant}`` component (the whole path when there is none)."""
        for i, part in enumerate(self.template.parts):
            if TENANT in part:
                return Path(*self.template.parts[:i])
        return self.template

    @property
    def templated(self) -> bool:
        return TENANT in str(self.template)

    def component(self, tenant: str) -> str:
        """The tenant's name of the component right under :attr:`prefix`."""
        return self.template.parts[len(self.prefix.parts)].replace(TENANT, tenant)

    def expand(self, tenant: str) -> Path:
        return Path(str(self.template).replace(TENANT, tenant))


class SourceRoots:
    """The source roots of every tenant, and the one check of a ``source_path``."""

    def __init__(self, configured: Sequence[Path | str], *, data_dir: Path) -> None:
        self._data = data_dir.resolve()
        roots = [_Root(_absolute(Path(r))) for r in configured if str(r).strip()]
        if not roots:
            roots = [_Root(self._data.parent / DEFAULT_ROOT, create=True)]
        self._roots = [r for r in roots if self._usable(r)]

    def _usable(self, root: _Root) -> bool:
        real = root.prefix.resolve()
        # under a {tenant} root's prefix, only some tenants' roots may hit the data dir: those
        # are left out per tenant (roots_for)
        bad = real.is_relative_to(self._data) if root.templated else _overlaps(real, self._data)
        if bad:
            log.warning(
                "source root %s is dropped: it overlaps the data dir %s, which no app may read",
                root.template,
                self._data,
            )
        return not bad

    def roots_for(self, tenant: str) -> list[Path]:
        """The tenant's roots, resolved (the default one created on first use)."""
        if not _TENANT_ID.fullmatch(tenant):
            return []
        found: list[Path] = []
        for root in self._roots:
            path = root.expand(tenant)
            if root.create:
                _make(path)
            real = path.resolve()
            if _overlaps(real, self._data):
                continue
            if root.templated and not real.is_relative_to(root.prefix.resolve()):
                continue  # the tenant's directory is a link out of the roots' parent
            found.append(real)
        return found

    def check(self, tenant: str, source_path: object) -> Path:
        """The resolved ``source_path`` if ``tenant`` may read it, else ``InvalidArgument``."""
        raw = _syntax(source_path)
        shown = repr(str(source_path))[:_SHOWN]
        allowed = self.roots_for(tenant)
        hint = _hint(allowed)
        written = [
            r.expand(tenant) for r in self._roots if _TENANT_ID.fullmatch(tenant)
        ]  # the roots as configured, before links resolve
        if not any(raw.is_relative_to(r) for r in (*written, *allowed)):
            raise InvalidArgument(f"source_path {shown} is outside your source roots", hint=hint)
        try:
            real = raw.resolve(strict=True)
        except FileNotFoundError:
            raise InvalidArgument(f"source_path {shown} does not exist", hint=hint) from None
        except (OSError, RuntimeError):  # a link loop, a permission, a name too long
            raise InvalidArgument(f"source_path {shown} cannot be read", hint=hint) from None
        if not any(real.is_relative_to(r) for r in allowed):
            raise InvalidArgument(
                f"source_path {shown} leads outside your source roots (through a link)",
                hint=hint,
            )
        if _overlaps(real, self._data):
            raise InvalidArgument(
                f"source_path {shown} overlaps the platform's data directory", hint=hint
            )
        if self._in_other_tenants_root(tenant, real):
            raise InvalidArgument(
                f"source_path {shown} is in another tenant's source root", hint=hint
            )
        if not real.is_dir():
            raise InvalidArgument(f"source_path {shown} is not a directory", hint=hint)
        return real

    def _in_other_tenants_root(self, tenant: str, real: Path) -> bool:
        """Whether ``real`` is in (or contains) a sibling of the tenant's ``{tenant}`` roots:
        a shared root configured above them must not open another tenant's sources."""
        for root in self._roots:
            if not root.templated:
                continue
            prefix = root.prefix.resolve()
            if prefix.is_relative_to(real):
                return True
            mine = root.component(tenant)
            if real.is_relative_to(prefix) and real.parts[len(prefix.parts)] != mine:
                return True
        return False


def _syntax(source_path: object) -> Path:
    if not isinstance(source_path, str) or not source_path:
        raise InvalidArgument("source_path must be a non-empty string")
    raw = Path(source_path)
    if "\x00" in source_path or not raw.is_absolute() or ".." in raw.parts:
        raise InvalidArgument(
            f"source_path must be an absolute path without '..': {source_path!r}"[:_SHOWN]
        )
    return raw


def _hint(allowed: list[Path]) -> str:
    if not allowed:
        return "no source root is open to your tenant: an operator sets APPDECK_SOURCE_ROOTS"
    listed = ", ".join(str(p) for p in allowed)
    return f"put the app in a directory under your source roots: {listed}"


def _overlaps(path: Path, protected: Path) -> bool:
    """``path`` is ``protected``, inside it, or a parent of it."""
    return path.is_relative_to(protected) or protected.is_relative_to(path)


def _absolute(path: Path) -> Path:
    return Path(os.path.normpath(path.expanduser().absolute()))


def _make(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("cannot create the source root %s: %s", path, exc.strerror)
