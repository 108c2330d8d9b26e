"""OpenAPI documents, pure: parse, check, canonical form, operations, find and resolve one
operation, what changed between two versions, and a result sized for a model.

A document comes from an app (its live release or its repository): hostile data. So:

- at most :data:`MAX_BYTES` raw, UTF-8, no NUL (a raw byte or a ``\\u0000`` in a string);
- JSON (``NaN``/``Infinity`` refused) or YAML read with a loader that refuses anchors and
  aliases (no billion laughs) and keeps dates as written; one document, string keys (an
  integer key, YAML's ``200:``, becomes ``"200"``), nesting at most :data:`MAX_DEPTH` deep;
- an object with ``openapi`` 3.0.x or 3.1.x (Swagger 2.0 is named and refused), at most
  :data:`MAX_PATHS` paths of at most :data:`MAX_PATH_CHARS` characters and
  :data:`MAX_OPERATIONS` operations;
- ``$ref`` (and ``$dynamicRef``, ``$recursiveRef``) local only (``#/...``), each pointing at
  something, no ring of refs pointing only at refs, no ``$id`` (it would move where refs
  point): nothing is ever fetched;
- then openapi-spec-validator (:func:`first_error`, which the catalogue runs in a child
  process with a time and memory cap: its 3.1 meta-schema check is slow on big documents).

Every refusal is an :class:`InvalidArgument` whose message is ours; where the app's text
appears (a key, a value) it is quoted and cut to :data:`QUOTE_CHARS` characters.

Values made from a document (titles, summaries, paths) stay the app's text: callers put them
in results marked untrusted, never in a summary line.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

import yaml

from appdeck.common.errors import InvalidArgument

__all__ = [
    "METHODS",
    "ApiDocument",
    "Changes",
    "Fitted",
    "Operation",
    "diff",
    "find_operation",
    "first_error",
    "fit",
    "load",
    "operations",
    "resolve_operation",
]

MAX_BYTES: Final = 2 * 1024 * 1024
MAX_CANONICAL_BYTES: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 64
MAX_PATHS: Final = 2000
MAX_OPERATIONS: Final = 5000
MAX_PATH_CHARS: Final = 2048
QUOTE_CHARS: Final = 200
METHODS: Final = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
VERSION: Final = re.compile(r"3\.[01]\.\d{1,4}")
REF_KEYS: Final = ("$ref", "$dynamicRef", "$recursiveRef")
RESOLVE_NODES: Final = 50_000
"""How many values one resolved operation holds at most (refs past it are left unexpanded)."""
RESOLVE_DEPTH: Final = 96
CUT: Final = "x-appdeck-cut"
"""The key of the marker that stands for a ``$ref`` not expanded: ``{"x-appdeck-cut":
"recursive", "ref": "#/..."}`` (it points back at itself) or ``"size"`` (over the bound)."""

Json = Any
"""A JSON value: dict, list, str, int, float, bool or None."""


def quote(text: object) -> str:
    """The app's ``text`` shown in one of our messages: quoted, cut."""
    value = str(text)
    if len(value) > QUOTE_CHARS:
        return repr(value[:QUOTE_CHARS]) + "…"
    return repr(value)


# -- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Loaded:
    """A document that passed every check but openapi-spec-validator's."""

    document: dict[str, Any]
    canonical: str
    """Sorted keys, no spaces, UTF-8: what is stored, and what the digest is of."""
    digest: str
    openapi_version: str
    title: str
    api_version: str


def load(raw: bytes, *, kind: str | None = None) -> Loaded:
    """Parse and check ``raw`` (``kind``: ``"json"``, ``"yaml"`` or None to tell by its first
    character); raise :class:`InvalidArgument` saying what is wrong."""
    return prepare(parse(raw, kind=kind))


def prepare(document: dict[str, Any]) -> Loaded:
    """Check a parsed document (:func:`parse`) and make its canonical form."""
    version = check(document)
    text = canonical(document)
    info = document.get("info")
    info = info if isinstance(info, dict) else {}
    return Loaded(
        document,
        text,
        digest(text),
        version,
        str(info.get("title", "")),
        str(info.get("version", "")),
    )


def looks_like_openapi(document: dict[str, Any]) -> bool:
    """Whether a parsed object claims to be an OpenAPI (or Swagger) document."""
    return "openapi" in document or "swagger" in document


def parse(raw: bytes, *, kind: str | None = None) -> dict[str, Any]:
    if len(raw) > MAX_BYTES:
        raise InvalidArgument(f"the document is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    if b"\0" in raw:
        raise InvalidArgument("the document holds a NUL byte")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"the document is not UTF-8 (byte {exc.start})") from None
    if kind is None:
        kind = "json" if text.lstrip().startswith("{") else "yaml"
    value = _json(text) if kind == "json" else _yaml(text)
    value = _clean(value, "", 0)
    if not isinstance(value, dict):
        raise InvalidArgument(f"the document is not an object (a {kind.upper()} mapping)")
    return value


def _refuse_constant(name: str) -> float:
    raise InvalidArgument(f"the document holds {name}, which JSON does not have")


def _json(text: str) -> Json:
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(
            f"the document is not valid JSON (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InvalidArgument(f"the document nests deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # an integer of more digits than Python converts
        raise InvalidArgument("the document holds a number too long to read") from None


class _Loader(yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader):  # type: ignore[misc]
    """Safe, and dates stay the text they were written as (JSON has no date)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _yaml(text: str) -> Json:
    """Two passes: the events (no anchor, no alias, depth bounded: so the composer, which
    recurses, never goes deep), then the values."""
    depth = 0
    scan = _Loader(text)
    try:
        while scan.check_event():
            event = scan.get_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise InvalidArgument(
                    "YAML anchors and aliases are not accepted (line "
                    f"{mark.line + 1 if mark else '?'}): write the values out"
                )
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise InvalidArgument(f"the document nests deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InvalidArgument(f"the document is not valid YAML{where}") from None
    except yaml.YAMLError:
        raise InvalidArgument("the document is not valid YAML") from None
    except ValueError:  # an integer of more digits than Python converts
        raise InvalidArgument("the document holds a number too long to read") from None
    finally:
        scan.dispose()


def _clean(value: Json, where: str, depth: int) -> Json:
    """The value as plain JSON: depth bounded, no NUL, string keys, finite numbers."""
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"the document nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        out: dict[str, Json] = {}
        for key, item in value.items():
            if isinstance(key, int) and not isinstance(key, bool):
                key = str(key)
            if not isinstance(key, str):
                raise InvalidArgument(
                    f"a key under {quote(where or '/')} is not a string: quote it"
                )
            _check_text(key, where)
            out[key] = _clean(item, f"{where}/{key}", depth + 1)
        return out
    if isinstance(value, list):
        return [_clean(item, f"{where}/{n}", depth + 1) for n, item in enumerate(value)]
    if isinstance(value, str):
        _check_text(value, where)
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(f"the value at {quote(where)} is not a finite number")
    if value is None or isinstance(value, bool | int | float):
        return value
    raise InvalidArgument(  # YAML's !!binary, !!set, an explicit !!timestamp
        f"the value at {quote(where or '/')} is not JSON data ({type(value).__name__})"
    )


def _check_text(text: str, where: str) -> None:
    if "\0" in text:
        raise InvalidArgument(f"a string under {quote(where or '/')} holds a NUL character")


def canonical(document: dict[str, Any]) -> str:
    try:
        text = json.dumps(
            document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument("the document holds invalid Unicode (a lone surrogate)") from None
    if size > MAX_CANONICAL_BYTES:
        raise InvalidArgument(f"the document is larger than {MAX_CANONICAL_BYTES} bytes as JSON")
    return text


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- checks before the validator ----------------------------------------------------------


def check(document: dict[str, Any]) -> str:
    """The document's OpenAPI version, once its version, size and refs are acceptable."""
    if "swagger" in document:
        raise InvalidArgument(
            "Swagger 2.0 documents are not supported: publish OpenAPI 3.0 or 3.1",
            hint="convert it (e.g. with swagger2openapi) and serve that instead",
        )
    version = document.get("openapi")
    if version is None:
        raise InvalidArgument("not an OpenAPI document: it has no openapi field")
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        raise InvalidArgument(f"OpenAPI version {quote(version)} is not supported: 3.0.x or 3.1.x")
    paths = document.get("paths")
    if isinstance(paths, dict):
        if len(paths) > MAX_PATHS:
            raise InvalidArgument(f"the document has more than {MAX_PATHS} paths")
        count = 0
        for path, item in paths.items():
            if len(path) > MAX_PATH_CHARS:
                raise InvalidArgument(f"a path is longer than {MAX_PATH_CHARS} characters")
            if isinstance(item, dict):
                count += sum(1 for method in METHODS if method in item)
        if count > MAX_OPERATIONS:
            raise InvalidArgument(f"the document has more than {MAX_OPERATIONS} operations")
    _check_refs(document)
    return version


def _walk(value: Json, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object in ``value`` with its location (a JSON pointer), without recursion."""
    stack: list[tuple[Json, str]] = [(value, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            yield at, node
            stack.extend((v, f"{at}/{_escape(k)}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{at}/{n}") for n, v in enumerate(node))


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _check_refs(document: dict[str, Any]) -> None:
    for at, node in _walk(document):
        if isinstance(node.get("$id"), str):
            raise InvalidArgument(
                f"$id is not accepted (at {quote(at)}): it moves where $refs point"
            )
        for key in REF_KEYS:
            ref = node.get(key)
            if not isinstance(ref, str):
                continue
            if not ref.startswith("#"):
                raise InvalidArgument(
                    f"the {key} at {quote(at)} is not local ({quote(ref)}): only refs "
                    "within the document (#/...) are followed, nothing is fetched"
                )
            _chase(document, ref, at)


def pointer(document: Json, ref: str) -> Json:
    """The value ``ref`` (``#/a/b``, percent-encoded as in a URI) points at; KeyError when it
    points at nothing."""
    return _lookup(document, unquote(ref[1:]))


def _lookup(document: Json, path: str) -> Json:
    if path == "":
        return document
    if not path.startswith("/"):
        raise KeyError(path)
    node = document
    for raw in path[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(path)
    return node


def _chase(document: dict[str, Any], ref: str, at: str) -> None:
    """Follow a chain of refs that point at refs: it must end at something else."""
    seen = [ref]
    while True:
        try:
            target = pointer(document, seen[-1])
        except KeyError:
            raise InvalidArgument(
                f"the $ref at {quote(at)} points at nothing ({quote(seen[-1])})"
            ) from None
        nxt = target.get("$ref") if isinstance(target, dict) else None
        if not isinstance(nxt, str) or not nxt.startswith("#"):
            return
        if nxt in seen:
            ring = " -> ".join([*seen, nxt])
            raise InvalidArgument(f"the $refs at {quote(at)} form a ring: {quote(ring)}")
        seen.append(nxt)


# -- openapi-spec-validator -----------------------------------------------------------------


class _NoFetch(dict[str, Any]):
    """The validator's ref handlers: one for every scheme, refusing. (jsonschema-path falls
    back to urllib for a scheme it has no handler for: an empty dict would fetch.)"""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Any:
        return _refuse_fetch


def _refuse_fetch(uri: str) -> Any:
    raise LookupError("a ref outside the document is never fetched")


def first_error(document: dict[str, Any]) -> tuple[str, str] | None:
    """openapi-spec-validator's first complaint about ``document`` as (where, what), or None.
    Slow on big 3.1 documents (its meta-schema check): the catalogue runs it in a child
    process (:func:`validate_stdio`). No resolver is given any handler: no ref is fetched."""
    from jsonschema.exceptions import ValidationError, best_match
    from openapi_spec_validator.validation import (
        OpenAPIV30SpecValidator,
        OpenAPIV31SpecValidator,
    )

    class V30(OpenAPIV30SpecValidator):
        resolver_handlers: Any = _NoFetch()

    class V31(OpenAPIV31SpecValidator):
        resolver_handlers: Any = _NoFetch()

    cls = V31 if str(document.get("openapi", "")).startswith("3.1") else V30
    validator = cls(document)
    # the library's own iter_errors is cached for the process's life (an lru_cache keyed by
    # the validator, document included): its two steps, called directly, are not
    errors = itertools.chain(
        validator.schema_validator.iter_errors(validator.schema),
        validator.root_validator(validator.schema_path),
    )
    try:
        found = next(errors, None)
    except RecursionError:
        return "", "its $refs nest too deeply to validate"
    except Exception as exc:  # noqa: BLE001 - the document's fault, said as ours
        return "", f"it could not be validated ({type(exc).__name__})"
    if found is None:
        return None
    if isinstance(found, ValidationError):
        found = best_match([found]) or found
        where = "/" + "/".join(_escape(str(p)) for p in found.absolute_path)
        if found.validator in ("oneOf", "anyOf"):  # its own message is the value, repeated
            return where, "it matches none of the forms OpenAPI allows there"
        return where, found.message
    return "", str(found)


def validate_stdio() -> None:
    """The child process: a canonical document on stdin, ``{"error": [where, what] | null}``
    on stdout."""
    document = json.loads(sys.stdin.buffer.read())
    found = first_error(document)
    sys.stdout.write(json.dumps({"error": list(found) if found else None}))


def invalid(where: str, what: str) -> InvalidArgument:
    """The refusal of a document the validator found wrong."""
    place = f" at {quote(where)}" if where else ""
    return InvalidArgument(
        f"the document is not valid OpenAPI{place}: {quote(what)}",
        hint="fix the document (the first error is shown), then call discover_apis again",
    )


# -- a stored version ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiDocument:
    """One discovered version of an app's document, parsed. Already validated when stored:
    whoever reads it (openapi-core) need not validate it again."""

    app_id: int
    version: int
    """Ours: 1, 2, ... per app."""
    source: str
    """Where it was found: ``live:/openapi.json``, ``repo:openapi.yaml@<commit>``."""
    title: str
    """info.title (the app's text, cut to 200 characters)."""
    api_version: str
    """info.version (the app's text, cut to 100 characters)."""
    openapi_version: str
    operations: int
    digest: str
    changes: dict[str, Any]
    """Since the version before: ``{added, removed, changed}`` (lists of ``"GET /path"``,
    at most :data:`MAX_CHANGES` of each) and ``counts`` (how many in all)."""
    discovered_by: str
    discovered_at: float
    document: dict[str, Any]

    @property
    def api_id(self) -> str:
        return f"api_{self.app_id}"


MAX_CHANGES: Final = 100
"""Operations listed per kind of change (the counts say how many in all)."""
MAX_CHANGE_CHARS: Final = 300
"""Characters of one listed operation (a longer path is cut, ending with …)."""


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


def _path_items(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
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
    for path, item in _path_items(document):
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
    item = dict(_path_items(document)).get(op.path, {})
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


# -- what changed ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Changes:
    added: list[str]
    removed: list[str]
    changed: list[str]
    """Operations as ``"GET /items/{item_id}"``; changed: the resolved operation differs."""


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> Changes:
    before = fingerprints(old) if old is not None else {}
    after = fingerprints(new)
    return Changes(
        added=sorted(after.keys() - before.keys()),
        removed=sorted(before.keys() - after.keys()),
        changed=sorted(k for k in after.keys() & before.keys() if after[k] != before[k]),
    )


def fingerprints(document: dict[str, Any]) -> dict[str, str]:
    """A digest per operation of what it resolves to (its object, its path's parameters, and
    what their refs point at, recursively) without expanding anything. Each ref target is
    hashed once, after the targets it refers to (a Merkle hash: a renamed but identical
    component changes nothing); the refs of a ring (schemas that refer to each other) are
    hashed as one whole, so the digests are the same whichever operation reaches them first
    (renaming a member of a ring does count as a change)."""
    table = _ref_digests(document)
    found = {}
    for path, item in _path_items(document):
        shared = item.get("parameters")
        for method in METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                value = {"operation": op, "path_parameters": shared}
                found[f"{method.upper()} {path}"] = _hash(_shape(value, table, frozenset()))
    return found


def _hash(value: Json) -> str:
    return digest(json.dumps(value, sort_keys=True, separators=(",", ":")))


def _ref_key(ref: str) -> str:
    """One spelling per place (``#/a%20b`` and ``#/a b`` are the same)."""
    return "#" + unquote(ref[1:])


def _refs_in(value: Json) -> set[str]:
    return {
        _ref_key(node["$ref"])
        for _, node in _walk(value)
        if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#")
    }


def _shape(value: Json, table: dict[str, str], ring: frozenset[str]) -> Json:
    """``value`` with each ref replaced by its target's digest (a ref into ``ring`` stays)."""
    if isinstance(value, list):
        return [_shape(v, table, ring) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _shape(v, table, ring) for k, v in value.items() if k != "$ref"}
    ref = value.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        key = _ref_key(ref)
        out["$ref"] = key if key in ring else table.get(key, f"missing:{key}")
    elif "$ref" in value:
        out["$ref"] = _shape(value["$ref"], table, ring)
    return out


def _ref_digests(document: dict[str, Any]) -> dict[str, str]:
    """The digest of every ref's target, rings (strongly connected refs) hashed whole."""
    targets: dict[str, Json] = {}
    for key in sorted(_refs_in(document)):
        try:
            targets[key] = _lookup(document, key[1:])
        except KeyError:
            continue
    edges = {key: sorted(_refs_in(target) & targets.keys()) for key, target in targets.items()}
    table: dict[str, str] = {}
    for ring in _rings(edges):  # each after every ring it refers to
        if len(ring) == 1 and ring[0] not in edges[ring[0]]:
            table[ring[0]] = _hash(_shape(targets[ring[0]], table, frozenset()))
            continue
        members = frozenset(ring)
        whole = _hash([[key, _shape(targets[key], table, members)] for key in sorted(ring)])
        for key in ring:
            table[key] = _hash([whole, key])
    return table


def _rings(edges: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, without recursion, in reverse topological
    order (a component comes after every component it has an edge to)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for n in range(at, len(edges[node])):
                nxt = edges[node][n]
                if nxt not in index:
                    work.append((node, n + 1))
                    work.append((nxt, 0))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    ring = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        ring.append(member)
                        if member == node:
                            break
                    found.append(ring)
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


# -- sized for a model ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fitted:
    value: dict[str, Any]
    truncated: bool
    chars: int
    """The JSON length of the whole value, before any cut."""
    note: str | None


_STEPS: Final = (
    # (depth, entries per object or list, characters per string); None: no limit
    (None, None, 2000),
    (None, None, 500),
    (None, 200, 300),
    (12, 100, 200),
    (10, 50, 200),
    (8, 40, 160),
    (6, 30, 120),
    (5, 20, 100),
    (4, 20, 80),
    (3, 15, 80),
    (2, 10, 60),
    (1, 10, 40),
    (1, 5, 40),
)


def size(value: Json) -> int:
    """Characters of ``value`` as JSON, as the text content carries it."""
    return len(json.dumps(value))


def fit(value: dict[str, Any], max_chars: int, *, smaller: str) -> Fitted:
    """``value`` whole when its JSON fits in ``max_chars``; else a copy cut until it fits
    (always a complete JSON object): long strings shortened, long lists and objects keep their
    first entries, deep parts replaced by a one-line marker. ``smaller`` says how to ask for
    less (in the note)."""
    whole = size(value)
    if whole <= max_chars:
        return Fitted(value, False, whole, None)
    for depth, entries, chars in _STEPS:
        cut = _cut(value, depth, entries, chars, 0)
        if size(cut) <= max_chars:
            limits = [f"strings over {chars} characters shortened"]
            if entries is not None:
                limits.append(f"lists and objects cut after {entries} entries")
            if depth is not None:
                limits.append(f"parts deeper than {depth} levels replaced by a marker")
            note = (
                f"Truncated: the whole is {whole} characters, over max_chars {max_chars}; "
                f"{', '.join(limits)} (marked with …). {smaller}"
            )
            return Fitted(cut, True, whole, note)
    note = f"Truncated: the whole is {whole} characters, far over max_chars {max_chars}. {smaller}"
    return Fitted({"…": "too large to show at this max_chars"}, True, whole, note)


def _cut(value: Json, depth: int | None, entries: int | None, chars: int, level: int) -> Json:
    if isinstance(value, str):
        return value if len(value) <= chars else f"{value[:chars]}…({len(value) - chars} more)"
    if not isinstance(value, dict | list):
        return value
    if depth is not None and level >= depth and value:
        kind = "object" if isinstance(value, dict) else "list"
        return f"…({kind} of {len(value)} entries cut)"
    if isinstance(value, list):
        kept = value if entries is None else value[:entries]
        out = [_cut(v, depth, entries, chars, level + 1) for v in kept]
        if len(kept) < len(value):
            out.append(f"…({len(value) - len(kept)} more entries)")
        return out
    keys = list(value)
    kept_keys = keys if entries is None else keys[:entries]
    cut = {
        _cut(k, None, None, chars, 0): _cut(value[k], depth, entries, chars, level + 1)
        for k in kept_keys
    }
    if len(kept_keys) < len(keys):
        cut["…"] = f"{len(keys) - len(kept_keys)} more entries"
    return cut
