"""Domain errors: what a platform service raises when a request cannot be done.

They know nothing of MCP. The protocol layer turns them into tool results with
``isError: true`` and ``structuredContent.error = {code, message, hint?}`` in exactly one
place (:func:`appdeck.protocol.errors.tool_error_result`).

    AppDeckError
    ├── InvalidArgument      invalid_argument     the caller sent something malformed
    ├── NotFound             not_found            no such thing (or not visible to the caller)
    ├── PermissionDenied     forbidden            visible, but the caller's role does not allow it
    ├── Conflict             conflict             the state forbids it right now (retry may work)
    ├── FailedPrecondition   failed_precondition  something else must be done first
    │   └── ConfirmationRequired                  a destructive step the caller must confirm
    ├── QuotaExceeded        quota_exceeded       a limit on what a client controls was reached
    ├── Unavailable          unavailable          a dependency is down; retry later
    └── Internal             internal             a bug; the message never carries library text
"""

from __future__ import annotations

from typing import Any, ClassVar, Final


class AppDeckError(Exception):
    """Base of every domain error. ``code`` is the stable, machine-readable name."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.hint:
            body["hint"] = self.hint
        if self.details:
            body["details"] = self.details
        return body


class InvalidArgument(AppDeckError):
    """The caller sent something malformed or out of range."""

    code = "invalid_argument"


class NotFound(AppDeckError):
    """No such object, or one the caller may not know exists (another tenant's)."""

    code = "not_found"


class PermissionDenied(AppDeckError):
    """The object is visible to the caller, but the caller's role does not allow the action."""

    code = "forbidden"


class Conflict(AppDeckError):
    """The current state of the object forbids the action; it may succeed later."""

    code = "conflict"


class FailedPrecondition(AppDeckError):
    """Another step must happen first (e.g. confirm a destructive action)."""

    code = "failed_precondition"


class ConfirmationRequired(FailedPrecondition):
    """A destructive step that goes ahead only when confirmed. The service decides *whether*
    a confirmation is needed (after checking the caller may do it at all); the adapter decides
    *how* to get one (``elicitation/create``, else ``confirm: true`` on a second call).

    ``question`` is what to ask the human; ``what`` names the step (``the deletion``)."""

    def __init__(self, message: str, *, question: str, what: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint or "call again with confirm: true")
        self.question = question
        self.what = what


class QuotaExceeded(AppDeckError):
    """A limit on something the client controls was reached."""

    code = "quota_exceeded"


class Unavailable(AppDeckError):
    """A dependency is down or overloaded; the same call may succeed later."""

    code = "unavailable"


class Internal(AppDeckError):
    """A defect. The message is generic; details go to the server log only."""

    code = "internal"


CODES: Final = tuple(
    cls.code
    for cls in (
        InvalidArgument,
        NotFound,
        PermissionDenied,
        Conflict,
        FailedPrecondition,
        QuotaExceeded,
        Unavailable,
        Internal,
    )
)

ERROR_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "description": "Only on error results (isError): what went wrong; hint: what to do.",
    "properties": {
        "code": {"type": "string", "enum": list(CODES)},
        "message": {"type": "string"},
        "hint": {"type": "string"},
        "details": {"type": "object", "description": "e.g. field: the refused argument."},
    },
    "required": ["code", "message"],
}
"""The JSON Schema of :meth:`AppDeckError.to_dict`, as tool results carry it."""
