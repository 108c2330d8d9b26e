"""resources/list, templates/list, read, subscribe and unsubscribe; update fan-out.

Subscriptions sit behind the :class:`~appdeck.protocol.ports.Subscriptions` port (the
handshake era keeps them in the session store), and the replica that sees a change fans it out: it
asks the store which sessions follow the URI, whichever replica took their subscribe, and
sends through the outbox (which reaches the replica holding each session's GET stream). One
sender per change, so no session hears of it twice; the alternative (broadcast the change,
every replica notifies the sessions it caches) would notify a session once per replica that
caches it, and miss sessions no replica caches since a restart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appdeck.common.errors import AppDeckError, NotFound, PermissionDenied
from appdeck.protocol import jsonrpc, pagination
from appdeck.protocol.call import Call
from appdeck.protocol.errors import Forbidden, InvalidParams, McpError, ResourceNotFound
from appdeck.protocol.rpc.dispatcher import Dispatcher

if TYPE_CHECKING:
    from appdeck.common.identity import Principal
    from appdeck.protocol.catalogue import Catalogue

JsonObject = dict[str, Any]
MAX_SUBSCRIPTIONS = 1000


class ResourcesFeature:
    def __init__(self, deps: Catalogue) -> None:
        self._registry, self._context = deps.registry, deps.context
        self._subscriptions, self._outbox = deps.subscriptions, deps.outbox
        self._listen = deps.listen

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register("resources/list", self.list)
        rpc.register("resources/templates/list", self.list_templates)
        rpc.register("resources/read", self.read)
        rpc.register("resources/subscribe", self.subscribe)
        rpc.register("resources/unsubscribe", self.unsubscribe)

    def _principal(self, call: Call) -> Principal:
        principal = call.principal
        assert principal is not None
        if principal.kind == "pat":
            raise Forbidden("forbidden: resources/* accept OAuth tokens only")
        return principal

    async def list(self, message: JsonObject, call: Call) -> JsonObject:
        principal = self._principal(call)
        registry = self._registry
        items = [r.wire() for r in registry.resources.values() if principal.has_scope(r.scope)]
        ctx = self._context(call, message)
        for scope, lister in registry.listers:
            if principal.has_scope(scope):
                items.extend(await lister(ctx))
        page, nxt = pagination.page(items, jsonrpc.params_of(message))
        body: JsonObject = {"resources": page}
        if nxt:
            body["nextCursor"] = nxt
        return body

    async def list_templates(self, message: JsonObject, call: Call) -> JsonObject:
        principal = self._principal(call)
        items = [t.wire() for t in self._registry.templates if principal.has_scope(t.scope)]
        page, nxt = pagination.page(items, jsonrpc.params_of(message))
        body: JsonObject = {"resourceTemplates": page}
        if nxt:
            body["nextCursor"] = nxt
        return body

    def _uri(self, message: JsonObject) -> str:
        uri = jsonrpc.params_of(message).get("uri")
        if not isinstance(uri, str) or not uri or len(uri) > 2048:
            raise InvalidParams("params.uri must be a non-empty string (at most 2048 characters)")
        return uri

    async def read(self, message: JsonObject, call: Call) -> JsonObject:
        principal = self._principal(call)
        uri = self._uri(message)
        registry = self._registry
        ctx = self._context(call, message)
        static = registry.resources.get(uri)
        try:
            if static is not None and principal.has_scope(static.scope):
                return {"contents": await static.reader(uri, {}, ctx)}
            found = registry.find_template(uri)
            if found is not None and principal.has_scope(found[0].scope):
                return {"contents": await found[0].reader(uri, found[1], ctx)}
        except NotFound:
            raise ResourceNotFound(uri) from None
        except PermissionDenied:
            raise Forbidden("forbidden: you may not read this resource", {"uri": uri}) from None
        raise ResourceNotFound(uri)

    def _known(self, uri: str) -> bool:
        registry = self._registry
        return uri in registry.resources or registry.find_template(uri) is not None

    async def readable(self, uri: str, call: Call) -> bool:
        """Whether ``call``'s principal may read ``uri`` (:meth:`read`'s check, a PAT
        refused): what a listen stream may follow (``resourceSubscriptions``)."""
        if not self._known(uri):
            return False
        try:
            await self.read({"params": {"uri": uri}}, call)
        except (McpError, AppDeckError):
            return False
        return True

    async def subscribe(self, message: JsonObject, call: Call) -> JsonObject:
        self._principal(call)
        uri = self._uri(message)
        session = call.session
        assert session is not None
        if not self._known(uri):
            raise ResourceNotFound(uri)
        await self.read(message, call)  # only what the caller may read can be followed
        await self._subscriptions.subscribe(session, uri, MAX_SUBSCRIPTIONS)
        return {}

    async def unsubscribe(self, message: JsonObject, call: Call) -> JsonObject:
        self._principal(call)
        uri = self._uri(message)
        session = call.session
        assert session is not None
        await self._subscriptions.unsubscribe(session, uri)
        return {}

    async def unsubscribe_user(self, tenant: str, user: str, base: str) -> int:
        """End the subscriptions of every session of (``tenant``, ``user``), on any replica,
        to ``base`` and the URIs below it (``base/…``): the user lost read access. How many
        sessions lost subscriptions (their listen streams stop following them too)."""
        if self._listen is not None:
            await self._listen.unfollow(tenant, user, base)
        return await self._subscriptions.unsubscribe_below(tenant, user, base)

    async def updated(self, uri: str, *, tenant: str | None = None) -> None:
        """Tell the sessions subscribed to ``uri`` (and only them; only those of ``tenant``
        when given) that it changed, and the listen streams that follow it."""
        ids = await self._subscriptions.followers(uri, tenant)
        if ids:
            note = jsonrpc.notification("notifications/resources/updated", {"uri": uri})
            await self._outbox.to_sessions(ids, note)
        if self._listen is not None:
            await self._listen.resource_updated(uri, tenant)

    async def list_changed(self, *, tenant: str | None = None) -> None:
        ids = await self._subscriptions.listeners(tenant)
        if ids:
            note = jsonrpc.notification("notifications/resources/list_changed")
            await self._outbox.to_sessions(ids, note)
        if self._listen is not None:
            await self._listen.resources_changed(tenant)
