"""Tool argument validation: a compiled fast check for the common schema shapes, with the
``jsonschema`` library as the authority.

``jsonschema`` costs ~15 µs per call even for ``{"text": {"type": "string"}}``: a third of a
``tools/call``. :func:`compile_check` turns a schema made only of the keywords below into a
plain Python predicate (~1 µs). When the predicate says "valid" the arguments are valid; when
it says "invalid", or the schema uses any other keyword, ``jsonschema`` decides and words the
error. So the fast path can only ever skip work, never change an answer.

Supported: type (one or a list), properties, required, additionalProperties (a bool or a
schema), propertyNames, minProperties, maxProperties, enum, const, pattern, minLength,
maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum, items, minItems, maxItems,
anyOf, oneOf, and the annotations (title, description, default, examples, $schema...). That
covers the schemas the tools generate, per-action ``oneOf`` branches and the app spec included.

**``pattern`` is ECMA-262's.** JSON Schema patterns are ECMA-262 regexes applied with search,
where ``$`` (no ``m`` flag) matches only at the very end: ``^[a-z]+$`` refuses ``"abc\\n"``.
Python's ``$`` also matches before a final newline, so both this check and :data:`Validator`
(the authority, ``jsonschema`` with this one keyword replaced) read a pattern through
:func:`ecma_pattern`, which turns every ``$`` anchor into ``\\Z``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError

Check = Callable[[Any], bool]

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "contentMediaType",
    }
)
# ``format`` is an annotation in JSON Schema 2020-12 unless a format assertion is enabled,
# which the project's validator does not do: the same answer as jsonschema's default.

_TYPES: dict[str, Check] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def _always(v: Any) -> bool:
    return True


def _never(v: Any) -> bool:
    return False


class Unsupported(Exception):
    """The schema uses a keyword the fast path does not implement."""


def compile_check(schema: Any) -> Check | None:
    """A predicate equivalent to validating against ``schema``, or None if not supported."""
    try:
        return _compile(schema)
    except Unsupported:
        return None


def _compile(schema: Any) -> Check:
    if schema is True or schema == {}:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict):
        raise Unsupported
    checks: list[Check] = []
    for key, value in schema.items():
        if key in ANNOTATIONS or key in ("properties", "required", "additionalProperties"):
            continue  # the object keywords are handled together below
        checks.append(_keyword(key, value))
    if any(k in schema for k in ("properties", "required", "additionalProperties")):
        checks.append(_object(schema))
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # the common case (type + properties): no generator per call
        first, second = checks

        def both(v: Any) -> bool:
            return first(v) and second(v)

        return both

    def every(v: Any) -> bool:
        return all(f(v) for f in checks)

    return every


def _keyword(key: str, value: Any) -> Check:
    """The check of one assertion keyword; raises Unsupported for any other."""
    if key in _SIZES and isinstance(value, int) and not isinstance(value, bool):
        return _size(key, value)
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and _num(value):
        return _bound(key, value)
    if key in ("anyOf", "oneOf") and isinstance(value, list) and value:
        return _combined(key, [_compile(sub) for sub in value])
    build = _KEYWORDS.get(key)
    if build is None:
        raise Unsupported
    return build(value)


def _type(value: Any) -> Check:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(n in _TYPES for n in names):
        raise Unsupported
    tests = [_TYPES[n] for n in names]
    if len(tests) == 1:
        return tests[0]

    def any_type(v: Any) -> bool:
        return any(f(v) for f in tests)

    return any_type


def _enum(value: Any) -> Check:
    if not isinstance(value, list):
        raise Unsupported
    if value and all(isinstance(a, str) for a in value):
        strings = frozenset(value)  # the common case (actions, roles, states): one set lookup

        def string_enum(v: Any) -> bool:
            return isinstance(v, str) and v in strings

        return string_enum
    allowed: list[Any] = value

    def enum(v: Any) -> bool:
        return any(_same(v, a) for a in allowed)

    return enum


def _const(value: Any) -> Check:
    def const(v: Any) -> bool:
        return _same(v, value)

    return const


def _items(value: Any) -> Check:
    item = _compile(value)

    def items(v: Any) -> bool:
        return not isinstance(v, list) or all(item(i) for i in v)

    return items


def ecma_pattern(pattern: str) -> str:
    """``pattern`` with each ``$`` anchor (not escaped, not in a character class) as ``\\Z``:
    the end of the string only, as ECMA-262 reads ``$``."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            # Python takes a ']' first in a class (after an optional '^') as a literal
            if pattern[i : i + 1] == "^":
                out.append("^")
                i += 1
            if pattern[i : i + 1] == "]":
                out.append("]")
                i += 1
            continue
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=512)
def _searcher(pattern: str) -> Callable[[str], re.Match[str] | None]:
    return re.compile(ecma_pattern(pattern)).search


def _pattern_keyword(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _searcher(pattern)(instance):
        shown = repr(instance) if len(instance) <= 60 else f"{instance[:57]!r}…"
        said = schema.get("description") if isinstance(schema, dict) else None
        if isinstance(said, str) and said:  # what the field takes, in words, not a regex
            yield ValidationError(f"{shown} is not allowed here: {said.rstrip('.')}")
        else:
            yield ValidationError(f"{shown} does not match {pattern!r}")


Validator: Any = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, {"pattern": _pattern_keyword}
)
"""Draft 2020-12 with ECMA-262's ``$`` in ``pattern``: the authority for tool arguments."""


def _pattern(value: Any) -> Check:
    if not isinstance(value, str):
        raise Unsupported
    search = _searcher(value)

    def pattern(v: Any) -> bool:
        return not isinstance(v, str) or search(v) is not None

    return pattern


def _property_names(value: Any) -> Check:
    name = _compile(value)

    def names(v: Any) -> bool:
        return not isinstance(v, dict) or all(name(k) for k in v)

    return names


_KEYWORDS: dict[str, Callable[[Any], Check]] = {
    "type": _type,
    "enum": _enum,
    "const": _const,
    "items": _items,
    "pattern": _pattern,
    "propertyNames": _property_names,
}


def _combined(key: str, branches: list[Check]) -> Check:
    if key == "anyOf":

        def any_of(v: Any) -> bool:
            return any(f(v) for f in branches)

        return any_of

    def one_of(v: Any) -> bool:
        return sum(1 for f in branches if f(v)) == 1

    return one_of


_SIZES: dict[str, tuple[type, bool]] = {
    "minLength": (str, True),
    "maxLength": (str, False),
    "minItems": (list, True),
    "maxItems": (list, False),
    "minProperties": (dict, True),
    "maxProperties": (dict, False),
}


def _size(key: str, limit: int) -> Check:
    kind, at_least = _SIZES[key]

    def size(v: Any) -> bool:
        if not isinstance(v, kind):
            return True
        n = len(v) if isinstance(v, (str, list, dict)) else 0
        return n >= limit if at_least else n <= limit

    return size


def _object(schema: dict[str, Any]) -> Check:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list):
        raise Unsupported
    compiled = {name: _compile(sub) for name, sub in props.items()}
    if not isinstance(extra, bool):
        return _object_with_extra(compiled, required, _compile(extra))

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True  # "type" (if any) decides; object keywords ignore other types
        for name in required:
            if name not in value:
                return False
        for name, item in value.items():
            test = compiled.get(name)
            if test is None:
                if not extra:
                    return False
            elif not test(item):
                return False
        return True

    return check


def _object_with_extra(compiled: dict[str, Check], required: list[Any], extra: Check) -> Check:
    """An object whose other properties must each fit a schema (a map of names to values)."""

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if any(name not in value for name in required):
            return False
        return all(compiled.get(name, extra)(item) for name, item in value.items())

    return check


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _bound(key: str, limit: float) -> Check:
    def ok(v: Any) -> bool:
        if not _num(v):
            return True
        if key == "minimum":
            return bool(v >= limit)
        if key == "maximum":
            return bool(v <= limit)
        if key == "exclusiveMinimum":
            return bool(v > limit)
        return bool(v < limit)

    return ok


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and (_num(a) == _num(b))
