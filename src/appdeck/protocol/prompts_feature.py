"""prompts/list and prompts/get."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appdeck.protocol import jsonrpc, pagination
from appdeck.protocol.call import Call
from appdeck.protocol.errors import InvalidParams
from appdeck.protocol.rpc.dispatcher import Dispatcher

if TYPE_CHECKING:
    from appdeck.protocol.catalogue import Catalogue

JsonObject = dict[str, Any]


class PromptsFeature:
    def __init__(self, deps: Catalogue) -> None:
        self._registry, self._context = deps.registry, deps.context
        self._subscriptions, self._outbox = deps.subscriptions, deps.outbox
        self._listen = deps.listen

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register("prompts/list", self.list)
        rpc.register("prompts/get", self.get)

    async def list(self, message: JsonObject, call: Call) -> JsonObject:
        principal = call.principal
        assert principal is not None
        items = [p.wire() for p in self._registry.prompts.values() if principal.has_scope(p.scope)]
        page, nxt = pagination.page(items, jsonrpc.params_of(message))
        body: JsonObject = {"prompts": page}
        if nxt:
            body["nextCursor"] = nxt
        return body

    async def get(self, message: JsonObject, call: Call) -> JsonObject:
        params = jsonrpc.params_of(message)
        name = params.get("name")
        principal = call.principal
        assert principal is not None
        prompt = self._registry.prompts.get(name) if isinstance(name, str) else None
        if prompt is None or not principal.has_scope(prompt.scope):
            raise InvalidParams(f"Unknown prompt: {name}")
        raw = params.get("arguments") or {}
        if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
            raise InvalidParams("prompts/get: arguments must be an object of strings")
        known = {a.name for a in prompt.arguments}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidParams(f"Unknown argument(s) for prompt {name}: {', '.join(unknown)}")
        missing = [a.name for a in prompt.arguments if a.required and not raw.get(a.name)]
        if missing:
            raise InvalidParams(
                f"Missing required argument(s) for prompt {name}: {', '.join(missing)}"
            )
        return await prompt.renderer(dict(raw), self._context(call, message))

    async def list_changed(self) -> None:
        ids = await self._subscriptions.listeners()  # every replica's sessions
        if ids:
            note = jsonrpc.notification("notifications/prompts/list_changed")
            await self._outbox.to_sessions(ids, note)
        if self._listen is not None:
            await self._listen.prompts_changed()
