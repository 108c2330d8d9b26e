"""The interfaces the protocol core needs from the layers around it.

Storage implements the stores (:mod:`appdeck.storage`), the transport implements delivery
(:mod:`appdeck.transport`). The core only ever sees these protocols, so its tests drive it
with in-memory doubles and plain dicts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from appdeck.common.identity import Principal
    from appdeck.protocol.sessions import Session, SessionChange
    from appdeck.protocol.task_model import Task

JsonObject = dict[str, Any]


class SessionStore(Protocol):
    """Durable home of sessions (the core keeps a hot cache in front of it)."""

    async def insert(self, session: Session) -> None: ...
    async def load(self, session_id: str) -> Session | None: ...
    async def update(self, session: Session) -> None: ...
    async def delete(self, session_id: str) -> None: ...
    async def touch(self, last_active: dict[str, float]) -> None: ...
    async def idle_since(self, before: float) -> list[str]: ...
    async def count(self) -> int: ...
    async def present(self, session_ids: Sequence[str]) -> set[str]:
        """Which of these sessions the store still holds (another process, or the
        operator's ``appdeck session drop``, may have ended the others)."""
        ...

    async def owned(self, tenant: str, user: str) -> list[tuple[str, float, str | None]]:
        """(id, last_active, token_id) of the (tenant, user)'s sessions, least recently
        active first."""
        ...

    async def change(self, session_id: str, change: SessionChange) -> Session | None:
        """Apply ``change`` (:meth:`SessionChange.apply`) to the stored session in one
        transaction that excludes concurrent changes of the same row (several replicas may
        change one session). The session as stored after it; None when it is gone."""
        ...

    async def subscribers(self, uri: str, tenant: str | None) -> list[str]:
        """Ids of the sessions subscribed to ``uri`` (of ``tenant`` when not None)."""
        ...

    async def session_ids(self, tenant: str | None) -> list[str]:
        """Ids of every stored session (of ``tenant`` when not None)."""
        ...


class TaskStore(Protocol):
    """Durable home of tasks: every state change is written before it is announced.

    Replicas share it. A task is run by one instance (``Task.instance_id``); every write of
    its state is a compare-and-set on "still running under the instance the writer read", so
    nothing overwrites a terminal status and two processes never both take a task over.
    """

    async def insert(self, task: Task) -> None: ...
    async def update(self, task: Task) -> bool:
        """Write the task's state (not its id, owner, creation time or instance) if the
        stored task is still running under ``task.instance_id``; False: refused, nothing
        written."""
        ...

    async def claim(self, task: Task, instance_id: str) -> bool:
        """Move a running task from ``task.instance_id`` to ``instance_id``; False when it
        ended or another process claimed it first."""
        ...

    async def get(self, task_id: str) -> Task | None: ...
    async def statuses(self, task_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """``task_id -> (status, instance_id)``; a deleted task is absent."""
        ...

    async def list_for_owner(
        self, tenant: str, user: str, offset: int, limit: int
    ) -> Sequence[Task]: ...
    async def orphaned(self, instance_id: str, limit: int) -> Sequence[Task]:
        """Running tasks whose instance is not alive, and ``instance_id``'s own running
        tasks (the caller skips those it still runs); oldest first, at most ``limit``."""
        ...

    async def delete_expired(self, now: float) -> int: ...

    async def ask(self, task_id: str, requests: Mapping[str, JsonObject], now: float) -> None:
        """Record a running task's input requests (``key -> {method, params}``; the keys are
        new for the task)."""
        ...

    async def answer(self, task_id: str, responses: Mapping[str, JsonObject], now: float) -> int:
        """Store the client's answers to pending requests of the task; a key not asked, or
        answered already, is ignored (the first answer stands). How many were stored."""
        ...

    async def inputs(self, task_id: str) -> tuple[dict[str, JsonObject], dict[str, JsonObject]]:
        """The task's pending requests (``key -> request``) and its answers
        (``key -> response``)."""
        ...


class Outbox(Protocol):
    """Delivery of messages that belong to no request: the session's standalone GET stream."""

    async def to_session(self, session_id: str, message: JsonObject) -> None: ...
    async def to_sessions(self, session_ids: Sequence[str], message: JsonObject) -> None: ...
    async def close_session(self, session_id: str) -> None: ...


class RequestChannel(Protocol):
    """Delivery of messages related to one in-flight request (its POST response stream)."""

    async def send(self, message: JsonObject) -> None: ...

    async def close_stream(self) -> None:
        """Close the response stream now; the client resumes it with GET + Last-Event-ID."""
        ...


class AuditTrail(Protocol):
    """Where the core reports what callers did: every ``tools/call`` and every refusal.

    Called on the request path, so an implementation must never block or await: it queues
    the record and writes it elsewhere (``auth.audit.AuditLog`` writes from a thread of its
    own). Callers pass names, ids and outcomes, never arguments or secrets.
    """

    def tool_called(
        self,
        principal: Principal | None,
        tool: str | None,
        action: str | None,
        app_id: int | None,
        failed: bool,
        status: int,
        duration_ms: float,
        request_id: str,
        task: bool,
    ) -> None: ...

    def refused(
        self,
        principal: Principal | None,
        status: int,
        reason: str,
        method: str | None = None,
        tool: str | None = None,
        *,
        source: str | None = None,
    ) -> None:
        """A refusal (401, 403, 429...); ``source`` is the client's IP when the caller knows
        it. A trail may aggregate refusals (a count per minute per source and reason)."""
        ...


class Telemetry(Protocol):
    """Where the core reports what it served, for metrics (``appdeck.observability``).

    Called once per request on the hot path: an implementation counts in memory and returns.
    Labels are bounded by the caller: ``method`` is a method the server serves or ``other``,
    ``tool`` a registered tool or ``other``, ``outcome`` one of a few words (see
    :mod:`appdeck.protocol.outcomes`)."""

    def request_served(self, method: str, era: str, outcome: str) -> None:
        """``era``: ``handshake`` or ``stateless``."""
        ...

    def tool_served(self, tool: str, outcome: str, seconds: float) -> None: ...

    def task_changed(self, status: str) -> None: ...


class RequestSpan(Protocol):
    """One request's span, open while the request is served (a context manager: the work
    it covers, tasks created meanwhile included, belongs to it)."""

    def __enter__(self) -> RequestSpan: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def answered(self, outcome: str, error: str | None) -> None:
        """How the request was answered: an outcome word (:mod:`appdeck.protocol.outcomes`),
        and the error's message for an error or a tool result with ``isError``."""
        ...


class Tracing(Protocol):
    """Where the core opens a span per request, for traces (``appdeck.observability``).

    The core passes what it read and nothing else: the method and tool names as the client
    sent them (the implementation bounds them), the trace context the client put in
    ``params._meta`` (``traceparent``, ``tracestate``: strings, or absent), the session."""

    def request(
        self,
        method: str,
        tool: str | None,
        carrier: Mapping[str, str],
        session_id: str | None,
    ) -> RequestSpan: ...


class Subscription(Protocol):
    """What :meth:`Broadcast.subscribe` returns; handed back to unsubscribe."""

    @property
    def channel(self) -> str: ...


class Broadcast(Protocol):
    """Messages between the replicas of one deployment (issue 13).

    Pub/sub: at most once, no replay. Whoever relies on a message also keeps a backstop read
    of the truth (periodic, and after :meth:`on_reconnect`). In one process it is a plain
    in-memory fan-out.
    """

    async def publish(self, channel: str, payload: bytes) -> None: ...

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> Subscription:
        """``handler`` runs in the event loop: it must not block or raise."""
        ...

    async def unsubscribe(self, subscription: Subscription) -> None: ...

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` after a dropped connection is back (messages may be lost)."""
        ...


class Subscriptions(Protocol):
    """Who follows which resource URI, and who hears of list changes, on every replica.

    The resources and prompts features see only this; the handshake era keeps subscriptions
    on the session, in the session store (:class:`~appdeck.protocol.session_subscriptions.
    SessionSubscriptions`)."""

    async def subscribe(self, session: Session, uri: str, limit: int) -> None:
        """``session`` follows ``uri`` (at most ``limit`` URIs per session)."""
        ...

    async def unsubscribe(self, session: Session, uri: str) -> None: ...

    async def unsubscribe_below(self, tenant: str, user: str, base: str) -> int:
        """Every session of (``tenant``, ``user``) stops following ``base`` and the URIs
        below it (``base/…``). How many sessions lost subscriptions."""
        ...

    async def followers(self, uri: str, tenant: str | None = None) -> list[str]:
        """Ids of the sessions following ``uri`` (only ``tenant``'s when given)."""
        ...

    async def listeners(self, tenant: str | None = None) -> list[str]:
        """Ids of the sessions that hear of list changes (only ``tenant``'s when given)."""
        ...
