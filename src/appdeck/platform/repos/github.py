"""The GitHub-specific extras, behind an adapter: commit statuses (``POST
/repos/{owner}/{repo}/statuses/{sha}``) and the repositories a token can see (``GET
/user/repos``, paginated by ``Link`` headers).

NOT exercised against github.com: the requests are checked against GitHub's published REST
description (a vendored subset of ``@octokit/openapi``, tests/fixtures/github/) and the answers
parsed are shaped by it, through an httpx mock transport.

Only ``https://api.github.com`` is called (the base URL is a parameter for tests; a ``Link`` to
another origin is not followed, so the token goes nowhere else); the token travels in the
``Authorization`` header only and is never logged or put in an error; every call has a time
limit, answers are read up to a size limit, pages up to a count, redirects are not followed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from appdeck.common import outbound_tls
from appdeck.common.errors import (
    AppDeckError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from appdeck.common.failures import http_failure

API: Final = "https://api.github.com"
STATES: Final = frozenset({"pending", "success", "failure", "error"})
CONTEXTS: Final = frozenset({"appdeck/ci", "appdeck/deploy"})
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_SHA: Final = re.compile(r"[0-9a-f]{40}")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]+")
_LINK_NEXT: Final = re.compile(r'<([^<>\s]{1,2048})>\s*;\s*rel="next"')
_HEADERS: Final = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


@dataclass(frozen=True, slots=True)
class GitHubRepo:
    full_name: str
    clone_url: str
    private: bool
    default_branch: str | None


def github_repository(url: str) -> tuple[str, str] | None:
    """(owner, repo) of a ``https://github.com/<owner>/<repo>[.git]`` URL, else ``None``."""
    parts = urlsplit(url)
    if parts.scheme != "https" or (parts.hostname or "").lower() != "github.com" or parts.port:
        return None
    pieces = parts.path.strip("/").removesuffix(".git").split("/")
    if len(pieces) != 2 or not all(_NAME.fullmatch(p) for p in pieces):
        return None
    return pieces[0], pieces[1]


class GitHub:
    def __init__(
        self,
        base_url: str = API,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 10.0,
        max_pages: int = 10,
        max_bytes: int = 8 << 20,
    ) -> None:
        if urlsplit(base_url).scheme != "https":
            raise ValueError("the GitHub API is reached over https only")
        self.base_url = base_url.rstrip("/")
        self._transport = transport
        self._timeout = httpx.Timeout(timeout_s)
        self._max_pages = max_pages
        self._max_bytes = max_bytes

    def _client(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url,
            transport=self._transport,
            timeout=self._timeout,
            follow_redirects=False,
            headers={**_HEADERS, "Authorization": f"Bearer {token}"},
            trust_env=False,
            verify=outbound_tls.verified(),  # one context, not one per call (~20 ms each)
        )

    async def create_status(
        self,
        token: str,
        owner: str,
        repo: str,
        sha: str,
        *,
        state: str,
        context: str,
        description: str,
        target_url: str | None = None,
    ) -> None:
        """Set the commit status ``context`` of ``sha`` (``state``: pending, success, failure
        or error; ``description`` cut to 140 characters)."""
        if not (_NAME.fullmatch(owner) and _NAME.fullmatch(repo) and _SHA.fullmatch(sha)):
            raise InvalidArgument("not a GitHub repository and commit")
        if state not in STATES or context not in CONTEXTS:
            raise InvalidArgument(
                f"state must be one of {sorted(STATES)}, context appdeck/ci|deploy"
            )
        body: dict[str, Any] = {
            "state": state,
            "context": context,
            "description": _CONTROL.sub(" ", description).strip()[:140],
        }
        if target_url is not None:
            if urlsplit(target_url).scheme != "https" or len(target_url) > 2048:
                raise InvalidArgument("target_url must be an https URL of 2048 characters or less")
            body["target_url"] = target_url
        async with self._client(token) as client:
            await self._call(client, "POST", f"/repos/{owner}/{repo}/statuses/{sha}", json=body)

    async def repos(self, token: str, *, per_page: int = 100) -> list[GitHubRepo]:
        """The repositories ``token`` can see (at most ``max_pages`` pages of ``per_page``)."""
        found: list[GitHubRepo] = []
        url: str | None = f"/user/repos?per_page={per_page}&sort=pushed"
        async with self._client(token) as client:
            for _ in range(self._max_pages):
                if url is None:
                    break
                answer = await self._call(client, "GET", url)
                items = _json(answer)
                if not isinstance(items, list):
                    raise Unavailable("GitHub answered /user/repos with something not a list")
                found.extend(r for r in map(_repo, items) if r is not None)
                url = self._next(answer.headers.get("link", ""))
        return found

    def _next(self, link: str) -> str | None:
        """The ``rel="next"`` page, if it is on the API's own origin (else not followed)."""
        match = _LINK_NEXT.search(link[:8192])
        if match is None:
            return None
        target = match.group(1)
        here, there = urlsplit(self.base_url), urlsplit(target)
        if (there.scheme, there.netloc, there.path) != (here.scheme, here.netloc, "/user/repos"):
            return None  # the token goes to this one endpoint only
        return target

    async def _call(
        self, client: httpx.AsyncClient, method: str, url: str, **kwargs: Any
    ) -> _Answer:
        data = bytearray()
        try:
            async with client.stream(method, url, **kwargs) as answer:
                async for chunk in answer.aiter_bytes():
                    data += chunk
                    if len(data) > self._max_bytes:
                        raise Unavailable(f"GitHub's answer is over {self._max_bytes} bytes")
        except httpx.TimeoutException:
            raise Unavailable("GitHub did not answer in time") from None
        except httpx.HTTPError as exc:
            raise Unavailable(f"GitHub could not be reached: {http_failure(exc)}") from None
        _raise_for(answer.status_code)
        return _Answer(answer.headers, bytes(data))


@dataclass(frozen=True, slots=True)
class _Answer:
    headers: httpx.Headers
    body: bytes


def _raise_for(code: int) -> None:
    if code < 300:
        return
    error: AppDeckError
    if code in (401, 403):
        error = FailedPrecondition(
            f"GitHub refused the token (HTTP {code})",
            hint="the token needs the repo:status (or repo) scope for statuses",
        )
    elif code == 404:
        error = NotFound("GitHub has no such repository for this token (HTTP 404)")
    elif code == 422:
        error = InvalidArgument("GitHub refused the request as invalid (HTTP 422)")
    else:
        error = Unavailable(f"GitHub answered HTTP {code}")
    raise error


def _json(answer: _Answer) -> Any:
    try:
        return json.loads(answer.body)
    except ValueError:
        raise Unavailable("GitHub's answer is not JSON") from None


def _repo(item: Any) -> GitHubRepo | None:
    """One entry of /user/repos, or None when it is not shaped as documented."""
    if not isinstance(item, dict):
        return None
    name, url = item.get("full_name"), item.get("clone_url")
    branch = item.get("default_branch")
    if not isinstance(name, str) or not isinstance(url, str) or len(name) > 201:
        return None
    if urlsplit(url).scheme != "https" or len(url) > 2048:
        return None
    return GitHubRepo(
        full_name=name,
        clone_url=url,
        private=item.get("private") is True,
        default_branch=branch if isinstance(branch, str) and len(branch) <= 200 else None,
    )
