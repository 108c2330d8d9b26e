"""The local driver's state files: a release's ``release.json``, ``built.json`` and
``instances.json``, written atomically and readable by the server's user only.

``instances.json`` names each instance by pid *and* the start time from ``/proc/<pid>/stat``
(and the boot id), so that adoption never mistakes a recycled pid for the instance.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from appdeck.platform.runtime.driver import ReleaseSpec


def spec_to_json(spec: ReleaseSpec, env_digest: str) -> dict[str, Any]:
    """The spec as recorded on disk: the env's names and a keyed digest of its values, never
    the values (they are the app's secrets)."""
    data = asdict(spec)
    data["source_path"] = str(spec.source_path)
    data["env"] = sorted(spec.env)
    data["env_digest"] = env_digest
    return data


def read_spec(path: Path) -> ReleaseSpec:
    """The recorded spec, with its env's values empty: whoever restarts the release after a
    server restart hands the driver the whole spec again (see ``adopt``)."""
    data = read_json(path)
    data.pop("env_digest", None)
    data["source_path"] = Path(data["source_path"])
    names = data.get("env") or []
    data["env"] = dict.fromkeys(names, "") if isinstance(names, list) else {}
    return ReleaseSpec(**data)


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
