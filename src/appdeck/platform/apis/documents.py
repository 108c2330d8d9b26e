"""OpenAPI documents, pure: parse, check and validate, canonical form, the stored version.
Next door, and re-exported here (callers use ``documents.<name>``): :mod:`.operations` (list,
find and resolve one), :mod:`.changes` (what changed between two versions), :mod:`.fitting`
(a result sized for a model) and :mod:`.refs` (pointers and refs, what they all share).

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

import itertools
import json
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, Final

import yaml

from appdeck.common.errors import InvalidArgument
from appdeck.platform.apis.changes import Changes, diff
from appdeck.platform.apis.fitting import Fitted, fit, size
from appdeck.platform.apis.operations import (
    Operation,
    find_operation,
    match_path,
    operations,
    resolve_operation,
)
from appdeck.platform.apis.refs import (
    CUT,
    METHODS,
    REF_KEYS,
    Json,
    digest,
    escape,
    pointer,
    walk,
)

# The package's face: parsing and checks live here, the rest next door (refs, operations,
# changes, fitting); callers use ``documents.<name>`` for all of it.
__all__ = [
    "CUT",
    "METHODS",
    "ApiDocument",
    "Changes",
    "Fitted",
    "Operation",
    "canonical",
    "diff",
    "digest",
    "find_operation",
    "first_error",
    "fit",
    "load",
    "match_path",
    "operations",
    "resolve_operation",
    "size",
]

MAX_BYTES: Final = 2 * 1024 * 1024
MAX_CANONICAL_BYTES: Final = 4 * 1024 * 1024
MAX_DEPTH: Final = 64
MAX_PATHS: Final = 2000
MAX_OPERATIONS: Final = 5000
MAX_PATH_CHARS: Final = 2048
QUOTE_CHARS: Final = 200
VERSION: Final = re.compile(r"3\.[01]\.\d{1,4}")


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


def _check_refs(document: dict[str, Any]) -> None:
    for at, node in walk(document):
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
    except Exception:  # noqa: BLE001 - the document's fault, said as ours
        return "", "it could not be validated (its schema is not usable)"
    if found is None:
        return None
    if isinstance(found, ValidationError):
        found = best_match([found]) or found
        where = "/" + "/".join(escape(str(p)) for p in found.absolute_path)
        if found.validator in ("oneOf", "anyOf"):  # its own message is the value, repeated
            return where, "it matches none of the forms OpenAPI allows there"
        return where, found.message
    return "", str(found)


def preload() -> None:
    """Import what :func:`first_error` needs (the checks' warm parent, ``forked.py``)."""
    import jsonschema.exceptions  # noqa: F401
    import openapi_spec_validator.validation  # noqa: F401


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
