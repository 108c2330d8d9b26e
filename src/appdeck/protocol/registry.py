"""What the server offers: tools, resources, resource templates, prompts and completions.

Each entry is a frozen definition plus an async handler. The tool, resource and prompt
packages fill a :class:`Registry`; the core only reads it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from jsonschema import Draft202012Validator

from appdeck.protocol.arguments import ArgumentCheck
from appdeck.protocol.param_headers import ParamHeaders, read_annotations

if TYPE_CHECKING:
    from appdeck.protocol.context import ToolContext

JsonObject = dict[str, Any]
TaskSupport = Literal["forbidden", "optional", "required"]

ToolHandler = Callable[[JsonObject, "ToolContext"], Awaitable[JsonObject]]
"""Takes the validated arguments, returns a CallToolResult (content, structuredContent...)."""
ResourceReader = Callable[[str, dict[str, str], "ToolContext"], Awaitable[list[JsonObject]]]
"""Takes the URI and the template variables, returns the ``contents`` list."""
ResourceLister = Callable[["ToolContext"], Awaitable[list[JsonObject]]]
"""Returns Resource objects that exist right now (e.g. one per app)."""
PromptRenderer = Callable[[dict[str, str], "ToolContext"], Awaitable[JsonObject]]
"""Takes the arguments, returns the GetPromptResult (description?, messages)."""
Completer = Callable[[str, dict[str, str]], Awaitable[list[str]]]
"""Takes the partial value and the already-resolved arguments, returns candidate values."""


@dataclass(frozen=True, slots=True)
class ToolDef:
    name: str
    description: str
    input_schema: JsonObject
    handler: ToolHandler
    title: str | None = None
    output_schema: JsonObject | None = None
    annotations: JsonObject | None = None
    task_support: TaskSupport = "forbidden"
    scope: str | None = None
    """The base scope a token needs to see and call the tool (None: any caller)."""
    action_scopes: Mapping[str, str] = field(default_factory=dict)
    """For multi-action tools: the scope each ``arguments.action`` needs beyond ``scope``."""
    validate_arguments: bool = True
    meta: JsonObject | None = None
    validation_schema: JsonObject | None = None
    """The schema arguments are checked against, when stricter than the published
    ``input_schema`` (per-action ``oneOf`` branches; see ``appdeck.tools.kit``)."""
    validator: ArgumentCheck | None = field(default=None, compare=False)
    param_headers: ParamHeaders = field(default_factory=dict, compare=False)
    """Arguments a stateless client repeats in ``Mcp-Param-*`` headers (``x-mcp-header``)."""
    before_task: ToolHandler | None = field(default=None, compare=False)
    """For a task of the tasks extension: runs in the ``tools/call`` request before the task
    exists, where asking the client ends the request with ``input_required`` (MRTR rounds);
    returns the arguments the task then runs with (validated as usual). For what must be
    settled before long work starts: a missing argument, a confirmation."""

    def wire(self) -> JsonObject:
        body: JsonObject = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.title:
            body["title"] = self.title
        if self.output_schema is not None:
            body["outputSchema"] = self.output_schema
        if self.annotations is not None:
            body["annotations"] = self.annotations
        if self.task_support != "forbidden":
            body["execution"] = {"taskSupport": self.task_support}
        if self.meta is not None:
            body["_meta"] = self.meta
        return body


@dataclass(frozen=True, slots=True)
class ResourceDef:
    uri: str
    name: str
    reader: ResourceReader
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    scope: str | None = None

    def wire(self) -> JsonObject:
        return _described({"uri": self.uri, "name": self.name}, self)


def _described(body: JsonObject, item: ResourceDef | ResourceTemplateDef) -> JsonObject:
    """Add the optional display fields shared by resources and resource templates."""
    if item.title:
        body["title"] = item.title
    if item.description:
        body["description"] = item.description
    if item.mime_type:
        body["mimeType"] = item.mime_type
    return body


_VAR = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class ResourceTemplateDef:
    """A family of resources named by an RFC 6570 level-1 template, e.g. ``x://a/{id}``."""

    uri_template: str
    name: str
    reader: ResourceReader
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    scope: str | None = None
    pattern: re.Pattern[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        parts: list[str] = []
        pos = 0
        for m in _VAR.finditer(self.uri_template):
            parts.append(re.escape(self.uri_template[pos : m.start()]))
            parts.append(f"(?P<{m.group(1)}>[^/?#]+)")
            pos = m.end()
        parts.append(re.escape(self.uri_template[pos:]))
        object.__setattr__(self, "pattern", re.compile("".join(parts) + r"\Z"))

    @property
    def variables(self) -> list[str]:
        return _VAR.findall(self.uri_template)

    def match(self, uri: str) -> dict[str, str] | None:
        m = self.pattern.match(uri)
        return m.groupdict() if m else None

    def wire(self) -> JsonObject:
        return _described({"uriTemplate": self.uri_template, "name": self.name}, self)


@dataclass(frozen=True, slots=True)
class PromptArgument:
    name: str
    description: str | None = None
    required: bool = False

    def wire(self) -> JsonObject:
        body: JsonObject = {"name": self.name, "required": self.required}
        if self.description:
            body["description"] = self.description
        return body


@dataclass(frozen=True, slots=True)
class PromptDef:
    name: str
    renderer: PromptRenderer
    description: str | None = None
    title: str | None = None
    arguments: Sequence[PromptArgument] = ()
    scope: str | None = None

    def wire(self) -> JsonObject:
        body: JsonObject = {"name": self.name}
        if self.title:
            body["title"] = self.title
        if self.description:
            body["description"] = self.description
        if self.arguments:
            body["arguments"] = [a.wire() for a in self.arguments]
        return body


class Registry:
    """The server's catalogue. Filled once at start-up; read on every list/call."""

    def __init__(self) -> None:
        self.tools: dict[str, ToolDef] = {}
        self.resources: dict[str, ResourceDef] = {}
        self.templates: list[ResourceTemplateDef] = []
        self.listers: list[tuple[str | None, ResourceLister]] = []
        self.prompts: dict[str, PromptDef] = {}
        self.completers: dict[tuple[str, str, str], Completer] = {}

    def add_tool(self, tool: ToolDef, *, schemas_checked: bool = False) -> ToolDef:
        """Add ``tool``, its input and validation schemas checked against Draft 2020-12's
        meta-schema (:func:`check_schema`) unless ``schemas_checked``: the built-in tools'
        schemas are fixed by their code and checked by the test suite
        (``tests/tools/test_schemas.py``), which spares every server start ~0.2 s of CPU."""
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        if not schemas_checked:
            check_schema(tool.input_schema)
            if tool.validation_schema is not None:
                check_schema(tool.validation_schema)
        if tool.validate_arguments and tool.validator is None:
            tool = _with_validator(tool)
        annotated = read_annotations(tool.input_schema)
        if annotated:
            tool = replace(tool, param_headers=annotated)
        self.tools[tool.name] = tool
        return tool

    def add_resource(self, resource: ResourceDef) -> None:
        self.resources[resource.uri] = resource

    def add_template(self, template: ResourceTemplateDef) -> None:
        self.templates.append(template)

    def add_lister(self, lister: ResourceLister, scope: str | None = None) -> None:
        self.listers.append((scope, lister))

    def add_prompt(self, prompt: PromptDef) -> None:
        self.prompts[prompt.name] = prompt

    def add_completer(self, ref_type: str, ref_name: str, argument: str, fn: Completer) -> None:
        """``ref_type`` is ``ref/prompt`` (name) or ``ref/resource`` (URI template)."""
        self.completers[(ref_type, ref_name, argument)] = fn

    def find_template(self, uri: str) -> tuple[ResourceTemplateDef, dict[str, str]] | None:
        for template in self.templates:
            variables = template.match(uri)
            if variables is not None:
                return template, variables
        return None


MAX_CHECKED: Final = 4096
"""Schemas remembered as valid (:func:`check_schema`); past it the memory starts again."""
_checked: set[str] = set()


def check_schema(schema: Any) -> None:
    """Draft 2020-12's meta-schema check (:class:`~jsonschema.exceptions.SchemaError` when the
    schema is not one), done once per distinct schema in a process. The check is ~40 % of a
    server's start (130 tools: 0.19 s of 0.45 s CPU), and every server a process starts
    registers the same schemas again (each test's). A schema of plain JSON values
    (exact ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``, ``bool``, ``None``) is
    remembered by its ``repr``, which tells all of them apart (``1``, ``1.0``, ``True``,
    ``'1'``; a list from a tuple); any other schema is checked every time."""
    key = repr(schema) if _plain(schema) else None
    if key is not None and key in _checked:
        return
    Draft202012Validator.check_schema(schema)
    if key is None:
        return
    if len(_checked) >= MAX_CHECKED:
        _checked.clear()
    _checked.add(key)


_SCALARS: Final = (str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return kind in _SCALARS


def _with_validator(tool: ToolDef) -> ToolDef:
    from dataclasses import replace

    return replace(tool, validator=ArgumentCheck(tool.validation_schema or tool.input_schema))
