"""What a tool, resource or prompt handler may do while it runs: log, report progress, ask the
client (elicitation, sampling), and know who is calling.

Messages go on the request's own response stream while the request is in flight, and on the
session's standalone stream when the work runs as a task.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from appdeck.common.errors import FailedPrecondition, Unavailable
from appdeck.common.identity import Principal
from appdeck.protocol import jsonrpc
from appdeck.protocol.envelope import Peer
from appdeck.protocol.errors import McpError, MissingCapability
from appdeck.protocol.inputs import CAPABILITY_OF, Inputs
from appdeck.protocol.levels import passes
from appdeck.protocol.ports import Outbox, RequestChannel
from appdeck.protocol.sessions import Session
from appdeck.protocol.task_inputs import ask_through_task
from appdeck.protocol.task_model import INPUT_REQUIRED, RELATED_TASK_META, WORKING, Task
from appdeck.protocol.tasks import TaskManager

JsonObject = dict[str, Any]


class ClientError(McpError):
    """The client answered a server-to-client request with a JSON-RPC error."""


class OutgoingRequests:
    """Server-to-client requests awaiting their responses, keyed by (session, request id).

    With an ``instance_id`` (always, in a server) the ids are ``"<instance>-<n>"``: unique
    across the replicas of a deployment, and the replica a client's answer lands on reads from
    the id which replica waits for it (:meth:`owner_of`)."""

    def __init__(self, timeout: float = 300.0, instance_id: str | None = None) -> None:
        self._ids = itertools.count(1)
        self._instance = instance_id
        self._pending: dict[tuple[str, str | int], asyncio.Future[JsonObject]] = {}
        self.timeout = timeout

    def open(self, session_id: str) -> tuple[str | int, asyncio.Future[JsonObject]]:
        n = next(self._ids)
        request_id: str | int = n if self._instance is None else f"{self._instance}-{n}"
        future: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        self._pending[(session_id, request_id)] = future
        return request_id, future

    def close(self, session_id: str, request_id: str | int) -> None:
        self._pending.pop((session_id, request_id), None)

    def resolve(self, session_id: str, message: JsonObject) -> bool:
        """Hand a client's response to the request waiting for it. False if none waits."""
        request_id = message.get("id")
        if not isinstance(request_id, (str, int)):
            return False
        future = self._pending.pop((session_id, request_id), None)
        if future is None or future.done():
            return False
        future.set_result(message)
        return True

    def owner_of(self, request_id: object) -> str | None:
        """The instance that sent the request ``request_id`` names; None when the id is not
        of the ``"<instance>-<n>"`` form."""
        if not isinstance(request_id, str) or len(request_id) > 160:
            return None
        instance, dash, n = request_id.rpartition("-")
        if not dash or not instance or not n.isdigit():
            return None
        return instance

    @property
    def instance_id(self) -> str | None:
        return self._instance

    def abandon_session(self, session_id: str) -> None:
        for key in [k for k in self._pending if k[0] == session_id]:
            future = self._pending.pop(key)
            if not future.done():
                future.set_exception(Unavailable("the session ended before the client answered"))


class ToolContext:
    """Passed to every handler. Cheap to build: the request path makes one per call."""

    __slots__ = (
        "_asked",
        "_channel",
        "_outbox",
        "_requests",
        "_tasks",
        "inputs",
        "peer",
        "principal",
        "progress_token",
        "request_id",
        "session",
        "task",
    )

    def __init__(
        self,
        *,
        principal: Principal,
        session: Session | None,
        request_id: jsonrpc.RequestId | None,
        progress_token: str | int | None,
        channel: RequestChannel | None,
        outbox: Outbox,
        requests: OutgoingRequests,
        tasks: TaskManager,
        task: Task | None = None,
        peer: Peer | None = None,
        inputs: Inputs | None = None,
    ) -> None:
        self.principal = principal
        self.session = session
        self.peer = peer
        self.inputs = inputs
        """A stateless request's answers (tools/call, prompts/get, resources/read only)."""
        self._asked = 0
        self.request_id = request_id
        self.progress_token = progress_token
        self.task = task
        self._channel = channel
        self._outbox = outbox
        self._requests = requests
        self._tasks = tasks

    async def send(self, message: JsonObject) -> None:
        """Send a message related to this request to the client."""
        if self.task is not None:
            params = message.setdefault("params", {})
            params.setdefault("_meta", {})[RELATED_TASK_META] = {"taskId": self.task.task_id}
        if self._channel is not None:
            await self._channel.send(message)
        elif self.session is not None:
            await self._outbox.to_session(self.session.id, message)

    async def log(self, level: str, data: Any, logger: str | None = None) -> None:
        """``notifications/message``, if the session's log level lets it through (in the
        stateless era: if the request's ``_meta`` asked for messages at that level)."""
        peer = self.peer
        if peer is not None:
            if peer.log_level is None or not passes(level, peer.log_level):
                return
        elif self.session is not None and not self.session.wants_log(level):
            return
        params: JsonObject = {"level": level, "data": data}
        if logger:
            params["logger"] = logger
        await self.send(jsonrpc.notification("notifications/message", params))

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """``notifications/progress`` when the caller asked for progress (a progressToken)."""
        if self.progress_token is None:
            return
        params: JsonObject = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.send(jsonrpc.notification("notifications/progress", params))

    async def report(
        self, message: str, done: float | None = None, total: float | None = None
    ) -> None:
        """A step of long work: the task's status message (when running as a task) and a
        progress notification (when the caller asked for progress)."""
        if self.task is not None:
            await self._tasks.note(self.task, message)
        if done is not None:
            await self.progress(done, total, message)

    async def close_stream(self) -> None:
        """End the response stream now (SSE polling); the client resumes it with GET."""
        if self._channel is not None:
            await self._channel.close_stream()

    def can_ask(self, capability: str) -> bool:
        """Whether :meth:`request` may ask the client for ``capability`` (elicitation,
        sampling) during this call: a client that declared it, in the handshake era or (for
        the requests that may answer ``input_required``, and in a task of the tasks
        extension) in the stateless era."""
        if self.peer is not None:
            asks = self.inputs is not None or self.task is not None
            return asks and self.peer.declares(capability)
        return self.session is not None and self.session.supports(capability)

    async def ask(self, requests: dict[str, JsonObject]) -> dict[str, JsonObject]:
        """Ask the client several things at once (key → ``{"method", "params"}``) and get
        its answers by key. In the stateless era the first call of a round ends the request
        with an ``input_required`` result (:class:`~appdeck.protocol.inputs.InputRequired`)
        and the handler runs again with the answers; a kind of request the client did not
        declare is ``-32021``. In the handshake era the requests go one after the other."""
        if self.peer is None:
            answers: dict[str, JsonObject] = {}
            for key, request in requests.items():
                method = request["method"]
                answers[key] = await self.request(
                    method, request["params"], capability=_capability(method)
                )
            return answers
        needs = {_capability(str(r["method"])) for r in requests.values()}
        missing: JsonObject = {c: {} for c in sorted(needs) if not self.peer.declares(c)}
        if missing:
            raise MissingCapability(
                "this request needs client capabilities it did not declare: " + ", ".join(missing),
                missing,
            )
        if self.task is not None:  # a task of the tasks extension: tasks/get and tasks/update
            return await ask_through_task(self._tasks, self.task, requests)
        if self.inputs is None:
            raise FailedPrecondition(
                "this request cannot ask the client for input in protocol 2026-07-28",
                hint="pass the value as an argument (a confirmation: confirm: true)",
            )
        return self.inputs.take(requests)

    async def request(self, method: str, params: JsonObject, *, capability: str) -> JsonObject:
        """Send a request to the client and wait (bounded) for its result (in the stateless
        era: through :meth:`ask`, keyed by its rank among this handler's requests)."""
        if self.peer is not None:
            self._asked += 1
            key = f"{capability}-{self._asked}"
            return (await self.ask({key: {"method": method, "params": params}}))[key]
        session = self.session
        if session is None or not session.supports(capability):
            raise FailedPrecondition(
                f"the client did not declare the '{capability}' capability",
                hint="use a client that supports it, or pass the value as an argument",
            )
        request_id, future = self._requests.open(session.id)
        if self.task is not None and self.task.status == WORKING:
            await self._tasks.transition(
                self.task, INPUT_REQUIRED, f"Waiting for the client: {method}"
            )
        try:
            await self.send(jsonrpc.request(request_id, method, params))
            async with asyncio.timeout(self._requests.timeout):
                response = await future
        except TimeoutError:
            raise Unavailable(f"the client did not answer {method} in time") from None
        finally:
            self._requests.close(session.id, request_id)
            if self.task is not None and self.task.status == INPUT_REQUIRED:
                await self._tasks.transition(self.task, WORKING)
        if "error" in response:
            err = response["error"]
            raise ClientError(str(err.get("message", "client error")), err.get("data"))
        result = response.get("result")
        return result if isinstance(result, dict) else {}

    async def elicit(self, message: str, requested_schema: JsonObject) -> JsonObject:
        """``elicitation/create`` (form mode): returns ``{action, content?}``."""
        params = {"mode": "form", "message": message, "requestedSchema": requested_schema}
        if self.session is not None and self.session.protocol_version < "2025-11-25":
            params.pop("mode")
        return await self.request("elicitation/create", params, capability="elicitation")

    async def sample(self, params: JsonObject) -> JsonObject:
        """``sampling/createMessage``: returns the client's CreateMessageResult."""
        return await self.request("sampling/createMessage", params, capability="sampling")


def _capability(method: str) -> str:
    """The client capability a request to the client needs (its method for an unknown one)."""
    return CAPABILITY_OF.get(method, method)
