"""The per-message context the transport hands to the core."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from appdeck.common.identity import Principal
from appdeck.protocol.context import ToolContext
from appdeck.protocol.envelope import Peer
from appdeck.protocol.inputs import Inputs
from appdeck.protocol.ports import RequestChannel
from appdeck.protocol.sessions import Session


@dataclass(slots=True)
class Call:
    """Who sent a message, on which session, and where related messages go.

    ``principal`` is None only for the open methods (``ping``, ``notifications/initialized``)
    sent without a token; ``session`` is None for ``initialize`` and for every request of the
    stateless era, whose ``peer`` says what the request's ``_meta`` declared.
    """

    principal: Principal | None
    session: Session | None
    channel: RequestChannel | None = None
    peer: Peer | None = None
    """Set for a stateless (2026-07-28) request, None in the handshake era."""
    inputs: Inputs | None = None
    """A stateless request's answers to earlier input requests (the requests that may answer
    ``input_required`` only)."""
    bound: bytes | None = None
    """What the next ``requestState`` of that request is bound to (caller, method, params)."""
    headers: Mapping[bytes, bytes] | None = None
    """A stateless request's HTTP headers (lower-case names), where its ``Mcp-Param-*``
    headers are read when the tool called annotates any (most calls need none of them)."""


ContextFactory = Callable[[Call, "dict[str, Any] | None"], ToolContext]
"""What a handler may do while it runs, for one call and (optionally) its request message:
the features get this instead of the server (see ``McpServer.context``)."""
