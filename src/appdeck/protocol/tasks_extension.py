"""The tasks extension of MCP 2026-07-28 (``io.modelcontextprotocol/tasks``, SEP-2663) on the
wire: ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` in the stateless era, and the
shapes of its answers. The state machine is the handshake era's (:mod:`appdeck.protocol.tasks`,
one store for both eras and every replica); input during a task is :mod:`.task_inputs`.

Negotiated per request: only a request whose ``_meta`` clientCapabilities declare the
extension gets a task (``tools/call`` of a tool whose ``task_support`` is ``optional`` or
``required``: AppDeck always runs those as tasks then, never "fast enough to answer at
once", so a client's code path does not depend on timing), and only such a request may call
``tasks/*`` (else ``-32021`` naming the extension). ``tasks/result`` and ``tasks/list`` do
not exist in this era (404 ``-32601``: they are not registered).
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

from appdeck.common.identity import Principal
from appdeck.protocol import jsonrpc
from appdeck.protocol.call import Call
from appdeck.protocol.errors import INTERNAL_ERROR, InvalidParams, MissingCapability
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.stateless import TASKS_EXTENSION
from appdeck.protocol.task_inputs import answer_task, pending_requests
from appdeck.protocol.task_model import COMPLETED, FAILED, INPUT_REQUIRED, Task, iso
from appdeck.protocol.tasks import TaskManager

JsonObject = dict[str, Any]

REQUIRED: Final[JsonObject] = {"extensions": {TASKS_EXTENSION: {}}}
"""``data.requiredCapabilities`` of a refusal for want of the extension."""


def info(task: Task) -> JsonObject:
    """The extension's Task: the 2025-11-25 fields with the units in their names."""
    body: JsonObject = {
        "taskId": task.task_id,
        "status": task.status,
        "createdAt": iso(task.created_at),
        "lastUpdatedAt": iso(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    }
    if task.status_message is not None:
        body["statusMessage"] = task.status_message
    return body


def created(task: Task) -> JsonObject:
    """A ``tools/call``'s CreateTaskResult (sent once the task is stored)."""
    return {"resultType": "task", **info(task)}


def detailed(task: Task, pending: dict[str, JsonObject]) -> JsonObject:
    """``tasks/get``'s DetailedTask (also what ``notifications/tasks`` carries): what the
    status needs beside the Task, ``inputRequests``, ``result`` or ``error``."""
    body = info(task)
    if task.status == INPUT_REQUIRED and pending:
        body["inputRequests"] = pending_requests(pending)
    elif task.status == COMPLETED and task.result is not None:
        body["result"] = task.result  # the CallToolResult as the tool returned it
    elif task.status == FAILED:
        body["error"] = task.error or {
            "code": INTERNAL_ERROR,
            "message": task.status_message or "The task failed.",
        }
    return body


async def detailed_task(tasks: TaskManager, task: Task) -> JsonObject:
    """:func:`detailed` with the task's pending requests read from the store."""
    pending: dict[str, JsonObject] = {}
    if task.status == INPUT_REQUIRED:
        pending, _ = await tasks.store.inputs(task.task_id)
    return detailed(task, pending)


class TasksExtension:
    """``tasks/get|update|cancel`` of the stateless era (register into its table only: the
    handshake era's ``tasks/*`` keep their 2025-11-25 wire)."""

    def __init__(self, tasks: TaskManager) -> None:
        self._tasks = tasks

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register("tasks/get", self.get)
        rpc.register("tasks/update", self.update)
        rpc.register("tasks/cancel", self.cancel)

    @staticmethod
    def _who(message: JsonObject, call: Call) -> Principal:
        """The caller, once its request declared the extension."""
        if call.peer is None or not call.peer.declares_extension(TASKS_EXTENSION):
            raise MissingCapability(
                f"{message['method']} needs the {TASKS_EXTENSION} extension: declare it in "
                "_meta clientCapabilities.extensions",
                REQUIRED,
            )
        assert call.principal is not None
        return call.principal

    async def get(self, message: JsonObject, call: Call) -> JsonObject:
        who = self._who(message, call)
        task = await self._tasks.get(who, jsonrpc.params_of(message).get("taskId"))
        return {"resultType": "complete", **await detailed_task(self._tasks, task)}

    async def update(self, message: JsonObject, call: Call) -> JsonObject:
        who = self._who(message, call)
        params = jsonrpc.params_of(message)
        await answer_task(self._tasks, who, params.get("taskId"), params.get("inputResponses"))
        return {"resultType": "complete"}

    async def cancel(self, message: JsonObject, call: Call) -> JsonObject:
        """An empty ack, also for a task that had ended already (the next ``tasks/get``
        tells how it ended); an unknown id, or another owner's, is -32602."""
        who = self._who(message, call)
        task = await self._tasks.get(who, jsonrpc.params_of(message).get("taskId"))
        if not task.terminal:
            # InvalidParams: it ended between the read and the cancel (the id was known)
            with contextlib.suppress(InvalidParams):
                await self._tasks.cancel(who, task.task_id)
        return {"resultType": "complete"}
