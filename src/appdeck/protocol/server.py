"""The MCP server core: one entry point per kind of message, a method table, the lifecycle.

The transport routes a POST with :func:`appdeck.protocol.inbound.read`, opens the call with
:meth:`McpServer.open` (the session, its owner, checked once), then calls
:meth:`McpServer.handle_request`, :meth:`handle_notification` and :meth:`handle_response` with
validated JSON-RPC dicts. Every exception a handler raises is turned into a wire error here
(:func:`appdeck.protocol.errors.error_response`) and nowhere else; every ``tools/call`` and
every refusal is reported to the :class:`~appdeck.protocol.ports.AuditTrail` from here too.

Several replicas (issue 13): a client's answer to our request (elicitation, sampling, roots)
may be POSTed to a replica that did not send the request, and its ``notifications/cancelled``
to one that does not run the call. The request id names the replica that waits
(``"<instance>-<n>"``), so an answer goes to that replica's ``reply:<instance>`` channel; a
cancel names a client's id, so it goes to every replica on ``cancel`` and only the one running
the call acts. Both go through :class:`~appdeck.protocol.relay.Relay` (acknowledged, sent again
until acknowledged; acting twice is harmless: a future resolves once, a task is cancelled
once).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from appdeck import __version__, activity
from appdeck.common.errors import AppDeckError
from appdeck.common.identity import Principal
from appdeck.protocol import inbound, jsonrpc, outcomes, stateless, versions
from appdeck.protocol.call import Call
from appdeck.protocol.catalogue import Catalogue
from appdeck.protocol.context import OutgoingRequests, ToolContext
from appdeck.protocol.errors import (
    Forbidden,
    InvalidParams,
    InvalidRequest,
    McpError,
    SessionNotFound,
    SessionRequired,
    error_response,
    from_domain,
)
from appdeck.protocol.inbound import OPEN_METHODS, Route
from appdeck.protocol.inflight import InFlightCalls, RequestCancelled
from appdeck.protocol.inputs import METHODS as INPUT_METHODS
from appdeck.protocol.inputs import InputRequired, StateCodec, input_required, inputs_of
from appdeck.protocol.instructions import INSTRUCTIONS
from appdeck.protocol.levels import LOG_RANK
from appdeck.protocol.listen import ListenFeature, ListenHub
from appdeck.protocol.ports import AuditTrail, Broadcast, Outbox, Telemetry, Tracing
from appdeck.protocol.prompts_feature import PromptsFeature
from appdeck.protocol.registry import Registry
from appdeck.protocol.relay import Relay, decode
from appdeck.protocol.resources_feature import ResourcesFeature
from appdeck.protocol.rpc.dispatcher import Dispatcher
from appdeck.protocol.session_subscriptions import SessionSubscriptions
from appdeck.protocol.sessions import Session, SessionChange, SessionManager
from appdeck.protocol.task_model import Task
from appdeck.protocol.tasks import TaskManager
from appdeck.protocol.tasks_extension import TasksExtension, detailed_task
from appdeck.protocol.tasks_feature import TasksFeature
from appdeck.protocol.tools_feature import ToolsFeature
from appdeck.protocol.trace_context import error_text, trace_carrier

log = logging.getLogger("appdeck.protocol")

JsonObject = dict[str, Any]
Headers = list[tuple[bytes, bytes]]
Answer = tuple[JsonObject | None, int, Headers | None]
"""A request's response (None when the client cancelled it), the HTTP status to use when it
is the whole HTTP answer, and the extra HTTP headers its error carries (step-up challenge)."""

__all__ = ["OPEN_METHODS", "Answer", "McpServer", "RequestCancelled", "ServerInfo"]
_AUDITED_STATUSES = frozenset({401, 403, 429})
_NO_PARAMS: dict[str, Any] = {}
"""Read, never written: the params of a request that sent none, or not an object."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    name: str = "appdeck-mcp"
    version: str = __version__
    title: str | None = "AppDeck"
    instructions: str | None = INSTRUCTIONS
    capabilities: JsonObject = field(
        default_factory=lambda: {
            "tools": {},
            "resources": {"listChanged": True, "subscribe": True},
            "prompts": {"listChanged": True},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            "logging": {},
            "completions": {},
        }
    )


REPLY_CHANNEL = "reply:"
CANCEL_CHANNEL = "cancel"


def _session_id(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 128 else None


def _request_id(value: object) -> str | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and len(value) <= 256):
        return value
    return None


class McpServer:
    """Dispatches JSON-RPC messages to the lifecycle and the feature handlers."""

    def __init__(
        self,
        *,
        registry: Registry,
        sessions: SessionManager,
        tasks: TaskManager,
        outbox: Outbox,
        info: ServerInfo | None = None,
        client_request_timeout: float = 300.0,
        audit: AuditTrail | None = None,
        resource_metadata_url: str | None = None,
        broadcast: Broadcast | None = None,
        instance_id: str | None = None,
        state_key: bytes | None = None,
        telemetry: Telemetry | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.info = info or ServerInfo()
        self.telemetry = telemetry
        """Counts every answered request (metrics); None: nothing counted."""
        self.tracing = tracing
        """Opens a span per request (traces); None: tracing is off."""
        self.states = StateCodec(state_key or secrets.token_bytes(32))
        """Seals the stateless era's ``requestState`` (the key every replica shares)."""
        self.registry = registry
        self.sessions = sessions
        self.tasks = tasks
        self.outbox = outbox
        self.audit = audit
        self.requests = OutgoingRequests(client_request_timeout, instance_id)
        self._relay = (
            Relay(broadcast, instance_id) if broadcast is not None and instance_id else None
        )
        self._inflight = InFlightCalls()
        subscriptions = SessionSubscriptions(sessions)
        self.tools = ToolsFeature(registry, self.context, tasks, resource_metadata_url)
        self.listen = ListenHub(broadcast, instance_id)
        """The stateless era's listen streams on this replica (``subscriptions/listen``)."""
        catalogue = Catalogue(registry, self.context, subscriptions, outbox, self.listen)
        self.resources = ResourcesFeature(catalogue)
        self.prompts = PromptsFeature(catalogue)
        self.task_methods = TasksFeature(tasks)
        self.rpc: Dispatcher[Call] = Dispatcher()
        """The method table: the lifecycle's methods and each feature's register into it."""
        for method, handler in (
            ("initialize", self._initialize),
            ("ping", self._ping),
            ("logging/setLevel", self._set_level),
            ("completion/complete", self._complete),
        ):
            self.rpc.register(method, handler)
        for feature in (self.tools, self.resources, self.prompts, self.task_methods):
            feature.register(self.rpc)
        self.stateless_rpc: Dispatcher[Call] = Dispatcher()
        """The stateless era's table (MCP 2026-07-28): ``server/discover`` and the methods
        of :data:`stateless.METHODS`, served by the same handlers."""
        self.stateless_rpc.register("server/discover", self._discover)
        for method in stateless.METHODS:
            self.stateless_rpc.register(method, self.rpc.lookup(method))
        ListenFeature(self.listen, self.resources.readable).register(self.stateless_rpc)
        TasksExtension(tasks).register(self.stateless_rpc)
        tasks.on_change(self._task_changed)
        self._identity: JsonObject = {"name": self.info.name, "version": self.info.version}
        if self.info.title:
            self._identity["title"] = self.info.title
        sessions.on_drop(self._session_dropped)

    async def start(self) -> None:
        """Listen to the other replicas: session changes, answers and cancels forwarded to
        this one (no-op without a broadcast)."""
        await self.sessions.start()
        await self.listen.start()
        relay = self._relay
        if relay is not None:
            await relay.start()
            await relay.listen(REPLY_CHANNEL + relay.me, self._on_reply)
            await relay.listen(CANCEL_CHANNEL, self._on_cancel)

    async def close(self) -> None:
        await self.listen.close()
        if self._relay is not None:
            await self._relay.close()
        await self.sessions.close()

    @property
    def relay_dropped(self) -> int:
        """Forwarded messages no replica acknowledged (or dropped before sending)."""
        return self._relay.dropped if self._relay is not None else 0

    # -- entry points ---------------------------------------------------------------------

    async def open(self, route: Route, principal: Principal | None) -> Call:
        """The call a routed POST runs as: its session found and its owner checked (once, for
        every message of the POST), then the batch rule of the session's version."""
        session = None
        if route.wants_session:
            session = await self.session_for(route.session_id, principal)
        rejection = inbound.admit(route, session.protocol_version if session else None)
        if rejection is not None:
            raise rejection
        return Call(principal, session)

    async def session_for(self, session_id: str | None, principal: Principal | None) -> Session:
        """The live session ``session_id`` names, used by ``principal``.

        Raises :class:`SessionRequired` (no header), :class:`SessionNotFound` (unknown or
        expired) or :class:`Forbidden` after dropping the session when ``principal`` is not its
        owner (the refusal is audited). ``principal`` is None only for the open methods."""
        if session_id is None:
            raise SessionRequired("Bad Request: Mcp-Session-Id header is required")
        session = await self.sessions.get(session_id)
        if session is None:
            raise SessionNotFound("Session not found")
        if principal is not None and session.owner != principal.owner:
            try:
                await self.sessions.check_owner(session, principal)
            except Forbidden:
                if self.audit is not None:
                    self.audit.refused(principal, 403, "session owner mismatch: session dropped")
                raise
        return session

    async def handle_request(self, message: JsonObject, call: Call) -> Answer:
        """Answer one request (see :data:`Answer`), and audit it: every ``tools/call``, and
        every request refused with 401, 403 or 429. With tracing on, in a span of its own
        (continuing the client's trace when its ``_meta`` carries one)."""
        tracing = self.tracing
        if tracing is None:
            return await self._answer(message, call)
        params = message.get("params")
        tool = params.get("name") if type(params) is dict else None
        session = call.session
        with tracing.request(
            message["method"],
            tool if type(tool) is str else None,
            trace_carrier(params),
            session.id if session is not None else None,
        ) as span:
            answer = await self._answer(message, call)
            span.answered(outcomes.of(answer[0], answer[1]), error_text(answer[0]))
            return answer

    async def _answer(self, message: JsonObject, call: Call) -> Answer:
        request_id = message["id"]
        method = message["method"]
        started = time.perf_counter()
        headers: Headers | None = None
        try:
            try:
                body = await self.dispatch(message, call)
            except InputRequired as needed:  # only a stateless request's context raises it
                assert call.bound is not None
                body = input_required(self.states, call.bound, needed)
            if call.peer is not None:
                body = stateless.stamp(method, body, self._identity)
            response: JsonObject | None = jsonrpc.result(request_id, body)
            status = 200
        except RequestCancelled:
            response, status = None, 202
        except McpError as exc:
            if call.peer is not None:
                exc = stateless.recode(exc)
            response, status, headers = (
                error_response(request_id, exc),
                exc.http_status,
                exc.headers,
            )
        except AppDeckError as exc:
            mapped = from_domain(exc)
            if call.peer is not None:
                mapped = stateless.recode(mapped)
            response, status = error_response(request_id, mapped), mapped.http_status
        except Exception as exc:
            log.exception("unhandled error in %s", method)
            response, status = error_response(request_id, exc), 500
        elapsed = time.perf_counter() - started
        if self.audit is not None and (method == "tools/call" or status in _AUDITED_STATUSES):
            self._audit(message, call.principal, response, status, elapsed)
        if self.telemetry is not None:
            self._count(message, call, response, status, elapsed)
        return response, status, headers

    def _count(
        self,
        request: JsonObject,
        call: Call,
        response: JsonObject | None,
        status: int,
        elapsed: float,
    ) -> None:
        telemetry = self.telemetry
        assert telemetry is not None
        method: str = request["method"]
        outcome = outcomes.of(response, status)
        telemetry.request_served(method, "handshake" if call.peer is None else "stateless", outcome)
        if method == "tools/call":
            params = request.get("params")
            tool = params.get("name") if type(params) is dict else None
            telemetry.tool_served(tool if type(tool) is str else "", outcome, elapsed)

    def _audit(
        self,
        request: JsonObject,
        principal: Principal | None,
        response: JsonObject | None,
        status: int,
        elapsed: float,
    ) -> None:
        audit = self.audit
        assert audit is not None
        method = request["method"]
        params = request.get("params")
        if type(params) is not dict:  # absent, or (JSON-RPC allows it) an array
            params = _NO_PARAMS
        tool = params.get("name") if method == "tools/call" else None
        if type(tool) is not str:
            tool = None
        error = response.get("error") if response is not None else None
        if status in _AUDITED_STATUSES and error is not None:
            audit.refused(principal, status, str(error.get("message", "")), method, tool)
            return
        if method != "tools/call":
            return
        arguments = params.get("arguments")
        if type(arguments) is not dict:
            arguments = _NO_PARAMS
        result = response.get("result") if response is not None else None
        action = arguments.get("action")
        if type(action) is not str:
            action = None
        app_id = arguments.get("app_id")
        if type(app_id) is not int:
            app_id = None
        failed = error is not None or (result is not None and result.get("isError") is True)
        ms = round(elapsed * 1_000_000) / 1000  # to the µs: round(x, 3) formats a string
        audit.tool_called(
            principal,
            tool,
            action,
            app_id,
            failed,
            status,
            ms,
            str(request["id"]),
            result is not None and ("task" in result or result.get("resultType") == "task"),
        )
        activity.tool_call(
            tool=tool,
            action=action,
            app_id=app_id,
            failed=failed,
            ms=ms,
            tenant=principal.tenant if principal else None,
            user=principal.user if principal else None,
        )

    async def dispatch(self, message: JsonObject, call: Call) -> JsonObject:
        """Run one request's handler; raises :class:`McpError` for wire errors.

        ``call`` comes from :meth:`open`: its session's owner has been checked already."""
        method: str = message["method"]
        if call.peer is not None:  # stateless: no session, nothing to cancel by notification
            handler = self.stateless_rpc.lookup(method)
            principal = call.principal
            if principal is None:
                raise Forbidden("this method needs a token")
            if method in INPUT_METHODS:
                call.inputs, call.bound = inputs_of(
                    self.states, principal.owner, method, jsonrpc.params_of(message)
                )
            return await handler(message, call)
        handler = self.rpc.lookup(method)
        if call.principal is None and method not in OPEN_METHODS:
            raise Forbidden("this method needs a token")
        session = call.session
        if session is None and method not in ("initialize", "ping"):
            raise SessionRequired("Bad Request: Mcp-Session-Id header is required")
        if method != "tools/call" or session is None:
            return await handler(message, call)
        # a tools/call may be cancelled (notifications/cancelled): noted while it runs
        return await self._inflight.run((session.id, message["id"]), handler(message, call))

    async def handle_notification(self, message: JsonObject, call: Call) -> None:
        method = message["method"]
        params = jsonrpc.params_of(message)
        session = call.session
        if session is None:
            return
        if method == "notifications/initialized":
            if not session.initialized:
                session.initialized = True
        elif method == "notifications/cancelled":
            target = _request_id(params.get("requestId"))
            if target is None or call.principal is None:
                return
            if not self._inflight.cancel((session.id, target)) and self._relay is not None:
                # the call may run on another replica: the one that has it cancels it
                self._relay.send(CANCEL_CHANNEL, {"session": session.id, "requestId": target})
                log.info("cancel of request %r forwarded to the other replicas", target)
        # notifications/progress, roots/list_changed and unknown notifications are ignored.

    async def handle_response(self, message: JsonObject, call: Call) -> None:
        """A client's answer to one of our requests (elicitation, sampling), handed to the
        request waiting for it, here or on the replica that sent it."""
        session = call.session
        if session is None or self.requests.resolve(session.id, message):
            return
        owner = self.requests.owner_of(message.get("id"))
        relay = self._relay
        if relay is not None and owner is not None and owner != relay.me:
            relay.send(REPLY_CHANNEL + owner, {"session": session.id, "message": message})

    def _on_reply(self, payload: bytes) -> None:
        body = decode(payload)
        if body is None or self._relay is None:
            return
        session_id, message = _session_id(body.get("session")), body.get("message")
        if session_id is None or not isinstance(message, dict):
            log.warning("dropped a malformed forwarded answer")
            return
        if _request_id(message.get("id")) is None:
            return
        self.requests.resolve(session_id, message)  # False: answered or timed out already
        self._relay.ack(body)

    def _on_cancel(self, payload: bytes) -> None:
        relay = self._relay
        body = decode(payload)
        if body is None or relay is None or body.get("from") == relay.me:
            return
        session_id, target = _session_id(body.get("session")), _request_id(body.get("requestId"))
        if (
            session_id is not None
            and target is not None
            and self._inflight.cancel((session_id, target))
        ):
            log.info("request %r cancelled by a cancel forwarded from %.64s", target, body["from"])
            relay.ack(body)

    # -- lifecycle and small methods ------------------------------------------------------

    async def _initialize(self, message: JsonObject, call: Call) -> JsonObject:
        if call.session is not None:
            raise InvalidRequest("Invalid Request: Server already initialized")
        params = jsonrpc.params_of(message)
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise InvalidParams("initialize: params.protocolVersion must be a string")
        caps = params.get("capabilities")
        client_info = params.get("clientInfo")
        principal = call.principal
        assert principal is not None
        version = versions.negotiate(requested)
        session = await self.sessions.create(
            principal,
            version,
            client_info if isinstance(client_info, dict) else {},
            caps if isinstance(caps, dict) else {},
        )
        call.session = session
        body: JsonObject = {
            "protocolVersion": version,
            "capabilities": self.info.capabilities,
            "serverInfo": self._identity,
            "sessionId": session.id,
        }
        if self.info.instructions:
            body["instructions"] = self.info.instructions
        return body

    async def _discover(self, message: JsonObject, call: Call) -> JsonObject:
        return stateless.discover(self.info.instructions)

    async def _ping(self, message: JsonObject, call: Call) -> JsonObject:
        return {}

    async def _set_level(self, message: JsonObject, call: Call) -> JsonObject:
        level = jsonrpc.params_of(message).get("level")
        if not isinstance(level, str) or level not in LOG_RANK:
            raise InvalidParams(f"Invalid log level: {level!r}")
        assert call.session is not None
        await self.sessions.change(call.session, SessionChange(log_level=str(level)))
        return {}

    async def _complete(self, message: JsonObject, call: Call) -> JsonObject:
        params = jsonrpc.params_of(message)
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise InvalidParams("completion/complete needs ref and argument objects")
        ref_type = ref.get("type")
        ref_name = ref.get("name") if ref_type == "ref/prompt" else ref.get("uri")
        arg_name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(arg_name, str) or not isinstance(value, str):
            raise InvalidParams("argument.name and argument.value must be strings")
        if ref_type not in ("ref/prompt", "ref/resource") or not isinstance(ref_name, str):
            raise InvalidParams("ref must be {type: ref/prompt, name} or {type: ref/resource, uri}")
        if ref_type == "ref/prompt" and ref_name not in self.registry.prompts:
            raise InvalidParams(f"Unknown prompt: {ref_name}")
        completer = self.registry.completers.get((str(ref_type), str(ref_name), arg_name))
        values: list[str] = []
        if completer is not None:
            context = params.get("context")
            known = context.get("arguments") if isinstance(context, dict) else None
            values = await completer(value, known if isinstance(known, dict) else {})
        return {
            "completion": {
                "values": values[:100],
                "total": len(values),
                "hasMore": len(values) > 100,
            }
        }

    # -- helpers for the features ---------------------------------------------------------

    def context(
        self, call: Call, message: JsonObject | None, principal: Principal | None = None
    ) -> ToolContext:
        params = jsonrpc.params_of(message) if message else {}
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        who = principal or call.principal
        assert who is not None
        return ToolContext(
            principal=who,
            session=call.session,
            request_id=message.get("id") if message else None,
            progress_token=token if isinstance(token, (str, int)) else None,
            channel=call.channel,
            outbox=self.outbox,
            requests=self.requests,
            tasks=self.tasks,
            peer=call.peer,
            inputs=call.inputs,
        )

    async def _task_changed(self, task: Task) -> None:
        """A stateless task's change, as ``notifications/tasks`` (its DetailedTask) to its
        owner's listen streams that name it, on every replica. A session's task is announced
        on its session (``notifications/tasks/status``) by the task manager."""
        if self.telemetry is not None:
            self.telemetry.task_changed(task.status)
        if not task.stateless:
            return
        body = await detailed_task(self.tasks, task)
        notice = jsonrpc.notification("notifications/tasks", body)
        await self.listen.to_task(task.task_id, task.tenant, task.user, notice)

    async def _session_dropped(self, session: Session) -> None:
        self.requests.abandon_session(session.id)
        session.subscriptions.clear()
        await self.outbox.close_session(session.id)
