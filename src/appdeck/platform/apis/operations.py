"""An OpenAPI document's operations: list them, find one by its template or a concrete path
(without regular expressions: nothing backtracks), and resolve one with its ``$ref``s."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from appdeck.platform.apis.refs import (
    CUT,
    METHODS,
    RESOLVE_DEPTH,
    RESOLVE_NODES,
    Json,
    pointer,
)

# -- operations -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    """Upper case: GET, POST, ..."""
    path: str
    """The template as the document writes it: ``/items/{item_id}``."""
    operation_id: str | None
    summary: str | None

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"


def path_items(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    paths = document.get("paths")
    if not isinstance(paths, dict):
        return
    for path, item in paths.items():
        seen: set[str] = set()
        while isinstance(item, dict) and isinstance(item.get("$ref"), str):
            ref = item["$ref"]
            if ref in seen:
                break
            seen.add(ref)
            try:
                item = pointer(document, ref)
            except KeyError:
                break
        if isinstance(item, dict):
            yield path, item


def operations(document: dict[str, Any]) -> list[Operation]:
    found = []
    for path, item in path_items(document):
        for method in METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                found.append(
                    Operation(method.upper(), path, _text(op, "operationId"), _text(op, "summary"))
                )
    return found


def _text(op: dict[str, Any], key: str) -> str | None:
    value = op.get(key)
    return value if isinstance(value, str) else None


def find_operation(document: dict[str, Any], method: str, path: str) -> Operation | None:
    """The operation ``method path``: ``path`` the template as written (``/items/{item_id}``)
    or a concrete path matching one (``/items/5``; literal templates first, then those with
    the most literal characters). A parameter never matches a value that is empty, holds a
    ``/`` or ``\\`` (encoded or not), or is a dot segment: such a path is not found."""
    wanted = method.upper()
    ops = [op for op in operations(document) if op.method == wanted]
    for op in ops:
        if op.path == path:
            return op
    candidates = []
    for op in ops:
        values = match_path(op.path, path)
        if values is not None:
            literal = len(_PARAM.sub("", op.path))
            candidates.append((-literal, len(values), op.path, op))
    return min(candidates, key=lambda c: c[:3])[-1] if candidates else None


_PARAM: Final = re.compile(r"\{[^}/]*\}")
MAX_MATCH_CHARS: Final = 8192


def match_path(template: str, path: str) -> dict[str, str] | None:
    """The path parameters when ``path`` matches ``template``, else None. Segment by segment:
    a ``{name}`` segment takes any one segment; a segment mixing text and parameters takes at
    most two parameters with text between them (read by finding the text: nothing can
    backtrack). Values are as written in ``path`` (still percent-encoded)."""
    if template == path:
        return {}
    wanted, given = template.split("/"), path.split("/")
    if len(path) > MAX_MATCH_CHARS or len(wanted) != len(given):
        return None
    values: dict[str, str] = {}
    for pattern, segment in zip(wanted, given, strict=True):
        names = [name[1:-1] for name in _PARAM.findall(pattern)]
        if not names:
            if pattern != segment:
                return None
            continue
        found = _segment(_PARAM.split(pattern), segment)
        if found is None or len(found) != len(names):
            return None
        for name, value in zip(names, found, strict=True):
            plain = unquote(value)
            if "/" in plain or "\\" in plain or plain in (".", ".."):
                return None
            values[name] = value
    return values


def _segment(texts: list[str], segment: str) -> list[str] | None:
    """The parameter values of one segment: ``texts`` are the literal parts around them (one
    more than the parameters)."""
    head, tail = texts[0], texts[-1]
    if len(texts) > 3 or any(not t for t in texts[1:-1]):
        return None  # adjacent or many parameters: ambiguous, only the template matches
    if len(segment) < len(head) + len(tail) or not segment.startswith(head):
        return None
    if not segment.endswith(tail):
        return None
    middle = segment[len(head) : len(segment) - len(tail)]
    if len(texts) == 2:
        return [middle] if middle else None
    at = middle.find(texts[1], 1)
    while at != -1:
        first, second = middle[:at], middle[at + len(texts[1]) :]
        if second:
            return [first, second]
        at = middle.find(texts[1], at + 1)
    return None


# -- resolving one operation ----------------------------------------------------------------


def resolve_operation(document: dict[str, Any], op: Operation) -> dict[str, Any]:
    """The operation object with its refs expanded: ``method``, ``path``, then its own fields
    (``requestBody``, ``responses``, ...), ``parameters`` merged with the path's. A ref that
    points back into itself, or past :data:`RESOLVE_NODES` values, is left as a marker
    ``{"x-appdeck-cut": "recursive" | "size", "ref": "#/..."}``."""
    item = dict(path_items(document)).get(op.path, {})
    raw = item.get(op.method.lower())
    if not isinstance(raw, dict):
        raise KeyError(op.key)
    resolver = _Resolver(document)
    resolved = resolver.expand(raw, (), 0)
    merged: dict[tuple[str, str], Json] = {}
    for source in (item.get("parameters"), raw.get("parameters")):
        for param in resolver.expand(source, (), 0) if isinstance(source, list) else []:
            if isinstance(param, dict):
                merged[(str(param.get("name")), str(param.get("in")))] = param
    out: dict[str, Any] = {"method": op.method, "path": op.path}
    out.update(resolved)
    if merged:
        out["parameters"] = list(merged.values())
    return out


class _Resolver:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.nodes = 0

    def expand(self, value: Json, stack: tuple[str, ...], depth: int) -> Json:
        self.nodes += 1
        if isinstance(value, list):
            return [self.expand(v, stack, depth + 1) for v in value]
        if not isinstance(value, dict):
            return value
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            if ref in stack:
                return {CUT: "recursive", "ref": ref}
            if self.nodes > RESOLVE_NODES or depth > RESOLVE_DEPTH:
                return {CUT: "size", "ref": ref}
            try:
                target = pointer(self.document, ref)
            except KeyError:
                return {CUT: "missing", "ref": ref}
            expanded = self.expand(target, (*stack, ref), depth + 1)
            siblings = {
                k: self.expand(v, stack, depth + 1) for k, v in value.items() if k != "$ref"
            }
            if siblings and isinstance(expanded, dict):
                return {**expanded, **siblings}
            return expanded
        return {k: self.expand(v, stack, depth + 1) for k, v in value.items()}
