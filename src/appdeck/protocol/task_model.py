"""What a task is (MCP 2025-11-25): its statuses, its record and wire form, its limits, and the
broadcast channels replicas use for it. The state machine that moves a task between statuses
is :mod:`appdeck.protocol.tasks`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

WORKING: Final = "working"
INPUT_REQUIRED: Final = "input_required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"

TERMINAL: Final = frozenset({COMPLETED, FAILED, CANCELLED})

RELATED_TASK_META: Final = "io.modelcontextprotocol/related-task"

SESSIONLESS: Final = ""
"""The ``session_id`` of a task a stateless (2026-07-28) request created: it has no session,
its client polls ``tasks/get`` and answers input through ``tasks/update``."""

MAX_TASK_ID: Final = 128


def iso(ts: float) -> str:
    """An epoch time as the wire spells it (ISO 8601, UTC, milliseconds)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(slots=True)
class Task:
    """A task and the request it runs. ``result`` or ``error`` is set once it is terminal."""

    task_id: str
    tenant: str
    user: str
    session_id: str
    status: str
    created_at: float
    updated_at: float
    ttl_ms: int | None
    poll_interval_ms: int
    method: str
    params: dict[str, Any]
    instance_id: str
    status_message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    progress_token: str | int | None = field(default=None)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def stateless(self) -> bool:
        """Created by a stateless request (the tasks extension of 2026-07-28)."""
        return self.session_id == SESSIONLESS

    def wire(self) -> dict[str, Any]:
        """The Task object of the spec."""
        body: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": iso(self.created_at),
            "lastUpdatedAt": iso(self.updated_at),
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_interval_ms,
        }
        if self.status_message is not None:
            body["statusMessage"] = self.status_message
        return body


Runner = Callable[[Task], Awaitable[dict[str, Any]]]
"""Runs a task's request; returns its result, or raises :class:`McpError` for an error."""

Resumer = Callable[[Task], Awaitable[bool]]
"""Given a task a dead process left working, take it over (True) or decline (False)."""


@dataclass(frozen=True, slots=True)
class TaskLimits:
    default_ttl_ms: int = 3_600_000
    max_ttl_ms: int = 86_400_000
    default_poll_ms: int = 1_000
    min_poll_ms: int = 250
    max_poll_ms: int = 60_000
    page_size: int = 50
    max_running: int = 10_000
    """Tasks one process runs at once (beyond: ServerBusy)."""
    max_watched: int = 10_000
    """Tasks one process's tasks/result waiters watch through the broadcast (beyond: poll)."""
    recheck_seconds: float = 2.0
    """How often the owner re-reads its running tasks (a lost task-cancel message)."""
    sweep_seconds: float = 2.0
    """How often a replica sweeps the tasks of dead replicas (dead at 10 s, swept within
    12 s of their last heartbeat: a killed replica's tasks end in under 15 s)."""
    sweep_batch: int = 200


def cancel_channel(instance_id: str) -> str:
    """Where a replica hears the cancels of the tasks it runs (payload: the task id)."""
    return f"task-cancel:{instance_id}"


def done_channel(task_id: str) -> str:
    """Rung when a task ends, by whichever process ended it (payload: its status), and when a
    client answered its input requests (payload ``input``): a doorbell, the store is the truth."""
    return f"task-done:{task_id}"


def task_id_of(payload: bytes) -> str | None:
    """The task id a ``task-cancel`` message carries, or None when it is malformed."""
    if not isinstance(payload, bytes) or not 0 < len(payload) <= MAX_TASK_ID:
        return None
    try:
        text = payload.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None
