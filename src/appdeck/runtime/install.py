"""One install, one namespace: what keeps two AppDeck servers on one host (production beside
staging, ``make run`` beside ``make test``) out of each other's apps.

Everything a sandboxed app holds on the host outside the data dir is named after the
*install*, not after the app alone (app ids and release ids repeat across data dirs):

- **An install id**, made at the first start and kept in ``<data dir>/install.json``
  (:func:`identify`). Replicas of one install share the data dir, hence the id.
- **A uid range** of :data:`UID_COUNT` uids (app ``n`` runs as ``uid_base + n``), recorded in
  ``install.json`` because files on disk belong to those uids: an install keeps its range for
  good. New installs take the first free range from :data:`FIRST_BASE` on, above systemd's
  container ranges and below its "foreign" range, skipping host users and ``/etc/sub[ug]id``.
- **Its cgroup** ``appdeck/<id>`` and **its runtime dir** ``/run/appdeck/<id>`` (the stage
  its sandboxes bind their workspace onto). Network namespaces have no names: each instance's
  is held by descriptors only (:mod:`appdeck.runtime.netns`), so there is nothing to share.

**The host registry** (:data:`REGISTRY`, ``/var/lib/appdeck/installs``: it survives reboots,
like the uids on disk) has an entry per 65,536-uid slot an install's range touches, naming
the install and its data dir, and a lock file per slot. A starting server (:func:`claim`)
holds a shared ``flock`` on each of its slots for as long as it runs. Holders with the same
install id *and* data dir coexist (replicas); anyone else is refused with one line naming the
other install's data dir: another install that runs on those uids (an operator gave two the
same ``APPDECK_SANDBOX_UID_BASE``, or copied a data dir), or one that is stopped but whose
data dir still holds it (its apps may still run: instances outlive their server). An entry
whose data dir no longer holds its install (deleted, moved) is stale: its slot is taken over.
Claims are serialised by a registry-wide lock held for the few file operations they take.

**Existing data dirs** (apps deployed, no ``install.json``) keep what they had: uid base
200,000 and cgroup ``appdeck`` (:data:`LEGACY_UID_BASE`, :data:`LEGACY_CGROUP`), recorded
at their first start under this code. ``APPDECK_SANDBOX_UID_BASE`` / ``APPDECK_SANDBOX_CGROUP``
still win when set (a uid base so set is recorded: the apps' files follow it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from appdeck.runtime import cgroups
from appdeck.runtime.sandbox import Sandbox, SandboxUnavailable, detect, require_root

log = logging.getLogger("appdeck.runtime")

INSTALL_FILE: Final = "install.json"
UID_COUNT: Final = 65_536
"""Uids per install: app ids 0 (the sandbox's own probe) to 65,535."""
FIRST_BASE: Final = 0x7000_0000
"""1,879,048,192: just above systemd's container uid ranges (524,288-1,879,048,191)."""
LAST_BASE: Final = 0x7FFD_0000
"""The last range ends below systemd's foreign uid range (0x7FFE0000)."""
LEGACY_UID_BASE: Final = 200_000
LEGACY_CGROUP: Final = "appdeck"
REGISTRY: Final = Path("/var/lib/appdeck/installs")
RUNTIME_ROOT: Final = Path("/run/appdeck")
_ID: Final = re.compile(r"^[a-z0-9]{6,32}$")
_APP_FILES: Final = ("runtime", "appdb")
"""Directories of a data dir whose files belong to app uids: a data dir with either and no
``install.json`` predates install ids."""


class InstallConflict(SandboxUnavailable):
    """Another install holds (some of) this install's uids; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class Install:
    """This install's namespace on the host."""

    id: str
    data_dir: Path
    """Resolved: two spellings of one directory are one install."""
    uid_base: int | None
    """None until the first sandboxed start takes a range."""
    cgroup: str
    uid_count: int = UID_COUNT

    @property
    def uids(self) -> range:
        return range(self.uid_base or 0, (self.uid_base or 0) + self.uid_count)


@dataclass
class InstallLock:
    """The claim of a running server on its install's uid range: held until :meth:`release`
    (or the process's end)."""

    install: Install
    stage: Path
    _fds: list[int] = field(default_factory=list, repr=False)

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def identify(data_dir: Path) -> Install:
    """The install ``data_dir`` holds, made (and recorded) at its first start."""
    data_dir = data_dir.resolve()
    path = data_dir / INSTALL_FILE
    record = _read_record(path)
    if record is not None and isinstance(record.get("id"), str) and _ID.match(record["id"]):
        return _from_record(data_dir, record)
    legacy = record is None and any((data_dir / name).exists() for name in _APP_FILES)
    new_id = secrets.token_hex(6)
    fresh = Install(
        id=new_id,
        data_dir=data_dir,
        uid_base=LEGACY_UID_BASE if legacy else None,
        cgroup=LEGACY_CGROUP if legacy else f"appdeck/{new_id}",
    )
    data_dir.mkdir(parents=True, exist_ok=True)
    if record is None:  # two replicas starting at once: the first one's id wins
        if not _create_exclusively(path, _to_record(fresh)):
            return identify(data_dir)
    else:  # an operator's reset: install.json without an id asks for a new identity
        _write(path, _to_record(fresh))
    if legacy:
        log.info("install %s: an existing data dir keeps uid base 200000", new_id)
    return fresh


def sandboxed(
    data_dir: Path,
    *,
    uid_base: int | None,
    cgroup: str | None,
    registry: Path = REGISTRY,
    runtime_root: Path = RUNTIME_ROOT,
) -> tuple[Sandbox, InstallLock]:
    """A server's sandbox on its install's uids, cgroup and stage, and its hold on them
    (release it at stop). Raises :class:`SandboxUnavailable` (this host cannot sandbox) or
    :class:`InstallConflict` (another install holds those uids)."""
    require_root()
    held = claim(
        data_dir, uid_base=uid_base, cgroup=cgroup, registry=registry, runtime_root=runtime_root
    )
    own = held.install
    try:
        found = detect(own.uids.start, own.cgroup, uid_count=own.uid_count, stage=held.stage)
    except SandboxUnavailable:
        held.release()
        raise
    log.debug(
        "install %s: uids %d-%d, cgroup %s, runtime dir %s",
        own.id,
        own.uids.start,
        own.uids.stop - 1,
        own.cgroup,
        held.stage,
    )
    return found, held


def claim(
    data_dir: Path,
    *,
    uid_base: int | None = None,
    cgroup: str | None = None,
    registry: Path = REGISTRY,
    runtime_root: Path = RUNTIME_ROOT,
    cgroup_root: Path = cgroups.ROOT,
) -> InstallLock:
    """Identify the install in ``data_dir``, give it a uid range if it has none, and hold
    its range for this process. ``uid_base`` / ``cgroup``: the operator's explicit settings,
    which win. Raises :class:`InstallConflict` when another install holds those uids."""
    try:
        return _claim(data_dir, uid_base, cgroup, _Host(registry, runtime_root, cgroup_root))
    except OSError as exc:
        raise SandboxUnavailable(
            f"cannot hold this install's uid range in {registry} "
            f"({exc.strerror or exc}): set APPDECK_INSTALL_REGISTRY to a writable directory"
        ) from None


@dataclass(frozen=True, slots=True)
class _Host:
    registry: Path
    runtime_root: Path
    cgroup_root: Path


def _claim(data_dir: Path, uid_base: int | None, cgroup: str | None, host: _Host) -> InstallLock:
    registry, runtime_root = host.registry, host.runtime_root
    registry.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _registry_locked(registry):
        install = identify(data_dir)
        base = uid_base if uid_base is not None else install.uid_base
        if base is None:
            base = _free_base(host)
        if base != install.uid_base:
            if install.uid_base is not None:
                log.warning(
                    "APPDECK_SANDBOX_UID_BASE=%d replaces this install's uid base %d: files its "
                    "apps wrote before belong to the old uids",
                    base,
                    install.uid_base,
                )
            install = replace(install, uid_base=base)
            _write(install.data_dir / INSTALL_FILE, _to_record(install))
        runtime_root.mkdir(parents=True, exist_ok=True)
        runtime_root.chmod(0o755)  # sandboxes (as the app's uid) walk through to their stage
        held = InstallLock(install, runtime_root / install.id)
        try:
            for slot in _slots(install):
                held._fds.append(_hold(registry, slot, install))
        except BaseException:
            held.release()
            raise
    if cgroup:
        held.install = replace(install, cgroup=cgroup)
    return held


# -------------------------------------------------------------------- the registry


def _slots(install: Install) -> range:
    first = install.uids.start // UID_COUNT
    return range(first, (install.uids.stop - 1) // UID_COUNT + 1)


@contextlib.contextmanager
def _registry_locked(registry: Path) -> Iterator[None]:
    fd = os.open(registry / "registry.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _hold(registry: Path, slot: int, install: Install) -> int:
    """A shared lock on ``slot`` for ``install`` (its fd), or :class:`InstallConflict`.
    Called with the registry locked: exclusive locks are only ever taken under it, so the
    downgrade below lets nobody in between."""
    fd = os.open(registry / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            running = False
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held: by whom?
            running = True
        entry = _read(registry / f"{slot}.json")
        if (
            entry is not None
            and not _same(entry, install)
            and (running or _still_holds(entry, slot))
        ):
            raise InstallConflict(_conflict(install, entry, running))
        if not running:
            _write(
                registry / f"{slot}.json",
                {"install": install.id, "data_dir": str(install.data_dir)},
            )
            fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _conflict(install: Install, entry: dict[str, Any], running: bool) -> str:
    uids = install.uids
    state = "running" if running else "stopped, its apps may still run"
    return (
        f"another AppDeck install ({state}) uses uids {uids.start}-{uids.stop - 1}: data dir "
        f"{entry.get('data_dir')}; two installs on one host must not share uids (set "
        "APPDECK_SANDBOX_UID_BASE apart, or give a copied data dir its own identity: "
        'docs/sandbox.md, "Several installs on one host")'
    )


def _same(entry: dict[str, Any], install: Install) -> bool:
    return entry.get("install") == install.id and entry.get("data_dir") == str(install.data_dir)


def _still_holds(entry: dict[str, Any], slot: int) -> bool:
    """Whether the entry's data dir still holds that install with a range in ``slot``."""
    data_dir = entry.get("data_dir")
    if not isinstance(data_dir, str):
        return False
    record = _read(Path(data_dir) / INSTALL_FILE)
    if record is None or record.get("id") != entry.get("install"):
        return False
    base = record.get("uid_base")
    if not isinstance(base, int):
        return False
    other = _from_record(Path(data_dir), record)
    return slot in _slots(other)


def _free_base(host: _Host) -> int:
    """The first range from :data:`FIRST_BASE` that no install (running or not) and no host
    user holds; a stale entry's slot is taken over (and its runtime dir and empty cgroup
    removed)."""
    registry = host.registry
    taken = _host_ids()
    for base in range(FIRST_BASE, LAST_BASE + 1, UID_COUNT):
        slot = base // UID_COUNT
        if any(base <= uid < base + UID_COUNT for uid in taken):
            continue
        entry = _read(registry / f"{slot}.json")
        if entry is None:
            return base
        if _still_holds(entry, slot) or not _reclaim(host, slot, entry):
            continue
        return base
    raise SandboxUnavailable(
        f"no free range of {UID_COUNT} sandbox uids left in {FIRST_BASE}-{LAST_BASE}: "
        f"remove the entries of deleted installs from {registry}, or set "
        "APPDECK_SANDBOX_UID_BASE"
    )


def _reclaim(host: _Host, slot: int, entry: dict[str, Any]) -> bool:
    registry = host.registry
    fd = os.open(registry / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # someone runs on it after all
    finally:
        os.close(fd)
    (registry / f"{slot}.json").unlink(missing_ok=True)
    gone = entry.get("install")
    if isinstance(gone, str) and _ID.match(gone):
        shutil.rmtree(host.runtime_root / gone, ignore_errors=True)
        cgroups.remove_empty(f"appdeck/{gone}", host.cgroup_root)
    log.debug("uid slot %d: install %s (data dir %s) is gone", slot, gone, entry.get("data_dir"))
    return True


def _host_ids() -> set[int]:
    """Uids and gids the host uses: its users and groups, and the first and last id of
    each subordinate range (``/etc/subuid``, ``/etc/subgid``: start:count)."""
    found: set[int] = set()
    for path, column in (("/etc/passwd", 2), ("/etc/group", 2)):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text(errors="replace").splitlines():
                fields = line.split(":")
                if len(fields) > column and fields[column].isdigit():
                    found.add(int(fields[column]))
    for path in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text(errors="replace").splitlines():
                fields = line.split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    start, count = int(fields[1]), int(fields[2])
                    found.update(range(start, start + count, UID_COUNT))
                    found.add(start + count - 1)
    return found


# -------------------------------------------------------------------- files


def _from_record(data_dir: Path, record: dict[str, Any]) -> Install:
    base = record.get("uid_base")
    count = record.get("uid_count")
    cgroup = record.get("cgroup")
    return Install(
        id=str(record["id"]),
        data_dir=data_dir,
        uid_base=base if isinstance(base, int) and base > 0 else None,
        cgroup=cgroup if isinstance(cgroup, str) and cgroup else f"appdeck/{record['id']}",
        uid_count=count if isinstance(count, int) and 0 < count <= UID_COUNT else UID_COUNT,
    )


def _to_record(install: Install) -> dict[str, Any]:
    return {
        "id": install.id,
        "uid_base": install.uid_base,
        "uid_count": install.uid_count,
        "cgroup": install.cgroup,
    }


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _read_record(path: Path) -> dict[str, Any] | None:
    """``install.json``: None when there is none (yet); unreadable, it stops the start."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SandboxUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise SandboxUnavailable(f"{path} is not a JSON object: fix or remove it")
    return value


def _write(path: Path, record: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.replace(temporary, path)


def _create_exclusively(path: Path, record: dict[str, Any]) -> bool:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        temporary.unlink()
    return True
