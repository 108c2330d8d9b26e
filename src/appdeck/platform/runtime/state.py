"""The local driver's state files: a release's ``release.json``, ``built.json`` and
``instances.json``, written atomically and readable by the server's user only.

``instances.json`` names each instance by pid *and* the start time from ``/proc/<pid>/stat``
(and the boot id), so that adoption never mistakes a recycled pid for the instance.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from appdeck.platform.release import AppSpec, Release


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
