"""``subscriptions/listen`` (MCP 2026-07-28): who hears what on the long-lived listen streams.

The wire rules (spec ``basic/patterns/subscriptions.mdx``):

- the first frame is ``notifications/subscriptions/acknowledged`` with the subset of the
  request's ``notifications`` filter the server honours, nothing before it;
- every frame carries ``_meta["io.modelcontextprotocol/subscriptionId"]`` = the request's id;
- a kind the client did not ask for is never sent;
- the server ends a stream (shutdown) with the JSON-RPC response ``{resultType: complete,
  _meta: {subscriptionId}}``; the client ends it by closing the HTTP stream.

AppDeck's choices. A stream belongs to its token's (tenant, user). ``resourceSubscriptions``
are authorised once, at listen time, with ``resources/read``'s own check: a URI the caller may
not read (or that names nothing) is left out of the ack rather than failing the whole stream,
so one stale URI does not cost the client its other notifications. Who hears what:

=========================  ==================================  ==============================
change                     heard by streams that asked for     owned by
=========================  ==================================  ==============================
tools list changed         ``toolsListChanged``                anyone
prompts list changed       ``promptsListChanged``              anyone
resources list changed     ``resourcesListChanged``            the change's tenant (None: all)
resource ``uri`` updated   ``uri`` in ``resourceSubscriptions``  the change's tenant (None: all)
task ``id`` notification   ``id`` in ``taskIds``               that (tenant, user) only
=========================  ==================================  ==============================

An ``unfollow`` change (the platform says a user lost read access below a URI) removes those
URIs from that (tenant, user)'s streams, as the handshake era ends their sessions'
subscriptions.

Replicas: the replica where a change happens delivers it to its own streams and publishes it
on the broadcast's ``listen`` channel, where every other replica delivers it to theirs. Each
stream lives on one replica, so nobody hears a change twice. Pub/sub is at most once and the
spec lets a listen stream lose notifications (a client re-reads after reconnecting): no
replay. No I/O here beyond the :class:`~appdeck.protocol.ports.Broadcast` port.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from appdeck.common.identity import Principal
from appdeck.protocol import jsonrpc
from appdeck.protocol.call import Call
from appdeck.protocol.envelope import Peer
from appdeck.protocol.errors import (
    InvalidParams,
    MissingCapability,
    ServerBusy,
    TooManyStreams,
)
from appdeck.protocol.ports import Broadcast, Subscription
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.stateless import TASKS_EXTENSION

log = logging.getLogger("appdeck.protocol")
JsonObject = dict[str, Any]

METHOD: Final = "subscriptions/listen"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"
CHANNEL: Final = "listen"
"""The broadcast channel changes travel on between replicas."""

MAX_URIS: Final = 100
MAX_URI_LENGTH: Final = 2048
MAX_TASK_IDS: Final = 100
MAX_TASK_ID_LENGTH: Final = 256
MAX_STREAMS_PER_USER: Final = 10
"""Open listen streams per (tenant, user) on one replica; one more is refused."""
MAX_PENDING: Final = 256
"""Notifications queued for one stream whose client reads slowly; past it they are dropped
(the spec allows a listen stream to lose notifications)."""
MAX_WIRE_BYTES: Final = 256 * 1024

Kind = Literal["tools", "prompts", "resources", "resource", "task", "unfollow"]
_KINDS: Final[frozenset[str]] = frozenset(
    {"tools", "prompts", "resources", "resource", "task", "unfollow"}
)
_METHODS: Final[dict[str, str]] = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
    "resource": "notifications/resources/updated",
}


@dataclass(frozen=True, slots=True)
class Filter:
    """What a stream asked for (after :func:`parse`), or what it is given (the ack)."""

    tools: bool = False
    prompts: bool = False
    resources: bool = False
    """``resourcesListChanged``."""
    uris: tuple[str, ...] | None = None
    """``resourceSubscriptions``; None: not asked for."""
    task_ids: tuple[str, ...] | None = None
    """``taskIds`` (tasks extension); None: not asked for."""

    def wire(self) -> JsonObject:
        """The ack's ``notifications``: only the kinds honoured."""
        out: JsonObject = {}
        for key, on in (
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ):
            if on:
                out[key] = True
        if self.uris is not None:
            out["resourceSubscriptions"] = list(self.uris)
        if self.task_ids is not None:
            out["taskIds"] = list(self.task_ids)
        return out


def _flag(notifications: JsonObject, key: str) -> bool:
    value = notifications.get(key, False)
    if not isinstance(value, bool):
        raise InvalidParams(f"subscriptions/listen: notifications.{key} must be a boolean")
    return value


def _strings(notifications: JsonObject, key: str, count: int, length: int) -> tuple[str, ...]:
    value = notifications[key]
    if not isinstance(value, list) or len(value) > count:
        raise InvalidParams(
            f"subscriptions/listen: notifications.{key} must be an array of at most {count} strings"
        )
    seen: dict[str, None] = {}
    for item in value:
        if not isinstance(item, str) or not item or len(item) > length:
            raise InvalidParams(
                f"subscriptions/listen: each of notifications.{key} must be a non-empty string "
                f"of at most {length} characters"
            )
        seen[item] = None
    return tuple(seen)


def parse(params: JsonObject, peer: Peer | None) -> Filter:
    """The filter a ``subscriptions/listen`` request asks for. Unknown keys are ignored;
    junk in a known key is ``-32602``; ``taskIds`` without the tasks extension declared in the
    request's capabilities is ``-32021``."""
    notifications = params.get("notifications")
    if not isinstance(notifications, dict):
        raise InvalidParams("subscriptions/listen: params.notifications must be an object")
    uris = (
        _strings(notifications, "resourceSubscriptions", MAX_URIS, MAX_URI_LENGTH)
        if "resourceSubscriptions" in notifications
        else None
    )
    task_ids = None
    if "taskIds" in notifications:
        if peer is None or not peer.declares_extension(TASKS_EXTENSION):
            raise MissingCapability(
                "notifications.taskIds needs the tasks extension, which the request did not "
                "declare",
                {"extensions": {TASKS_EXTENSION: {}}},
            )
        task_ids = _strings(notifications, "taskIds", MAX_TASK_IDS, MAX_TASK_ID_LENGTH)
    return Filter(
        tools=_flag(notifications, "toolsListChanged"),
        prompts=_flag(notifications, "promptsListChanged"),
        resources=_flag(notifications, "resourcesListChanged"),
        uris=uris,
        task_ids=task_ids,
    )


@dataclass(frozen=True, slots=True)
class Change:
    """Something listen streams may hear of. ``key`` is the URI (``resource``, ``unfollow``)
    or the task id (``task``); ``message`` is the notification a ``task`` change delivers as
    is."""

    kind: Kind
    key: str | None = None
    tenant: str | None = None
    user: str | None = None
    message: JsonObject | None = None

    def notification(self) -> JsonObject:
        if self.kind == "task":
            assert self.message is not None
            return self.message
        if self.kind == "resource":
            return jsonrpc.notification(_METHODS["resource"], {"uri": self.key})
        return jsonrpc.notification(_METHODS[self.kind])

    def wire(self) -> JsonObject:
        return {
            "kind": self.kind,
            "key": self.key,
            "tenant": self.tenant,
            "user": self.user,
            "message": self.message,
        }

    @classmethod
    def from_wire(cls, body: JsonObject) -> Change | None:
        kind, key, tenant = body.get("kind"), body.get("key"), body.get("tenant")
        user, message = body.get("user"), body.get("message")
        if kind not in _KINDS or not all(
            v is None or isinstance(v, str) for v in (key, tenant, user)
        ):
            return None
        if kind in ("resource", "task", "unfollow") and key is None:
            return None
        if kind in ("task", "unfollow") and (tenant is None or user is None):
            return None
        if kind == "task" and (not isinstance(message, dict) or not message):
            return None
        return cls(kind, key, tenant, user, message if kind == "task" else None)


def tagged(message: JsonObject, subscription_id: object) -> JsonObject:
    """A copy of ``message`` with the subscription id in ``params._meta``."""
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, dict) else {}), SUBSCRIPTION_ID: subscription_id}
    return {**message, "params": params}


class Listener:
    """One open listen stream: what it hears, and the notifications waiting to be written."""

    __slots__ = ("_pending", "_wake", "dropped", "ended", "filter", "owner", "subscription_id")

    def __init__(self, subscription_id: object, owner: tuple[str, str], honoured: Filter) -> None:
        self.subscription_id = subscription_id
        self.owner = owner
        self.filter = honoured
        self.ended = False
        self.dropped = 0
        self._pending: deque[JsonObject] = deque()
        self._wake = asyncio.Event()

    def hears(self, change: Change) -> bool:
        f = self.filter
        tenant, user = self.owner
        if change.tenant is not None and change.tenant != tenant:
            return False
        if change.kind == "tools":
            return f.tools
        if change.kind == "prompts":
            return f.prompts
        if change.kind == "resources":
            return f.resources
        if change.kind == "resource":
            return f.uris is not None and change.key in f.uris
        if change.kind != "task":
            return False
        # a task's notifications: its owner's streams only, never another (tenant, user)'s
        return (
            change.tenant == tenant
            and change.user == user
            and f.task_ids is not None
            and change.key in f.task_ids
        )

    def unfollow(self, base: str) -> None:
        """Stop following ``base`` and the URIs below it (``base/…``)."""
        f = self.filter
        if f.uris is None:
            return
        below = base + "/"
        kept = tuple(u for u in f.uris if u != base and not u.startswith(below))
        self.filter = Filter(f.tools, f.prompts, f.resources, kept, f.task_ids)

    def acknowledgement(self) -> JsonObject:
        note = jsonrpc.notification(ACKNOWLEDGED, {"notifications": self.filter.wire()})
        return tagged(note, self.subscription_id)

    def offer(self, message: JsonObject) -> None:
        if self.ended:
            return
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return
        self._pending.append(tagged(message, self.subscription_id))
        self._wake.set()

    def end(self) -> None:
        """The server ends the stream: :meth:`next` answers None once the queue is empty."""
        self.ended = True
        self._wake.set()

    async def next(self) -> JsonObject | None:
        """The next notification to write; None when the stream is to end."""
        while not self._pending:
            if self.ended:
                return None
            self._wake.clear()
            await self._wake.wait()
        return self._pending.popleft()


class ListenHub:
    """The listen streams this replica holds, and the way changes reach them and the others'.

    :meth:`notify` is the one entry for a change; :meth:`to_task` is how task notifications
    (``taskIds``) are delivered: an arbitrary notification to the streams of one (tenant,
    user) that listen to that task id, on any replica."""

    def __init__(
        self,
        broadcast: Broadcast | None = None,
        instance_id: str | None = None,
        max_per_user: int = MAX_STREAMS_PER_USER,
    ) -> None:
        self._broadcast = broadcast if instance_id else None
        self._me = instance_id
        self._max_per_user = max_per_user
        self._listeners: set[Listener] = set()
        self._per_owner: dict[tuple[str, str], int] = {}
        self._subscription: Subscription | None = None
        self.closing = False

    async def start(self) -> None:
        if self._broadcast is not None and self._subscription is None:
            self._subscription = await self._broadcast.subscribe(CHANNEL, self._on_remote)

    async def close(self) -> None:
        self.end_all()
        if self._broadcast is not None and self._subscription is not None:
            await self._broadcast.unsubscribe(self._subscription)
            self._subscription = None

    @property
    def open_streams(self) -> int:
        return len(self._listeners)

    def open(self, principal: Principal, subscription_id: object, honoured: Filter) -> Listener:
        """A new stream of ``principal``: :class:`TooManyStreams` past the cap,
        :class:`ServerBusy` while the server shuts down."""
        owner = (principal.tenant, principal.user)
        count = self._per_owner.get(owner, 0)
        if self.closing:
            raise ServerBusy("the server is shutting down; listen again")
        if count >= self._max_per_user:
            raise TooManyStreams(
                f"at most {self._max_per_user} subscriptions/listen streams per user are open "
                "at once; close one first",
                self._max_per_user,
            )
        listener = Listener(subscription_id, owner, honoured)
        self._listeners.add(listener)
        self._per_owner[owner] = count + 1
        return listener

    def release(self, listener: Listener) -> None:
        if listener not in self._listeners:
            return
        self._listeners.discard(listener)
        left = self._per_owner[listener.owner] - 1
        if left:
            self._per_owner[listener.owner] = left
        else:
            del self._per_owner[listener.owner]

    def end_all(self) -> None:
        """Shutdown: every stream ends with its response; no new one opens."""
        self.closing = True
        for listener in self._listeners:
            listener.end()

    def deliver(self, change: Change) -> int:
        """Hand ``change`` to this replica's streams that hear it; how many did."""
        if change.kind == "unfollow":
            assert change.key is not None
            for listener in self._listeners:
                if listener.owner == (change.tenant, change.user):
                    listener.unfollow(change.key)
            return 0
        heard = [listener for listener in self._listeners if listener.hears(change)]
        if heard:
            note = change.notification()
            for listener in heard:
                listener.offer(note)
        return len(heard)

    async def notify(self, change: Change) -> None:
        """Deliver ``change`` here and publish it to the other replicas."""
        self.deliver(change)
        if self._broadcast is None:
            return
        try:
            payload = json.dumps({**change.wire(), "from": self._me}).encode()
        except (TypeError, ValueError):
            log.warning("a listen notification is not JSON; not sent to the other replicas")
            return
        if len(payload) > MAX_WIRE_BYTES:
            log.warning("a listen notification of %d bytes not sent to the others", len(payload))
            return
        try:
            await self._broadcast.publish(CHANNEL, payload)
        except Exception:  # at most once anyway: the others' streams miss this one
            log.warning("listen notification not published", exc_info=True)

    def _on_remote(self, payload: bytes) -> None:
        if len(payload) > MAX_WIRE_BYTES:
            return
        try:
            body = json.loads(payload)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            log.warning("dropped a malformed listen notification from another replica")
            return
        if body.get("from") == self._me:
            return
        change = Change.from_wire(body)
        if change is None:
            log.warning("dropped a malformed listen notification from another replica")
            return
        self.deliver(change)

    # -- the changes, by name -------------------------------------------------------------

    async def tools_changed(self) -> None:
        await self.notify(Change("tools"))

    async def prompts_changed(self) -> None:
        await self.notify(Change("prompts"))

    async def resources_changed(self, tenant: str | None = None) -> None:
        await self.notify(Change("resources", tenant=tenant))

    async def resource_updated(self, uri: str, tenant: str | None = None) -> None:
        await self.notify(Change("resource", uri, tenant))

    async def unfollow(self, tenant: str, user: str, base: str) -> None:
        """(``tenant``, ``user``) lost read access to ``base`` and below: their streams on
        every replica stop following those URIs."""
        await self.notify(Change("unfollow", base, tenant, user))

    async def to_task(self, task_id: str, tenant: str, user: str, message: JsonObject) -> None:
        """Deliver ``message`` (a JSON-RPC notification) to the streams of (``tenant``,
        ``user``) that listen to ``task_id`` (``taskIds``), on every replica. The stream tags
        it with its subscription id."""
        await self.notify(Change("task", task_id, tenant, user, message))


Readable = Callable[[str, Call], Awaitable[bool]]
"""Whether the call's principal may read a resource URI (``resources/read``'s check)."""


class ListenFeature:
    """The ``subscriptions/listen`` handler (stateless era only)."""

    def __init__(self, hub: ListenHub, readable: Readable) -> None:
        self._hub = hub
        self._readable = readable

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register(METHOD, self.listen)

    async def _honoured(self, asked: Filter, call: Call) -> Filter:
        uris = asked.uris
        if uris is not None:
            uris = tuple([uri for uri in uris if await self._readable(uri, call)])
        principal = call.principal
        resources = asked.resources and principal is not None and principal.kind != "pat"
        return Filter(asked.tools, asked.prompts, resources, uris, asked.task_ids)

    async def listen(self, message: JsonObject, call: Call) -> JsonObject:
        """Acknowledge, then write what the stream hears until the server ends it (the
        transport cancels this when the client goes away)."""
        principal, channel = call.principal, call.channel
        assert principal is not None
        assert channel is not None
        asked = parse(jsonrpc.params_of(message), call.peer)
        honoured = await self._honoured(asked, call)
        listener = self._hub.open(principal, message["id"], honoured)
        try:
            await channel.send(listener.acknowledgement())
            while (note := await listener.next()) is not None:
                await channel.send(note)
        finally:
            self._hub.release(listener)
        return {"_meta": {SUBSCRIPTION_ID: message["id"]}}
