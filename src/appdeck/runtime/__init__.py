"""Runtime drivers: build, run, supervise and observe app releases (DESIGN.md §5).

:mod:`.driver` is the interface every driver implements; :mod:`.local` the default driver
on local processes, with :mod:`.shim` (the first process of every instance), :mod:`.logs`
(reading the JSON-lines logs) and :mod:`.workspace` (copying a source safely).
"""

from typing import TYPE_CHECKING, Any

from appdeck.model.release import AppSpec, Release, RuntimeKind
from appdeck.runtime.driver import (
    RUNTIMES,
    Adoption,
    BuildFailed,
    Capabilities,
    DiskUsage,
    Driver,
    Health,
    Instance,
    InstanceEvent,
    InstanceStatus,
    LogKind,
    LogLine,
    LogPage,
    LogStream,
    Readiness,
)

if TYPE_CHECKING:
    from appdeck.runtime.local import LocalDriver, RestartPolicy, free_port
    from appdeck.runtime.workspace import CopyLimits

_LAZY = {
    "LocalDriver": "appdeck.runtime.local",
    "RestartPolicy": "appdeck.runtime.local",
    "free_port": "appdeck.runtime.local",
    "CopyLimits": "appdeck.runtime.workspace",
}
"""The local driver's names, imported when first asked for: a package below ``runtime``
(``runtime.kubernetes``, the manifests) does not load the local driver, its sandbox and its
process supervision by being imported."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "RUNTIMES",
    "Adoption",
    "AppSpec",
    "BuildFailed",
    "Capabilities",
    "CopyLimits",
    "DiskUsage",
    "Driver",
    "Health",
    "Instance",
    "InstanceEvent",
    "InstanceStatus",
    "LocalDriver",
    "LogKind",
    "LogLine",
    "LogPage",
    "LogStream",
    "Readiness",
    "Release",
    "RestartPolicy",
    "RuntimeKind",
    "free_port",
]
