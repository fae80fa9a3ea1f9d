"""The exceptions agentlib raises.

Every exception is an :class:`SdkError`; catch that to handle any of them::

    SdkError
    ├── ValidationError              (also a ValueError) bad input: history, blocks, answers
    ├── SessionBusyError             the session cannot take the message now; nothing changed
    ├── SessionIdempotencyConflictError
    │                                an idempotency key reused for another message
    ├── SessionTerminatedError       the session was cancelled; it takes no more commands
    ├── UnsupportedSessionProcedureError
    │                                the call is not allowed on this reference (a subagent's)
    ├── ObservationLost              the session's events can no longer be read from there
    ├── InvalidCursorError           a cursor of another session, or a malformed one
    ├── SessionNotFoundError         the runtime's store has no session with that id
    ├── TurnNotFoundError            the session has no turn with that id
    ├── ClientToolAnswerError        a client tool's answer could not be delivered
    ├── MaxStepsExceeded             a turn reached its max_steps (the error of its Failed)
    └── ModelError                   a model failed: HTTP or protocol error, or no reply

Messages say what was wrong and what to do next. None of them contains a credential or the
value of a session input.
"""

from __future__ import annotations

__all__ = [
    "ClientToolAnswerError",
    "InvalidCursorError",
    "MaxStepsExceeded",
    "ModelError",
    "ObservationLost",
    "SdkError",
    "SessionBusyError",
    "SessionIdempotencyConflictError",
    "SessionNotFoundError",
    "SessionTerminatedError",
    "TurnNotFoundError",
    "UnsupportedSessionProcedureError",
    "ValidationError",
]


class SdkError(Exception):
    """The base class of every exception agentlib raises on purpose."""


class ValidationError(SdkError, ValueError):
    """Input did not have the expected shape or broke a rule.

    Attributes:
        errors: One line per problem, each ending with the path of the offending value,
            e.g. ``"required field missing @ $[2].tool_call_id"``.
    """

    def __init__(self, message: str, errors: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.errors = errors


class SessionBusyError(SdkError):
    """The session could not take the command now; nothing was changed. Try again later."""


class SessionIdempotencyConflictError(SdkError):
    """An idempotency key was reused for a different message."""


class SessionTerminatedError(SdkError):
    """The session was cancelled and accepts no more commands; its history stays readable."""


class UnsupportedSessionProcedureError(SdkError):
    """The call is not allowed on this reference, e.g. ``send_message`` on a subagent."""


class ObservationLost(SdkError):
    """The session's events could not be replayed from the requested position.

    Attributes:
        cursor: Where to resume: read again with ``after=cursor`` (None if unknown).
    """

    def __init__(self, message: str, *, cursor: str | None = None) -> None:
        super().__init__(message)
        self.cursor = cursor


class InvalidCursorError(SdkError):
    """A cursor (or record) of another session, or a string that is not a cursor."""


class SessionNotFoundError(SdkError):
    """The runtime's store has no session with this id."""


class TurnNotFoundError(SdkError):
    """The session has no turn with this id."""


class ClientToolAnswerError(SdkError):
    """A client tool's result was produced but could not be delivered; the call stays open."""


class MaxStepsExceeded(SdkError):
    """A turn reached its step limit (``max_steps``) without an answer: the model called
    tools at every step. The turn ends ``Failed`` with this error's type and message."""


class ModelError(SdkError):
    """A model failed to produce a reply.

    Attributes:
        status: The HTTP status code, when the failure came from an HTTP response.
        code: The provider's error code (e.g. Mistral's ``"3280"``), when it gave one.
        body: The start of the response body (at most 500 characters), when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body


def add_note(error: BaseException, note: str) -> None:
    """``error.add_note(note)``, on Python 3.10 too (where tracebacks show ``__notes__``
    through the exceptiongroup backport)."""
    notes = getattr(error, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
        error.__notes__ = notes  # type: ignore[attr-defined]
    notes.append(note)
