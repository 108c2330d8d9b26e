"""tasks/get, tasks/result, tasks/list and tasks/cancel on the wire."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from appdeck.protocol import jsonrpc
from appdeck.protocol.call import Call
from appdeck.protocol.errors import wire_error
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.task_model import RELATED_TASK_META

if TYPE_CHECKING:
    from appdeck.common.identity import Principal
    from appdeck.protocol.tasks import TaskManager

JsonObject = dict[str, Any]


class TasksFeature:
    def __init__(self, tasks: TaskManager) -> None:
        self._tasks = tasks

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register("tasks/get", self.get)
        rpc.register("tasks/result", self.result)
        rpc.register("tasks/list", self.list)
        rpc.register("tasks/cancel", self.cancel)

    @staticmethod
    def _who(call: Call) -> Principal:
        assert call.principal is not None
        return call.principal

    async def get(self, message: JsonObject, call: Call) -> JsonObject:
        task = await self._tasks.get(self._who(call), jsonrpc.params_of(message).get("taskId"))
        return task.wire()

    async def result(self, message: JsonObject, call: Call) -> JsonObject:
        task = await self._tasks.wait(self._who(call), jsonrpc.params_of(message).get("taskId"))
        if task.error is not None:
            raise wire_error(task.error)
        body = dict(task.result or {})
        meta = dict(body.get("_meta") or {})
        meta[RELATED_TASK_META] = {"taskId": task.task_id}
        body["_meta"] = meta
        return body

    async def list(self, message: JsonObject, call: Call) -> JsonObject:
        tasks, nxt = await self._tasks.list(
            self._who(call), jsonrpc.params_of(message).get("cursor")
        )
        body: JsonObject = {"tasks": [t.wire() for t in tasks]}
        if nxt:
            body["nextCursor"] = nxt
        return body

    async def cancel(self, message: JsonObject, call: Call) -> JsonObject:
        task = await self._tasks.cancel(self._who(call), jsonrpc.params_of(message).get("taskId"))
        return task.wire()
