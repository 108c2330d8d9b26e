"""Runtime drivers: build, run, supervise and observe app releases (DESIGN.md §5).

:mod:`.driver` is the interface every driver implements; :mod:`.local` the default driver
on local processes, with :mod:`.shim` (the first process of every instance), :mod:`.logs`
(reading the JSON-lines logs) and :mod:`.workspace` (copying a source safely).
"""

from appdeck.model.release import AppSpec, Release, RuntimeKind
from appdeck.runtime.driver import (
    RUNTIMES,
    Adoption,
    BuildFailed,
    DiskUsage,
    Health,
    InstanceEvent,
    InstanceRef,
    InstanceStatus,
    LogKind,
    LogLine,
    LogPage,
    LogStream,
    RuntimeDriver,
)
from appdeck.runtime.local import LocalDriver, RestartPolicy, free_port
from appdeck.runtime.workspace import CopyLimits

__all__ = [
    "RUNTIMES",
    "Adoption",
    "AppSpec",
    "BuildFailed",
    "CopyLimits",
    "DiskUsage",
    "Health",
    "InstanceEvent",
    "InstanceRef",
    "InstanceStatus",
    "LocalDriver",
    "LogKind",
    "LogLine",
    "LogPage",
    "LogStream",
    "Release",
    "RestartPolicy",
    "RuntimeDriver",
    "RuntimeKind",
    "free_port",
]
