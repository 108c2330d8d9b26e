"""How a tool is declared: a :class:`Tool`, and next to each handler the pydantic models of its
arguments and of its result. Everything on the wire comes from those models (the schemas, see
:mod:`appdeck.tools.schemas`); the handler gets typed arguments and the platform's services,
and returns a :class:`Reply`. docs/tools-cookbook.md walks through adding a tool family.

    deploy_app = Tool("deploy_app", title=..., description=..., scope="deploy:write", ...)

    class DeployApp(Arguments):
        app_id: AppId
        strategy: Strategy | None = None

    @deploy_app.handles(DeployApp, Deployment)
    async def _deploy(args: DeployApp, call: Call) -> Reply: ...

A multi-action tool has one arguments model per action, each with ``action: Literal["..."]``
and its own handler, result model and (optionally) scope. The rules (who may, what is valid
beyond the schema, what needs confirming) live in the platform services; a handler calls one
or two services and shapes the result. Also here, once for every tool: the confirmation
helper (:meth:`Call.confirming`) and the paginator (:func:`paginate`).
"""

from __future__ import annotations

import copy
import functools
import json
import typing
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from appdeck.common import cursors
from appdeck.common.errors import (
    AppDeckError,
    ConfirmationRequired,
    FailedPrecondition,
    InvalidArgument,
)
from appdeck.common.identity import Principal
from appdeck.platform.services import Platform
from appdeck.protocol.arguments import ArgumentCheck
from appdeck.protocol.context import ToolContext
from appdeck.protocol.registry import TaskSupport, ToolDef
from appdeck.tools import schemas, timestamps

JsonObject = dict[str, Any]
T = TypeVar("T")
A = TypeVar("A", bound="Arguments")

INT64_MAX = 2**63 - 1
"""The largest id a database column holds: a larger one is refused naming its field."""

AppId = Annotated[
    int,
    Field(ge=1, le=INT64_MAX, description="The app's id (from register_app or list_my_apps)."),
]


class Arguments(BaseModel):
    """Base of a tool's (or one action's) arguments: closed (an unknown argument is refused,
    naming it) and immutable. The docstring of an action's model is its description."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Output(BaseModel):
    """Base of a result. A field left unset is *absent* from the result (not null): set
    ``next_cursor`` only when there is a next page."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a handler returns: a one-line summary for the model (what happened, what to call
    next) and the result. ``error`` makes it an error result that still carries ``data``
    (a deployment that ended failed)."""

    summary: str
    data: Output
    error: AppDeckError | None = None

    def wire(self) -> JsonObject:
        body = timestamps.add_iso(self.data.model_dump(exclude_unset=True))
        if self.error is not None:
            body["error"] = self.error.to_dict()
        text = f"{self.summary}\n{json.dumps(body, default=str)}"
        result: JsonObject = {
            "content": [{"type": "text", "text": text}],
            "structuredContent": body,
        }
        if self.error is not None:
            result["isError"] = True
        return result


@dataclass(frozen=True, slots=True)
class Hints:
    """MCP tool annotations."""

    read_only: bool
    destructive: bool = False
    idempotent: bool = False

    def wire(self) -> JsonObject:
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": False,
        }


READS = Hints(read_only=True, idempotent=True)


@dataclass(frozen=True, slots=True)
class Call:
    """One tools/call as a handler sees it: who calls, the platform's services, and the
    request's context (progress, tasks, requests to the client)."""

    platform: Platform
    ctx: ToolContext

    @property
    def principal(self) -> Principal:
        return self.ctx.principal

    @property
    def as_task(self) -> bool:
        return self.ctx.task is not None

    async def confirming(self, step: Callable[[bool], Awaitable[T]], *, confirm: bool) -> T:
        """Run ``step(confirmed)``. When the service answers :class:`ConfirmationRequired`,
        ask the human through ``elicitation/create`` (when the client supports it) and run it
        again confirmed; without elicitation the refusal stands, and its hint says to call
        again with ``confirm: true``."""
        try:
            return await step(confirm)
        except ConfirmationRequired as needed:
            if confirm or not self.ctx.can_ask("elicitation"):
                raise
            question, what = needed.question, needed.what
        answer = await self.ctx.elicit(
            question,
            {
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Yes", "default": False}},
                "required": ["confirm"],
            },
        )
        content = answer.get("content") or {}
        if answer.get("action") != "accept" or content.get("confirm") is not True:
            raise FailedPrecondition(f"{what} was not confirmed", hint="nothing changed")
        return await step(True)


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


async def paginate(
    fetch: Callable[[int, int], Awaitable[Sequence[T]]], cursor: str | None, limit: int
) -> Page[T]:
    """One page of a list tool: ``fetch(offset, limit)`` is asked for one more item than
    shown, to know whether there is a next page. The cursor codec is the server's one."""
    try:
        offset = cursors.decode(cursor)
    except cursors.BadCursor:
        raise InvalidArgument(
            "invalid cursor", hint="pass the next_cursor of a previous page", field="cursor"
        ) from None
    found = list(await fetch(offset, limit + 1))
    more = len(found) > limit
    return Page(found[:limit], cursors.encode(offset + limit) if more else None)


Handler = Callable[[A, Call], Awaitable[Reply]]


@dataclass(frozen=True, slots=True)
class _Action:
    name: str | None
    """The value of ``action`` (None: a tool without actions)."""
    model: type[Arguments]
    output: type[Output]
    handler: Callable[[Any, Call], Awaitable[Reply]]
    scope: str | None


@dataclass(frozen=True, slots=True)
class _Fixed:
    published: JsonObject
    validated: JsonObject | None
    output: JsonObject
    check: ArgumentCheck


class Tool:
    """A tool: its name, what a model reads about it, its scope, and its handlers."""

    def __init__(
        self,
        name: str,
        *,
        title: str,
        description: str,
        scope: str,
        hints: Hints,
        task_support: TaskSupport = "forbidden",
    ) -> None:
        self.name = name
        self.title = title
        self.description = description
        self.scope = scope
        self.hints = hints
        self.task_support: TaskSupport = task_support
        self._actions: dict[str | None, _Action] = {}
        self._fixed: tuple[tuple[str | None, ...], _Fixed] | None = None

    def handles(
        self, model: type[A], output: type[Output], *, scope: str | None = None
    ) -> Callable[[Handler[A]], Handler[A]]:
        """Declare the handler of ``model`` (one action, or the whole tool) returning
        ``output``; ``scope`` is what the action needs beyond the tool's own scope."""

        def register(handler: Handler[A]) -> Handler[A]:
            name = action_of(model)
            if name in self._actions or (None in self._actions) or (name is None and self._actions):
                raise ValueError(f"{self.name}: {name or 'the tool'} is declared twice")
            self._actions[name] = _Action(name, model, output, handler, scope)
            return handler

        return register

    def action_scopes(self) -> dict[str | None, str | None]:
        """Each action's extra scope as declared (None: the tool's own scope suffices); the
        key is None for a single-action tool."""
        return {name: action.scope for name, action in self._actions.items()}

    @property
    def multi_action(self) -> bool:
        return None not in self._actions

    @property
    def default_action(self) -> str | None:
        """The action a call without ``action`` runs: the one whose model gives ``action`` a
        default (a tool that gained actions keeps its old calls working)."""
        for action in self._actions.values():
            field = action.model.model_fields.get("action")
            if field is not None and not field.is_required():
                return action.name
        return None

    def input_schemas(self) -> tuple[JsonObject, JsonObject | None]:
        """``(published, validated)``; validated is None when they are the same. Generated
        once per process for a set of actions (:func:`_input_schemas`); each call gets its
        own copy, so a caller may change it."""
        models = tuple((a.name, a.model) for a in self._actions.values())
        published, validated = _input_schemas(models, self.default_action)
        return copy.deepcopy(published), copy.deepcopy(validated)

    def output_schema(self) -> JsonObject:
        """The outputSchema, generated once per process for a set of result models; each
        call gets its own copy."""
        outputs = tuple(dict.fromkeys(a.output for a in self._actions.values()))
        return copy.deepcopy(_output_schema(outputs))

    def fixed(self) -> _Fixed:
        """What :meth:`definition` gives every registry: the input schemas, the output
        schema and their argument check, made once per process for its actions (they come
        from the code alone: ~20 ms of every start for the 26 tools, and the test suite
        starts ~1,000 composition roots). Shared by every registry, so never changed."""
        key = tuple(self._actions)
        if self._fixed is None or self._fixed[0] != key:
            published, validated = self.input_schemas()
            check = ArgumentCheck(validated or published)
            self._fixed = (key, _Fixed(published, validated, self.output_schema(), check))
        return self._fixed[1]

    def definition(self, platform: Platform) -> ToolDef:
        """The registry entry, bound to ``platform``."""
        if not self._actions:
            raise ValueError(f"tool {self.name} has no handler")
        fixed = self.fixed()
        published, validated = fixed.published, fixed.validated
        actions = dict(self._actions)
        multi = self.multi_action
        default = self.default_action

        async def handle(arguments: JsonObject, ctx: ToolContext) -> JsonObject:
            action = actions.get(arguments.get("action", default) if multi else None)
            if action is None:
                raise InvalidArgument(
                    f"action must be one of {', '.join(map(str, actions))}", field="action"
                )
            try:
                args = action.model.model_validate(arguments)
            except ValidationError as exc:
                raise _invalid(exc) from None
            reply = await action.handler(args, Call(platform, ctx))
            return reply.wire()

        return ToolDef(
            self.name,
            self.description,
            published,
            handle,
            title=self.title,
            output_schema=fixed.output,
            annotations=self.hints.wire(),
            task_support=self.task_support,
            scope=self.scope,
            action_scopes={str(a.name): a.scope for a in actions.values() if a.scope},
            validation_schema=validated,
            validator=fixed.check,
        )


@functools.cache
def _input_schemas(
    models: tuple[tuple[str | None, type[Arguments]], ...], default: str | None
) -> tuple[JsonObject, JsonObject | None]:
    """What :meth:`Tool.input_schemas` answers, remembered for the process: the schemas depend
    only on the models (and the default action), and pydantic's generation is most of a
    server's start (26 tools: ~0.25 s CPU; every test server starts them again). Never hand
    out what is remembered: callers get deep copies."""
    if models and models[0][0] is None:
        return schemas.arguments(models[0][1]), None
    branches = {str(name): schemas.arguments(model) for name, model in models}
    return schemas.published(branches, default=default), schemas.strict(branches)


@functools.cache
def _output_schema(outputs: tuple[type[Output], ...]) -> JsonObject:
    """What :meth:`Tool.output_schema` answers, remembered for the process (as above)."""
    return schemas.output(list(outputs))


def action_of(model: type[BaseModel]) -> str | None:
    """The ``Literal`` value of a model's ``action`` field, if it has one."""
    field = model.model_fields.get("action")
    if field is None:
        return None
    values = typing.get_args(field.annotation)
    if typing.get_origin(field.annotation) is not Literal or len(values) != 1:
        raise TypeError(f"{model.__name__}.action must be one Literal value")
    return str(values[0])


def _invalid(exc: ValidationError) -> InvalidArgument:
    """Arguments the schema let through but the model did not (should not happen: the schema
    is generated from the model). Named like the registry's own refusals."""
    first = exc.errors(include_url=False)[0]
    where = "/".join(str(p) for p in first["loc"]) or None
    message = f"{where or 'arguments'}: {first['msg']}"
    return InvalidArgument(message[:500], field=where) if where else InvalidArgument(message)
