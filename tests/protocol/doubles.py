"""In-memory stand-ins for the core's ports: the protocol tests need no I/O at all."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from appdeck.protocol.sessions import Session, SessionChange
from appdeck.protocol.task_model import TERMINAL, Task


class MemorySessionStore:
    def __init__(self) -> None:
        self.rows: dict[str, Session] = {}

    async def insert(self, session: Session) -> None:
        self.rows[session.id] = copy.deepcopy(session)

    async def load(self, session_id: str) -> Session | None:
        row = self.rows.get(session_id)
        return copy.deepcopy(row) if row else None

    async def update(self, session: Session) -> None:
        self.rows[session.id] = copy.deepcopy(session)

    async def delete(self, session_id: str) -> None:
        self.rows.pop(session_id, None)

    async def touch(self, last_active: dict[str, float]) -> None:
        for sid, when in last_active.items():
            if sid in self.rows:
                self.rows[sid].last_active = when

    async def idle_since(self, before: float) -> list[str]:
        return [s.id for s in self.rows.values() if s.last_active < before]

    async def present(self, session_ids: Sequence[str]) -> set[str]:
        return {sid for sid in session_ids if sid in self.rows}

    async def count(self) -> int:
        return len(self.rows)

    async def owned(self, tenant: str, user: str) -> list[tuple[str, float, str | None]]:
        mine = [s for s in self.rows.values() if s.owner == (tenant, user)]
        return sorted(((s.id, s.last_active, s.token_id) for s in mine), key=lambda r: r[1])

    async def change(self, session_id: str, change: SessionChange) -> Session | None:
        row = self.rows.get(session_id)
        if row is None:
            return None
        fresh = copy.deepcopy(row)
        change.apply(fresh)
        self.rows[session_id] = fresh
        return copy.deepcopy(fresh)

    async def subscribers(self, uri: str, tenant: str | None) -> list[str]:
        return [
            s.id
            for s in self.rows.values()
            if uri in s.subscriptions and (tenant is None or s.tenant == tenant)
        ]

    async def session_ids(self, tenant: str | None) -> list[str]:
        return [s.id for s in self.rows.values() if tenant is None or s.tenant == tenant]


class MemoryTaskStore:
    def __init__(self) -> None:
        self.rows: dict[str, Task] = {}
        self.requests: dict[str, dict[str, dict[str, Any]]] = {}
        self.answers: dict[str, dict[str, dict[str, Any]]] = {}

    async def ask(self, task_id: str, requests: Mapping[str, dict[str, Any]], now: float) -> None:
        mine = self.requests.setdefault(task_id, {})
        assert not set(requests) & set(mine), "input keys are never reused"
        mine.update(copy.deepcopy(dict(requests)))

    async def answer(
        self, task_id: str, responses: Mapping[str, dict[str, Any]], now: float
    ) -> int:
        asked = self.requests.get(task_id, {})
        answered = self.answers.setdefault(task_id, {})
        fresh = {k: v for k, v in responses.items() if k in asked and k not in answered}
        answered.update(copy.deepcopy(fresh))
        return len(fresh)

    async def inputs(
        self, task_id: str
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        answered = self.answers.get(task_id, {})
        pending = {k: v for k, v in self.requests.get(task_id, {}).items() if k not in answered}
        return copy.deepcopy(pending), copy.deepcopy(answered)

    async def insert(self, task: Task) -> None:
        self.rows[task.task_id] = copy.deepcopy(task)

    async def update(self, task: Task) -> bool:
        """Compare-and-set, as the real store: only while the stored task is still running
        under the same instance."""
        row = self.rows.get(task.task_id)
        if row is None or row.terminal or row.instance_id != task.instance_id:
            return False
        self.rows[task.task_id] = copy.deepcopy(task)
        return True

    async def get(self, task_id: str) -> Task | None:
        row = self.rows.get(task_id)
        return copy.deepcopy(row) if row else None

    async def list_for_owner(
        self, tenant: str, user: str, offset: int, limit: int
    ) -> Sequence[Task]:
        mine = [t for t in self.rows.values() if (t.tenant, t.user) == (tenant, user)]
        mine.sort(key=lambda t: t.created_at, reverse=True)
        return mine[offset : offset + limit]

    async def working_elsewhere(self, instance_id: str) -> Sequence[Task]:
        return [
            copy.deepcopy(t)
            for t in self.rows.values()
            if t.status not in TERMINAL and t.instance_id != instance_id
        ]

    async def delete_expired(self, now: float) -> int:
        gone = [
            k
            for k, t in self.rows.items()
            if t.ttl_ms is not None and t.created_at + t.ttl_ms / 1000 < now
        ]
        for k in gone:
            del self.rows[k]
        return len(gone)


class RecordingOutbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.closed: list[str] = []

    async def to_session(self, session_id: str, message: dict[str, Any]) -> None:
        self.sent.append((session_id, message))

    async def to_sessions(self, session_ids: Sequence[str], message: dict[str, Any]) -> None:
        for sid in session_ids:
            self.sent.append((sid, message))

    async def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)

    def methods(self, session_id: str | None = None) -> list[str]:
        return [m["method"] for sid, m in self.sent if session_id is None or sid == session_id]


class RecordingChannel:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.closed = False

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def close_stream(self) -> None:
        self.closed = True
