"""test_api's verdict: an app's response checked against its operation's documented responses
(openapi-core), in a short-lived child process.

Both the document and the response come from the app, so both are hostile. Checking one
against the other in the server's own process would let an app stall it: a ``pattern`` that
backtracks exponentially holds the GIL for as long as it runs, ``uniqueItems`` over a long
array of objects is quadratic, nested ``anyOf`` is exponential, deep nesting recurses. So
:class:`ResponseChecker` runs :func:`verdict` in a child (forked from the checks' warm parent,
:mod:`~appdeck.platform.apis.forked`, which imported openapi-core once; or ``python -I -m
appdeck.platform.apis.validation``: the request on stdin, the verdict on stdout) that:

- is killed at its deadline (the verdict then says it was not checked, and why);
- caps its own memory and CPU time (``RLIMIT_AS``, ``RLIMIT_CPU``) before reading anything;
- may open no socket and start no process (an audit hook refuses them);
- resolves only local ``$ref``s: openapi-core gets no retrieval handlers, and a document with
  a ``$ref`` that is not ``#/...`` is not checked at all (discovery refuses those already).

At most :data:`PARALLEL` children run at once per server; a call that waits longer than the
deadline for one gets "not checked" too. The response is never the worse for it: the check
is a report about the answer, never a gate on it.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from appdeck.platform.apis.forked import warm_parent

__all__ = ["PARALLEL", "ResponseChecker", "Verdict", "verdict"]

PARALLEL: Final = 4
DEADLINE_S: Final = 10.0
MAX_ERRORS: Final = 20
MAX_ERROR_CHARS: Final = 500
MEMORY_BYTES: Final = 1024 * 1024 * 1024
"""The child's address-space cap: the interpreter and openapi-core, a 2 MiB document parsed,
a 1 MiB body decoded, with room to spare."""
_METHODS: Final = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


@dataclass(frozen=True, slots=True)
class Verdict:
    checked: bool
    """The response was compared with the document (False: ``note`` says why not)."""
    valid: bool | None = None
    """Whether it matches (None when not checked)."""
    errors: tuple[str, ...] = ()
    """What does not match: at most 20, each at most 500 characters (the app's text in them)."""
    note: str | None = None
    """What was not checked, and why (our text)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "valid": self.valid,
            "errors": list(self.errors),
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        errors = data.get("errors")
        valid = data.get("valid")
        note = data.get("note")
        return cls(
            checked=data.get("checked") is True,
            valid=valid if isinstance(valid, bool) else None,
            errors=tuple(str(e)[:MAX_ERROR_CHARS] for e in errors[:MAX_ERRORS])
            if isinstance(errors, list)
            else (),
            note=str(note)[:MAX_ERROR_CHARS] if note is not None else None,
        )


def not_checked(note: str) -> Verdict:
    return Verdict(checked=False, note=note)


@dataclass(frozen=True, slots=True)
class Exchange:
    """What :func:`verdict` compares: the operation (its document, template and the method
    the document lists it under) and the response the app gave."""

    document: Mapping[str, Any]
    template: str
    method: str
    status: int
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""
    check_body: bool = True
    """False for a HEAD or a cut body: only the status is compared."""

    def to_json(self) -> dict[str, Any]:
        return {
            "document": self.document,
            "template": self.template,
            "method": self.method,
            "status": self.status,
            "headers": [list(h) for h in self.headers],
            "body": base64.b64encode(self.body).decode(),
            "check_body": self.check_body,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Exchange:
        return cls(
            document=data["document"],
            template=str(data["template"]),
            method=str(data["method"]),
            status=int(data["status"]),
            headers=[(str(k), str(v)) for k, v in data["headers"]],
            body=base64.b64decode(data["body"]),
            check_body=bool(data["check_body"]),
        )


# -- the check itself (in the child) -----------------------------------------------------------


def verdict(exchange: Exchange) -> Verdict:
    """Compare the response with the operation's documented responses (openapi-core)."""
    document = exchange.document
    method = exchange.method.lower()
    if any(not ref.startswith("#") for ref in _refs(document)):
        return not_checked("the document has a $ref to another document: not followed")
    paths = document.get("paths")
    item = paths.get(exchange.template) if isinstance(paths, dict) else None
    operation = item.get(method) if isinstance(item, dict) else None
    if method not in _METHODS or not isinstance(operation, dict):
        return not_checked("the operation is not in the document")
    try:
        errors = list(_errors(_serverless(document), exchange, method))
    except RecursionError:
        return not_checked("the document's schema for this response nests too deeply to check")
    except Exception:  # noqa: BLE001 - the app's document: anything it breaks is reported, not raised
        return not_checked("the document's schema for this response could not be used")
    if not exchange.check_body:
        note = "only the status was compared (no body to check)"
        return Verdict(True, not errors, tuple(errors[:MAX_ERRORS]), note)
    return Verdict(True, not errors, tuple(errors[:MAX_ERRORS]))


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            ref = current.get("$ref")
            if isinstance(ref, str):
                yield ref
            elif ref is not None:
                yield ""  # not a string: refused like a remote one
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)


def _serverless(document: Mapping[str, Any]) -> dict[str, Any]:
    """The document without its ``servers`` (root, path items, operations): the operation is
    found by its template alone, whatever host or base path the document names."""
    out = dict(document)
    out.pop("servers", None)
    paths = {}
    for template, item in (document.get("paths") or {}).items():
        if isinstance(item, dict):
            item = {k: v for k, v in item.items() if k != "servers"}
            for name in _METHODS & item.keys():
                if isinstance(item[name], dict):
                    item[name] = {k: v for k, v in item[name].items() if k != "servers"}
        paths[template] = item
    out["paths"] = paths
    return copy.deepcopy(out)


def _errors(document: dict[str, Any], exchange: Exchange, method: str) -> Iterator[str]:
    from jsonschema_path import SchemaPath
    from openapi_core import Config, OpenAPI
    from openapi_core.templating.responses.exceptions import ResponseNotFound
    from openapi_core.templating.responses.finders import ResponseFinder

    spec = SchemaPath.from_dict(document, handlers={})  # no retrieval: local $refs only
    status = exchange.status
    if not exchange.check_body:
        responses = spec / "paths" / exchange.template / method / "responses"
        try:
            ResponseFinder(responses).find(str(status))
        except ResponseNotFound as exc:
            yield _undocumented(status, exc.availableresponses)
        return
    # None skips openapi-core's own check of the document (it was validated when discovered):
    # openapi-core tests for None, its annotation does not list it
    api = OpenAPI(spec, config=Config(spec_validator_cls=None))  # type: ignore[arg-type]
    request = _Request(exchange.template, method)
    response = _Response(exchange)
    for error in api.iter_response_errors(request, response):
        yield from _describe(error, status)


def _undocumented(status: int, available: Sequence[str]) -> str:
    listed = ", ".join(str(a)[:20] for a in list(available)[:20]) or "none"
    return f"status {status} is not documented for this operation (documented: {listed})"


def _describe(error: Exception, status: int) -> Iterator[str]:
    from openapi_core.deserializing.media_types.exceptions import MediaTypeDeserializeError
    from openapi_core.templating.media_types.exceptions import MediaTypeNotFound
    from openapi_core.templating.responses.exceptions import ResponseNotFound
    from openapi_core.validation.response.exceptions import (
        InvalidHeader,
        MissingData,
        MissingRequiredHeader,
    )
    from openapi_core.validation.schemas.exceptions import InvalidSchemaValue

    cause = error.__cause__
    if isinstance(error, ResponseNotFound):
        yield _undocumented(status, error.availableresponses)
    elif isinstance(error, MissingData):
        yield "the body is empty, but the documented response has content"
    elif isinstance(cause, MediaTypeNotFound):
        documented = ", ".join(m[:100] for m in cause.availableMimetypes[:10])
        shown = cause.mimetype[:100] or "none"
        yield f"content type {shown!r} is not documented (documented: {documented})"
    elif isinstance(cause, MediaTypeDeserializeError):
        yield f"the body is not valid {cause.mimetype[:100]}"
    elif isinstance(cause, InvalidSchemaValue):
        where = (
            f"header {getattr(error, 'name', '')}" if isinstance(error, InvalidHeader) else "body"
        )
        for problem in list(cause.schema_errors)[:MAX_ERRORS]:
            yield _schema_error(where, problem)
    elif isinstance(error, MissingRequiredHeader):
        yield f"the required header {str(error.name)[:100]} is missing"
    else:
        yield f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]


def _schema_error(where: str, problem: Exception) -> str:
    path = getattr(problem, "absolute_path", ())
    message = getattr(problem, "message", None) or str(problem)
    at = "".join(f"/{p}" for p in path)
    return f"{where}{at}: {message}"[:MAX_ERROR_CHARS]


class _Request:
    """openapi-core's request protocol, with the path pattern given (no server matching)."""

    host_url = "http://app"

    def __init__(self, template: str, method: str) -> None:
        from openapi_core.datatypes import RequestParameters

        self.path = template
        self.path_pattern = template
        self.method = method
        self.body = b""
        self.content_type = ""
        self.parameters = RequestParameters()


class _Response:
    def __init__(self, exchange: Exchange) -> None:
        from werkzeug.datastructures import Headers

        self.status_code = exchange.status
        self.headers = Headers(list(exchange.headers))
        self.content_type = (self.headers.get("content-type") or "").lower()
        self.data = exchange.body


# -- running it in a child ---------------------------------------------------------------------


class ResponseChecker:
    """Runs :func:`verdict` in a child process per check (see the module docstring). One per
    server: at most :data:`PARALLEL` children at once."""

    def __init__(self, deadline_s: float = DEADLINE_S, parallel: int = PARALLEL) -> None:
        self.deadline_s = deadline_s
        self._slots = asyncio.Semaphore(parallel)

    async def check(self, exchange: Exchange) -> Verdict:
        payload = json.dumps(exchange.to_json(), separators=(",", ":")).encode()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        try:
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        except TimeoutError:
            return not_checked("too many responses were being checked at once")
        try:
            return await self._run(payload, deadline)
        finally:
            self._slots.release()

    async def _run(self, payload: bytes, deadline: float) -> Verdict:
        try:
            async with asyncio.timeout_at(deadline):
                child = await warm_parent().spawn("response")
        except TimeoutError:
            return not_checked(f"checking took longer than {self.deadline_s:g} s and was stopped")
        except OSError:
            return not_checked("the checking process could not be started")
        try:
            async with asyncio.timeout_at(deadline):
                out, _ = await child.communicate(payload)
        except TimeoutError:
            return not_checked(f"checking took longer than {self.deadline_s:g} s and was stopped")
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
            child.close()
        try:
            return Verdict.from_json(json.loads(out))
        except (ValueError, TypeError, AttributeError):
            return not_checked("the check ran out of memory or time and was stopped")


def preload() -> None:
    """Import what :func:`verdict` needs (the checks' warm parent, ``forked.py``)."""
    import jsonschema_path  # noqa: F401
    import openapi_core
    import openapi_core.deserializing.media_types.exceptions
    import openapi_core.templating.media_types.exceptions
    import openapi_core.templating.responses.finders
    import openapi_core.validation.response.exceptions
    import openapi_core.validation.schemas.exceptions  # noqa: F401
    import werkzeug.datastructures  # noqa: F401


def _confine() -> None:
    """Caps and refusals for the child, before it reads a byte of the app's."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    cpu = int(DEADLINE_S) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))

    def refuse(event: str, _args: tuple[Any, ...]) -> None:
        if event.startswith(("socket.", "subprocess.", "os.exec", "os.posix_spawn", "os.fork")):
            raise PermissionError(f"{event} is not allowed while checking a response")
        if event in ("os.system", "urllib.Request"):
            raise PermissionError(f"{event} is not allowed while checking a response")

    sys.addaudithook(refuse)


def main() -> int:
    """The child: caps, an exchange on stdin, its verdict on stdout; the exit code."""
    _confine()
    try:
        exchange = Exchange.from_json(json.loads(sys.stdin.buffer.read()))
    except (ValueError, KeyError, TypeError):
        return 2
    try:
        result = verdict(exchange)
    except MemoryError:
        result = not_checked("checking needed more memory than allowed")
    sys.stdout.write(json.dumps(result.to_json()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    os.umask(0o077)
    sys.exit(main())
