"""The local driver's state files: a release's ``release.json``, ``built.json`` and
``instances.json``, written atomically and readable by the server's user only.

``instances.json`` names each instance by pid *and* the start time from ``/proc/<pid>/stat``
(and the boot id), so that adoption never mistakes a recycled pid for the instance.

It is also how the replicas on one host agree on an instance (they share the data dir, and
each may supervise any instance: the one that started it, and every one that adopted it).
Its records are the instances that *should* run, and every change is a read-modify-write
under the release's lock (:func:`locked`, an ``flock`` on ``.state.lock``): a stop removes
the instance's record *before* signalling it (the stop intent), a restart after a crash
replaces the record's pid only while it still names the dead process. So a supervisor that
sees its instance exit reads the record first: gone means stopped (never restarted), another
live pid means someone restarted it already (follow that one), the dead pid means a crash
(restart it, once, whoever gets the lock first).

A start holds the lock only to read and to write, not across its spawn (a netns, a cgroup, a
fork: long on a loaded host, and a server stopped there, SIGSTOP or a paused VM, held every
other replica's stop of the release for as long as it was away). So it reads, spawns, and
records under the lock again, and every stop counts itself in ``instances.json``'s ``stops``
(by index; ``*`` for the whole release): a start that finds a stop counted since it read
kills what it spawned instead of recording it (:func:`stop_mark`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

from appdeck.common.errors import FailedPrecondition, Unavailable
from appdeck.model.release import AppSpec, Release

STATE_LOCK: Final = ".state.lock"
LOCK_POLL_S: Final = 0.01
LOCK_WITHIN_S: Final = 60.0
"""How long a change of ``instances.json`` waits for the release's lock (its holders keep it
for a file write, or a restart's spawn: milliseconds; a stopped process holding it is what
this bounds)."""


def spec_to_json(release: Release, env_digest: str) -> dict[str, Any]:
    """The release as recorded on disk: the env's names and a keyed digest of its values,
    never the values (they are the app's secrets)."""
    spec = release.spec.to_dict()
    spec["env"] = sorted(spec.get("env") or {})  # the spec's own defaults: names only too
    return {
        "app_id": release.app_id,
        "app_name": release.app_name,
        "number": release.number,
        "route": release.route,
        "source_path": str(release.source_path),
        "spec": spec,
        "env": sorted(release.env),
        "env_digest": env_digest,
    }


def read_spec(path: Path) -> Release:
    """The recorded release, with its env's values empty: whoever restarts the release after
    a server restart hands the driver the whole release again (see ``adopt``)."""
    data = read_json(path)
    spec = dict(data["spec"])
    spec["env"] = dict.fromkeys(spec.get("env") or [], "")
    names = data.get("env") or []
    return Release(
        int(data["app_id"]),
        str(data["app_name"]),
        int(data["number"]),
        AppSpec.from_dict(spec),
        dict.fromkeys(names, "") if isinstance(names, list) else {},
        route=str(data.get("route") or ""),
        source_path=Path(data["source_path"]),
    )


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically (a server killed mid-write leaves the old file), readable by us only."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def records(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The well-formed instance records of an ``instances.json``."""
    found = state.get("instances")
    if not isinstance(found, list):
        return []
    valid = []
    for record in found:
        with contextlib.suppress(KeyError, TypeError, ValueError):
            int(record["index"]), int(record["port"]), int(record["pid"])
            int(record["start_ticks"]), float(record["started_at"])
            valid.append(record)
    return valid


class ReleaseRemoved(FailedPrecondition):
    """The release's directory is gone: another server on this host removed the release
    (:meth:`~.stopping.StopMixin.remove` renames it away first), so it runs nowhere."""


@contextlib.asynccontextmanager
async def locked(directory: Path) -> AsyncIterator[None]:
    """Hold the release's state lock (every replica on this host, every coroutine: each
    holder opens the lock file anew) while reading and changing ``instances.json``.
    :class:`ReleaseRemoved` when the release's directory is gone."""
    try:
        fd = os.open(directory / STATE_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        raise ReleaseRemoved(f"release {directory.name} was removed") from None
    try:
        deadline = time.monotonic() + LOCK_WITHIN_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        "the release's state is locked by a server that does not let go",
                        hint="try again; restart the servers on this host if it persists",
                    ) from None
                await asyncio.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # lets the lock go


def load_instances(directory: Path, boot_id: str) -> tuple[dict[int, dict[str, Any]], bool]:
    """``instances.json``'s records by index, and its ``unhealthy`` mark (none of them when
    it was written before the last boot: those processes are gone)."""
    found, unhealthy, _ = load_records(directory, boot_id)
    return found, unhealthy


def load_records(
    directory: Path, boot_id: str
) -> tuple[dict[int, dict[str, Any]], bool, dict[str, int]]:
    """:func:`load_instances` and :func:`load_stops` from one read (a writer's, under
    :func:`locked`, before :func:`save_instances`)."""
    recorded = read_json(directory / "instances.json")
    unhealthy = bool(recorded.get("unhealthy", False))
    stops = _stops(recorded)
    if recorded.get("boot_id") != boot_id:
        return {}, unhealthy, stops
    return {int(r["index"]): r for r in records(recorded)}, unhealthy, stops


def load_stops(directory: Path) -> dict[str, int]:
    """``instances.json``'s stop counts: by instance index (as a string), ``*`` the stops of
    the whole release. They only grow, across boots too."""
    return _stops(read_json(directory / "instances.json"))


def _stops(recorded: dict[str, Any]) -> dict[str, int]:
    found = recorded.get("stops")
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and type(v) is int}


def count_stop(stops: dict[str, int], index: int | None) -> dict[str, int]:
    """``stops`` with one more stop of instance ``index`` (None: the whole release)."""
    key = "*" if index is None else str(index)
    return {**stops, key: stops.get(key, 0) + 1}


def stop_mark(stops: dict[str, int], index: int) -> tuple[int, int]:
    """What a start of instance ``index`` compares before and after its spawn: a stop of the
    release or of that instance, counted in between, means the start was stopped."""
    return stops.get("*", 0), stops.get(str(index), 0)


def save_instances(
    directory: Path,
    release_id: str,
    boot_id: str,
    found: dict[int, dict[str, Any]],
    *,
    unhealthy: bool,
    stops: dict[str, int],
) -> None:
    """Write ``instances.json`` (under :func:`locked`, after :func:`load_records`)."""
    write_json(
        directory / "instances.json",
        {
            "release_id": release_id,
            "boot_id": boot_id,
            "unhealthy": unhealthy,
            "instances": [found[index] for index in sorted(found)],
            "stops": stops,
        },
    )
