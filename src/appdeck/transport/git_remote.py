"""``/git/<tenant>/<app>.git/...``: each app's git remote, smart HTTP (``git push``, fetch,
clone) through ``git http-backend`` in the app's sandbox (:mod:`appdeck.platform.repos.hosted`).

Authentication is HTTP Basic whose password is a token (a personal access token or an OAuth
access token, verified as ``/mcp`` verifies a bearer token; the user name is not read): 401
with ``WWW-Authenticate: Basic`` so git asks for it. Fetching needs ``repos:read`` (or
``repos:write``), pushing ``repos:write``; 403 without. The token's tenant must own the app:
another tenant's app, or none of that name, is the same 404. Only the smart protocol's four
requests are served (``info/refs?service=...``, ``git-upload-pack``, ``git-receive-pack``);
the rest is 404. Bounds: the request body (``max_push_bytes``: 413), the time of a request
(the backend is killed), pushes under way per app (429), refused tokens per client address
(429 once past the free ones, as at ``/mcp``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Final

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from appdeck.auth import Authenticator, AuthError
from appdeck.auth.throttle import FailureThrottle
from appdeck.common.errors import AppDeckError, FailedPrecondition, NotFound, PermissionDenied
from appdeck.common.identity import Principal
from appdeck.platform.repos.hosted import Run, body_of, cgi_head
from appdeck.platform.repos.hosting import HostedService, PushBusy
from appdeck.storage.apps import AppRecord

log = logging.getLogger("appdeck.repos")
PATH: Final = "/git/{tenant}/{repo}/{rest:path}"
REALM: Final = 'Basic realm="AppDeck git", charset="UTF-8"'
_SERVICES: Final = ("git-upload-pack", "git-receive-pack")
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_PROTOCOL: Final = re.compile(r"[A-Za-z0-9=:._ -]{1,200}")
_TYPE: Final = re.compile(r"application/x-git-(upload|receive)-pack-request")


def git_remote_route(
    hosting: HostedService, authenticator: Authenticator, failures: FailureThrottle | None = None
) -> Route:
    """``failures``: refused tokens per client address; past its free ones the address waits
    (429 with ``Retry-After``). git's first request carries no credentials (it asks only after
    a 401): that one is not counted."""

    async def endpoint(request: Request) -> Response:
        service = _service(request)
        tenant, repo = request.path_params["tenant"], request.path_params["repo"]
        name = repo.removesuffix(".git")
        if service is None or not repo.endswith(".git") or not _named(tenant, name):
            return _said(404, "not found")
        length = request.headers.get("content-length", "")
        limit = hosting.limits.max_push_bytes
        if length and (not length.isdigit() or int(length) > limit):
            return _said(413, f"the request body is over {limit} bytes")
        write = service == "git-receive-pack"
        client = request.client.host if request.client is not None else "?"
        wait = failures.blocked(client) if failures is not None else None
        if wait is not None:
            return _said(429, f"too many refused tokens: wait {wait} s", retry=wait)
        header = request.headers.get("authorization")
        principal = await _principal(authenticator, header)
        if principal is None:
            if header and failures is not None:
                failures.failed(client)
            return _said(401, "sign in: the password is an AppDeck token", REALM)
        needed = "repos:write" if write else "repos:read"
        if not (principal.has_scope(needed) or principal.has_scope("repos:write")):
            return _said(403, f"the token lacks the {needed} scope")
        try:
            app = await hosting.open(principal, tenant, name, write=write)
            run = await hosting.serve(app, _cgi(request, principal, service), write=write)
        except AppDeckError as exc:
            return _refused(exc)
        return await _answer(hosting, app, run, request, write=write)

    return Route(PATH, endpoint, methods=["GET", "POST"])


def _service(request: Request) -> str | None:
    """The smart-protocol service a request is for, or None (not served)."""
    rest = request.path_params.get("rest", "")
    if request.method == "GET" and rest == "info/refs":
        service = request.query_params.get("service", "")
        return service if service in _SERVICES else None
    if request.method == "POST" and rest in _SERVICES:
        return str(rest)
    return None


def _named(tenant: str, name: str) -> bool:
    return bool(_NAME.fullmatch(tenant) and _NAME.fullmatch(name))


async def _principal(authenticator: Authenticator, header: str | None) -> Principal | None:
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic" or not encoded or len(encoded) > 8192:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    _, _, token = decoded.partition(":")
    if not token or not token.isprintable() or " " in token:
        return None
    try:
        return await authenticator.authenticate(f"Bearer {token}")
    except AuthError:
        return None


def _cgi(request: Request, principal: Principal, service: str) -> dict[str, str]:
    """The CGI variables of the request, each checked (the client wrote them)."""
    headers = request.headers
    rest = request.path_params["rest"]
    cgi = {
        "REQUEST_METHOD": request.method,
        "PATH_INFO": f"/{rest}",
        "QUERY_STRING": f"service={service}" if rest == "info/refs" else "",
        "REMOTE_USER": principal.user if principal.user.isprintable() else "user",
    }
    if _TYPE.fullmatch(headers.get("content-type", "")):
        cgi["CONTENT_TYPE"] = headers["content-type"]
    length = headers.get("content-length", "")
    if length.isdigit():
        cgi["CONTENT_LENGTH"] = length
    if headers.get("content-encoding", "") in ("gzip", "x-gzip"):
        cgi["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
    protocol = headers.get("git-protocol", "")
    if _PROTOCOL.fullmatch(protocol):
        cgi["GIT_PROTOCOL"] = protocol
    return cgi


async def _pump(request: Request, run: Run, limit: int) -> bool:
    """The request body into git's stdin; False when it was over ``limit`` (git killed)."""
    stdin = run.proc.stdin
    assert stdin is not None
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                run.kill()
                return False
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # git answered without reading it all (a refusal): its answer says why
    finally:
        with contextlib.suppress(OSError):
            stdin.close()
    return True


async def _answer(
    hosting: HostedService, app: AppRecord, run: Run, request: Request, *, write: bool
) -> Response:
    """The backend's answer, streamed; the body is taken whole before the answer starts
    (git reads a request through before it answers)."""
    limit = hosting.limits.timeout_s
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    timer = loop.call_at(deadline, run.kill)  # the answer's streaming too
    assert run.proc.stdout is not None
    try:  # a client that stalls mid-body is cut at the deadline, its push slot freed
        async with asyncio.timeout_at(deadline):
            within, head = await asyncio.gather(
                _pump(request, run, hosting.limits.max_push_bytes), cgi_head(run.proc.stdout)
            )
    except BaseException as exc:
        timer.cancel()
        run.kill()
        await run.close()
        await hosting.done(app, write=write, ok=False)
        if isinstance(exc, TimeoutError):
            return _said(408, f"the request took longer than {limit:g} s")
        if isinstance(exc, AppDeckError):
            return _said(502, "git did not answer")
        raise
    if not within:
        timer.cancel()
        await run.close()
        await hosting.done(app, write=write, ok=False)
        return _said(413, f"the request body is over {hosting.limits.max_push_bytes} bytes")

    async def body() -> AsyncIterator[bytes]:
        ok = False
        try:
            async for chunk in body_of(run, head.rest):
                yield chunk
            ok = True
        finally:
            timer.cancel()
            code = await run.close()
            # only a POST moves refs: git's GET info/refs before it is no push event (it
            # would deploy whatever the branch held, and the real push would find it building)
            pushed = ok and code == 0 and request.method == "POST"
            outcome = await hosting.done(app, write=write, ok=pushed)
            if outcome is not None:
                log.info("push to app %s: %s %s", app.id, outcome.status, outcome.commit or "")

    headers = dict(head.headers)
    return StreamingResponse(body(), status_code=head.status, headers=headers)


def _refused(exc: AppDeckError) -> Response:
    if isinstance(exc, NotFound):
        return _said(404, "not found")
    if isinstance(exc, PermissionDenied):
        return _said(403, exc.message)
    if isinstance(exc, PushBusy):
        return _said(429, exc.message)
    if isinstance(exc, FailedPrecondition):
        return _said(413 if "size cap" in exc.message else 403, exc.message)
    return _said(503, "the repository is not available now")


def _said(
    status: int, text: str, challenge: str | None = None, *, retry: int | None = None
) -> Response:
    headers = {"www-authenticate": challenge} if challenge else {}
    if retry is not None:
        headers["retry-after"] = str(retry)
    return PlainTextResponse(text + "\n", status_code=status, headers=headers)
