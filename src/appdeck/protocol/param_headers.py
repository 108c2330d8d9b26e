"""Tool parameters mirrored into HTTP headers (MCP 2026-07-28, SEP-2243 ``x-mcp-header``).

A tool may mark a top-level ``inputSchema`` property of type string, integer or boolean with
``"x-mcp-header": "<Name>"``; a stateless client then repeats that argument in the header
``Mcp-Param-<Name>`` (a gateway can route on it without reading the body). The server checks
the header against the body: a value in the body needs its header, equal after decoding
(``=?base64?…?=``; integers compare as numbers, booleans as ``true``/``false``), or the call is
refused with ``-32020``. An argument that is absent or null expects no header.

The annotations are read once, at registration, and refused there when they break the rules
(a name that is not an HTTP token, two names equal but for case, another type, or a nested
property: AppDeck supports top-level properties only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from appdeck.protocol.envelope import header_value
from appdeck.protocol.errors import HeaderMismatch

ANNOTATION: Final = "x-mcp-header"
PREFIX: Final = b"mcp-param-"
_TOKEN: Final = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}$")
_TYPES: Final = frozenset({"string", "integer", "boolean"})

ParamHeaders = Mapping[str, tuple[str, str]]
"""A tool's annotated parameters: header name (lower case, after ``Mcp-Param-``) →
(property, JSON type)."""


def read_annotations(schema: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The annotated parameters of an input schema; ``ValueError`` when an annotation breaks
    the rules (found at start-up, not by a client)."""
    found: dict[str, tuple[str, str]] = {}
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return found
    for prop, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        _refuse_nested(spec, f"properties.{prop}")
        name = spec.get(ANNOTATION)
        if name is None:
            continue
        kind = spec.get("type")
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise ValueError(f"{ANNOTATION} of {prop!r} must be an HTTP token")
        if kind not in _TYPES:
            raise ValueError(f"{ANNOTATION} of {prop!r}: only string, integer or boolean")
        if name.lower() in found:
            raise ValueError(f"{ANNOTATION} {name!r} is used twice (names ignore case)")
        found[name.lower()] = (prop, str(kind))
    return found


def _refuse_nested(spec: Mapping[str, Any], where: str) -> None:
    for key, value in spec.items():
        if isinstance(value, dict):
            if ANNOTATION in value:
                raise ValueError(
                    f"{ANNOTATION} is supported on top-level properties only ({where})"
                )
            _refuse_nested(value, f"{where}.{key}")
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _refuse_nested(item, f"{where}.{key}")


def collect(headers: Mapping[bytes, bytes]) -> dict[str, bytes]:
    """The ``Mcp-Param-*`` headers of a request, by lower-case name after the prefix (the
    HTTP server bounds how many headers a request has)."""
    return {
        name[len(PREFIX) :].decode("latin-1"): value
        for name, value in headers.items()
        if name.startswith(PREFIX)
    }


def _same(kind: str, body: object, text: str) -> bool:
    if kind == "boolean":
        return isinstance(body, bool) and text == ("true" if body else "false")
    if kind == "integer":
        if isinstance(body, bool) or not isinstance(body, int | float):
            return False
        try:
            return float(text) == float(body) and len(text) <= 40
        except ValueError:
            return False
    return isinstance(body, str) and text == body


def check(annotated: ParamHeaders, arguments: Mapping[str, Any], sent: Mapping[str, bytes]) -> None:
    """Refuse (``-32020``) a call whose ``Mcp-Param-*`` headers do not repeat its arguments."""
    for name, (prop, kind) in annotated.items():
        value = arguments.get(prop)
        if value is None:
            continue  # nothing to repeat; a header sent anyway is ignored
        raw = sent.get(name)
        if raw is None:
            raise HeaderMismatch(f"the Mcp-Param-{name} header is required ({prop} is set)")
        text = header_value(raw)
        if text is None or not _same(kind, value, text):
            raise HeaderMismatch(f"the Mcp-Param-{name} header does not match arguments.{prop}")
