"""uvicorn's httptools HTTP/1.1 protocol, with each response sent in one system call.

uvicorn writes the status line and headers when the app sends ``http.response.start`` and the
body when it sends ``http.response.body``: two ``send()`` calls for every JSON response. On a
loopback or LAN connection each one walks the kernel's whole TCP path, and in ``bench/run.py``
the first of them alone was ~15 % of the server's CPU per ``tools/call``.

:class:`CoalescingHttpToolsProtocol` hands uvicorn a transport that keeps what is written during
one event-loop step and writes it at the end of that step, with one ``writelines`` (a single
``writev``). A JSON response (header + body, sent back to back) is one system call; an SSE stream
still goes out event by event, each as soon as the task that wrote it yields. Everything else is
uvicorn's own code: parsing, keep-alive, flow control, limits.

Serve with ``uvicorn.Config(app, http=CoalescingHttpToolsProtocol, loop="uvloop", ...)``.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport that defers writes to the end of the current loop step (see the module)."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        pending = self._pending
        if pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            pending.append(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.writelines(pending)

    def get_write_buffer_size(self) -> int:
        pending = self._pending
        waiting = sum(len(chunk) for chunk in pending) if pending else 0
        return self._transport.get_write_buffer_size() + waiting

    def close(self) -> None:
        self.flush()  # what was written before close() still goes out, as asyncio promises
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, resume_reading, set_protocol, ...
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol over a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(cast(asyncio.Transport, coalescing))
