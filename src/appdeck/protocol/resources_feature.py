"""resources/list, templates/list, read, subscribe and unsubscribe; update fan-out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appdeck.common.errors import NotFound, PermissionDenied
from appdeck.protocol import jsonrpc, pagination
from appdeck.protocol.call import Call
from appdeck.protocol.errors import Forbidden, InvalidParams, ResourceNotFound
from appdeck.protocol.sessions import Session

if TYPE_CHECKING:
    from appdeck.common.identity import Principal
    from appdeck.protocol.server import McpServer

JsonObject = dict[str, Any]
MAX_SUBSCRIPTIONS = 1000


class ResourcesFeature:
    def __init__(self, server: McpServer) -> None:
        self._server = server

    def _principal(self, call: Call) -> Principal:
        principal = call.principal
        assert principal is not None
        if principal.kind == "pat":
            raise Forbidden("forbidden: resources/* accept OAuth tokens only")
        return principal

    async def list(self, message: JsonObject, call: Call) -> JsonObject:
        principal = self._principal(call)
        registry = self._server.registry
        items = [r.wire() for r in registry.resources.values() if principal.has_scope(r.scope)]
        ctx = self._server.context(call, message)
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
        items = [t.wire() for t in self._server.registry.templates if principal.has_scope(t.scope)]
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
        registry = self._server.registry
        ctx = self._server.context(call, message)
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
        registry = self._server.registry
        return uri in registry.resources or registry.find_template(uri) is not None

    async def subscribe(self, message: JsonObject, call: Call) -> JsonObject:
        self._principal(call)
        uri = self._uri(message)
        session = call.session
        assert session is not None
        if not self._known(uri):
            raise ResourceNotFound(uri)
        await self.read(message, call)  # only what the caller may read can be followed
        if uri not in session.subscriptions:
            if len(session.subscriptions) >= MAX_SUBSCRIPTIONS:
                raise InvalidParams(f"at most {MAX_SUBSCRIPTIONS} subscriptions per session")
            session.subscriptions.add(uri)
            await self._server.sessions.save(session)
        return {}

    async def unsubscribe(self, message: JsonObject, call: Call) -> JsonObject:
        self._principal(call)
        uri = self._uri(message)
        session = call.session
        assert session is not None
        if uri in session.subscriptions:
            session.subscriptions.discard(uri)
            await self._server.sessions.save(session)
        return {}

    async def unsubscribe_user(self, tenant: str, user: str, base: str) -> int:
        """End the subscriptions of every live session of (``tenant``, ``user``) to ``base``
        and the URIs below it (``base/…``): the user lost read access. How many ended."""
        ended = 0
        for session in self._server.sessions.live():
            if session.owner != (tenant, user):
                continue
            gone = {u for u in session.subscriptions if u == base or u.startswith(base + "/")}
            if gone:
                session.subscriptions -= gone
                ended += len(gone)
                await self._server.sessions.save(session)
        return ended

    def forget(self, session: Session) -> None:
        session.subscriptions.clear()

    async def updated(self, uri: str, *, tenant: str | None = None) -> None:
        """Tell the sessions subscribed to ``uri`` (and only them; only those of ``tenant``
        when given) that it changed."""
        ids = [
            s.id
            for s in self._server.sessions.live()
            if uri in s.subscriptions and (tenant is None or s.tenant == tenant)
        ]
        if ids:
            note = jsonrpc.notification("notifications/resources/updated", {"uri": uri})
            await self._server.outbox.to_sessions(ids, note)

    async def list_changed(self, *, tenant: str | None = None) -> None:
        ids = [s.id for s in self._server.sessions.live() if tenant is None or s.tenant == tenant]
        if ids:
            note = jsonrpc.notification("notifications/resources/list_changed")
            await self._server.outbox.to_sessions(ids, note)
