"""test_api's request: every part a caller sends, checked, and the request target built from
them. Pure: no I/O (the other half of the SSRF defence is :class:`~appdeck.platform.apis.client.
AppHttp`: it connects only to the ingress, names the app by ``Host`` itself, follows no
redirect).

What this module guarantees, whatever the caller (or the app's own document) says:

- ``path`` is a path, never a URL: one leading ``/``, no scheme, no authority (``//``), no
  ``\\``, ``?``, ``#``, whitespace, control or non-ASCII character.
- Path parameters are substituted percent-encoded with nothing left safe (``quote(v,
  safe="")``): ``/``, ``?``, ``#``, ``%``, ``@``, ``\\`` inside a value stay inside its segment.
  A concrete path (``/items/5``) is matched against the operation's template and its values
  decoded once, then encoded again the same way.
- The target is checked once built: printable ASCII, one leading ``/``, and no ``.`` or
  ``..`` segment after decoding it up to three times (``%2e%2e``, ``%252e%252e``), whether the
  dots came from a value, the template or the document's server path.
- The query is ``urlencode``d (names and values encoded whole).
- Headers: at most 20, names RFC 7230 tokens, values printable ASCII; never ``Host``, the
  framing and hop-by-hop headers, ``Forwarded``/``X-Forwarded-*``/``X-Real-IP`` (the ingress
  sets those), ``X-AppDeck-*`` (the ingress's own) or ``X-API-Key`` (``api_key`` says it).
- The JSON body is at most 256 KiB serialized, and only on methods that carry one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote, urlencode, urlsplit

from appdeck.common.errors import InvalidArgument

__all__ = [
    "KEY_HEADER",
    "METHODS",
    "READ_METHODS",
    "base_path",
    "build_target",
    "check_headers",
    "check_path",
    "encode_body",
    "encode_query",
    "masked",
]

METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
READ_METHODS: Final = frozenset({"GET", "HEAD"})
"""The methods ``apis:read`` allows; every other needs ``apis:write``."""
BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})

MAX_PATH: Final = 2048
MAX_TARGET: Final = 8192
MAX_PARAMS: Final = 50
MAX_PARAM_VALUE: Final = 1024
MAX_QUERY_VALUES: Final = 50
MAX_QUERY_VALUE: Final = 2048
MAX_HEADERS: Final = 20
MAX_HEADER_NAME: Final = 100
MAX_HEADER_VALUE: Final = 4096
MAX_BODY: Final = 256 * 1024
MAX_KEY: Final = 256

KEY_HEADER: Final = "X-API-Key"
"""How a key reaches the ingress (the gate also reads ``Authorization: Bearer adk_key_...``)."""

_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_REFUSED: Final = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "forwarded",
        "x-real-ip",
        "x-api-key",
    }
)
_REFUSED_PREFIXES: Final = ("x-forwarded-", "x-appdeck-", "proxy-")
_SECRET: Final = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
_PARAM: Final = re.compile(r"\{([^}/]*)\}")
"""A template's parameter, as :func:`appdeck.platform.apis.documents.match_path` reads it."""
_LITERAL_SAFE: Final = "/:@!$&'()*+,;=%"
"""What stays as it is in the literal parts of a template (the document's own encoding)."""
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

Scalar = str | int | float | bool
QueryValue = Scalar | Sequence[Scalar]


def _ascii_printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def check_path(path: str) -> str:
    """The caller's ``path``: the operation's template (``/items/{item_id}``) or a concrete
    path matching one (``/items/5``); never a URL."""
    if (
        not path.startswith("/")
        or path.startswith("//")
        or len(path) > MAX_PATH
        or not _ascii_printable(path)
        or any(c in path for c in " \\?#")
    ):
        raise InvalidArgument(
            "path must be the operation's path as its document writes it (e.g. "
            "/items/{item_id}) or a concrete one (/items/5): one leading /, printable ASCII, "
            "no spaces, \\, ? or #; never a URL or another host",
            hint="the query goes in query, the app's address is never needed",
            field="path",
        )
    return path


def params_of(template: str) -> list[str]:
    return _PARAM.findall(template)


def _literal(text: str) -> str:
    return quote(text, safe=_LITERAL_SAFE)


def _param_text(name: str, value: Scalar) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = json.dumps(value)
    else:
        text = value
    if not text or len(text) > MAX_PARAM_VALUE:
        raise InvalidArgument(
            f"path parameter {name[:100]!r} must be 1 to {MAX_PARAM_VALUE} characters",
            field=f"path_params/{name[:100]}",
        )
    return text


def base_path(document: Mapping[str, Any]) -> str:
    """The path of the document's first server URL (``/api`` of ``servers: [{url: "/api"}]``
    or of ``https://example.com/api``), where its operations' paths start; "" when it has
    none, or one with variables. Only ever a path on the app's own route."""
    servers = document.get("servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], dict):
        return ""
    url = servers[0].get("url")
    if not isinstance(url, str) or "{" in url or len(url) > MAX_PATH:
        return ""
    if _SCHEME.match(url):
        try:
            url = urlsplit(url).path
        except ValueError:
            return ""
    if not url.startswith("/"):
        return ""
    return url.rstrip("/")


def build_target(
    template: str,
    values: Mapping[str, str],
    path_params: Mapping[str, Scalar],
    query: Mapping[str, QueryValue],
    *,
    base: str = "",
) -> str:
    """The request target (``/base/items/5?x=1``) of the operation ``template``, with the
    parameter ``values`` read from a concrete path (decoded) and ``path_params``. Raises
    :class:`InvalidArgument` for a missing, unknown or conflicting parameter, and for a
    target that would leave the operation's path."""
    names = params_of(template)
    if len(path_params) > MAX_PARAMS:
        raise InvalidArgument(f"at most {MAX_PARAMS} path parameters", field="path_params")
    values = dict(values)
    for name, given in path_params.items():
        if name not in names:
            raise InvalidArgument(
                f"the operation's path has no parameter {name[:100]!r}",
                hint="get_api_schema shows its parameters",
                field=f"path_params/{name[:100]}",
            )
        text = _param_text(name, given)
        if values.setdefault(name, text) != text:
            raise InvalidArgument(
                f"path parameter {name[:100]!r} is both in path and in path_params, with "
                "two values",
                field=f"path_params/{name[:100]}",
            )
    for name, text in values.items():
        if _dot_segments(text):
            raise InvalidArgument(
                f"path parameter {name[:100]!r} would leave the operation's path (a . or .. "
                "segment, maybe percent-encoded)",
                field=f"path_params/{name[:100]}",
            )
    missing = [n for n in names if n not in values]
    if missing:
        raise InvalidArgument(
            f"path parameter {missing[0][:100]!r} has no value",
            hint="give it in path_params",
            field="path_params",
        )
    pieces: list[str] = [_literal(base)]
    pos = 0
    for found in _PARAM.finditer(template):
        pieces.append(_literal(template[pos : found.start()]))
        pieces.append(quote(values[found.group(1)], safe=""))
        pos = found.end()
    pieces.append(_literal(template[pos:]))
    target = "".join(pieces)
    check_target(target)
    encoded = encode_query(query)
    return f"{target}?{encoded}" if encoded else target


def check_target(target: str) -> None:
    """Refuse a request target that could leave the operation's path on the app's route."""
    if (
        not target.startswith("/")
        or target.startswith("//")
        or len(target) > MAX_TARGET
        or not _ascii_printable(target)
        or any(c in target for c in " \\#?")
    ):
        raise InvalidArgument(
            "the request target would not be a plain path on the app's route", field="path"
        )
    if _dot_segments(target):
        raise InvalidArgument(
            "the request target would leave the operation's path (a . or .. segment, maybe "
            "percent-encoded)",
            field="path",
        )


def _dot_segments(text: str) -> bool:
    """Whether ``text`` has a ``.`` or ``..`` segment (``/`` or ``\\`` separated) as it is or
    decoded up to three times (double encoding)."""
    for _ in range(4):
        if any(s in (".", "..") for s in re.split(r"[/\\]", text)):
            return True
        decoded = unquote(text)
        if decoded == text:
            return False
        text = decoded
    return True  # still encoded after three decodings: refused as if it had dots


def _query_text(name: str, value: Scalar) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = json.dumps(value)
    else:
        text = value
    if len(text) > MAX_QUERY_VALUE:
        raise InvalidArgument(
            f"query value of {name[:100]!r} is longer than {MAX_QUERY_VALUE} characters",
            field=f"query/{name[:100]}",
        )
    return text


def encode_query(query: Mapping[str, QueryValue]) -> str:
    """``name=value&...``, a list repeating its name; every character encoded."""
    if len(query) > MAX_PARAMS:
        raise InvalidArgument(f"at most {MAX_PARAMS} query parameters", field="query")
    pairs: list[tuple[str, str]] = []
    for name, value in query.items():
        if not name or len(name) > 200:
            raise InvalidArgument("query names are 1 to 200 characters", field="query")
        items = value if isinstance(value, Sequence) and not isinstance(value, str) else [value]
        if len(items) > MAX_QUERY_VALUES:
            raise InvalidArgument(
                f"at most {MAX_QUERY_VALUES} values per query name", field=f"query/{name[:100]}"
            )
        pairs += [(name, _query_text(name, item)) for item in items]
    return urlencode(pairs, quote_via=quote)


def check_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The caller's headers, as sent (in order). Raises :class:`InvalidArgument` naming the
    first one refused."""
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(f"at most {MAX_HEADERS} headers", field="headers")
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        lower = name.lower()
        shown = name[:100]
        if len(name) > MAX_HEADER_NAME or not _TOKEN.fullmatch(name):
            raise InvalidArgument(
                f"header name {shown!r} is not an HTTP token", field=f"headers/{shown}"
            )
        if lower in _REFUSED or lower.startswith(_REFUSED_PREFIXES):
            hint = (
                "pass the key as api_key"
                if lower == "x-api-key"
                else "the ingress sets it; the app is always reached by its own host"
            )
            raise InvalidArgument(
                f"header {shown!r} may not be set by test_api", hint=hint, field=f"headers/{shown}"
            )
        if lower in seen:
            raise InvalidArgument(f"header {shown!r} is given twice", field=f"headers/{shown}")
        if len(value) > MAX_HEADER_VALUE or not _ascii_printable(value) or "\t" in value:
            raise InvalidArgument(
                f"the value of header {shown!r} must be at most {MAX_HEADER_VALUE} printable "
                "ASCII characters (no CR, LF or other control)",
                field=f"headers/{shown}",
            )
        seen.add(lower)
        out.append((name, value))
    return out


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY or not _ascii_printable(key) or " " in key:
        raise InvalidArgument(
            f"api_key must be 1 to {MAX_KEY} printable ASCII characters without spaces",
            field="api_key",
        )
    return key


def encode_body(method: str, body: object) -> bytes | None:
    """The JSON body (None: no body). At most 256 KiB serialized."""
    if body is None:
        return None
    if method not in BODY_METHODS:
        raise InvalidArgument(
            f"{method} sends no body here; body goes with {', '.join(sorted(BODY_METHODS))}",
            field="body",
        )
    try:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        raise InvalidArgument("body must be a JSON value", field="body") from None
    encoded = data.encode()
    if len(encoded) > MAX_BODY:
        raise InvalidArgument(
            f"body is {len(encoded)} bytes as JSON; at most {MAX_BODY}", field="body"
        )
    return encoded


def masked(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Headers as a result may show them: credentials masked (a key keeps its first 12
    characters, the prefix manage_api_key lists)."""
    out = []
    for name, value in headers:
        lower = name.lower()
        if lower == "x-api-key":
            value = f"{value[:12]}…" if value.startswith("adk_key_") and len(value) > 20 else "…"
        elif lower in _SECRET:
            scheme = value.split(" ", 1)[0] if " " in value else ""
            value = f"{scheme[:20]} …".strip() if scheme else "…"
        out.append((name, value))
    return out
