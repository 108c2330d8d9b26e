"""ApiCatalog: discover_apis, list_apis and get_api_schema's rules.

Discovery (role ``api.test``), where the document is looked for, in order:

- ``live``: ``GET`` each of :data:`WELL_KNOWN` on the app's live release, through the ingress
  (:class:`AppHttp`: its own address, the app's hostname, no redirect followed), at most
  :data:`documents.MAX_BYTES` read, one deadline of :data:`FETCH_TIMEOUT_S` each (body
  included: a trickling answer cannot stretch it) and :data:`LIVE_BUDGET_S` for them all,
  each holding a slot of the tenant's share of the outbound pool. Only a ``200`` whose body is
  a JSON or YAML object claiming to be OpenAPI (``openapi`` or ``swagger``) counts; an HTML
  page, another status, a JSON answer that is not a document: the next path. The ingress
  saying the app has no live release, or no answer at all, ends the live search.
- ``repo``: the connected repository at its branch's head (the checkout deploys use), the
  top-level regular file ``openapi.yaml``, ``openapi.yml`` or ``openapi.json``, opened without
  following a link, size capped. No repository code runs.
- ``auto``: live, then repo.

The first document found decides: a broken one is refused (``invalid_argument``, nothing
stored), even when another place might have a good one: fix what the app serves. None found:
``failed_precondition`` naming every place tried. A valid document whose digest equals the
latest version's stores nothing (``unchanged``); else it is version n+1, with the operations
added, removed and changed since version n. At most :data:`MAX_VERSIONS` versions are kept.

openapi-spec-validator runs in a child process (:func:`_validate`; a fork of the checks' warm
parent, :mod:`~appdeck.platform.apis.forked`): its 3.1 meta-schema check
takes about a minute on a document at the size limits, so it gets its own CPU, a memory cap and
a deadline, and can be killed; at most :data:`VALIDATORS` run at once.

Reading (role ``api.read``): the catalogue of the caller's apps, a version, one operation
resolved, every result sized for a model (:func:`documents.fit`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol

from appdeck.common.errors import (
    AppDeckError,
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from appdeck.common.identity import Principal
from appdeck.model import hostnames
from appdeck.platform.apis import documents
from appdeck.platform.apis.client import AppHttp, AppResponse
from appdeck.platform.apis.documents import ApiDocument, Operation
from appdeck.platform.apis.fetching import declared_kind, ingress_miss, read_top_file
from appdeck.platform.apis.forked import warm_parent
from appdeck.platform.apps import AppService
from appdeck.platform.changes import ChangeFeed
from appdeck.platform.repos.service import RepoService
from appdeck.storage.api_documents import ApiDocumentRow, ApiDocumentStore, NewVersion
from appdeck.storage.apps import AppRecord

__all__ = [
    "ApiCatalog",
    "ApiDocument",
    "ApiSummary",
    "Discovery",
    "SchemaView",
    "Tried",
]

log = logging.getLogger("appdeck.apis")

WELL_KNOWN: Final = (
    "/openapi.json",
    "/openapi.yaml",
    "/swagger.json",
    "/.well-known/openapi.json",
    "/docs/openapi.json",
)
REPO_FILES: Final = ("openapi.yaml", "openapi.yml", "openapi.json")
SOURCES: Final = ("auto", "live", "repo")
FETCH_TIMEOUT_S: Final = 10.0
LIVE_BUDGET_S: Final = 20.0
"""The whole live search (every well-known path) ends within this."""
MAX_VERSIONS: Final = 50
MAX_TITLE: Final = 200
MAX_API_VERSION: Final = 100
MIN_CHARS: Final = 1_000
MAX_CHARS: Final = 200_000
VALIDATE_TIMEOUT_S: Final = 120.0
VALIDATE_MEMORY: Final = 2 << 30
VALIDATORS: Final = 2
ACCEPT: Final = "application/json, application/yaml;q=0.9, text/yaml;q=0.8, */*;q=0.1"
USER_AGENT: Final = "AppDeck-discover_apis/1"

Source = Literal["auto", "live", "repo"]
Report = Callable[[str, int, int], Awaitable[None]]
"""``report(message, done, total)``: one step of a discovery (the message is ours)."""


class Credentials(Protocol):
    """Where a key for the app's own route comes from when its spec requires one
    (:class:`~appdeck.platform.apis.keys.ApiKeyService`)."""

    async def test_credential(self, principal: Principal, app_id: int) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Tried:
    where: str
    """``live GET /openapi.json``, ``repo openapi.yaml``, ``repo``."""
    outcome: str
    """Ours, never the app's text: ``404``, ``no live release``, ``found``, ..."""


@dataclass(frozen=True, slots=True)
class Discovery:
    document: ApiDocument
    """The version stored, or the latest one when ``unchanged``."""
    unchanged: bool
    changes: dict[str, Any]
    """Since the version before (empty lists when unchanged)."""
    tried: list[Tried]


@dataclass(frozen=True, slots=True)
class ApiSummary:
    api_id: str
    app_id: int
    app_name: str
    title: str
    api_version: str
    openapi_version: str
    version: int
    operations: int
    source: str
    discovered_at: float


@dataclass(frozen=True, slots=True)
class SchemaView:
    document: ApiDocument
    operation: Operation | None
    """The one operation asked for (None: the whole document)."""
    content: dict[str, Any]
    truncated: bool
    chars: int
    """The JSON length of the whole content, before any cut."""
    note: str | None


@dataclass(frozen=True, slots=True)
class _Found:
    where: str
    """The stored ``source``: ``live:/openapi.json``, ``repo:openapi.yaml@<12 hex>``."""
    document: dict[str, Any]


class ApiCatalog:
    def __init__(
        self,
        apps: AppService,
        store: ApiDocumentStore,
        http: AppHttp,
        repos: RepoService,
        feed: ChangeFeed,
        *,
        credentials: Credentials | None = None,
    ) -> None:
        self._apps = apps
        self._store = store
        self._http = http
        self._repos = repos
        self._feed = feed
        self._credentials = credentials
        self._validators = asyncio.Semaphore(VALIDATORS)
        self.validate_timeout_s = VALIDATE_TIMEOUT_S
        """The child validator's deadline (tests shorten it)."""
        self.validate_memory = VALIDATE_MEMORY
        """The child validator's address-space cap, bytes (tests lower it)."""

    def use_credentials(self, credentials: Credentials) -> None:
        """Fetch live documents with the app's key when its spec requires one."""
        self._credentials = credentials

    # -- discover_apis --------------------------------------------------------------------

    async def discover(
        self,
        principal: Principal,
        app_id: int,
        *,
        source: Source = "auto",
        report: Report | None = None,
    ) -> Discovery:
        app = (await self._apps.load(principal, app_id, "api.test")).app
        if source not in SOURCES:
            raise InvalidArgument("source must be auto, live or repo", field="source")
        steps = _Steps(report, len(WELL_KNOWN) * (source != "repo") + (source != "live") + 2)
        tried: list[Tried] = []
        found = None
        if source in ("auto", "live"):
            found = await self._live(principal, app, tried, steps)
        if found is None and source in ("auto", "repo"):
            found = await self._repo(app, tried, steps, explicit=source == "repo")
        if found is None:
            places = "; ".join(f"{t.where}: {t.outcome}" for t in tried)
            raise FailedPrecondition(
                f"no OpenAPI document found for app {app_id} ({places})",
                hint="deploy the app so it serves /openapi.json, or commit openapi.yaml or "
                "openapi.json at the top of its connected repository",
            )
        await steps.step("checking the document")
        loaded = await asyncio.to_thread(documents.prepare, found.document)
        last = await self._store.latest(app_id)
        if last is None or last.digest != loaded.digest:  # the same one was validated before
            await self._validate(loaded.canonical)
        await steps.step("storing the version")
        return await self._keep(principal, app_id, loaded, found.where, tried)

    async def _live(
        self, principal: Principal, app: AppRecord, tried: list[Tried], steps: _Steps
    ) -> _Found | None:
        host = hostnames.hostname(app.name, app.tenant_id)
        headers = [("accept", ACCEPT), ("user-agent", USER_AGENT)]
        key = (
            await self._credentials.test_credential(principal, app.id)
            if self._credentials
            else None
        )
        if key is not None:
            headers.append(("x-api-key", key))
        budget_ends = time.monotonic() + LIVE_BUDGET_S
        for path in WELL_KNOWN:
            where = f"live GET {path}"
            left = budget_ends - time.monotonic()
            if left < 0.5:
                tried.append(
                    Tried(where, f"not tried: the live search's {LIVE_BUDGET_S:g} s ran out")
                )
                return None
            await steps.step(f"trying {where}")
            try:
                response = await self._http.request(
                    app.tenant_id,
                    host,
                    "GET",
                    path,
                    headers=headers,
                    max_body=documents.MAX_BYTES + 1,
                    timeout_s=min(FETCH_TIMEOUT_S, left),
                )
            except Unavailable as exc:
                tried.append(Tried(where, exc.message))
                return None
            if ingress_miss(response):
                tried.append(Tried(where, "no live release"))
                return None
            found = await _candidate(response, path, where, tried)
            if found is not None:
                return found
        return None

    async def _repo(
        self, app: AppRecord, tried: list[Tried], steps: _Steps, *, explicit: bool
    ) -> _Found | None:
        await steps.step("reading the connected repository")
        if not await self._repos.connected(app.id):
            if explicit:
                raise FailedPrecondition(
                    f"app {app.id} has no connected repository", hint="connect_repo connects one"
                )
            tried.append(Tried("repo", "no repository connected"))
            return None
        try:
            checkout = await self._repos.source(app, None)
        except AppDeckError as exc:
            if explicit:
                raise
            tried.append(Tried("repo", f"could not be read ({exc.code})"))
            return None
        if checkout is None:
            tried.append(Tried("repo", "no repository connected"))
            return None
        commit = str(checkout.get("commit", ""))[:12]
        for name in REPO_FILES:
            where = f"repo {name}"
            raw, outcome = await asyncio.to_thread(read_top_file, Path(checkout["path"]), name)
            if raw is None:
                tried.append(Tried(where, outcome))
                continue
            kind = "json" if name.endswith(".json") else "yaml"
            document = await asyncio.to_thread(documents.parse, raw, kind=kind)
            tried.append(Tried(where, "found"))
            return _Found(f"repo:{name}@{commit}", document)
        return None

    async def _validate(self, canonical: str) -> None:
        """openapi-spec-validator's verdict, from a child process with a deadline and caps
        (forked from the checks' warm parent: :mod:`~appdeck.platform.apis.forked`)."""
        cpu = int(self.validate_timeout_s) + 5
        options = {"memory": self.validate_memory, "cpu": cpu}
        too_slow = InvalidArgument(
            f"the document took longer than {self.validate_timeout_s:g} s to validate",
            hint="make it smaller: fewer operations, simpler schemas",
        )
        async with self._validators:
            try:
                async with asyncio.timeout(self.validate_timeout_s) as deadline:
                    proc = await warm_parent().spawn("openapi", options)
            except TimeoutError:
                raise too_slow from None
            except OSError as exc:
                log.warning("the OpenAPI validator could not be started: %s", exc)
                raise Unavailable(
                    "the OpenAPI validator could not be started",
                    hint="retry; the server log says why",
                ) from None
            try:
                async with asyncio.timeout_at(deadline.when()):
                    out, err = await proc.communicate(canonical.encode("utf-8"))
            except TimeoutError:
                raise too_slow from None
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                proc.close()
        code = proc.returncode or 0
        if code != 0:
            log.warning(
                "the OpenAPI validator ended with %s: %s",
                code,
                err[-2000:].decode("utf-8", "replace"),
            )
            if code < 0 or b"MemoryError" in err:
                raise InvalidArgument(
                    "the document is too large or complex to validate",
                    hint="make it smaller: fewer operations, simpler schemas",
                )
            raise Unavailable("the OpenAPI validator failed", hint="retry; the server log says why")
        verdict = json.loads(out)
        if verdict.get("error"):
            where, what = verdict["error"]
            raise documents.invalid(str(where), str(what))

    async def _keep(
        self,
        principal: Principal,
        app_id: int,
        loaded: documents.Loaded,
        where: str,
        tried: list[Tried],
    ) -> Discovery:
        for _ in range(3):
            last = await self._store.latest(app_id)
            if last is not None and last.digest == loaded.digest:
                unchanged = _changes(documents.Changes([], [], []))
                return Discovery(await _document(last), True, unchanged, tried)
            before = await asyncio.to_thread(json.loads, last.document) if last else None
            changes = _changes(await asyncio.to_thread(documents.diff, before, loaded.document))
            new = NewVersion(
                source=where,
                title=loaded.title[:MAX_TITLE],
                api_version=loaded.api_version[:MAX_API_VERSION],
                openapi_version=loaded.openapi_version,
                operations=len(documents.operations(loaded.document)),
                digest=loaded.digest,
                changes=changes,
                discovered_by=principal.user,
                discovered_at=time.time(),
                document=loaded.canonical,
            )
            after = last.version if last is not None else 0
            row = await self._store.add(app_id, new, after=after, keep=MAX_VERSIONS)
            if row is not None:
                return Discovery(_value(row, loaded.document), False, changes, tried)
        raise Conflict(
            f"other discoveries of app {app_id} kept storing versions meanwhile",
            hint="call discover_apis again",
        )

    # -- list_apis, get_api_schema ---------------------------------------------------------

    async def list(
        self,
        principal: Principal,
        *,
        app_id: int | None = None,
        title_contains: str | None = None,
        offset: int,
        limit: int,
    ) -> list[ApiSummary]:
        """The latest version of each app's document the caller can see, by app id."""
        if app_id is not None:
            await self._apps.load(principal, app_id, "api.read")
        admin = await self._apps.tenant_role(principal) == "admin"
        rows = await self._store.listing(
            principal.tenant,
            member=None if admin else principal.user,
            app_id=app_id,
            title_contains=title_contains,
            offset=offset,
            limit=limit,
        )
        return [
            ApiSummary(
                api_id=f"api_{r.app_id}",
                app_id=r.app_id,
                app_name=r.app_name,
                title=r.title,
                api_version=r.api_version,
                openapi_version=r.openapi_version,
                version=r.version,
                operations=r.operations,
                source=r.source,
                discovered_at=r.discovered_at,
            )
            for r in rows
        ]

    async def latest(self, principal: Principal, app_id: int) -> ApiDocument:
        """The app's latest document (role ``api.read``); not found before any discovery."""
        await self._apps.load(principal, app_id, "api.read")
        row = await self._store.latest(app_id)
        if row is None:
            raise NotFound(
                f"app {app_id} has no discovered API document", hint="call discover_apis first"
            )
        return await _document(row)

    async def get(self, principal: Principal, app_id: int, version: int) -> ApiDocument:
        await self._apps.load(principal, app_id, "api.read")
        row = await self._store.get(app_id, version)
        if row is None:
            kept = await self._store.versions(app_id)
            shown = f"versions {kept[0]} to {kept[-1]} are kept" if kept else "call discover_apis"
            raise NotFound(f"app {app_id} has no API document version {version}", hint=shown)
        return await _document(row)

    async def schema(
        self,
        principal: Principal,
        app_id: int,
        *,
        version: int | None = None,
        path: str | None = None,
        method: str | None = None,
        max_chars: int = 20_000,
    ) -> SchemaView:
        """The whole document, or one operation with its refs resolved; cut to ``max_chars``."""
        if (path is None) != (method is None):
            missing = "path" if path is None else "method"
            raise InvalidArgument("give both path and method, or neither", field=missing)
        if not MIN_CHARS <= max_chars <= MAX_CHARS:
            raise InvalidArgument(
                f"max_chars must be {MIN_CHARS} to {MAX_CHARS}", field="max_chars"
            )
        if version is None:
            doc = await self.latest(principal, app_id)
        else:
            doc = await self.get(principal, app_id, version)
        if path is None or method is None:
            fitted = await asyncio.to_thread(
                documents.fit,
                doc.document,
                max_chars,
                smaller="Ask for one operation (path and method: the paths are the keys of "
                f"paths) or a larger max_chars (at most {MAX_CHARS}).",
            )
            return SchemaView(doc, None, fitted.value, fitted.truncated, fitted.chars, fitted.note)
        op = documents.find_operation(doc.document, method, path)
        if op is None:
            raise NotFound(
                f"app {app_id}'s API (version {doc.version}) has no operation "
                f"{method.upper()[:10]} {path[:200]!r}",
                hint="get_api_schema without path and method shows the document's paths",
                field="path",
            )
        resolved = await asyncio.to_thread(documents.resolve_operation, doc.document, op)
        fitted = await asyncio.to_thread(
            documents.fit,
            resolved,
            max_chars,
            smaller=f"Ask for a larger max_chars (at most {MAX_CHARS}).",
        )
        return SchemaView(doc, op, fitted.value, fitted.truncated, fitted.chars, fitted.note)


class _Steps:
    def __init__(self, report: Report | None, total: int) -> None:
        self._report = report
        self._total = total
        self._done = 0

    async def step(self, message: str) -> None:
        self._done += 1
        if self._report is not None:
            await self._report(message, self._done, max(self._total, self._done))


async def _candidate(
    response: AppResponse, path: str, where: str, tried: list[Tried]
) -> _Found | None:
    """The document in a live answer, or None (the outcome noted) when it is not one. A body
    the app declares JSON or YAML that does not parse, or that is too large, is refused."""
    if response.status != 200:
        moved = " (a redirect: not followed)" if 300 <= response.status < 400 else ""
        tried.append(Tried(where, f"{response.status}{moved}"))
        return None
    declared = declared_kind(response)
    if declared == "html":
        tried.append(Tried(where, "200, an HTML page"))
        return None
    if response.truncated:
        raise InvalidArgument(
            f"the document at {path} is larger than {documents.MAX_BYTES // (1024 * 1024)} MiB"
        )
    kind = declared or ("json" if path.endswith(".json") else None)
    try:
        document = await asyncio.to_thread(documents.parse, response.body, kind=kind)
    except InvalidArgument as exc:
        if declared is not None:
            raise InvalidArgument(f"{exc.message} (the answer to GET {path})") from None
        tried.append(Tried(where, "200, neither JSON nor YAML"))
        return None
    if not documents.looks_like_openapi(document):
        tried.append(Tried(where, "200, not an OpenAPI document"))
        return None
    tried.append(Tried(where, "found"))
    return _Found(f"live:{path}", document)


def _changes(changes: documents.Changes) -> dict[str, Any]:
    def shown(keys: list[str]) -> list[str]:
        cap = documents.MAX_CHANGE_CHARS
        return [k if len(k) <= cap else k[: cap - 1] + "…" for k in keys[: documents.MAX_CHANGES]]

    return {
        "added": shown(changes.added),
        "removed": shown(changes.removed),
        "changed": shown(changes.changed),
        "counts": {
            "added": len(changes.added),
            "removed": len(changes.removed),
            "changed": len(changes.changed),
        },
    }


def _value(row: ApiDocumentRow, document: dict[str, Any]) -> ApiDocument:
    return ApiDocument(
        app_id=row.app_id,
        version=row.version,
        source=row.source,
        title=row.title,
        api_version=row.api_version,
        openapi_version=row.openapi_version,
        operations=row.operations,
        digest=row.digest,
        changes=row.changes,
        discovered_by=row.discovered_by,
        discovered_at=row.discovered_at,
        document=document,
    )


async def _document(row: ApiDocumentRow) -> ApiDocument:
    return _value(row, await asyncio.to_thread(json.loads, row.document))
