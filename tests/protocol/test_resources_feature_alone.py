"""The resources feature on its own: a registry, a context factory, an in-memory
:class:`~appdeck.protocol.ports.Subscriptions` and an outbox; no server, no session manager."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from appdeck.protocol.call import Call
from appdeck.protocol.catalogue import Catalogue
from appdeck.protocol.context import OutgoingRequests, ToolContext
from appdeck.protocol.errors import ResourceNotFound
from appdeck.protocol.registry import Registry, ResourceDef
from appdeck.protocol.resources_feature import MAX_SUBSCRIPTIONS, ResourcesFeature
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.sessions import Session
from appdeck.protocol.tasks import TaskManager

from .conftest import ALICE
from .doubles import MemoryTaskStore, RecordingOutbox

JsonObject = dict[str, Any]


class MemorySubscriptions:
    """Subscriptions in a dict, keyed by session id; refuses past the limit like the store."""

    def __init__(self) -> None:
        self.following: dict[str, set[str]] = {}
        self.limits: list[int] = []

    async def subscribe(self, session: Session, uri: str, limit: int) -> None:
        self.limits.append(limit)
        self.following.setdefault(session.id, set()).add(uri)

    async def unsubscribe(self, session: Session, uri: str) -> None:
        self.following.get(session.id, set()).discard(uri)

    async def unsubscribe_below(self, tenant: str, user: str, base: str) -> int:
        return 0

    async def followers(self, uri: str, tenant: str | None = None) -> list[str]:
        return sorted(sid for sid, uris in self.following.items() if uri in uris)

    async def listeners(self, tenant: str | None = None) -> list[str]:
        return sorted(self.following)


class Alone:
    def __init__(self) -> None:
        self.outbox = RecordingOutbox()
        self.tasks = TaskManager(MemoryTaskStore(), self.outbox, instance_id="alone")
        self.subscriptions = MemorySubscriptions()
        registry = Registry()

        async def read(uri: str, v: dict[str, str], ctx: ToolContext) -> list[JsonObject]:
            return [{"uri": uri, "text": f"read by {ctx.principal.user}"}]

        registry.add_resource(ResourceDef("test://a", "a", read))
        self.feature = ResourcesFeature(
            Catalogue(registry, self.context, self.subscriptions, self.outbox)
        )

    def context(self, call: Call, message: JsonObject | None) -> ToolContext:
        assert call.principal is not None
        return ToolContext(
            principal=call.principal,
            session=call.session,
            request_id=None,
            progress_token=None,
            channel=None,
            outbox=self.outbox,
            requests=OutgoingRequests(),
            tasks=self.tasks,
        )


@pytest.fixture
async def alone() -> AsyncIterator[Alone]:
    a = Alone()
    yield a
    await a.tasks.shutdown()


def _message(method: str, uri: str) -> JsonObject:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"uri": uri}}


def _call(session_id: str) -> Call:
    return Call(ALICE, Session(session_id, "acme", "alice", "2025-11-25"))


async def test_it_registers_its_five_methods_into_a_dispatcher() -> None:
    rpc: Dispatcher[Call] = Dispatcher()
    Alone().feature.register(rpc)
    assert sorted(rpc) == [
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
        "resources/unsubscribe",
    ]


async def test_a_subscribe_goes_through_the_port_and_updates_reach_only_followers(
    alone: Alone,
) -> None:
    await alone.feature.subscribe(_message("resources/subscribe", "test://a"), _call("s1"))
    await alone.feature.subscribe(_message("resources/subscribe", "test://a"), _call("s2"))
    await alone.feature.unsubscribe(_message("resources/unsubscribe", "test://a"), _call("s2"))
    assert alone.subscriptions.limits == [MAX_SUBSCRIPTIONS, MAX_SUBSCRIPTIONS]
    await alone.feature.updated("test://a")
    assert alone.outbox.sent == [
        (
            "s1",
            {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": "test://a"},
            },
        )
    ]


async def test_an_unknown_uri_is_not_followed(alone: Alone) -> None:
    with pytest.raises(ResourceNotFound):
        await alone.feature.subscribe(_message("resources/subscribe", "test://b"), _call("s1"))
    assert alone.subscriptions.following == {}


async def test_list_changes_go_to_every_listener_the_port_names(alone: Alone) -> None:
    await alone.feature.subscribe(_message("resources/subscribe", "test://a"), _call("s1"))
    await alone.feature.list_changed()
    assert alone.outbox.methods() == ["notifications/resources/list_changed"]
