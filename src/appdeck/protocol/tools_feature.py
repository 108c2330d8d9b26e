"""tools/list and tools/call, including task-augmented calls."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from appdeck.common.errors import AppDeckError, InvalidArgument
from appdeck.protocol import jsonrpc, pagination, param_headers, tasks_extension
from appdeck.protocol.arguments import Problem
from appdeck.protocol.call import Call, ContextFactory
from appdeck.protocol.context import ToolContext
from appdeck.protocol.errors import (
    InsufficientScope,
    InvalidParams,
    McpError,
    MethodNotFound,
    MissingCapability,
    tool_error_result,
)
from appdeck.protocol.inputs import InputRequired
from appdeck.protocol.registry import ToolDef
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.stateless import TASKS_EXTENSION
from appdeck.protocol.task_model import SESSIONLESS, Task

if TYPE_CHECKING:
    from appdeck.common.identity import Principal
    from appdeck.protocol.registry import Registry
    from appdeck.protocol.tasks import TaskManager

log = logging.getLogger("appdeck.tools")
JsonObject = dict[str, Any]


class ToolsFeature:
    def __init__(
        self,
        registry: Registry,
        context: ContextFactory,
        tasks: TaskManager,
        resource_metadata_url: str | None = None,
    ) -> None:
        self._registry = registry
        self._context = context
        self._tasks = tasks
        self._resource_metadata_url = resource_metadata_url
        """Named in the step-up challenge of a tool refused for its scope (RFC 9728)."""
        self._wire: dict[str, JsonObject] = {}
        self._wire_stateless: dict[str, JsonObject] = {}

    def register(self, rpc: Dispatcher[Call]) -> None:
        rpc.register("tools/list", self.list)
        rpc.register("tools/call", self.call)

    def _wired(self, tool: ToolDef) -> JsonObject:
        body = self._wire.get(tool.name)
        if body is None:
            body = self._wire[tool.name] = tool.wire()
        return body

    def _wired_stateless(self, tool: ToolDef) -> JsonObject:
        """A tool as 2026-07-28 lists it: without ``execution.taskSupport``, which that revision
        dropped (the tasks extension, SEP-2663, negotiates tasks by capability, not per tool)."""
        body = self._wire_stateless.get(tool.name)
        if body is None:
            body = {k: v for k, v in self._wired(tool).items() if k != "execution"}
            self._wire_stateless[tool.name] = body
        return body

    async def list(self, message: JsonObject, call: Call) -> JsonObject:
        principal = call.principal
        assert principal is not None
        wired = self._wired if call.peer is None else self._wired_stateless
        visible = [wired(t) for t in self._registry.tools.values() if principal.has_scope(t.scope)]
        tools, nxt = pagination.page(visible, jsonrpc.params_of(message))
        body: JsonObject = {"tools": tools}
        if nxt:
            body["nextCursor"] = nxt
        return body

    async def call(self, message: JsonObject, call: Call) -> JsonObject:
        params = jsonrpc.params_of(message)
        principal = call.principal
        assert principal is not None
        tool, arguments, task_request = self._admit(params, principal)
        if call.peer is not None:  # stateless: the handshake era's task requests are ignored
            as_task = tool.task_support != "forbidden" and call.peer.declares_extension(
                TASKS_EXTENSION
            )
            if tool.task_support == "required" and not as_task:
                raise MissingCapability(
                    f"Tool '{tool.name}' runs only as a task: declare the {TASKS_EXTENSION} "
                    "extension",
                    {"extensions": {TASKS_EXTENSION: {}}},
                )
            if tool.param_headers:
                sent = param_headers.collect(call.headers) if call.headers is not None else {}
                param_headers.check(tool.param_headers, arguments, sent)
            if as_task:
                return await self._start_stateless(tool, arguments, call, message)
            return await run_tool(tool, arguments, self._context(call, message))
        if task_request is not None and not isinstance(task_request, dict):
            raise InvalidParams("tools/call: params.task must be an object")
        if task_request is not None and tool.task_support == "forbidden":
            raise MethodNotFound(f"Tool '{tool.name}' does not support task-augmented execution")
        if task_request is None and tool.task_support == "required":
            raise MethodNotFound(f"Tool '{tool.name}' must be called as a task (params.task)")
        if task_request is None:
            return await run_tool(tool, arguments, self._context(call, message))
        session = call.session
        assert session is not None
        # the task outlives the request: its messages go to the session's stream, not the POST's
        ctx = self._context(Call(principal, session), message)

        async def runner(task: Task) -> JsonObject:
            ctx.task = task
            return await run_tool(tool, arguments, ctx)

        task = await self._tasks.start(
            principal,
            session.id,
            "tools/call",
            {"name": tool.name, "arguments": arguments},
            task_request,
            runner,
            ctx.progress_token,
        )
        return {"task": task.wire()}

    async def _start_stateless(
        self, tool: ToolDef, arguments: JsonObject, call: Call, message: JsonObject
    ) -> JsonObject:
        """A task for a request that declared the tasks extension (see
        :mod:`appdeck.protocol.tasks_extension`): stored, then answered with its
        CreateTaskResult. Its run has neither session nor response stream: the client polls
        ``tasks/get`` and answers input with ``tasks/update``."""
        principal = call.principal
        assert principal is not None
        if tool.before_task is not None:  # may end this request with input_required
            arguments = await tool.before_task(arguments, self._context(call, message))
        ctx = self._context(Call(principal, None, peer=call.peer), message)

        async def runner(task: Task) -> JsonObject:
            ctx.task = task
            return await run_tool(tool, arguments, ctx)

        task = await self._tasks.start(
            principal,
            SESSIONLESS,
            "tools/call",
            {"name": tool.name, "arguments": arguments},
            {},
            runner,
        )
        return tasks_extension.created(task)

    def _admit(self, params: JsonObject, principal: Principal) -> tuple[ToolDef, JsonObject, Any]:
        """The tool a call names, its arguments (without ``task``) and its task request (the
        handshake era's ``params.task``, or ``arguments.task``), once the caller's scopes for
        the tool and its action are checked."""
        name = params.get("name")
        if not isinstance(name, str):
            raise InvalidParams("tools/call: params.name must be a string")
        tool = self._registry.tools.get(name)
        if tool is None:
            raise InvalidParams(f"Unknown tool: {name}")
        if not principal.has_scope(tool.scope):
            raise InsufficientScope(tool.scope or "", self._resource_metadata_url)
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidParams("tools/call: params.arguments must be an object")
        task_request = params.get("task")
        if isinstance(arguments.get("task"), dict):
            if task_request is None:
                task_request = arguments["task"]
            arguments = {k: v for k, v in arguments.items() if k != "task"}
        action = arguments.get("action")
        if isinstance(action, str) and action in tool.action_scopes:
            needed = tool.action_scopes[action]
            if not principal.has_scope(needed):
                raise InsufficientScope(needed, self._resource_metadata_url)
        return tool, arguments, task_request


async def run_tool(tool: ToolDef, arguments: JsonObject, ctx: ToolContext) -> JsonObject:
    """Validate the arguments and run the tool. Tool failures become ``isError`` results;
    protocol errors (McpError) propagate to the dispatcher."""
    if tool.validator is not None:
        problem = tool.validator.problem(arguments)
        if problem is not None:
            return tool_error_result(_invalid(tool.name, problem))
    try:
        return await tool.handler(arguments, ctx)
    except (McpError, InputRequired, asyncio.CancelledError):
        raise
    except AppDeckError as exc:
        return tool_error_result(exc)
    except Exception as exc:
        log.exception("tool %s failed", tool.name)
        return tool_error_result(exc)


def _invalid(tool: str, problem: Problem) -> AppDeckError:
    message = f"Invalid arguments for {tool}: {problem.message}"[:1000]
    if problem.field is None:
        return InvalidArgument(message)
    return InvalidArgument(message, field=problem.field)
