"""JSON Schemas generated from a tool's pydantic models, in the forms clients take.

- **Inputs, per action** (:func:`arguments`): pydantic's schema, inlined (no ``$ref``), without
  the generated titles, and an optional argument is just its type (pydantic would say
  ``anyOf [X, null]``: a caller leaves it out, it does not send null).
- **Inputs, validated** (:func:`strict`): one ``oneOf`` branch per action, each listing its
  required fields; the registry checks arguments against it (``appdeck.protocol.arguments``).
- **Inputs, published** (:func:`published`): one flat object, ``action`` an enum whose
  description says what each action needs, each argument's description saying which actions
  take it. A root ``oneOf``/``anyOf`` makes Claude (API and Code), OpenAI, Bedrock and Vertex
  refuse the tool, or the whole server's tool list (docs/decisions.md, "Tool schemas").
- **Outputs** (:func:`output`): the properties of every action's result, ``error`` (the shape
  of ``isError`` results) among them, and an ``anyOf`` of required sets: each action's, or
  ``error``. So every result, error results included, validates against the outputSchema in
  the TypeScript SDK (which validates error results too) and the Python SDK. Nullable fields
  are ``anyOf [X, null]``, never ``type: [X, "null"]``. Compact (issue 22): a result model used
  more than once in a tool's results is written once in the schema's own ``$defs`` (``$ref``
  ``#/$defs/Name``; the schema stays self-contained), and so is the ISO 8601 twin of every
  timestamp (``#/$defs/iso``); a model used once is inlined.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel

from appdeck.common.errors import ERROR_SCHEMA
from appdeck.tools import timestamps

JsonObject = dict[str, Any]

_SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties", "propertyNames", "not", "contains")


def arguments(model: type[BaseModel]) -> JsonObject:
    """The input schema of one action (or of a tool without actions)."""
    schema = _clean(_inline(model.model_json_schema(mode="validation")), output=False)
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        if name not in required:
            schema["properties"][name] = _optional(sub)
    return schema


def strict(branches: Mapping[str, JsonObject]) -> JsonObject:
    """The validated input schema of a multi-action tool."""
    return {"type": "object", "oneOf": list(branches.values())}


def published(
    branches: Mapping[str, JsonObject], key: str = "action", default: str | None = None
) -> JsonObject:
    """The input schema tools/list shows for a multi-action tool (see the module docstring);
    with ``default``, ``key`` may be left out (that action runs). Raises ValueError when two
    actions declare one argument differently."""
    names = list(branches)
    users: dict[str, list[str]] = {}
    props: dict[str, JsonObject] = {}
    for action, branch in branches.items():
        for name, sub in branch.get("properties", {}).items():
            if name == key:
                continue
            users.setdefault(name, []).append(action)
            if name in props and _bare(props[name]) != _bare(sub):
                raise ValueError(f"argument {name!r} is declared differently by two actions")
            props.setdefault(name, copy.deepcopy(sub))
    required_everywhere = set.intersection(*(set(b.get("required", ())) for b in branches.values()))
    lines = []
    for action, branch in branches.items():
        needs = [n for n in branch.get("required", ()) if n not in required_everywhere | {key}]
        lines.append(
            f"{action}: {_summary(branch)}" + (f" Needs {', '.join(needs)}." if needs else "")
        )
    for name, sub in props.items():
        if len(users[name]) < len(names):
            said = str(sub.get("description") or "")
            if not said.startswith("("):  # the field already says which actions use it
                sub["description"] = f"({', '.join(users[name])}) {said}".strip()
    choice: JsonObject = {"type": "string", "enum": names, "description": " ".join(lines)}
    if default is not None:
        choice["default"] = default
    schema: JsonObject = {
        "type": "object",
        "properties": {key: choice, **props},
        "required": ([] if default is not None else [key]) + sorted(required_everywhere - {key}),
        "additionalProperties": False,
    }
    return schema


def _summary(branch: JsonObject) -> str:
    """An action's summary: the first paragraph of its description on one line, without a
    "Needs …" sentence of its own (the generated one names what the action requires)."""
    first = str(branch.get("description", "")).strip().split("\n\n")[0]
    return _NEEDS.sub("", " ".join(first.split())).strip()


_NEEDS: Final = re.compile(r"\s*Needs [^.]*\.")


def output(models: list[type[BaseModel]]) -> JsonObject:
    """The outputSchema of a tool whose actions return ``models``."""
    props: dict[str, JsonObject] = {}
    defs: dict[str, JsonObject] = {}
    required_sets: list[list[str]] = []
    for model in models:
        schema = _clean(model.model_json_schema(mode="serialization"), output=True)
        for name, sub in schema.pop("$defs", {}).items():
            if name in defs and defs[name] != sub:
                raise ValueError(f"result model {name!r} is declared differently by two actions")
            defs[name] = sub
        for name, sub in schema.get("properties", {}).items():
            if name in props and _bare(props[name]) != _bare(sub):
                raise ValueError(f"result field {name!r} is declared differently by two actions")
            props.setdefault(name, sub)
        needed = list(schema.get("required", ()))
        if needed not in required_sets:
            required_sets.append(needed)
    props["error"] = copy.deepcopy(ERROR_SCHEMA)
    body: JsonObject = {
        "type": "object",
        "properties": props,
        "anyOf": [*({"required": r} for r in required_sets), {"required": ["error"]}],
    }
    return _shared(body, defs)


def _shared(body: JsonObject, defs: dict[str, JsonObject]) -> JsonObject:
    """``body`` with the ISO twins declared and each of ``defs`` inlined where it is used once
    (or never), kept in ``$defs`` where it is used more than once."""
    uses: dict[str, int] = {}

    def count(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                count(item)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(_DEFS):
                name = ref.removeprefix(_DEFS)
                uses[name] = uses.get(name, 0) + 1
                if uses[name] == 1:
                    count(defs[name])  # what a def refers to is used once per def
            for value in node.values():
                count(value)

    count(body)
    kept = {name: sub for name, sub in defs.items() if uses.get(name, 0) > 1}
    inlined = _inline({**body, "$defs": {k: v for k, v in defs.items() if k not in kept}})
    kept = {
        name: _inline({**sub, "$defs": {k: v for k, v in defs.items() if k not in kept}})
        for name, sub in kept.items()
    }
    out = timestamps.declare({**inlined, "$defs": kept}, iso={"$ref": f"{_DEFS}iso"})
    if f'"{_DEFS}iso"' in json.dumps(out):
        out["$defs"]["iso"] = copy.deepcopy(timestamps.ISO)
    if not out["$defs"]:
        del out["$defs"]
    return out


_DEFS: Final = "#/$defs/"


def _optional(schema: JsonObject) -> JsonObject:
    """``anyOf [X, null]`` → X, keeping the description; no ``default: null``."""
    body = dict(schema)
    if body.get("default", 0) is None:
        body.pop("default")
    options = body.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        body.pop("anyOf")
        if len(rest) == 1:
            return {**rest[0], **body}
        body["anyOf"] = rest
    return body


def _bare(schema: JsonObject) -> JsonObject:
    return {k: v for k, v in schema.items() if k not in ("description", "default")}


def _inline(schema: JsonObject) -> JsonObject:
    """Replace every ``{"$ref": "#/$defs/X"}`` by X when X is in the schema's ``$defs``: input
    schemas are inlined whole (several clients cannot follow refs in what they send)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.removeprefix("#/$defs/") in defs:
            target = walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]))
            return {**target, **{k: walk(v) for k, v in node.items() if k != "$ref"}}
        return {k: walk(v) for k, v in node.items()}

    out: JsonObject = walk(schema)
    return out


def _clean(schema: JsonObject, *, output: bool) -> JsonObject:
    """Drop what pydantic generates for people reading Python (titles); on outputs also
    ``additionalProperties`` (false: a result may grow fields; true: the default) and
    defaults."""

    def walk(node: JsonObject) -> JsonObject:
        out: JsonObject = {}
        for key, value in node.items():
            if key == "title" and isinstance(value, str):
                continue
            if output and key == "default":
                continue
            if output and key == "additionalProperties" and isinstance(value, bool):
                continue
            if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
                out[key] = {k: walk(v) if isinstance(v, dict) else v for k, v in value.items()}
            elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
                out[key] = [walk(v) if isinstance(v, dict) else v for v in value]
            elif key in _SUBSCHEMAS and isinstance(value, dict):
                out[key] = walk(value)
            else:
                out[key] = value
        return out

    return walk(schema)
