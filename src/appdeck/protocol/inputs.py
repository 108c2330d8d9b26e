"""Input-required results (MCP 2026-07-28, SEP-2322): asking the client without a session.

The stateless era has no server-to-client request. A handler that needs the client's input
(an elicitation, a sampling, the roots) ends the request with an ``input_required`` result
that lists what it asks (``inputRequests``, by key) and carries a ``requestState``; the client
answers by sending the same request again with ``inputResponses`` (by key) and the state. The
handler runs again from the start and this time finds its answers. Several rounds may follow:
what was answered in earlier rounds travels in the state, as the server keeps nothing.

The state is a signed token (HMAC-SHA256, a key every replica shares) binding the answers to
who asked (tenant and user), which request (method, tool or prompt name or URI, a digest of
the arguments) and until when. A state that fails any of that is refused (``-32602``), so a
client can neither forge an earlier answer nor carry one to another call or another user.
Answers the client sends without a state count only for what the handler asks in that round
(as if it had answered at once); unknown keys are ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from appdeck.protocol.errors import InvalidParams

JsonObject = dict[str, Any]

METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
"""The only requests that may be answered with an input-required result."""

CAPABILITY_OF: Final = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
"""The client capability each kind of input request needs."""

MAX_KEYS: Final = 32
MAX_STATE_CHARS: Final = 96 * 1024
STATE_TTL_SECONDS: Final = 900
"""How long a client has to answer (a person may be reading the question)."""
_VERSION: Final = "s1"
_NOT_BOUND: Final = frozenset({"_meta", "inputResponses", "requestState"})


class InputRequired(Exception):
    """Raised by a handler's context to end the request with an ``input_required`` result:
    ``requests`` are the questions still open, ``answers`` what was answered so far."""

    def __init__(self, requests: dict[str, JsonObject], answers: dict[str, Any]) -> None:
        super().__init__("input required")
        self.requests = requests
        self.answers = answers


def _valid_answer(method: str, answer: object) -> bool:
    if not isinstance(answer, dict):
        return False
    if method == "elicitation/create":
        content = answer.get("content")
        return answer.get("action") in ("accept", "decline", "cancel") and (
            content is None or isinstance(content, dict)
        )
    if method == "roots/list":
        return isinstance(answer.get("roots"), list)
    return True


class Inputs:
    """What one stateless request brings to its handler: the answers of earlier rounds (from
    a verified state) and of this one (``inputResponses``)."""

    __slots__ = ("_available", "consumed")

    def __init__(self, available: Mapping[str, Any] | None = None) -> None:
        self._available = dict(available or {})
        self.consumed: dict[str, Any] = {}

    def take(self, requests: Mapping[str, JsonObject]) -> dict[str, Any]:
        """The answers to ``requests`` (key → ``{method, params}``), or :class:`InputRequired`
        for those still open. An answer of the wrong shape is ``-32602``."""
        found: dict[str, Any] = {}
        missing: dict[str, JsonObject] = {}
        for key, request in requests.items():
            if key in self._available:
                answer = self._available[key]
                if not _valid_answer(request["method"], answer):
                    raise InvalidParams(
                        f"inputResponses.{key[:64]} is not a {request['method']} result",
                        {"key": key[:64]},
                    )
                found[key] = answer
            else:
                missing[key] = request
        self.consumed.update(found)
        if missing:
            raise InputRequired(missing, dict(self.consumed))
        return found


def binding(principal: tuple[str, str], method: str, params: Mapping[str, Any]) -> bytes:
    """What a state is bound to: the caller, the method and its params as sent (without
    ``_meta`` and the answers), as canonical JSON. A state carries its SHA-256, computed only
    when one is sealed or opened: every stateless tools/call takes this snapshot (params may
    change while the handler runs), few ask for input, and OpenSSL's digest set-up was ~6k
    instructions of each call."""
    bound = {k: v for k, v in params.items() if k not in _NOT_BOUND}
    try:
        canonical = orjson.dumps(
            [principal[0], principal[1], method, bound], option=orjson.OPT_SORT_KEYS
        )
    except TypeError:  # orjson's nesting limit (254 levels)
        raise InvalidParams(
            "params are nested too deeply for a request that asks for input"
        ) from None
    return canonical


def _digest(bound: bytes) -> str:
    return _b64(hashlib.sha256(bound).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class StateCodec:
    """Seals and opens ``requestState`` tokens: ``s1.<payload>.<mac>``, base64url."""

    def __init__(
        self,
        key: bytes,
        ttl_seconds: int = STATE_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if len(key) < 16:
            raise ValueError("the request-state key must have at least 16 bytes")
        self._key = key
        self._ttl = ttl_seconds
        self._clock = clock

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def seal(self, bound: bytes, answers: Mapping[str, Any]) -> str:
        payload = {"b": _digest(bound), "a": dict(answers), "x": int(self._clock()) + self._ttl}
        raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
        body = f"{_VERSION}.{_b64(raw)}"
        token = f"{body}.{self._mac(body)}"
        if len(token) > MAX_STATE_CHARS:
            raise InvalidParams("the answers given so far are too large to carry to the next round")
        return token

    def open(self, token: object, bound: bytes) -> dict[str, Any]:
        """The answers a state carries, if it is ours, unexpired and bound to ``bound``;
        ``-32602`` otherwise."""
        if not isinstance(token, str) or len(token) > MAX_STATE_CHARS:
            raise InvalidParams("requestState must be the string the server sent")
        version, _, rest = token.partition(".")
        payload, _, mac = rest.rpartition(".")
        body = f"{version}.{payload}"
        if version != _VERSION or not payload or not hmac.compare_digest(mac, self._mac(body)):
            raise InvalidParams("requestState failed its integrity check")
        try:
            data = json.loads(_unb64(payload))
        except (binascii.Error, ValueError):
            raise InvalidParams("requestState failed its integrity check") from None
        answers = data.get("a") if isinstance(data, dict) else None
        if not isinstance(answers, dict):
            raise InvalidParams("requestState failed its integrity check")
        if not hmac.compare_digest(str(data.get("b")), _digest(bound)):
            raise InvalidParams("requestState belongs to another request or caller")
        expires = data.get("x")
        if not isinstance(expires, int) or expires < self._clock():
            raise InvalidParams("requestState has expired: send the request again without it")
        return answers


def inputs_of(
    codec: StateCodec, principal: tuple[str, str], method: str, params: Mapping[str, Any]
) -> tuple[Inputs, bytes]:
    """The answers a retried request carries (its verified state's and its ``inputResponses``)
    and the binding of its next state."""
    bound = binding(principal, method, params)
    available: dict[str, Any] = {}
    if "requestState" in params:
        available.update(codec.open(params["requestState"], bound))
    if "inputResponses" in params:
        responses = params["inputResponses"]
        if not isinstance(responses, dict):
            raise InvalidParams("params.inputResponses must be an object of answers by key")
        if len(responses) > MAX_KEYS:
            raise InvalidParams(f"params.inputResponses has more than {MAX_KEYS} answers")
        available.update(responses)
    return Inputs(available), bound


def input_required(codec: StateCodec, bound: bytes, needed: InputRequired) -> JsonObject:
    """The ``input_required`` result for a handler that asked ``needed``."""
    return {
        "resultType": "input_required",
        "inputRequests": needed.requests,
        "requestState": codec.seal(bound, needed.answers),
    }
