"""ApiTester: test_api's rules. One operation of an app's live release, called through the
ingress as the app's own clients reach it, and the answer checked against the document.

    answer = await tester.call(principal, app_id, ApiCall("GET", "/items/{item_id}",
                                                          path_params={"item_id": 5}))

The order, and why:

1. The caller's role on the app (``api.test``: developer); another tenant's app is not found.
2. Every part of the call checked (:mod:`appdeck.platform.apis.requests`) before anything
   else happens: a hostile argument is refused, never half-sent.
3. The operation must be in the latest discovered document (``discover_apis`` first); HEAD
   may test a GET operation (documents rarely list HEAD).
4. The target is built from the document's template (never the caller's path as given) and
   checked again; it goes through :class:`AppHttp` only: the ingress's own address, the app's
   hostname as ``Host``, no redirect followed. So the app's route is all that is reachable.
5. The app's key: the caller's ``api_key``, or none (``without_key``), or, when the app
   requires one, a short-lived key from the key service, valid for this app only and masked
   wherever the request is shown.
6. When the ingress itself answers that the app has no live release, that is the caller's
   failed precondition, not the app's answer.
7. The response is checked against the operation's documented responses in a child process
   (:mod:`appdeck.platform.apis.validation`); an answer that breaks its schema, a 4xx or a
   5xx is a result like any other: it is what the caller asked to see.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import unquote

from appdeck.common.errors import FailedPrecondition, InvalidArgument, NotFound
from appdeck.common.identity import Principal
from appdeck.model import hostnames
from appdeck.platform.apis import documents
from appdeck.platform.apis import requests as rq
from appdeck.platform.apis.catalog import ApiCatalog
from appdeck.platform.apis.client import AppHttp, AppResponse
from appdeck.platform.apis.fetching import INGRESS_MISSES
from appdeck.platform.apis.keys import ApiKeyService
from appdeck.platform.apis.validation import Exchange, ResponseChecker, Verdict
from appdeck.platform.apps import AppService

__all__ = ["ApiAnswer", "ApiCall", "ApiTester"]

MIN_TIMEOUT: Final = 0.1
MAX_TIMEOUT: Final = 30.0
DEFAULT_TIMEOUT: Final = 10.0
MIN_BODY: Final = 1024
MAX_BODY: Final = 1024 * 1024
DEFAULT_BODY: Final = 64 * 1024
MAX_HEADERS_SHOWN: Final = 50
MAX_HEADER_CHARS: Final = 1024
USER_AGENT: Final = "AppDeck-test_api/1"
ACCEPT: Final = "application/json, */*;q=0.5"
_PAGE_HEADERS: Final = frozenset({"content-type", "content-length", "cache-control", "retry-after"})

KeyUse = Literal["given", "injected", "none"]


@dataclass(frozen=True, slots=True)
class ApiCall:
    """What the caller asks for (the tool's arguments, checked again here)."""

    method: str
    path: str
    path_params: Mapping[str, rq.Scalar] = field(default_factory=dict)
    query: Mapping[str, rq.QueryValue] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: object = None
    """A JSON value (None: no body)."""
    api_key: str | None = None
    without_key: bool = False
    timeout_s: float = DEFAULT_TIMEOUT
    max_body_bytes: int = DEFAULT_BODY


@dataclass(frozen=True, slots=True)
class ApiAnswer:
    app_id: int
    method: str
    """The method sent."""
    documented: str
    """The method the document lists the operation under (GET for a HEAD of a GET)."""
    template: str
    """The operation's path as its document writes it (the app's text)."""
    target: str
    sent: tuple[tuple[str, str], ...]
    """The request's headers, credentials masked."""
    sent_bytes: int
    key: KeyUse
    status: int
    headers: tuple[tuple[str, str], ...]
    """At most 50, each value at most 1 KiB."""
    headers_truncated: bool
    content_type: str | None
    body: str
    encoding: Literal["utf-8", "base64"]
    body_bytes: int
    truncated: bool
    location: str | None
    """A 3xx's ``Location`` (never followed)."""
    latency_ms: float
    validation: Verdict

    @property
    def redirect(self) -> bool:
        return 300 <= self.status < 400


class ApiTester:
    def __init__(
        self, apps: AppService, catalog: ApiCatalog, keys: ApiKeyService, http: AppHttp
    ) -> None:
        self._apps = apps
        self._catalog = catalog
        self._keys = keys
        self._http = http
        self.checker = ResponseChecker()
        """Runs the schema check in a child process (tests may give a shorter deadline)."""

    async def call(self, principal: Principal, app_id: int, call: ApiCall) -> ApiAnswer:
        app = (await self._apps.load(principal, app_id, "api.test")).app
        method, body, extra = _checked(call)
        latest = await self._document(principal, app_id)
        document = latest.document
        operation = documents.find_operation(document, method, call.path)
        if operation is None and method == "HEAD":
            operation = documents.find_operation(document, "GET", call.path)
        if operation is None:
            raise NotFound(
                f"app {app_id}'s API has no operation {method} {call.path[:200]!r}",
                hint="get_api_schema (or list_apis) shows its operations; discover_apis again "
                "if the app changed",
                field="path",
            )
        given = (
            {} if call.path == operation.path else documents.match_path(operation.path, call.path)
        )
        target = rq.build_target(
            operation.path,
            {name: unquote(value) for name, value in (given or {}).items()},
            call.path_params,
            call.query,
            base=rq.base_path(document),
        )
        headers, key = await self._with_key(principal, app_id, call, extra)
        host = hostnames.hostname(app.name, app.tenant_id)
        response = await self._http.request(
            app.tenant_id,
            host,
            method,
            target,
            headers=headers,
            body=body,
            max_body=call.max_body_bytes,
            timeout_s=call.timeout_s,
        )
        if _ingress_miss(response, method):
            raise FailedPrecondition(
                f"app {app_id} has no live release to call", hint="deploy_app first"
            )
        verdict = await self._verdict(document, operation.path, operation.method, method, response)
        shown, cut = _shown_headers(response)
        text, encoding = _decoded(response.body, response.truncated)
        location = response.header("location") if 300 <= response.status < 400 else None
        return ApiAnswer(
            app_id=app_id,
            method=method,
            documented=operation.method,
            template=operation.path,
            target=target,
            sent=tuple(rq.masked([("Host", host), *headers])),
            sent_bytes=len(body or b""),
            key=key,
            status=response.status,
            headers=shown,
            headers_truncated=cut,
            content_type=response.header("content-type"),
            body=text,
            encoding=encoding,
            body_bytes=len(response.body),
            truncated=response.truncated,
            location=location[:MAX_HEADER_CHARS] if location is not None else None,
            latency_ms=response.latency_ms,
            validation=verdict,
        )

    async def _document(self, principal: Principal, app_id: int) -> documents.ApiDocument:
        try:
            return await self._catalog.latest(principal, app_id)
        except NotFound:
            raise FailedPrecondition(
                f"app {app_id} has no discovered API document",
                hint="call discover_apis first",
            ) from None

    async def _with_key(
        self, principal: Principal, app_id: int, call: ApiCall, headers: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], KeyUse]:
        if call.api_key is not None:
            return [*headers, (rq.KEY_HEADER, call.api_key)], "given"
        if call.without_key:
            return headers, "none"
        injected = await self._keys.test_credential(principal, app_id)
        if injected is None:
            return headers, "none"
        return [*headers, (rq.KEY_HEADER, injected)], "injected"

    async def _verdict(
        self,
        document: Mapping[str, object],
        template: str,
        documented: str,
        method: str,
        response: AppResponse,
    ) -> Verdict:
        whole = not response.truncated
        exchange = Exchange(
            document,
            template,
            documented,
            response.status,
            response.headers,
            response.body if whole else b"",
            check_body=whole and method != "HEAD",
        )
        verdict = await self.checker.check(exchange)
        if response.truncated and verdict.checked:
            note = (
                "the body was cut at max_body_bytes, so only the status was compared; raise "
                "max_body_bytes to check the body"
            )
            return Verdict(verdict.checked, verdict.valid, verdict.errors, note)
        return verdict


def _checked(call: ApiCall) -> tuple[str, bytes | None, list[tuple[str, str]]]:
    """The method, the body and the caller's headers with our defaults; every refusal here."""
    method = call.method.upper()
    if method not in rq.METHODS:
        raise InvalidArgument(f"method must be one of {', '.join(rq.METHODS)}", field="method")
    rq.check_path(call.path)
    if not MIN_TIMEOUT <= call.timeout_s <= MAX_TIMEOUT:
        raise InvalidArgument(
            f"timeout_s must be {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g}", field="timeout_s"
        )
    if not MIN_BODY <= call.max_body_bytes <= MAX_BODY:
        raise InvalidArgument(
            f"max_body_bytes must be {MIN_BODY} to {MAX_BODY}", field="max_body_bytes"
        )
    if call.api_key is not None:
        rq.check_key(call.api_key)
        if call.without_key:
            raise InvalidArgument("give api_key or without_key, not both", field="without_key")
    body = rq.encode_body(method, call.body)
    given = rq.check_headers(call.headers)
    names = {name.lower() for name, _ in given}
    headers = [("Accept", ACCEPT)] if "accept" not in names else []
    headers += [("User-Agent", USER_AGENT)] if "user-agent" not in names else []
    # the body as the app sends it: its size is the wire's, and no small compressed body
    # unfolds into a large one in memory (unless the caller asks for an encoding)
    headers += [("Accept-Encoding", "identity")] if "accept-encoding" not in names else []
    if body is not None and "content-type" not in names:
        headers.append(("Content-Type", "application/json"))
    return method, body, headers + given


def _ingress_miss(response: AppResponse, method: str) -> bool:
    """Whether the ingress itself answered that no live release serves the app (its 404 "no
    such app" for an app never live, its 503 "no live release"), rather than the app: the
    status, exactly the page's headers, and the page's code in its JSON or HTML (a HEAD's
    page has no body: the headers decide)."""
    if response.status not in (404, 503) or response.header("cache-control") != "no-store":
        return False
    if not {name.lower() for name, _ in response.headers} <= _PAGE_HEADERS:
        return False
    kind = (response.header("content-type") or "").split(";")[0].strip()
    if kind not in ("application/json", "text/html"):
        return False
    if method == "HEAD":
        return not response.body
    if kind == "application/json":
        try:
            error = json.loads(response.body).get("error")
        except (ValueError, AttributeError):
            return False
        return isinstance(error, dict) and error.get("code") in INGRESS_MISSES
    body = response.body.decode("utf-8", "replace")
    return any(f"AppDeck ingress · {code}</small>" in body for code in INGRESS_MISSES)


def _shown_headers(response: AppResponse) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The response's headers as a result shows them (50, each value 1 KiB), and whether
    any was left out or cut."""
    kept = response.headers[:MAX_HEADERS_SHOWN]
    cut = len(response.headers) > MAX_HEADERS_SHOWN or any(
        len(v) > MAX_HEADER_CHARS for _, v in kept
    )
    return tuple((k, v[:MAX_HEADER_CHARS]) for k, v in kept), cut


def _decoded(body: bytes, truncated: bool) -> tuple[str, Literal["utf-8", "base64"]]:
    """UTF-8 text when the body is (a cut body may end inside a character: that tail is left
    out), else base64."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        return decoder.decode(body, final=not truncated), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"
