"""Checking a tool's arguments, and saying what is wrong in words a model can act on: the
field, and what it should be.

A schema whose root is a ``oneOf`` of objects that all pin one property to a ``const`` (the
per-action branches of a multi-action tool, ``action``) is checked as a *discriminated
union*: the branch is picked by that property and only its errors are reported, so
``{"action": "grant"}`` without ``user`` is "user is required for grant", not jsonschema's
"is not valid under any of the given schemas". The compiled fast check answers first (see
:mod:`appdeck.protocol.validation`); ``jsonschema`` words the errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from appdeck.protocol.validation import Check, Validator, compile_check

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Problem:
    """Why arguments were refused. ``field`` is a ``/``-separated path (None: the whole)."""

    field: str | None
    message: str


@dataclass(frozen=True, slots=True)
class _Branch:
    fast: Check | None
    validator: Draft202012Validator

    def problem(self, arguments: Any) -> Problem | None:
        if self.fast is not None and self.fast(arguments):
            return None
        return _first(self.validator.iter_errors(arguments))


class ArgumentCheck:
    """A tool's argument check, built once at registration."""

    __slots__ = ("_branches", "_default", "_key", "_whole")

    def __init__(self, schema: JsonObject) -> None:
        self._whole = _Branch(compile_check(schema), Validator(schema))
        found = discriminator(schema)
        self._key: str | None = None
        self._default: Any = None
        self._branches: dict[Any, _Branch] = {}
        if found is not None:
            self._key, branches = found
            self._default = _default_of(schema, self._key)
            self._branches = {
                value: _Branch(compile_check(sub), Validator(sub))
                for value, sub in branches.items()
            }

    def problem(self, arguments: Any) -> Problem | None:
        """None when ``arguments`` fit the schema."""
        if self._key is None:
            return self._whole.problem(arguments)
        key = self._key
        if not isinstance(arguments, dict):
            return Problem(None, "the arguments must be an object")
        chosen = arguments.get(key, self._default)
        branch = self._branches.get(chosen) if isinstance(chosen, str) else None
        if branch is None:
            choices = ", ".join(str(v) for v in self._branches)
            if key not in arguments:
                return Problem(key, f"{key} is required: one of {choices}")
            return Problem(key, f"{key} {str(chosen)[:60]!r} is not one of {choices}")
        found = branch.problem(arguments)
        if found is None:
            return None
        if key not in arguments:  # the default action's: unless another action's arguments
            for value, other in self._branches.items():
                if value != chosen and other.problem({**arguments, key: value}) is None:
                    return Problem(key, f"{key} is required for these arguments: {value}?")
        return Problem(found.field, f"{key} {chosen}: {found.message}")


def discriminator(schema: Mapping[str, Any]) -> tuple[str, dict[Any, JsonObject]] | None:
    """``(property, {value: branch})`` when ``schema`` is a root ``oneOf`` of object branches
    that each pin the same required property to a distinct ``const``."""
    branches = schema.get("oneOf")
    if not isinstance(branches, list) or not branches:
        return None
    keys: set[str] | None = None
    for branch in branches:
        pinned = {  # required, or defaulting to its const (the action a call without it runs)
            name
            for name, sub in (branch.get("properties") or {}).items()
            if isinstance(sub, dict)
            and "const" in sub
            and (name in branch.get("required", ()) or sub.get("default") == sub["const"])
        }
        keys = pinned if keys is None else keys & pinned
    if not keys:
        return None
    key = sorted(keys)[0]
    out = {b["properties"][key]["const"]: b for b in branches}
    return (key, out) if len(out) == len(branches) else None


def _default_of(schema: Mapping[str, Any], key: str) -> Any:
    """The ``key`` a call without it gets: the const of the one branch that defaults to it."""
    for branch in schema.get("oneOf") or ():
        sub = (branch.get("properties") or {}).get(key)
        if isinstance(sub, dict) and key not in branch.get("required", ()):
            return sub.get("const")
    return None


def _first(errors: Iterable[ValidationError]) -> Problem | None:
    error = next(iter(errors), None)
    if error is None:
        return None
    path = [str(p) for p in error.absolute_path]
    instance = error.instance
    if error.validator == "required" and isinstance(instance, dict):
        wanted = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [str(n) for n in wanted if n not in instance]
        name = "/".join([*path, missing[0]]) if missing else "/".join(path)
        return Problem(name, f"{name} is required")
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(str(k) for k in instance if k not in known)
        if extra:
            name = "/".join([*path, extra[0]])
            accepted = ", ".join(sorted(str(k) for k in known))
            owner = "this object" if path else "this tool (or this action)"
            return Problem(
                name[:100],
                f"{name[:100]} is not an argument of {owner}; it takes {accepted or 'none'}",
            )
    where = "/".join(path) or None
    return Problem(where, f"{where or 'arguments'}: {_reason(error)}")


_EXCERPT = 60
"""How much of a refused value a message repeats (characters of its repr)."""


def _reason(error: ValidationError) -> str:
    """What is wrong, first, and at most a short excerpt of the value (jsonschema's own
    words start with the whole value: a 1,001-row batch, a 5,000-character name)."""
    instance, limit = error.instance, error.validator_value
    size = len(instance) if isinstance(instance, list | str | dict) else None
    unit = (
        "items"
        if isinstance(instance, list)
        else "characters"
        if isinstance(instance, str)
        else "properties"
    )
    if error.validator in ("maxItems", "maxLength", "maxProperties") and size is not None:
        return f"at most {limit} {unit}, got {size}"
    if error.validator in ("minItems", "minLength", "minProperties") and size is not None:
        return f"at least {limit} {unit}, got {size}"
    shown = repr(instance)
    if len(shown) <= _EXCERPT or shown not in error.message:
        return error.message
    reason = error.message.replace(shown, "the value").strip()
    return f"{reason} (the value: {shown[:_EXCERPT]}…)"
