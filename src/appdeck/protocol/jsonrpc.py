"""JSON-RPC 2.0 message shapes: classify and validate incoming dicts, build outgoing ones.

Hand-written rather than model-validated: this runs on every message, and a handful of
type checks is an order of magnitude cheaper than building a model per message.
"""

from __future__ import annotations

from enum import Enum

from appdeck.common.types import JsonObject as JsonObject
from appdeck.protocol.errors import InvalidRequest

RequestId = str | int


class Kind(Enum):
    """What a JSON-RPC message is."""

    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


def classify(message: object) -> Kind:
    """Validate ``message`` as one JSON-RPC 2.0 message and say what it is.

    Raises :class:`InvalidRequest` for anything that is not a JSON-RPC 2.0 object.
    """
    if not isinstance(message, dict):
        raise InvalidRequest("Invalid Request: a JSON-RPC message must be an object")
    if message.get("jsonrpc") != "2.0":
        raise InvalidRequest('Invalid Request: "jsonrpc" must be "2.0"')
    method = message.get("method")
    has_id = "id" in message
    if method is not None:
        if not isinstance(method, str) or not method:
            raise InvalidRequest('Invalid Request: "method" must be a non-empty string')
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest('Invalid Request: "params" must be an object')
        if not has_id:
            return Kind.NOTIFICATION
        if not _valid_id(message["id"]):
            raise InvalidRequest('Invalid Request: "id" must be a string or an integer')
        return Kind.REQUEST
    if has_id and ("result" in message) != ("error" in message):
        if "error" in message and not isinstance(message["error"], dict):
            raise InvalidRequest('Invalid Request: "error" must be an object')
        return Kind.RESPONSE
    raise InvalidRequest("Invalid Request: not a request, notification or response")


def _valid_id(value: object) -> bool:
    # MCP forbids null ids; bool is an int subclass in Python but not a JSON-RPC id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def result(request_id: RequestId, body: JsonObject) -> JsonObject:
    """A success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": body}


def request(request_id: RequestId, method: str, params: JsonObject | None = None) -> JsonObject:
    """A request object (server to client)."""
    msg: JsonObject = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: JsonObject | None = None) -> JsonObject:
    """A notification object."""
    msg: JsonObject = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def params_of(message: JsonObject) -> JsonObject:
    """The params object of a validated message (empty when absent)."""
    params = message.get("params")
    return params if isinstance(params, dict) else {}
