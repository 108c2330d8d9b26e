"""A JSON-RPC method table: method name -> async handler, and nothing else.

It knows no MCP method, no session, no protocol era: features (tools, resources, prompts,
tasks) and the lifecycle register their methods into one :class:`Dispatcher`, and the server
asks it for the handler of each request. The context a handler receives (``Ctx``) is whatever
the front end that owns the dispatcher passes; the dispatcher never looks at it.

Rules:

- a name is registered once: registering it again raises :class:`DuplicateMethod` (two
  features claiming one method is a wiring bug, found at start-up, not a silent override);
- looking up a name nobody registered raises
  :class:`~appdeck.protocol.errors.MethodNotFound` (JSON-RPC ``-32601``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Generic, TypeVar

from appdeck.protocol.errors import MethodNotFound

JsonObject = dict[str, Any]
Ctx = TypeVar("Ctx")
Handler = Callable[[JsonObject, Ctx], Awaitable[JsonObject]]
"""Answers one request: the whole JSON-RPC message and the caller's context in, a result out."""

__all__ = ["Dispatcher", "DuplicateMethod", "Handler"]


class DuplicateMethod(ValueError):
    """A method name was registered twice."""


class Dispatcher(Generic[Ctx]):
    """The method table. Registration happens at start-up; lookups on every request."""

    __slots__ = ("_handlers",)

    def __init__(self) -> None:
        self._handlers: dict[str, Handler[Ctx]] = {}

    def register(self, method: str, handler: Handler[Ctx]) -> None:
        """Route ``method`` to ``handler``; raises :class:`DuplicateMethod` if it is taken."""
        if method in self._handlers:
            raise DuplicateMethod(f"method {method!r} is already registered")
        self._handlers[method] = handler

    def lookup(self, method: str) -> Handler[Ctx]:
        """The handler of ``method``; raises :class:`MethodNotFound` if none is registered."""
        handler = self._handlers.get(method)
        if handler is None:
            raise MethodNotFound(f"Method not found: {method[:100]}")  # never echo a megabyte
        return handler

    def __contains__(self, method: object) -> bool:
        return method in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)
