"""Environment variables of an app: encrypted at rest, masked in every output unless an admin
asks to reveal them. Any change marks the app as needing a restart or redeploy."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from appdeck.common.errors import InvalidArgument, NotFound, QuotaExceeded
from appdeck.common.identity import Principal
from appdeck.model.specs import ENV_NAME as NAME
from appdeck.model.specs import RESERVED_ENV as RESERVED
from appdeck.platform.apps import AppService
from appdeck.platform.changes import Change, ChangeFeed
from appdeck.platform.crypto import Sealer

MAX_VALUE: Final = 32 * 1024
MAX_VARS: Final = 200
MAX_DOTENV: Final = 64 * 1024
MASK: Final = "********"
SECRET_NAMES: Final = "$secret"  # noqa: S105 - a key's name, not a secret
"""In a deployment's frozen env, the names of the vars that were secret (no env var name has
a ``$``): what its builds go without unless its spec says ``ci.secrets``."""


def freeze(env: Mapping[str, str], secret: Iterable[str]) -> str:
    """A deployment's env as frozen (then sealed): the values and which names are secret."""
    return json.dumps({**env, SECRET_NAMES: sorted(set(secret) & set(env))})


def thaw(text: str) -> tuple[dict[str, str], frozenset[str]]:
    """:func:`freeze` undone: the env, and its secret names (none known for a deployment
    frozen before they were recorded)."""
    data = json.loads(text)
    names = data.pop(SECRET_NAMES, None)
    return data, frozenset(names if isinstance(names, list) else ())


class EnvService:
    def __init__(self, apps: AppService, sealer: Sealer, feed: ChangeFeed) -> None:
        self._apps = apps
        self._sealer = sealer
        self._feed = feed

    async def list_vars(self, principal: Principal, app_id: int) -> list[dict[str, Any]]:
        await self._apps.load(principal, app_id, "env.list")
        return [
            {"name": e.name, "secret": e.secret, "updated_at": e.updated_at}
            for e in await self._apps.store.env(app_id)
        ]

    async def get(
        self, principal: Principal, app_id: int, name: str, *, reveal: bool = False
    ) -> dict[str, Any]:
        await self._apps.load(principal, app_id, "env.reveal")
        for e in await self._apps.store.env(app_id):
            if e.name == name:
                shown = self._sealer.open(e.value) if (reveal or not e.secret) else MASK
                return {"name": e.name, "secret": e.secret, "value": shown, "revealed": reveal}
        raise NotFound(f"no env var {name!r} on app {app_id}")

    async def reveal(self, principal: Principal, app_id: int) -> list[dict[str, Any]]:
        """Every var with its value, secrets included (``env.reveal``: admin and up): the
        console's "show the values" page, one call rather than one ``get`` per name."""
        await self._apps.load(principal, app_id, "env.reveal")
        return [
            {"name": e.name, "secret": e.secret, "value": self._sealer.open(e.value)}
            for e in await self._apps.store.env(app_id)
        ]

    async def set_vars(
        self, principal: Principal, app_id: int, values: dict[str, str], *, secret: bool
    ) -> list[str]:
        view = await self._apps.load(principal, app_id, "env.write")
        for name, value in values.items():
            _check(name, value)
        existing = {e.name for e in await self._apps.store.env(app_id)}
        if len(existing | set(values)) > MAX_VARS:
            raise QuotaExceeded(f"an app has at most {MAX_VARS} env vars")
        items = [(n, self._sealer.seal(v), secret) for n, v in values.items()]
        await self._apps.store.set_env(app_id, items, principal.user)
        await self._feed.emit(Change("env.updated", view.app.tenant_id, app_id))
        return sorted(values)

    async def unset(self, principal: Principal, app_id: int, names: list[str]) -> int:
        if len(names) > MAX_VARS:
            raise InvalidArgument(f"at most {MAX_VARS} names at once", field="names")
        for name in names:  # no such var can exist; and a NUL is refused by PostgreSQL itself
            if not isinstance(name, str) or not NAME.fullmatch(name):
                raise InvalidArgument(
                    f"invalid env var name {name!r}"[:200],
                    hint="letters, digits and _, not starting with a digit",
                    field="names",
                )
        view = await self._apps.load(principal, app_id, "env.write")
        removed = await self._apps.store.unset_env(app_id, names)
        if removed:
            await self._feed.emit(Change("env.updated", view.app.tenant_id, app_id))
        return removed

    async def import_dotenv(
        self, principal: Principal, app_id: int, text: str, *, secret: bool
    ) -> list[str]:
        if len(text.encode()) > MAX_DOTENV:
            raise QuotaExceeded(
                f"the .env text is larger than {MAX_DOTENV // 1024} KiB",
                hint="split it, or set the variables one by one",
            )
        return await self.set_vars(principal, app_id, parse_dotenv(text), secret=secret)

    async def resolved(
        self, app_id: int, defaults: dict[str, str], *, secrets: bool = True
    ) -> dict[str, str]:
        """The environment an instance gets: spec defaults overridden by env_vars (no auth:
        for the deploy engine, which already checked its caller). ``secrets=False``: without
        the secret ones (a CI run of an app whose spec does not say ``ci.secrets``)."""
        env = dict(defaults)
        for e in await self._apps.store.env(app_id):
            if e.secret and not secrets:
                env.pop(e.name, None)  # nor the spec's default of that name
                continue
            env[e.name] = self._sealer.open(e.value)
        return env

    async def secret_names(self, app_id: int) -> frozenset[str]:
        """The names of the app's secret env vars (what builds go without)."""
        return frozenset(e.name for e in await self._apps.store.env(app_id) if e.secret)


def _check(name: str, value: str) -> None:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidArgument(
            f"invalid env var name {name!r}"[:200],
            hint="letters, digits and _, not starting with a digit",
            field="values",
        )
    if name in RESERVED:
        raise InvalidArgument(
            f"{name} is set by the platform for every instance", field=f"values/{name}"
        )
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidArgument(
            f"the value of {name} contains a NUL character", field=f"values/{name}"
        )
    if len(value.encode()) > MAX_VALUE:
        raise QuotaExceeded(f"the value of {name} is larger than {MAX_VALUE // 1024} KiB")


_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def parse_dotenv(text: str) -> dict[str, str]:
    """``KEY=value`` lines: comments, blank lines, ``export``, single and double quotes."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not sep or not NAME.fullmatch(key):
            raise InvalidArgument(f"line {number} of the .env text is not KEY=value")
        rest = rest.strip()
        if rest[:1] == '"':
            value, ok = _double_quoted(rest[1:])
        elif rest[:1] == "'":
            end = rest.find("'", 1)
            value, ok = (rest[1:end], True) if end > 0 else ("", False)
        else:
            value, ok = re.split(r"\s+#", rest, maxsplit=1)[0].rstrip(), True
        if not ok:
            raise InvalidArgument(f"line {number} of the .env text has an unclosed quote")
        out[key] = value
    return out


def _double_quoted(body: str) -> tuple[str, bool]:
    chars: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            chars.append(_ESCAPES.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
            continue
        if c == '"':
            return "".join(chars), True
        chars.append(c)
        i += 1
    return "", False
