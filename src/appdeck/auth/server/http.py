"""HTTP plumbing shared by the endpoints: bounded bodies, strict form parsing, OAuth error
responses (RFC 6749 §5.2, RFC 7591 §3.2.2) and the headers every credential response carries."""

from __future__ import annotations

import json
from typing import Any, Final
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

MAX_FORM_BYTES: Final = 16 * 1024
MAX_JSON_BYTES: Final = 16 * 1024
MAX_FIELDS: Final = 64
NO_STORE: Final = {"Cache-Control": "no-store", "Pragma": "no-cache"}
CORS: Final = {
    # Metadata, registration, token and revocation take no cookies, so any origin may call
    # them (browser-based MCP clients do); /authorize is a page, not an API, and has no CORS.
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version",
    "Access-Control-Max-Age": "600",
}


class OAuthError(Exception):
    """An error answered as ``{"error": …, "error_description": …}``."""

    def __init__(
        self,
        error: str,
        description: str,
        *,
        status: int = 400,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status
        self.headers = headers or {}

    def response(self) -> Response:
        body = {"error": self.error, "error_description": self.description}
        return JSONResponse(
            body, status_code=self.status, headers={**NO_STORE, **CORS, **self.headers}
        )


def json_response(body: Any, status: int = 200, *, cache: str | None = None) -> Response:
    headers = {**CORS, **(NO_STORE if cache is None else {"Cache-Control": cache})}
    return JSONResponse(body, status_code=status, headers=headers)


async def preflight(request: Request) -> Response:
    return Response(status_code=204, headers=CORS)


async def read_body(request: Request, limit: int, *, error: str = "invalid_request") -> bytes:
    """The request body, refused (413) once it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise OAuthError(error, f"the request body is larger than {limit} bytes", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise OAuthError(error, f"the request body is larger than {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_form(request: Request, *, repeatable: frozenset[str] = frozenset()) -> Form:
    """An ``application/x-www-form-urlencoded`` body. A parameter other than those in
    ``repeatable`` may appear once only (RFC 6749 §3.1/§3.2)."""
    if _media_type(request) != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "send the parameters form-encoded")
    body = await read_body(request, MAX_FORM_BYTES)
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FIELDS,
        )
    except (UnicodeDecodeError, ValueError):
        raise OAuthError("invalid_request", "the form is not valid UTF-8 form encoding") from None
    return Form.of(pairs, repeatable)


async def read_json_object(request: Request) -> dict[str, Any]:
    if _media_type(request) != "application/json":
        raise OAuthError("invalid_client_metadata", "send the client metadata as application/json")
    body = await read_body(request, MAX_JSON_BYTES, error="invalid_client_metadata")
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError("invalid_client_metadata", "the body is not valid JSON") from None
    if not isinstance(value, dict):
        raise OAuthError("invalid_client_metadata", "the body must be a JSON object")
    return value


class Form:
    """Decoded parameters: single values by name, plus the lists of repeatable ones."""

    def __init__(self, single: dict[str, str], multi: dict[str, list[str]]) -> None:
        self._single = single
        self._multi = multi

    @classmethod
    def of(cls, pairs: list[tuple[str, str]], repeatable: frozenset[str] = frozenset()) -> Form:
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for name, value in pairs:
            if name in repeatable:
                multi.setdefault(name, []).append(value)
            elif name in single:
                raise OAuthError("invalid_request", f"the parameter {name!r} is repeated")
            else:
                single[name] = value
        return cls(single, multi)

    def get(self, name: str, *, max_len: int = 4096) -> str | None:
        """The value, or None when absent or empty (RFC 6749 §3.1: empty means omitted)."""
        value = self._single.get(name)
        if not value:
            return None
        if len(value) > max_len:
            raise OAuthError("invalid_request", f"the parameter {name!r} is too long")
        return value

    def all(self, name: str) -> list[str]:
        return list(self._multi.get(name, ()))

    def __contains__(self, name: object) -> bool:
        return name in self._single or name in self._multi
