"""Which git URLs a tenant may connect, decided before git ever runs (pure: no I/O).

Accepted: ``https://host/path`` (never with credentials in it: a token goes in its own,
sealed field), ``file:///abs/path`` and an absolute local path (both must
then pass the tenant's source roots, :mod:`appdeck.platform.sources`). Refused: every other
transport (``ext::``, ``fd::``, ``ssh``, plain ``http``, the ``host:path`` form, and
``git://``: unencrypted, and git's own client cannot be pinned to a checked address), control
characters, a leading ``-`` and anything longer than :data:`MAX_URL`. An error never quotes a
URL that carries credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

from appdeck.common.errors import InvalidArgument

MAX_URL: Final = 2048
MAX_TOKEN: Final = 512
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,512}")
_HOST: Final = re.compile(r"[A-Za-z0-9._-]{1,253}|[0-9A-Fa-f:.]{2,45}")
_SHOWN: Final = 120
HINT: Final = (
    "use https://host/owner/repo.git (with token for a private repo), file:// or an absolute path"
)

Kind = Literal["https", "local", "hosted"]
HOSTED: Final = "hosted"
"""The url that names the app's own hosted repository (``git push`` to it, inline files)."""


@dataclass(frozen=True, slots=True)
class GitUrl:
    kind: Kind
    url: str
    """As connected (what is stored and shown)."""
    path: str | None = None
    """A local repository's absolute path (``local`` only), to check against the roots."""


def parse(raw: object) -> GitUrl:
    if not isinstance(raw, str) or not raw:
        raise InvalidArgument("url must be a non-empty string", hint=HINT)
    if len(raw) > MAX_URL:
        raise InvalidArgument(f"url is longer than {MAX_URL} characters", hint=HINT)
    if _CONTROL.search(raw):
        raise InvalidArgument("url contains a control character", hint=HINT)
    if raw.startswith("-"):
        raise InvalidArgument("url must not start with '-'", hint=HINT)
    if raw.startswith("/") or raw == HOSTED:
        return GitUrl("hosted", HOSTED) if raw == HOSTED else GitUrl("local", raw, _local(raw))
    scheme, sep, _ = raw.partition("://")
    if not sep:
        raise InvalidArgument(
            f"url {_shown(raw)} is not a URL this platform fetches from", hint=HINT
        )
    scheme = scheme.lower()
    if scheme == "file":
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument("a file:// url names no host: file:///abs/path", hint=HINT)
        return GitUrl("local", raw, _local(unquote(parts.path)))
    if scheme != "https":
        raise _scheme_refused(scheme)
    parts = urlsplit(raw)
    if "@" in parts.netloc:
        raise InvalidArgument(
            "the url carries credentials (not echoed back); pass the token in 'token'",
            hint="the token is stored encrypted and never shown; the url is shown to others",
        )
    try:
        parts.port  # noqa: B018 (a port that is not a number raises)
    except ValueError:
        raise InvalidArgument(f"url {_shown(raw)} has a bad port", hint=HINT) from None
    if not _HOST.fullmatch(parts.hostname or ""):
        raise InvalidArgument(f"url {_shown(raw)} has no valid host", hint=HINT)
    if not parts.path.strip("/"):
        raise InvalidArgument(f"url {_shown(raw)} names no repository", hint=HINT)
    if parts.query or parts.fragment:
        raise InvalidArgument("url must not carry a query or a fragment", hint=HINT)
    return GitUrl("https", raw)


def _scheme_refused(scheme: str) -> InvalidArgument:
    if scheme == "git":
        return InvalidArgument(
            "git:// is not allowed (unencrypted, and its host cannot be pinned): use https",
            hint=HINT,
        )
    return InvalidArgument(f"url scheme {scheme[:20]!r} is not allowed (https, file)", hint=HINT)


def check_token(token: object) -> str:
    if not isinstance(token, str) or not _TOKEN.fullmatch(token):
        raise InvalidArgument(
            f"token must be 1-{MAX_TOKEN} printable characters without spaces (not echoed back)"
        )
    return token


def _local(path: str) -> str:
    if not path.startswith("/") or "\x00" in path:
        raise InvalidArgument("a local repository is an absolute path", hint=HINT)
    return path


def _shown(raw: str) -> str:
    return repr(raw[:_SHOWN])
