"""Type aliases every layer shares: JSON objects and the ASGI interface (plain mappings and
callables, as the ASGI specification defines them)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

JsonObject = dict[str, Any]
"""A decoded JSON object."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]
"""Raw header pairs, lower-case names, as ASGI carries them."""
