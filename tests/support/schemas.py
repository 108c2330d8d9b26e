"""Hypothesis strategies for JSON values that fit a JSON Schema (the subset the tools' schemas
use), with hand-picked values for named properties so calls reach past "no such app"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

Strategy = st.SearchStrategy[Any]


def values(schema: Any, picks: Mapping[str, Strategy] | None = None) -> Strategy:
    """Values valid under ``schema``; ``picks`` overrides the strategy of a property by name
    (its values are still filtered through the schema)."""
    validator = Draft202012Validator(schema)
    return _values(schema, dict(picks or {})).filter(validator.is_valid)


def _values(schema: Any, picks: dict[str, Strategy]) -> Strategy:
    if schema is True or schema == {}:
        return st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=5)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("oneOf", "anyOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k != key}
            return st.one_of([_values({**rest, **branch}, picks) for branch in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_values({**schema, "type": k}, picks) for k in kind])
    if kind == "object" or "properties" in schema:
        return _object(schema, picks)
    if kind == "array":
        return st.lists(
            _values(schema.get("items", {}), picks),
            min_size=schema.get("minItems", 0),
            max_size=min(schema.get("maxItems", 3), 3),
        )
    if kind == "string" or (kind is None and "pattern" in schema):
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(
                lambda s: len(s) <= schema.get("maxLength", 10**6)
            )
        return st.text(
            min_size=schema.get("minLength", 0), max_size=min(schema.get("maxLength", 12), 12)
        )
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -5))
        high = schema.get("maximum", min(low + 100, 10**6))
        if kind == "integer":
            return st.integers(int(low), int(high))
        return st.floats(float(low), float(min(high, low + 3)), allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    raise NotImplementedError(schema)


def _object(schema: Mapping[str, Any], picks: dict[str, Strategy]) -> Strategy:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))

    def pick(name: str, sub: Any) -> Strategy:
        return picks[name] if name in picks else _values(sub, picks)

    fields = {n: pick(n, s) for n, s in props.items() if n in required}
    optional = {n: pick(n, s) for n, s in props.items() if n not in required}
    base = st.fixed_dictionaries(fields, optional=optional)
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, dict):
        names = schema.get("propertyNames", {"type": "string"})
        more = st.dictionaries(_values(names, picks), _values(extra, picks), max_size=2)
        return st.tuples(base, more).map(lambda pair: {**pair[1], **pair[0]})
    return base
