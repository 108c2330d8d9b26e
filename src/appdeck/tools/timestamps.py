"""ISO 8601 beside every Unix timestamp a tool returns.

Results keep their timestamps as Unix seconds (``created_at: 1764165842.1``: easy to compare
and subtract) and gain ``created_at_iso: "2026-11-26T14:04:02.100Z"`` beside each, for a model
or a person reading them. A field is a timestamp when it is named ``at`` or ``*_at`` and holds
a number; the output schema declares each ``*_iso`` twin (:func:`declare`), the result carries
it (:func:`add_iso`).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

JsonObject = dict[str, Any]
ISO: JsonObject = {"type": "string", "format": "date-time", "description": "The same, ISO 8601."}
"""The schema of an ``*_iso`` twin."""
_LATEST = 253402300799.0  # 9999-12-31T23:59:59Z: past it (or before 0) no ISO form


def _stamped(name: str) -> bool:
    return name == "at" or name.endswith("_at")


def iso(seconds: float) -> str | None:
    if not 0 <= seconds <= _LATEST:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def add_iso(node: Any) -> Any:
    """``node`` with an ``<name>_iso`` beside each numeric timestamp, in every nested object."""
    if isinstance(node, list):
        return [add_iso(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: JsonObject = {}
    for key, value in node.items():
        out[key] = add_iso(value)
        if _stamped(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{key}_iso"] = iso(float(value))
        elif _stamped(key) and value is None:
            out[f"{key}_iso"] = None
    return out


def _numeric(schema: Any) -> bool | None:
    """True: a number; None: a number or null; False: something else."""
    if not isinstance(schema, dict):
        return False
    if schema.get("type") in ("number", "integer"):
        return True
    branches = schema.get("anyOf")
    if isinstance(branches, list):
        kinds = {b.get("type") for b in branches if isinstance(b, dict)}
        if kinds and kinds <= {"number", "integer", "null"} and kinds & {"number", "integer"}:
            return None if "null" in kinds else True
    return False


def declare(schema: JsonObject, iso: JsonObject = ISO) -> JsonObject:
    """An output schema with an ``<name>_iso`` property beside each timestamp property, declared
    as ``iso`` (a ``$ref`` to a shared :data:`ISO`, or :data:`ISO` itself)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: walk(value) for key, value in node.items()}
        props = out.get("properties")
        if isinstance(props, dict):
            for name, sub in list(props.items()):
                kind = _numeric(sub) if _stamped(name) else False
                if kind is True:
                    props[f"{name}_iso"] = copy.deepcopy(iso)
                elif kind is None:
                    props[f"{name}_iso"] = {"anyOf": [copy.deepcopy(iso), {"type": "null"}]}
        return out

    result: JsonObject = walk(schema)
    return result
